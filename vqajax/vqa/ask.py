"""Asking a trained VQA model about images and questions of one's own (`vqajax ask`).

`Answerer.from_workdir(path)` opens a trained run, a workdir or an export bundle
(`core/trained.py`: its config, its recorded encoders and one checkpoint's parameters;
no training data), so a new question is encoded exactly as the training questions were.
Images are the run's feature store ids (no extraction) or image files, whose features are
computed as the store's were (`features/run_images.py`): with the extractor settings the
run recorded (`features/recorded.py`), refused when those weights are not there or differ. Questions
go through one jitted function in fixed-size batches (the run's eval batch), so
thousands of questions cost a few device calls.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from vqajax.core import text
from vqajax.core import trained as trained_runs
from vqajax.core.errors import InputError
from vqajax.features.run_images import RunImages
from vqajax.vqa import dataset as vqa_dataset
from vqajax.vqa import files as vqa_files
from vqajax.vqa import task as vqa_task

MC_WIDTH = 18  # choices per question padded to this (VQA v1's count): one compiled shape
_CAPTION_FILES = ("captions_train2014.json", "captions_val2014.json")  # looked for beside the data


class Answerer(RunImages):
  """A trained VQA model answering questions (module docstring); its images: `RunImages`."""

  def __init__(self, run: trained_runs.Trained, weights: str | None = None):
    super().__init__(run, weights)
    self.path, self._enc, self._captions = run.path, run.encoders, None
    self.answers: list[str] = list(run.encoders.answers.answers)
    self._predict = run.jit(self._top_k, static_argnums=2)

  @classmethod
  def from_workdir(cls, path: str, step: int | None = None, *, best: bool = False,
                   weights: str | None = None, data_dir: str | None = None) -> "Answerer":
    """The run at `path` (a workdir or a bundle) at checkpoint `step` (default: the latest);
    `weights`: where the extractor's weights file is now, if it moved; `data_dir`: a bundle's
    data folder on this machine."""
    return cls(trained_runs.open_run(path, {"vqa": vqa_task}, step, best, data_dir=data_dir), weights)

  @property
  def step(self) -> int:
    return self._run.step

  @property
  def batch(self) -> int:
    """Questions per device call (the run's eval batch, padded to the devices)."""
    return self._run.batch

  def _top_k(self, params, batch, k: int):
    logits = self._run.model.apply({"params": params}, batch, train=False)
    if isinstance(logits, dict):  # a generative model: its reply and the likeliest choice, with their probabilities
      pick = jnp.argmax(logits["choice_scores"], axis=-1)
      best = jnp.max(logits["choice_scores"], axis=-1)
      return logits["tokens"], jnp.exp(logits["reply_logprob"]), pick, jnp.where(jnp.isfinite(best), jnp.exp(best), 0.0)
    softmax = jax.nn.softmax(logits)
    probs, index = jax.lax.top_k(softmax, k)
    pick = vqa_task.multiple_choice(logits, batch["choice_index"])
    picked = jnp.take_along_axis(batch["choice_index"], pick[:, None], axis=-1)  # -1: not in the answer table
    pick_prob = jnp.where(picked >= 0, jnp.take_along_axis(softmax, jnp.maximum(picked, 0), axis=-1), 0.0)[:, 0]
    return probs, index, pick, pick_prob

  # ------------------------------------------------------------------- images

  def _caption_table(self) -> dict[int, list[str]]:
    """Every caption of the run's data: its configured caption files, else the COCO
    caption files beside its data (the embedded dataset has them), else none."""
    if self._captions is None:
      data = self._run.config.data
      named = [p for s in ("train", "val") for p in vqa_dataset.resolve_all(data, f"{s}_captions")]
      paths = named or [p for p in (os.path.join(data.dir, n) for n in _CAPTION_FILES) if os.path.isfile(p)]
      self._captions = {}
      for path in paths:
        self._captions.update(vqa_files.read_captions(path))
    return self._captions

  def caption(self, image_id: int) -> str | None:
    """The first caption of a store image, if the run's data has captions."""
    captions = self._caption_table().get(image_id)
    return captions[0] if captions else None

  def unknown_words(self, question: str) -> list[str]:
    """The words of `question` the run's vocabulary does not have (read as one unknown word)."""
    words = text.tokenize(question)
    tokens, _ = self._enc.vocab.encode([words], max(1, len(words)))
    return [w for w, t in zip(words, tokens[0].tolist()) if t == text.UNK]

  # ---------------------------------------------------------------- answering

  def _inputs(self, questions: list[str], image_ids, choices) -> dict[str, np.ndarray]:
    """Host arrays of the model's inputs but the image, one row per question."""
    inputs = self._enc.questions(questions)
    if "caption_bow" in self._enc.bag_sizes:
      if image_ids is None:
        raise InputError("the caption model answers about store images only (their captions): give image ids")
      path = self._run.config.data.train_captions
      inputs["caption_bow"] = vqa_dataset.caption_bags(image_ids, self._caption_table(), path,
                                                       self._enc.caption_words)
    index = np.full((len(questions), MC_WIDTH), -1, np.int32)
    for i, options in enumerate(choices or []):
      index[i, :len(options)] = self._enc.answers.index(options)
    inputs["choice_index"] = index
    return inputs

  def _check(self, questions, image_ids, features, choices) -> None:
    if not questions:
      raise InputError("no questions to answer")
    text.check_text(questions, lambda i: f"question {i}")
    if (image_ids is None) == (features is None):
      raise InputError("give the questions' images as image_ids or as features, one of them")
    given = len(image_ids) if image_ids is not None else len(features)
    if given != len(questions):
      raise InputError(f"{len(questions)} questions but {given} images: one image per question")
    if features is not None and tuple(np.shape(features)[1:]) != self._enc.image_shape:
      raise InputError(f"features of shape {tuple(np.shape(features)[1:])}, the run reads "
                       f"{self._enc.image_shape} per image")
    if choices is not None:
      if len(choices) != len(questions):
        raise InputError(f"{len(questions)} questions but {len(choices)} lists of choices")
      bad = next((i for i, c in enumerate(choices) if not 1 <= len(c) <= MC_WIDTH), None)
      if bad is not None:
        raise InputError(f"question {bad}: {len(choices[bad])} choices, expected 1 to {MC_WIDTH}")
    if image_ids is not None:
      self.check_ids(image_ids)

  def answer(self, questions: list[str], *, image_ids: list[int] | None = None,
             features: np.ndarray | None = None, k: int = 5,
             choices: list[list[str]] | None = None) -> list[dict]:
    """Top-k answers (answer, probability) of each question about its image (a store id
    or a row of `features`; a generative model's: its greedy reply in words); with `choices`,
    also the model's pick among them and its probability (0 for a choice the answer table does
    not have)."""
    self._check(questions, image_ids, features, choices)
    if not isinstance(k, int) or k < 1:
      raise InputError(f"k: expected a positive integer, got {k!r}")
    k = min(k, len(self.answers))
    image_ids = None if image_ids is None else list(image_ids)
    inputs = self._inputs(list(questions), image_ids, choices)
    if features is not None:
      inputs["image"] = np.asarray(features, np.float32)
    else:
      inputs["image_row"] = self._run.store.rows(image_ids)
    first, second, picks, pick_probs = self._run.predict(self._predict, inputs, k)
    if second.ndim == 1:  # a generative model: its replies' tokens and their probabilities
      answers, probs = [[reply] for reply in vqa_task.replies(self._enc, first)], second[:, None]
    else:  # the top k: probabilities, answer-table indices
      answers, probs = [[self.answers[a] for a in row] for row in second], first
    out = []
    for q, (question, p, a) in enumerate(zip(questions, probs, answers)):
      item = {"question": question, "answers": [(answer, float(v)) for answer, v in zip(a, p)]}
      if choices is not None:
        item["choice"], item["choice_probability"] = choices[q][int(picks[q])], float(pick_probs[q])
      out.append(item)
    return out
