"""Late-fusion VQA classifiers: every neural row of the paper's Table II is one setting.

Inputs, each optional: the question (`bow`: the 1030-bin bag of words; `lstm`: last
(cell, hidden) of every layer of an LSTM), the image features (optionally l2-normalised)
and the captions of the image (a bag of the top caption words). Each input named in
`project` goes through fully-connected + tanh to `fused_dim`; the inputs are then fused
element-wise ('mul', equal widths needed) or concatenated ('concat'); a single input
is used as it is. The shared head: `mlp_dims` tanh layers, each after dropout, and a
linear layer to the K answer logits (softmax in the loss).

Raw image features (the rows without norm I) are multiplied by `image_scale` (0.01 in
the configs). fc7 activations are non-negative with L2 norms of ~50-100 (VGG, and the
synthetic store), and with the adaptive optimisers used here (RMSprop, Adam) every
first-layer weight moves by about the learning rate per step, so a unit over 4096 such
inputs swings by ~lr * sum(x) (~3 at lr 1e-3) and never settles. A constant factor keeps
each image's magnitude (unlike norm I). Measured on the medium synthetic set, cpu
setting, 1000 steps: BoW Q + I 31.4 -> 67.2, LSTM Q + I 56.9 -> 61.0 open-ended.

  row                      question  image      caption  project            fusion
  BoW Q                    bow       -          -        -                  -
  I                        -         raw        -        -                  -
  BoW Q + I                bow       raw        -        -                  concat
  LSTM Q                   lstm x1   -          -        -                  -
  LSTM Q + I               lstm x1   raw        -        image              mul
  deeper LSTM Q            lstm x2   -          -        question           -
  deeper LSTM Q + norm I   lstm x2   l2-normed  -        question, image    mul
  Caption                  -         -          bow      -                  -
  BoW Q + C                bow       -          bow      -                  concat

Beyond the paper, `AttentionVQA` (config.model.glimpses > 0): "Show, Ask, Attend, and
Answer" (Kazemi & Elqursh 2017) over a grid store [H, W, C] (conv5, ViT patches): the
grid l2-normalised over channels at every location, the LSTM question encoding, G
question-guided glimpses over the locations (`nn/attention.py`), [glimpses ; question]
-> `mlp_dims` ReLU layers, each after dropout -> dropout -> the K answer logits.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from vqajax.core.errors import InputError
from vqajax.nn import lstm
from vqajax.nn.attention import GlimpseAttention
from vqajax.nn.question import LSTMEncoder

QUESTION_ENCODERS = ("none", "bow", "lstm")
FUSIONS = ("mul", "concat")


def bag_of_words(indices, size: int):
  """Counts per bin from [B, W] bin indices; -1 (padding, unknown words) counts nowhere."""
  return jax.nn.one_hot(indices, size).sum(axis=1)


def l2_normalise(x, axis: int = -1):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), 1e-12)


class LateFusionVQA(nn.Module):
  num_answers: int
  question: str = "lstm"
  vocab_size: int = 0                   # lstm: token ids
  embed_dim: int = 300
  lstm_dim: int = 512
  lstm_layers: int = 2
  question_bow_size: int = 0            # bow: bins of the question bag
  use_image: bool = True
  image_norm: bool = True
  image_scale: float = 1.0              # without image_norm: a constant factor
  caption_bow_size: int = 0             # > 0: use the caption bag
  project: tuple[str, ...] = ("question", "image")
  fusion: str = "mul"
  fused_dim: int = 1024
  mlp_dims: tuple[int, ...] = (1000, 1000)
  dropout: float = 0.5
  dtype: str = "float32"                # matmul inputs (bfloat16: parameters stay float32)
  lstm_impl: str = "chunked"            # nn/lstm.IMPLS

  def _inputs(self, batch) -> dict:
    inputs = {}
    if self.question == "lstm":
      inputs["question"] = LSTMEncoder(self.vocab_size, self.embed_dim, self.lstm_dim, self.lstm_layers,
                                       jnp.dtype(self.dtype), self.lstm_impl, name="question")(batch["tokens"], batch["length"])
    elif self.question == "bow":
      inputs["question"] = bag_of_words(batch["question_bow"], self.question_bow_size)
    if self.use_image:
      image = batch["image"].reshape(batch["image"].shape[0], -1).astype(jnp.float32)
      if self.image_norm:
        image = l2_normalise(image)
      else:
        image = image * self.image_scale
      inputs["image"] = image
    if self.caption_bow_size:
      inputs["caption"] = bag_of_words(batch["caption_bow"], self.caption_bow_size)
    return inputs

  @nn.compact
  def __call__(self, batch, *, train: bool):
    inputs = self._inputs(batch)
    dense = functools.partial(nn.Dense, dtype=jnp.dtype(self.dtype))
    parts = [jnp.tanh(dense(self.fused_dim, name=f"{name}_proj")(x)) if name in self.project else x
             for name, x in inputs.items()]
    if len(parts) > 1 and self.fusion == "mul":
      widths = {name: x.shape[-1] for name, x in zip(inputs, parts)}
      if len(set(widths.values())) > 1:
        raise InputError(f"element-wise fusion needs equal widths, got {widths}; "
                         "project the inputs (config.model.project) or fuse by 'concat'")
      x = parts[0]
      for part in parts[1:]:
        x = x * part
    else:
      x = jnp.concatenate(parts, axis=-1)
    for i, dim in enumerate(self.mlp_dims):
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
      x = jnp.tanh(dense(dim, name=f"mlp_{i}")(x))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return dense(self.num_answers, name="classifier")(x).astype(jnp.float32)


class AttentionVQA(nn.Module):
  num_answers: int
  vocab_size: int
  embed_dim: int = 300
  lstm_dim: int = 1024
  lstm_layers: int = 1
  image_norm: bool = True               # l2 over the channels of every location
  attention_dim: int = 512
  glimpses: int = 2
  attention_dropout: float = 0.2
  mlp_dims: tuple[int, ...] = (1024,)
  dropout: float = 0.5
  dtype: str = "float32"
  lstm_impl: str = "chunked"            # nn/lstm.IMPLS

  @nn.compact
  def __call__(self, batch, *, train: bool):
    dtype = jnp.dtype(self.dtype)
    question = LSTMEncoder(self.vocab_size, self.embed_dim, self.lstm_dim, self.lstm_layers, dtype, self.lstm_impl,
                           name="question")(batch["tokens"], batch["length"])
    image = batch["image"]
    grid = image.reshape(image.shape[0], -1, image.shape[-1]).astype(jnp.float32)  # [B, H * W, C]
    if self.image_norm:
      grid = l2_normalise(grid)
    x = GlimpseAttention(self.attention_dim, self.glimpses, self.attention_dropout, dtype,
                         name="attention")(grid, question, train=train)
    x = jnp.concatenate([x, question], axis=-1)
    for i, dim in enumerate(self.mlp_dims):
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
      x = jax.nn.relu(nn.Dense(dim, dtype=dtype, name=f"mlp_{i}")(x))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return nn.Dense(self.num_answers, dtype=dtype, name="classifier")(x).astype(jnp.float32)


def _build_attention(cfg, enc, lstm_impl: str) -> AttentionVQA:
  if cfg.question != "lstm" or not cfg.use_image or cfg.caption:
    raise InputError("config.model.glimpses > 0 (attention over the image grid) needs question='lstm', "
                     "use_image=True and caption=False")
  if len(enc.image_shape) != 3:
    raise InputError(f"config.data.features: attention (config.model.glimpses > 0) reads a grid store of "
                     f"[H, W, C] per image, got {enc.image_shape} (e.g. features/conv5_grid.npy)")
  return AttentionVQA(
      num_answers=len(enc.answers), vocab_size=len(enc.vocab), embed_dim=cfg.embed_dim, lstm_dim=cfg.lstm_dim,
      lstm_layers=cfg.lstm_layers, image_norm=cfg.image_norm, attention_dim=cfg.attention_dim,
      glimpses=cfg.glimpses, attention_dropout=cfg.attention_dropout, mlp_dims=tuple(cfg.mlp_dims),
      dropout=cfg.dropout, dtype=cfg.dtype, lstm_impl=lstm_impl)


def build(cfg, enc) -> LateFusionVQA | AttentionVQA:
  """The model described by `config.model`, sized by the run's encoders (`dataset.Encoders`)."""
  if cfg.question not in QUESTION_ENCODERS:
    raise InputError(f"config.model.question '{cfg.question}' is not one of {QUESTION_ENCODERS}")
  lstm_impl = cfg.get("lstm_impl", "chunked")  # runs recorded before the switch: chunked
  if lstm_impl not in lstm.IMPLS:
    raise InputError(f"config.model.lstm_impl '{lstm_impl}' is not one of {lstm.IMPLS}")
  if cfg.fusion not in FUSIONS:
    raise InputError(f"config.model.fusion '{cfg.fusion}' is not one of {FUSIONS}")
  unknown = set(cfg.project) - {"question", "image", "caption"}
  if unknown:
    raise InputError(f"config.model.project names unknown inputs {sorted(unknown)}")
  if cfg.caption and "caption_bow" not in enc.bag_sizes:
    raise InputError("config.model.caption needs captions: set config.data.train_captions and val_captions")
  if cfg.question == "none" and not cfg.use_image and not cfg.caption:
    raise InputError("a VQA model needs a question encoder, the image, the captions, or several")
  glimpses = cfg.get("glimpses", 0)  # runs recorded before attention: late fusion
  if glimpses < 0:
    raise InputError(f"config.model.glimpses: expected 0 (late fusion) or more, got {glimpses}")
  if glimpses:
    return _build_attention(cfg, enc, lstm_impl)
  return LateFusionVQA(
      num_answers=len(enc.answers), question=cfg.question, vocab_size=len(enc.vocab),
      embed_dim=cfg.embed_dim, lstm_dim=cfg.lstm_dim, lstm_layers=cfg.lstm_layers,
      question_bow_size=enc.bag_sizes["question_bow"], use_image=cfg.use_image,
      image_norm=cfg.image_norm, image_scale=cfg.image_scale, caption_bow_size=enc.bag_sizes["caption_bow"] if cfg.caption else 0,
      project=tuple(cfg.project), fusion=cfg.fusion, fused_dim=cfg.fused_dim,
      mlp_dims=tuple(cfg.mlp_dims), dropout=cfg.dropout, dtype=cfg.dtype, lstm_impl=lstm_impl)
