"""VQA-AnswerTherapy models: the single-vs-multiple grounding classifier and the answer
mask predictor (`config.model.name`: `MODELS`, each a `core/model.Model` entry holding its config
group, each field's default and rule), over the suite's question encoders
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

The pretrained architectures (`nn/pretrained.MODELS`, each for the challenges in its `tasks`) join `MODELS`.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from vqajax.core import model as model_lib
from vqajax.core.config import dims, integer, number, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import Builder, Field, Model
from vqajax.nn import lstm, pretrained, question

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


def _text(cfg, enc) -> dict:
  """The fields both challenges' models share: the text encoder, inputs and dropout."""
  if "i" in cfg.inputs.split("+") and enc.image_shape is None:
    raise InputError(f"config.model.inputs '{cfg.inputs}' needs image features: set config.data.features")
  return dict(text=_Text(question.build(cfg.question, cfg, len(enc.vocab))), inputs=cfg.inputs, dropout=cfg.dropout)


def _grounding_classifier(cfg, enc) -> GroundingClassifier:
  """Single vs multiple grounding from the text and a text-guided attention over the grid (`GroundingClassifier`)."""
  return GroundingClassifier(fused_dim=cfg.fused_dim, attention_dim=cfg.attention_dim, mlp_dims=tuple(cfg.mlp_dims),
                             **_text(cfg, enc))


def _mask_predictor(cfg, enc) -> MaskPredictor:
  """A mask per answer slot: its text FiLM-modulates each grid cell (`MaskPredictor`)."""
  return MaskPredictor(cell_dim=cfg.cell_dim, **_text(cfg, enc))


DROPOUT = number(0, 1, hi_open=True)
# The text encoder's fields, the LSTM's sizes (`nn/question.py`; a Transformer's own group,
# config.model.transformer, has its rules there)
TEXT = {
    "question": Field("lstm", one_of(*question.ENCODERS)),  # the text encoder: one of nn/question.ENCODERS
    "embed_dim": Field(300, integer()),
    "lstm_dim": Field(512, integer()),
    "lstm_layers": Field(1, integer()),
    "lstm_impl": Field("auto", one_of("auto", *lstm.IMPLS)),  # "chunked" (CPU) | "scan" (TPU / GPU) | "auto": by backend
}

GROUNDING_CLASSIFIER = Model(group={
    "inputs": Field("i+q+a", one_of(*CLASSIFIER_INPUTS)),  # what it reads: the image, question, answers
    **TEXT,
    "dropout": Field(0.5, DROPOUT),                       # before each layer of the MLP
    "fused_dim": Field(512, integer()),
    "attention_dim": Field(256, integer()),
    "mlp_dims": Field((512,), dims()),
}, tasks={"grounding_class": Builder(_grounding_classifier)})

MASK_PREDICTOR = Model(group={
    "inputs": Field("i+q+a", one_of(*MASK_INPUTS)),       # each slot's text: the question, question + answer, answer
    **TEXT,
    "dropout": Field(0.1, DROPOUT),                       # on the text's projection
    "cell_dim": Field(256, integer()),
}, tasks={"grounding_mask": Builder(_mask_predictor)})

# config.model.name -> its entry
MODELS = {"grounding_classifier": GROUNDING_CLASSIFIER, "mask_predictor": MASK_PREDICTOR, **pretrained.MODELS}


def build(cfg, enc, task: str) -> nn.Module:
  """The model `config.model` names for `task` ('grounding_class' | 'grounding_mask'), checked with the config."""
  return model_lib.entry(MODELS, cfg).tasks[task].build(cfg, enc)


def initial_params(cfg, params, enc):
  """Where the model `config.model` names starts from (None: `params` stay)."""
  return model_lib.initial_params(MODELS, cfg, params, enc)


def frozen(cfg) -> tuple[str, ...]:
  """The top-level parameter groups of the model `config.model` names that do not train."""
  return model_lib.frozen(MODELS, cfg)
