"""Hugging Face's activation names (transformers' `ACT2FN`) -> the same functions in JAX, for every
architecture read from the Hub (`hidden_act` in its config.json)."""

import functools

import flax.linen as nn
import jax
import numpy as np


def gelu(x):
  """The exact GELU as torch computes it, x / 2 (1 + erf(x / sqrt 2)): within 1.1e-6 of it like
  `nn.gelu(approximate=False)`, whose erfc XLA expands into a slower two-branch series (ViLT-B's
  training step on the CPU took 5-13% longer with it)."""
  return 0.5 * x * (1 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": functools.partial(nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(nn.gelu, approximate=True),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": nn.relu,
    "silu": nn.silu,
    "swish": nn.silu,
}
