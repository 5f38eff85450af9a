"""Hugging Face's activation names (transformers' `ACT2FN`) -> the same functions in JAX, for every
architecture read from the Hub (`hidden_act` in its config.json)."""

import functools

import flax.linen as nn
import jax

ACTIVATIONS = {
    "gelu": functools.partial(nn.gelu, approximate=False),
    "gelu_new": functools.partial(nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(nn.gelu, approximate=True),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": nn.relu,
    "silu": nn.silu,
    "swish": nn.silu,
}
