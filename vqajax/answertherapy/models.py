"""VQA-AnswerTherapy models: the single-vs-multiple grounding classifier and the answer
mask predictor, from the suite's question encoder (`question.LSTMEncoder`).

Text: one LSTM encodes the question and, with the same weights, each answer; answers are
mean-pooled over a question's valid answers where one vector is needed.

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
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from vqajax.core.errors import InputError
from vqajax.nn import lstm
from vqajax.nn.question import LSTMEncoder

CLASSIFIER_INPUTS = ("q", "q+a", "i+q", "i+q+a")
MASK_INPUTS = ("i+q", "i+q+a", "i+a")


class _Text(nn.Module):
  """(question [B, D], answers [B, A, D]) encodings from one shared LSTM."""
  vocab_size: int
  embed_dim: int
  lstm_dim: int
  lstm_layers: int
  lstm_impl: str = "chunked"

  @nn.compact
  def __call__(self, batch, answers: bool):
    encoder = LSTMEncoder(self.vocab_size, self.embed_dim, self.lstm_dim, self.lstm_layers, impl=self.lstm_impl,
                          name="encoder")
    question = encoder(batch["tokens"], batch["length"])
    if not answers:
      return question, None
    b, a, length = batch["answer_tokens"].shape
    encoded = encoder(batch["answer_tokens"].reshape(b * a, length), batch["answer_length"].reshape(b * a))
    return question, encoded.reshape(b, a, -1)


def mean_answers(answers, valid):
  """Mean of [B, A, D] over the valid answers ([B, A] bool)."""
  weights = valid.astype(answers.dtype)[..., None]
  return (answers * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)


class _TextInputs(nn.Module):
  """What both challenges' models share: `inputs` and the text encoder's sizes."""
  vocab_size: int
  inputs: str = "i+q+a"
  embed_dim: int = 300
  lstm_dim: int = 512
  lstm_layers: int = 1
  lstm_impl: str = "chunked"            # nn/lstm.IMPLS

  def encode_text(self, batch):
    """(input parts, question [B, D], answers [B, A, D] or None); call from a compact method."""
    parts = self.inputs.split("+")
    question, answers = _Text(self.vocab_size, self.embed_dim, self.lstm_dim, self.lstm_layers,
                              self.lstm_impl, name="text")(batch, "a" in parts)
    return parts, question, answers


class GroundingClassifier(_TextInputs):
  fused_dim: int = 512
  attention_dim: int = 256
  mlp_dims: tuple[int, ...] = (512,)
  dropout: float = 0.5

  @nn.compact
  def __call__(self, batch, *, train: bool):
    parts, question, answers = self.encode_text(batch)
    x = question if answers is None else jnp.concatenate(
        [question, mean_answers(answers, batch["answer_valid"])], axis=-1)
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
  cell_dim: int = 256
  dropout: float = 0.1

  @nn.compact
  def __call__(self, batch, *, train: bool):
    _, question, answers = self.encode_text(batch)
    num_answers = batch["answer_valid"].shape[1]
    per_slot = jnp.broadcast_to(question[:, None], (question.shape[0], num_answers, question.shape[-1]))
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


def build(cfg, enc, task: str) -> nn.Module:
  """The model of `config.model` for `task` ('grounding_class' | 'grounding_mask')."""
  allowed = CLASSIFIER_INPUTS if task == "grounding_class" else MASK_INPUTS
  lstm_impl = cfg.get("lstm_impl", "chunked")  # runs recorded before the switch: chunked
  if lstm_impl not in lstm.IMPLS:
    raise InputError(f"config.model.lstm_impl '{lstm_impl}' is not one of {lstm.IMPLS}")
  if cfg.inputs not in allowed:
    raise InputError(f"config.model.inputs '{cfg.inputs}' is not one of {allowed} ({task})")
  if "i" in cfg.inputs.split("+") and enc.image_shape is None:
    raise InputError(f"config.model.inputs '{cfg.inputs}' needs image features: set config.data.features")
  text = dict(vocab_size=len(enc.vocab), inputs=cfg.inputs, embed_dim=cfg.embed_dim,
              lstm_dim=cfg.lstm_dim, lstm_layers=cfg.lstm_layers, lstm_impl=lstm_impl, dropout=cfg.dropout)
  if task == "grounding_class":
    return GroundingClassifier(fused_dim=cfg.fused_dim, attention_dim=cfg.attention_dim,
                               mlp_dims=tuple(cfg.mlp_dims), **text)
  return MaskPredictor(cell_dim=cfg.cell_dim, **text)
