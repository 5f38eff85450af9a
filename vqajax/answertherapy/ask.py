"""Asking trained VQA-AnswerTherapy models where each answer of a question is grounded
(`vqajax ask` on a grounding_mask workdir or bundle).

`Grounder.from_workdir(path)` opens a grounding_mask run (`core/trained.py`: its config,
its recorded vocabulary, a checkpoint; no training data) and, with `class_workdir`, a
grounding_class run that decides single / multiple. Without one the decision comes from
the predicted masks by the dataset's rule (`from_masks`: every pair of groundings with
IoU > 0.9 is single). Images are the run's grid-store ids or image files whose features
are made with the extractor settings the run recorded (`features/run_images.py`).
"""

from __future__ import annotations

import types

import jax
import numpy as np
from pycocotools import mask as coco_mask

from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import from_masks, grounding_class, grounding_mask, masks
from vqajax.core import text
from vqajax.core import trained as trained_runs
from vqajax.core.errors import InputError
from vqajax.features.run_images import RunImages
from vqajax.nn import paligemma_ground


class _Model:
  """A trained run's model applied to one question and its answers, encoded as its training
  text was (its vocabulary, or its model's own text encoder and text layout)."""

  def __init__(self, run: trained_runs.Trained, output):
    self.run = run
    self._apply = run.jit(lambda p, batch: output(run.model.apply({"params": p}, batch, train=False)))

  def __call__(self, question: str, answers: list[str], image: np.ndarray) -> np.ndarray:
    inputs = therapy_dataset.text_arrays([question], [tuple(answers)], self.run.encoders, self.run.config)
    return jax.tree.map(lambda x: x[0], self.run.predict(self._apply, {**inputs, "image": image}))


def _mask_probabilities(outputs):
  """Per-cell probabilities, or a generative model's replies ({tokens}), read as masks on the host."""
  return outputs if isinstance(outputs, dict) else jax.nn.sigmoid(outputs)


class Grounder(RunImages):
  """Answer-grounding masks and the single / multiple call (module docstring); its images,
  the mask run's: `RunImages`."""

  def __init__(self, mask_run: trained_runs.Trained, class_run: trained_runs.Trained | None = None,
               weights: str | None = None):
    super().__init__(mask_run, weights)
    self._config = mask_run.config
    self._masks = _Model(mask_run, _mask_probabilities)
    self._classes = None
    if class_run is not None:
      shapes = (class_run.encoders.image_shape, mask_run.encoders.image_shape)
      if shapes[0] is not None and class_run.config.data.features != mask_run.config.data.features:
        raise InputError(f"the grounding_class run reads {class_run.config.data.features}, the mask run "
                         f"{mask_run.config.data.features}: give two runs on one feature store")
      self._classes = _Model(class_run, lambda logits: jax.nn.softmax(logits)[..., 1])

  @classmethod
  def from_workdir(cls, path: str, step: int | None = None, *, best: bool = False, class_workdir: str | None = None,
                   class_step: int | None = None, weights: str | None = None, data_dir: str | None = None
                   ) -> "Grounder":
    """A grounding_mask run (workdir or bundle) at checkpoint `step` (default: the latest),
    optionally with a grounding_class run for the single / multiple call; `weights`: the
    extractor's weights file, if it moved; `data_dir`: a bundle's data folder here."""
    mask_run = trained_runs.open_run(path, {"grounding_mask": grounding_mask}, step, best, data_dir=data_dir)
    class_run = None if class_workdir is None else trained_runs.open_run(
        class_workdir, {"grounding_class": grounding_class}, class_step)
    return cls(mask_run, class_run, weights)

  @property
  def grid(self) -> int:
    """The side of the predicted masks (the store's grid, or the model's `config.model.mask_grid`)."""
    return therapy_dataset.mask_grid(self._config.model, self._run.encoders.image_shape)

  def _image(self, image_id, features) -> np.ndarray:
    if (image_id is None) == (features is None):
      raise InputError("give the image as image_id or as features, one of them")
    if features is not None:
      features = np.asarray(features, np.float32)
      if features.shape != self._run.encoders.image_shape:
        raise InputError(f"features of shape {features.shape}, the run reads {self._run.encoders.image_shape}")
      return features[None]
    self.check_ids([image_id])
    return self._run.store.read(self._run.store.rows([image_id]))

  def ground(self, question: str, answers: list[str], *, image_id: int | None = None,
             features: np.ndarray | None = None, image_size: tuple[int, int] | None = None) -> dict:
    """{"masks": [A, G, G] per-cell probabilities, "single": bool (None for one answer),
    "single_from": "classifier" | "masks", "rle": a COCO RLE per answer of its mask
    (probability >= 0.5) at `image_size` (height, width; default the grid)}."""
    answers = list(answers)
    width = self._config.data.max_answers
    if not answers or len(answers) > width or not all(isinstance(a, str) and a.strip() for a in answers):
      raise InputError(f"answers {answers!r}: expected 1 to {width} non-empty answers")
    if not isinstance(question, str) or not question.strip():
      raise InputError("the question is empty")
    text.check_text([question, *answers], lambda i: f"answers[{i - 1}]" if i else "the question")
    image = self._image(image_id, features)
    predicted = self._masks(question, answers, image)
    height, cols = image_size or (self.grid, self.grid)
    if isinstance(predicted, dict):  # a generative model's replies (nn/paligemma_ground), drawn at the image's size
      sample = types.SimpleNamespace(answers=answers, height=height, width=cols)
      grid, rles, _ = paligemma_ground.reply_masks(self._run.encoders.text.encoder, predicted["tokens"][None],
                                                   [sample], self.grid, paligemma_ground.decoder(self._config.model))
      probs = grid[0, :len(answers)].astype(np.float32)
      binary = [coco_mask.decode(rle).astype(bool) for rle in rles[0]]
    else:
      probs = predicted[:len(answers)]
      binary = [masks.upsample(p >= 0.5, height, cols) for p in probs]
    if len(answers) < 2:
      single, source = None, None
    elif self._classes is not None:
      single, source = bool(self._classes(question, answers, image) < 0.5), "classifier"
    else:
      single, source = from_masks.grounding(binary) == from_masks.SINGLE, "masks"  # the dataset's rule
    return {"masks": probs, "single": single, "single_from": source, "rle": [masks.encode(b) for b in binary]}
