"""Question-guided soft attention over a grid of image features (Kazemi & Elqursh 2017).

A 1x1 convolution over [grid ; question tiled to every location] -> ReLU -> a 1x1
convolution to G glimpse logits per location -> softmax over the locations; each
glimpse is the attention-weighted sum of the grid's feature vectors. The first
convolution is computed as `grid @ W_grid + question @ W_question` (the same linear map
as over the concatenation, without materialising the tiled question).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class GlimpseAttention(nn.Module):
  """grid [B, L, C] (L locations), question [B, Q] -> the G glimpses concatenated [B, G * C].

  `dropout` applies to the inputs of both convolutions (the reproduction's 0.2); `dtype`
  is the matmul input type (parameters and the softmax stay float32).
  """
  hidden: int = 512
  glimpses: int = 2
  dropout: float = 0.0
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, grid, question, *, train: bool):
    drop = nn.Dropout(self.dropout, deterministic=not train)
    x = (nn.Dense(self.hidden, use_bias=False, dtype=self.dtype, name="grid")(drop(grid))
         + nn.Dense(self.hidden, dtype=self.dtype, name="question")(drop(question))[:, None, :])
    logits = nn.Dense(self.glimpses, dtype=self.dtype, name="glimpses")(drop(jax.nn.relu(x)))
    weights = jax.nn.softmax(logits.astype(jnp.float32), axis=1)  # [B, L, G], over locations
    pooled = jnp.einsum("blg,blc->bgc", weights, grid.astype(jnp.float32))
    return pooled.reshape(grid.shape[0], -1)
