"""How a model's parameters start, by name (`config.model.init`, `RULES`).

- "paper": every parameter (embeddings, kernels, biases) from U(-0.08, 0.08), as the VQA
  paper's released Torch code (VQA_LSTM_CNN's train.lua draws each network's flattened
  `getParameters()` vector with `:uniform(-0.08, 0.08)`).
- "default": flax's default for each layer (e.g. Dense kernels LeCun normal, biases zero,
  Embed N(0, 1 / dim), the LSTM's recurrent kernels orthogonal).

A rule is one initialiser for every parameter of the layers that take it, or None for each
layer's own defaults.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

PAPER_RANGE = 0.08  # VQA_LSTM_CNN: :uniform(-0.08, 0.08)


def paper(key, shape, dtype=jnp.float32) -> jax.Array:
  """U(-PAPER_RANGE, PAPER_RANGE), the paper's code's rule for every parameter."""
  return jax.random.uniform(key, shape, dtype, -PAPER_RANGE, PAPER_RANGE)


RULES: dict[str, Callable | None] = {"paper": paper, "default": None}


def kernel_and_bias(rule: Callable | None) -> dict:
  """Keyword arguments for a Dense-like layer: the rule for its kernel and bias, or none (its own defaults)."""
  return {} if rule is None else {"kernel_init": rule, "bias_init": rule}
