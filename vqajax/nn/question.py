"""Question encoders over right-padded token ids with their lengths, by name (`ENCODERS`).

Every encoder maps (tokens [B, T], lengths [B]) to one vector per row that padding never
changes (an empty question encodes to zeros); the VQA and AnswerTherapy models take theirs
from `build(config.model, vocab_size)`, so a new encoder is one class and one entry here, with
the rules of its config fields beside it (`RULES`: what each field holds, and its rules across
fields), which both papers' configs take from here (`FIELDS`, `check`).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from flax.linen.recurrent import DenseParams
from jax.sharding import PartitionSpec as P

from vqajax.core.config import integer, number
from vqajax.core.errors import InputError
from vqajax.nn import initializers, lstm


class WordEmbedding(nn.Module):
  """The paper's word embedding: a fully-connected layer on one-hot words, then tanh."""
  vocab_size: int
  dim: int = 300
  param_init: Callable | None = None  # every parameter's initialiser (`initializers.RULES`); None: flax's defaults

  @nn.compact
  def __call__(self, tokens):
    rule = {} if self.param_init is None else {"embedding_init": self.param_init}
    x = nn.Embed(self.vocab_size, self.dim, **rule)(tokens)
    return jnp.tanh(x + self.param("bias", self.param_init or nn.initializers.zeros, (self.dim,)))


class _LSTMWeights(nn.Module):
  """Flax's LSTM-cell parameters ({ii,if,ig,io}/kernel, {hi,hf,hg,ho}/{kernel,bias}) as one
  [E + H, 4H] kernel (input rows, then hidden rows; gates i, f, g, o) and a [4H] bias."""
  hidden: int
  param_init: Callable | None = None  # as WordEmbedding's; None: flax's LSTM cell's defaults

  @nn.compact
  def __call__(self, inputs: int):
    x, h = jnp.zeros((inputs,)), jnp.zeros((self.hidden,))  # only their widths are read
    rule = initializers.kernel_and_bias(self.param_init)
    w_i = [DenseParams(self.hidden, use_bias=False, name=f"i{gate}", **rule)(x)[0] for gate in "ifgo"]
    recurrent = rule or {"kernel_init": nn.initializers.orthogonal()}  # flax's LSTM cell's default
    w_h, b = zip(*(DenseParams(self.hidden, name=f"h{gate}", **recurrent)(h) for gate in "ifgo"))
    w = jnp.concatenate([jnp.concatenate(w_i, axis=-1), jnp.concatenate(w_h, axis=-1)])
    return w, jnp.concatenate(b)


class _LSTMLayer(nn.Module):
  hidden: int
  param_init: Callable | None = None

  @nn.compact
  def __call__(self, inputs: int):
    return _LSTMWeights(self.hidden, self.param_init, name="cell")(inputs)


class LSTMEncoder(nn.Module):
  """Stacked LSTM; the encoding is the last (cell, hidden) of every layer, concatenated.

  Each row's state is frozen after its last word, so padding never changes the encoding
  (and an empty question encodes to zeros); the recurrence only computes the steps of
  words (`lstm.encode`). Traced under a mesh with batch axes (`sharding.in_mesh`),
  each device encodes its own rows (`shard_map`), so the batch stays sharded. `dtype`
  is the matmul input type of the recurrence (parameters stay float32); `impl` the
  recurrence's shape (`lstm.IMPLS`: "chunked" for CPUs, "scan" for accelerators);
  `param_init` every parameter's initialiser (`initializers.RULES`; None: flax's defaults).
  """
  vocab_size: int
  embed_dim: int = 300
  hidden: int = 512
  layers: int = 2
  dtype: jnp.dtype = jnp.float32
  impl: str = "chunked"
  param_init: Callable | None = None

  @nn.compact
  def __call__(self, tokens, lengths, *, train: bool = False):
    del train  # no dropout inside the recurrence
    x = WordEmbedding(self.vocab_size, self.embed_dim, self.param_init)(tokens.T)  # time-major [T, B, E]
    weights = [_LSTMLayer(self.hidden, self.param_init, name=f"lstm_{layer}")(
        self.embed_dim if layer == 0 else self.hidden) for layer in range(self.layers)]
    encode = functools.partial(lstm.encode, dtype=self.dtype, impl=self.impl)
    mesh = jax.sharding.get_abstract_mesh()
    rows = tuple(mesh.axis_names)  # a batch's rows are split over every axis (`core/sharding.py`)
    if math.prod(mesh.shape.values()) > 1:  # the weights whole on each device (gathered where FSDP splits them)
      encode = jax.shard_map(encode, mesh=mesh, in_specs=(P(None, rows), P(rows), P()), out_specs=P(rows),
                             check_vma=False)
    return encode(x, lengths, weights)


class TransformerEncoder(nn.Module):
  """A small pre-LN Transformer: word embeddings plus learned positions, `layers` blocks of
  self-attention over the words (padding masked out) and a GELU MLP, each added to its
  input; a final LayerNorm, then the mean of the words' states."""
  vocab_size: int
  width: int = 256
  layers: int = 2
  heads: int = 4
  dropout: float = 0.1
  positions: int = 32                   # the longest question it reads
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, tokens, lengths, *, train: bool = False):
    length = tokens.shape[1]
    if length > self.positions:
      raise ValueError(f"questions of {length} words; the encoder has {self.positions} positions")
    x = nn.Embed(self.vocab_size, self.width, name="embed")(tokens)
    x = x + self.param("positions", nn.initializers.normal(0.02), (self.positions, self.width))[:length]
    valid = jnp.arange(length)[None, :] < lengths[:, None]
    drop = nn.Dropout(self.dropout, deterministic=not train)
    for i in range(self.layers):
      h = nn.LayerNorm(name=f"block_{i}_ln_attention")(x)
      h = nn.MultiHeadDotProductAttention(self.heads, dtype=self.dtype, dropout_rate=self.dropout,
                                          deterministic=not train, name=f"block_{i}_attention")(
                                              h, h, mask=nn.make_attention_mask(valid, valid))
      x = x + drop(h)
      h = nn.LayerNorm(name=f"block_{i}_ln_mlp")(x)
      h = nn.Dense(self.width, dtype=self.dtype, name=f"block_{i}_mlp_out")(
          nn.gelu(nn.Dense(4 * self.width, dtype=self.dtype, name=f"block_{i}_mlp_in")(h)))
      x = x + drop(h)
    weights = valid.astype(jnp.float32)[..., None]
    states = nn.LayerNorm(name="ln_final")(x).astype(jnp.float32)
    return (states * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)


def _lstm(cfg, vocab_size: int) -> LSTMEncoder:
  """The masked LSTM over word embeddings, its last (cell, hidden) of every layer (`nn/lstm.py`)."""
  return LSTMEncoder(vocab_size, cfg.embed_dim, cfg.lstm_dim, cfg.lstm_layers, jnp.dtype(cfg.get("dtype", "float32")),
                     lstm.resolve(cfg.lstm_impl), initializers.RULES[cfg.get("init", "default")])


def _transformer(cfg, vocab_size: int) -> TransformerEncoder:
  """A pre-LN Transformer over the words, the mean of their states (config.model.transformer)."""
  t = cfg.transformer  # experiments/vqa/transformer_q_norm_i.py
  return TransformerEncoder(vocab_size, t.width, t.layers, t.heads, t.dropout, t.positions,
                            jnp.dtype(cfg.get("dtype", "float32")))


ENCODERS = {"lstm": _lstm, "transformer": _transformer}  # config.model.question -> builder

# The Transformer's settings (config.model.transformer), in either paper's config.
TRANSFORMER = {
    "model.transformer.width": integer(1, 8192), "model.transformer.layers": integer(1, 64),
    "model.transformer.heads": integer(1, 128), "model.transformer.dropout": number(0, 1, hi_open=True),
    "model.transformer.positions": integer(1, 4096),
}


def _check_transformer(config: ml_collections.ConfigDict) -> None:
  """Its group is there, its heads divide its width and it has a position for every word."""
  t = config.model.get("transformer")
  if not isinstance(t, ml_collections.ConfigDict):
    raise InputError("config.model.question 'transformer': expected a config.model.transformer group (width, "
                     "layers, heads, dropout, positions), as experiments/vqa/transformer_q_norm_i.py sets")
  if t.width % t.heads:
    raise InputError(f"config.model.transformer.heads: expected a divisor of config.model.transformer.width "
                     f"({t.width}), got {t.heads}")
  words = config.data.get("max_question_len", 0)
  if t.positions < words:
    raise InputError(f"config.model.transformer.positions: expected at least config.data.max_question_len "
                     f"({words}), got {t.positions}")


# config.model.question -> (its fields' rules, `core.config.Rule`s; its rules across fields); an
# encoder without an entry has no fields of its own (the LSTM's sizes are the papers' model fields).
RULES = {"transformer": (TRANSFORMER, _check_transformer)}
FIELDS = {field: rule for fields, _ in RULES.values() for field, rule in fields.items()}  # every encoder's


def check(config: ml_collections.ConfigDict) -> None:
  """InputError naming the first field that breaks the rules across fields of the encoder
  `config.model.question` names."""
  name = config.get("model", {}).get("question")
  if name in RULES:
    RULES[name][1](config)


def build(name: str, cfg, vocab_size: int) -> nn.Module:
  """The question encoder `name` (one of `ENCODERS`), sized by `config.model` and the vocabulary."""
  return ENCODERS[name](cfg, vocab_size)
