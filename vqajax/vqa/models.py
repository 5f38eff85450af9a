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
inputs swings by ~lr * sum(x) (~3 at lr 1e-3) and never settles: without the factor those
rows do not learn. A constant factor keeps each image's magnitude (unlike norm I).

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

`config.model.name` picks the model (`MODELS`: each a `core/model.Model` entry holding its
config group, each field's default and rule), `config.model.question` the question
encoder ("none", "bow", or one of `nn/question.ENCODERS`: the LSTM, a small Transformer).
The pretrained architectures that serve the VQA task (`nn/pretrained.MODELS`) join `MODELS`.

Beyond the paper, `AttentionVQA` ("attention"): "Show, Ask, Attend, and
Answer" (Kazemi & Elqursh 2017) over a grid store [H, W, C] (conv5, ViT patches): the
grid l2-normalised over channels at every location, the LSTM question encoding, G
question-guided glimpses over the locations (`nn/attention.py`), [glimpses ; question]
-> `mlp_dims` ReLU layers, each after dropout -> dropout -> the K answer logits.
"""

from __future__ import annotations

import functools
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from vqajax.core import model as model_lib
from vqajax.core.config import FLAG, dims, integer, names, number, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import Builder, Field, Model
from vqajax.nn import initializers, lstm, pretrained, question
from vqajax.nn.attention import GlimpseAttention

QUESTION_ENCODERS = ("none", "bow", *question.ENCODERS)
FUSIONS = ("mul", "concat")


def bag_of_words(indices, size: int):
  """Counts per bin from [B, W] bin indices; -1 (padding, unknown words) counts nowhere."""
  return jax.nn.one_hot(indices, size).sum(axis=1)


def l2_normalise(x, axis: int = -1):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), 1e-12)


class LateFusionVQA(nn.Module):
  num_answers: int
  question: nn.Module | None = None     # a token encoder (nn/question.py) ...
  question_bow_size: int = 0            # ... or the bins of the question bag (BoW Q)
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
  param_init: Callable | None = None          # every Dense's kernel and bias (`initializers.RULES`); None: flax's

  def _inputs(self, batch, train: bool) -> dict:
    inputs = {}
    if self.question is not None:
      inputs["question"] = self.question(batch["tokens"], batch["length"], train=train)
    elif self.question_bow_size:
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
    inputs = self._inputs(batch, train)
    dense = functools.partial(nn.Dense, dtype=jnp.dtype(self.dtype), **initializers.kernel_and_bias(self.param_init))
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
  question: nn.Module                   # a token encoder (nn/question.py)
  image_norm: bool = True               # l2 over the channels of every location
  attention_dim: int = 512
  glimpses: int = 2
  attention_dropout: float = 0.2
  mlp_dims: tuple[int, ...] = (1024,)
  dropout: float = 0.5
  dtype: str = "float32"

  @nn.compact
  def __call__(self, batch, *, train: bool):
    dtype = jnp.dtype(self.dtype)
    question = self.question(batch["tokens"], batch["length"], train=train)
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


def _init_rule(cfg, supported: bool, model: str):
  """`config.model.init`'s initialiser; "paper" only where every layer takes it (`supported`)."""
  rule = cfg.init
  if rule != "default" and not supported:
    raise InputError(f"config.model.init '{rule}' is for the late-fusion rows with an LSTM or BoW question; "
                     f"{model} takes 'default'")
  return initializers.RULES[rule]


def _attention(cfg, enc) -> AttentionVQA:
  """Show, Ask, Attend, and Answer: question-guided glimpses over a grid store (`AttentionVQA`)."""
  _init_rule(cfg, False, "the attention model")
  if cfg.question not in question.ENCODERS:
    raise InputError(f"config.model.name 'attention' (over the image grid) needs a question encoder of "
                     f"{tuple(question.ENCODERS)}")
  if len(enc.image_shape) != 3:
    raise InputError(f"config.data.features: attention (config.model.name 'attention') reads a grid store of "
                     f"[H, W, C] per image, got {enc.image_shape} (e.g. features/conv5_grid.npy)")
  return AttentionVQA(
      num_answers=len(enc.answers), question=question.build(cfg.question, cfg, len(enc.vocab)),
      image_norm=cfg.image_norm, attention_dim=cfg.attention_dim, glimpses=cfg.glimpses,
      attention_dropout=cfg.attention_dropout, mlp_dims=tuple(cfg.mlp_dims), dropout=cfg.dropout, dtype=cfg.dtype)


def _late_fusion(cfg, enc) -> LateFusionVQA:
  """Every Table II row: question, image and caption inputs fused late (`LateFusionVQA`)."""
  unknown = set(cfg.project) - {"question", "image", "caption"}
  if unknown:
    raise InputError(f"config.model.project names unknown inputs {sorted(unknown)}")
  if cfg.caption and "caption_bow" not in enc.bag_sizes:
    raise InputError("config.model.caption needs captions: set config.data.train_captions and val_captions")
  if cfg.question == "none" and not cfg.use_image and not cfg.caption:
    raise InputError("a VQA model needs a question encoder, the image, the captions, or several")
  init = _init_rule(cfg, cfg.question != "transformer", f"the {cfg.question} question encoder")
  encoder = question.build(cfg.question, cfg, len(enc.vocab)) if cfg.question in question.ENCODERS else None
  return LateFusionVQA(
      num_answers=len(enc.answers), question=encoder,
      question_bow_size=enc.bag_sizes["question_bow"] if cfg.question == "bow" else 0, use_image=cfg.use_image,
      image_norm=cfg.image_norm, image_scale=cfg.image_scale,
      caption_bow_size=enc.bag_sizes["caption_bow"] if cfg.caption else 0, project=tuple(cfg.project),
      fusion=cfg.fusion, fused_dim=cfg.fused_dim, mlp_dims=tuple(cfg.mlp_dims), dropout=cfg.dropout, dtype=cfg.dtype,
      param_init=init)


DTYPE = Field("float32", one_of("float32", "bfloat16", "float16"))  # matmul inputs; "bfloat16": parameters stay float32
# the loss (`task.LOSSES`): "answer" (the paper's: the most common answer), "soft" (the annotators'
# answers' distribution) or "bce" (each answer's VQA score)
TARGETS = Field("answer", one_of("answer", "soft", "bce"))
DROPOUT = number(0, 1, hi_open=True)
# The question encoder's fields, the LSTM's sizes (`nn/question.py`; a Transformer's own group,
# config.model.transformer, has its rules there)
QUESTION = {
    "question": Field("lstm", one_of(*QUESTION_ENCODERS)),  # "none" | "bow" | an encoder of nn/question.ENCODERS
    "embed_dim": Field(300, integer()),
    "lstm_dim": Field(512, integer()),
    "lstm_layers": Field(2, integer()),
    "lstm_impl": Field("auto", one_of("auto", *lstm.IMPLS)),  # "chunked" (CPU) | "scan" (TPU / GPU) | "auto": by backend
}

LATE_FUSION = Model(group={
    **QUESTION,
    "use_image": Field(True, FLAG),
    "image_norm": Field(True, FLAG),
    "image_scale": Field(0.01, number(0, lo_open=True)),  # without image_norm: raw fc7 times this (module docstring)
    "caption": Field(False, FLAG),
    "project": Field(("question", "image"), names()),   # inputs that get fully-connected + tanh to fused_dim
    "fusion": Field("mul", one_of(*FUSIONS)),
    "fused_dim": Field(1024, integer()),
    "mlp_dims": Field((1000, 1000), dims()),
    "dropout": Field(0.5, DROPOUT),                   # before each layer of the MLP
    "dtype": DTYPE,
    "targets": TARGETS,
    # every parameter U(-0.08, 0.08) as the paper's code, or "default": flax's per layer (nn/initializers.py)
    "init": Field("paper", one_of(*initializers.RULES)),
}, tasks={"vqa": Builder(_late_fusion)})

ATTENTION = Model(group={
    **QUESTION,
    "image_norm": Field(True, FLAG),                  # l2 over the channels of every location
    "glimpses": Field(2, integer()),
    "attention_dim": Field(512, integer()),           # its 1x1 convolution's width
    "attention_dropout": Field(0.2, DROPOUT),         # on the attention's inputs
    "mlp_dims": Field((1024,), dims()),
    "dropout": Field(0.5, DROPOUT),
    "dtype": DTYPE,
    "targets": TARGETS,
    "init": Field("default", one_of("default")),      # flax's per layer
}, tasks={"vqa": Builder(_attention)})

MODELS = {"late_fusion": LATE_FUSION, "attention": ATTENTION, **pretrained.serving("vqa")}  # config.model.name -> its entry


def build(cfg, enc) -> nn.Module:
  """The model `config.model` names, sized by the run's encoders (`dataset.Encoders`)."""
  return model_lib.entry(MODELS, cfg).tasks["vqa"].build(cfg, enc)


def initial_params(cfg, params, enc):
  """Where the model `config.model` names starts from (None: `params` stay)."""
  return model_lib.initial_params(MODELS, cfg, params, enc)


def frozen(cfg) -> tuple[str, ...]:
  """The top-level parameter groups of the model `config.model` names that do not train."""
  return model_lib.frozen(MODELS, cfg)
