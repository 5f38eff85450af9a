"""VQA-AnswerTherapy models: the single-vs-multiple grounding classifier and the answer
mask predictor (`config.model.name`: `MODELS`), over the suite's question encoders
(`config.model.question`: `nn/question.ENCODERS`, the VQA models' too).

Text: one encoder encodes the question and, with the same weights, each answer; answers
are mean-pooled over a question's valid answers where one vector is needed.

`GroundingClassifier` (challenge 1; inputs "q", "q+a", "i+q", "i+q+a"): the text vector
is fc + tanh of the question encoding (Q) or of [question, mean answer] (Q+A). The image
(I) is a small attention over the grid: each cell scores tanh(W_c cell + W_t text) . w,
the softmax over the cells weights the cells' features, and fc + tanh of that pool is
multiplied element-wise with the text vector (the late fusion of the VQA paper's best
model). Head: `mlp_dims` tanh layers after dropout, then 2 logits (single, multiple).

`MaskPredictor` (challenge 2; inputs "i+q", "i+q+a", "i+a"): one mask per answer slot.
The text of slot j is the question (I+Q: the same for every answer, so one mask per
question), [question, answer j] (I+Q+A) or answer j (I+A), through fc + tanh. Each cell
is projected (fc + tanh) and modulated FiLM-style by the text, h = tanh(cell * gamma(text)
+ beta(text)), then a linear layer gives the cell's logit: [B, A, G, G].

"vilt" (either challenge; `experiments/therapy/vilt_class.py`, `vilt_mask.py`): ViLT over the
run's pixel store and WordPiece text (`dataset.vilt_texts` lays the inputs out). Challenge 1:
`ViltClassifier` with two labels on question + answers (or the question, I+Q). Challenge 2:
`ViltSlots`, `ViltMask` (one map) on each answer slot's own text, as `MaskPredictor` conditions
each slot on its text, resized to the targets' grid (`dataset.mask_grid`).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.core.errors import InputError
from vqajax.nn import question, vilt_run
from vqajax.nn.vilt import ViltClassifier, ViltMask

CLASSIFIER_INPUTS = ("q", "q+a", "i+q", "i+q+a")
MASK_INPUTS = ("i+q", "i+q+a", "i+a")


class _Text(nn.Module):
  """(question [B, D], answers [B, A, D]) encodings from one shared encoder."""
  encoder: nn.Module  # nn/question.py

  def __call__(self, batch, answers: bool, train: bool):
    encoded = self.encoder(batch["tokens"], batch["length"], train=train)
    if not answers:
      return encoded, None
    b, a, length = batch["answer_tokens"].shape
    words = self.encoder(batch["answer_tokens"].reshape(b * a, length), batch["answer_length"].reshape(b * a),
                         train=train)
    return encoded, words.reshape(b, a, -1)


def mean_answers(answers, valid):
  """Mean of [B, A, D] over the valid answers ([B, A] bool)."""
  weights = valid.astype(answers.dtype)[..., None]
  return (answers * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)


class _TextInputs(nn.Module):
  """What both challenges' models share: `inputs` and the text encoder."""
  text: _Text
  inputs: str = "i+q+a"

  def encode_text(self, batch, train: bool):
    """(input parts, question [B, D], answers [B, A, D] or None); call from a compact method."""
    parts = self.inputs.split("+")
    return (parts, *self.text(batch, "a" in parts, train))


class GroundingClassifier(_TextInputs):
  """Single vs multiple grounding: the encoded text, a text-guided attention over the grid, an MLP, 2 classes."""
  fused_dim: int = 512
  attention_dim: int = 256
  mlp_dims: tuple[int, ...] = (512,)
  dropout: float = 0.5

  @nn.compact
  def __call__(self, batch, *, train: bool):
    parts, encoded, answers = self.encode_text(batch, train)
    x = encoded if answers is None else jnp.concatenate(
        [encoded, mean_answers(answers, batch["answer_valid"])], axis=-1)
    x = jnp.tanh(nn.Dense(self.fused_dim, name="text_proj")(x))
    if "i" in parts:
      cells = batch["image"].reshape(batch["image"].shape[0], -1, batch["image"].shape[-1])
      scores = nn.Dense(1, name="attention_score")(jnp.tanh(
          nn.Dense(self.attention_dim, name="attention_cells")(cells)
          + nn.Dense(self.attention_dim, name="attention_text")(x)[:, None, :]))[..., 0]
      pooled = (nn.softmax(scores, axis=-1)[..., None] * cells).sum(1)
      x = x * jnp.tanh(nn.Dense(self.fused_dim, name="image_proj")(pooled))
    for i, dim in enumerate(self.mlp_dims):
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
      x = jnp.tanh(nn.Dense(dim, name=f"mlp_{i}")(x))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return nn.Dense(2, name="classifier")(x)


class MaskPredictor(_TextInputs):
  """A mask per answer slot: the slot's text FiLM-modulates each projected grid cell into a logit per cell."""
  cell_dim: int = 256
  dropout: float = 0.1

  @nn.compact
  def __call__(self, batch, *, train: bool):
    _, encoded, answers = self.encode_text(batch, train)
    num_answers = batch["answer_valid"].shape[1]
    per_slot = jnp.broadcast_to(encoded[:, None], (encoded.shape[0], num_answers, encoded.shape[-1]))
    text = {"i+q": per_slot, "i+a": answers}.get(self.inputs)
    if text is None:  # i+q+a
      text = jnp.concatenate([per_slot, answers], axis=-1)
    text = jnp.tanh(nn.Dense(self.cell_dim, name="text_proj")(text))
    text = nn.Dropout(self.dropout, deterministic=not train)(text)
    gamma = nn.Dense(self.cell_dim, name="film_scale")(text)[:, :, None, None, :]
    beta = nn.Dense(self.cell_dim, name="film_shift")(text)[:, :, None, None, :]
    cells = jnp.tanh(nn.Dense(self.cell_dim, name="cell_proj")(batch["image"].astype(jnp.float32)))
    h = jnp.tanh(cells[:, None] * gamma + beta)
    return nn.Dense(1, name="cell_logit")(h)[..., 0]


class ViltSlots(nn.Module):
  """A `ViltMask` with one map applied to every answer slot's text ([B, S, T] WordPiece arrays)
  with the question's image (normalised as `vilt_run.ViltOnBatch` does) -> [B, A, G, G]
  logits; one text per question (S = 1, I+Q) gives every answer slot the same map."""
  model: ViltMask

  def setup(self):
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    b, slots, length = batch["input_ids"].shape
    ids, attention, types = (batch[k].reshape(b * slots, length) for k in vilt_run.TEXT_KEYS)
    values, mask = vilt_run.pixel_inputs(jnp.repeat(batch["image"], slots, axis=0))
    logits = self.model(ids, attention, values, mask, types, train=train)
    logits = logits.reshape(b, slots, *logits.shape[2:])
    return jnp.broadcast_to(logits, (b, batch["answer_valid"].shape[1], *logits.shape[2:]))


VILT_INPUTS = {"grounding_class": ("i+q", "i+q+a"), "grounding_mask": MASK_INPUTS}


def _vilt(cfg, enc, task: str) -> nn.Module:
  """ViLT with the two-class head (grounding_class) or a mask per answer slot (grounding_mask)."""
  if cfg.inputs not in VILT_INPUTS[task]:
    raise InputError(f"config.model.inputs '{cfg.inputs}' is not one of {VILT_INPUTS[task]} (ViLT, {task})")
  if enc.vilt is None:
    raise InputError("config.model.name 'vilt': this run's encoders hold no ViLT tokenizer (train it as a ViLT row)")
  dtype = jnp.dtype(cfg.dtype)
  if task == "grounding_class":
    return vilt_run.ViltOnBatch(ViltClassifier(enc.vilt.config, 2, dtype, cfg.remat))
  grid = therapy_dataset.mask_grid(cfg, enc.image_shape)
  return ViltSlots(ViltMask(enc.vilt.config, 1, (grid, grid), dtype, cfg.remat))


MODELS = {"grounding_classifier": GroundingClassifier, "mask_predictor": MaskPredictor,  # config.model.name
          "vilt": _vilt}
_TASK_MODELS = {"grounding_class": "grounding_classifier", "grounding_mask": "mask_predictor"}


def build(cfg, enc, task: str) -> nn.Module:
  """The model `config.model` names for `task` ('grounding_class' | 'grounding_mask')."""
  name = cfg.name
  if name == "vilt":
    return _vilt(cfg, enc, task)
  if name != _TASK_MODELS[task]:
    raise InputError(f"config.model.name '{name}': the {task} task trains a '{_TASK_MODELS[task]}' or 'vilt'")
  allowed = CLASSIFIER_INPUTS if task == "grounding_class" else MASK_INPUTS
  encoder = cfg.question  # names and values checked with the config (configs.FIELDS)
  if cfg.inputs not in allowed:
    raise InputError(f"config.model.inputs '{cfg.inputs}' is not one of {allowed} ({task})")
  if "i" in cfg.inputs.split("+") and enc.image_shape is None:
    raise InputError(f"config.model.inputs '{cfg.inputs}' needs image features: set config.data.features")
  text = dict(text=_Text(question.build(encoder, cfg, len(enc.vocab))), inputs=cfg.inputs, dropout=cfg.dropout)
  if name == "grounding_classifier":
    return GroundingClassifier(fused_dim=cfg.fused_dim, attention_dim=cfg.attention_dim,
                               mlp_dims=tuple(cfg.mlp_dims), **text)
  return MaskPredictor(cell_dim=cfg.cell_dim, **text)
