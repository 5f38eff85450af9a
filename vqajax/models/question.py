"""Question encoders over right-padded token ids with their lengths."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


class WordEmbedding(nn.Module):
  """The paper's word embedding: a fully-connected layer on one-hot words, then tanh."""
  vocab_size: int
  dim: int = 300

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab_size, self.dim, embedding_init=nn.initializers.uniform(0.16))(tokens)
    return jnp.tanh(x + self.param("bias", nn.initializers.zeros, (self.dim,)))


class LSTMEncoder(nn.Module):
  """Stacked LSTM; the encoding is the last (cell, hidden) of every layer, concatenated.

  The scan runs over the padded length, but each question's state is taken at its own
  last word, so padding never changes the encoding; an empty question encodes to zeros.
  """
  vocab_size: int
  embed_dim: int = 300
  hidden: int = 512
  layers: int = 2

  @nn.compact
  def __call__(self, tokens, lengths):
    x = WordEmbedding(self.vocab_size, self.embed_dim)(tokens)
    states = []
    for layer in range(self.layers):
      rnn = nn.RNN(nn.OptimizedLSTMCell(self.hidden), return_carry=True, name=f"lstm_{layer}")
      (c, h), x = rnn(x, seq_lengths=lengths)
      states += [c, h]
    encoding = jnp.concatenate(states, axis=-1)
    return jnp.where((lengths > 0)[:, None], encoding, 0.0)

  @property
  def features(self) -> int:
    return 2 * self.layers * self.hidden
