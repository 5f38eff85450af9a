"""Question encoders over right-padded token ids with their lengths."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from flax.linen.recurrent import DenseParams

from vqajax.models.lstm import masked_lstm


class WordEmbedding(nn.Module):
  """The paper's word embedding: a fully-connected layer on one-hot words, then tanh."""
  vocab_size: int
  dim: int = 300

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab_size, self.dim, embedding_init=nn.initializers.uniform(0.16))(tokens)
    return jnp.tanh(x + self.param("bias", nn.initializers.zeros, (self.dim,)))


class _LSTMWeights(nn.Module):
  """Flax's LSTM-cell parameters ({ii,if,ig,io}/kernel, {hi,hf,hg,ho}/{kernel,bias}),
  concatenated over the gates (i, f, g, o) for the fused matmuls."""
  hidden: int

  @nn.compact
  def __call__(self, x):
    h = jnp.zeros(x.shape[:-1] + (self.hidden,), x.dtype)
    w_i = [DenseParams(self.hidden, use_bias=False, name=f"i{gate}")(x)[0] for gate in "ifgo"]
    w_h, b = zip(*(DenseParams(self.hidden, kernel_init=nn.initializers.orthogonal(), name=f"h{gate}")(h)
                   for gate in "ifgo"))
    return jnp.concatenate(w_i, axis=-1), jnp.concatenate(w_h, axis=-1), jnp.concatenate(b)


class _LSTMLayer(nn.Module):
  """One masked LSTM layer over time-major inputs [T, B, E] (`lstm.masked_lstm`)."""
  hidden: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, lengths):
    w_i, w_h, b = _LSTMWeights(self.hidden, name="cell")(x)
    return masked_lstm(x, lengths, w_i, w_h, b, self.dtype)


class LSTMEncoder(nn.Module):
  """Stacked LSTM; the encoding is the last (cell, hidden) of every layer, concatenated.

  Each row's state is frozen after its last word, so padding never changes the encoding
  (and an empty question encodes to zeros); the recurrence stops at the batch's longest
  question. No gather over time is needed, which keeps the batch sharded end to end.
  `dtype` is the matmul input type of the recurrence (parameters stay float32).
  """
  vocab_size: int
  embed_dim: int = 300
  hidden: int = 512
  layers: int = 2
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, tokens, lengths):
    x = WordEmbedding(self.vocab_size, self.embed_dim)(tokens.T)  # time-major [T, B, E]
    states = []
    for layer in range(self.layers):
      x, c, h = _LSTMLayer(self.hidden, self.dtype, name=f"lstm_{layer}")(x, lengths)
      states += [c, h]
    return jnp.concatenate(states, axis=-1)
