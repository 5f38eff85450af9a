"""Question encoders over right-padded token ids with their lengths."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class WordEmbedding(nn.Module):
  """The paper's word embedding: a fully-connected layer on one-hot words, then tanh."""
  vocab_size: int
  dim: int = 300

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab_size, self.dim, embedding_init=nn.initializers.uniform(0.16))(tokens)
    return jnp.tanh(x + self.param("bias", nn.initializers.zeros, (self.dim,)))


class _MaskedLSTMStep(nn.Module):
  """One time step of an LSTM (fused gate matmuls) that keeps its state where mask is off."""
  hidden: int

  @nn.compact
  def __call__(self, carry, inputs):
    x, keep = inputs
    new_carry, _ = nn.OptimizedLSTMCell(self.hidden, name="cell")(carry, x)
    carry = jax.tree.map(lambda new, old: jnp.where(keep[:, None], new, old), new_carry, carry)
    return carry, carry[1]


class LSTMEncoder(nn.Module):
  """Stacked LSTM; the encoding is the last (cell, hidden) of every layer, concatenated.

  The scan runs over the padded length with the state frozen after each question's last
  word, so padding never changes the encoding (and an empty question encodes to zeros).
  No gather over time is needed, which keeps the batch sharded end to end.
  """
  vocab_size: int
  embed_dim: int = 300
  hidden: int = 512
  layers: int = 2

  @nn.compact
  def __call__(self, tokens, lengths):
    x = WordEmbedding(self.vocab_size, self.embed_dim)(tokens)
    keep = jnp.arange(tokens.shape[1])[None, :] < lengths[:, None]
    scan = nn.scan(_MaskedLSTMStep, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=1, out_axes=1)
    states = []
    for layer in range(self.layers):
      zeros = jnp.zeros((tokens.shape[0], self.hidden), x.dtype)
      (c, h), x = scan(self.hidden, name=f"lstm_{layer}")((zeros, zeros), (x, keep))
      states += [c, h]
    return jnp.concatenate(states, axis=-1)
