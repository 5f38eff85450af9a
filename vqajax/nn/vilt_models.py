"""ViLT as a model entry (`VILT`, `config.model.name` "vilt" in `nn/pretrained.MODELS`) of both
papers' tasks, over a pixel store and WordPiece text (`nn/vilt_run.py`: its config group, its
tokenizer, the start from a Hub folder):

  vqa              `ViltClassifier` over the run's answer table, trained on each answer's VQA
                   score (`config.model.targets` "bce"; `experiments/vqa/vilt.py`)
  grounding_class  `ViltClassifier` with two labels (single, multiple) on the question and its
                   answers, or the question alone (`config.model.inputs` "i+q+a" | "i+q")
  grounding_mask   `ViltSlots`: `ViltMask` (one map) on each answer slot's own text, as the grid
                   mask predictor conditions each slot on its text, resized to the targets' grid
                   (`config.model.mask_grid`); "i+q+a" | "i+q" | "i+a"

The AnswerTherapy text layouts are `texts`.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from vqajax.core.config import integer, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import TEXT_KEYS, Builder, Field, Model, TextEncoding
from vqajax.nn import vilt_run
from vqajax.nn.vilt import ViltClassifier, ViltMask

SEP = " [SEP] "  # between the answers of a text (BERT's separator; a special token of its tokenizer)
INPUTS = {"grounding_class": ("i+q", "i+q+a"), "grounding_mask": ("i+q", "i+q+a", "i+a")}


class ViltSlots(nn.Module):
  """A `ViltMask` with one map applied to every answer slot's text ([B, S, T] WordPiece arrays)
  with the question's image (normalised as `vilt_run.ViltOnBatch` does) -> [B, A, G, G]
  logits; one text per question (S = 1, I+Q) gives every answer slot the same map."""
  model: ViltMask

  def setup(self):
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    b, slots, length = batch["input_ids"].shape
    ids, attention, types = (batch[k].reshape(b * slots, length) for k in TEXT_KEYS)
    values, mask = vilt_run.pixel_inputs(jnp.repeat(batch["image"], slots, axis=0))
    logits = self.model(ids, attention, values, mask, types, train=train)
    logits = logits.reshape(b, slots, *logits.shape[2:])
    return jnp.broadcast_to(logits, (b, batch["answer_valid"].shape[1], *logits.shape[2:]))


def texts(questions: list[str], answers: list[tuple[str, ...]], config) -> tuple[list[str], list[str] | None]:
  """The texts (and second segments, token type 1, or None) of an AnswerTherapy task as `config.task`
  and `config.model.inputs` lay them out. The classifier, one text per question: I+Q+A
  "[CLS] question [SEP] answer 1 [SEP] answer 2 ... [SEP]", I+Q the question alone. The mask
  model, one text per answer slot (`max_answers`, padding slots an empty answer): I+Q+A
  "[CLS] question [SEP] answer j [SEP]", I+A "[CLS] answer j [SEP]"; I+Q one text per question
  (its mask serves every answer)."""
  inputs = config.model.inputs
  if config.task == "grounding_class":
    return list(questions), [SEP.join(group) for group in answers] if inputs == "i+q+a" else None
  if inputs == "i+q":
    return list(questions), None
  width = config.data.max_answers
  slots = [a for group in answers for a in tuple(group) + ("",) * (width - len(group))]
  if inputs == "i+a":
    return slots, None
  return [q for q in questions for _ in range(width)], slots


def _spec(enc) -> vilt_run.Spec:
  """The run's architecture and tokenizer."""
  if enc.text is None:
    raise InputError("config.model.name 'vilt': this run's encoders hold no ViLT tokenizer (train it as a ViLT row)")
  return enc.text.encoder


def _vqa(cfg, enc) -> vilt_run.ViltOnBatch:
  """ViLT with the VQA classifier over the run's answer table (`nn/vilt_models.py`)."""
  return vilt_run.ViltOnBatch(ViltClassifier(_spec(enc).config, len(enc.answers), jnp.dtype(cfg.dtype), cfg.remat))


def _grounding_class(cfg, enc) -> vilt_run.ViltOnBatch:
  """ViLT with the two-class head on the question and its answers (`nn/vilt_models.py`)."""
  return vilt_run.ViltOnBatch(ViltClassifier(_spec(enc).config, 2, jnp.dtype(cfg.dtype), cfg.remat))


def _grounding_mask(cfg, enc) -> ViltSlots:
  """ViLT with a mask per answer slot, on the slot's own text (`nn/vilt_models.py`)."""
  spec = _spec(enc)
  return ViltSlots(ViltMask(spec.config, 1, (cfg.mask_grid, cfg.mask_grid), jnp.dtype(cfg.dtype), cfg.remat))


VILT = Model(
    group=vilt_run.GROUP,
    tasks={
        # the loss: the VQA task's "answer" | "soft" | "bce" (each answer's VQA score, ViLT's)
        "vqa": Builder(_vqa, {"targets": Field("bce", one_of("answer", "soft", "bce"))}),
        # what the text holds (`texts`): the question and its answers, the question, an answer
        "grounding_class": Builder(_grounding_class, {"inputs": Field("i+q+a", one_of(*INPUTS["grounding_class"]))}, texts),
        "grounding_mask": Builder(_grounding_mask, {
            "inputs": Field("i+q+a", one_of(*INPUTS["grounding_mask"])),
            "mask_grid": Field(14, integer(1, 1024)),  # the side of the predicted and target masks (the grid rows')
        }, texts),
    },
    text=TextEncoding(vilt_run.spec, vilt_run.Spec.from_tables),
    initial_params=vilt_run.initial_params,
    label="ViLT")
