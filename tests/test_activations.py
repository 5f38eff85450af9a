"""Hugging Face's activation names against their definitions, evaluated in float64 with `math`."""

import math

import jax
import numpy as np
import pytest

from vqajax.nn.activations import ACTIVATIONS

POINTS = np.array([-10.0, -4.0, -2.5, -1.0, -0.3, 0.0, 1e-3, 0.5, 1.0, 2.0, 3.7, 9.0], np.float32)


def _tanh_gelu(x):
  return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


DEFINITIONS = {
    "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
    "gelu_new": _tanh_gelu,
    "gelu_pytorch_tanh": _tanh_gelu,
    "quick_gelu": lambda x: x / (1 + math.exp(-1.702 * x)),
    "relu": lambda x: max(x, 0.0),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "swish": lambda x: x / (1 + math.exp(-x)),
}


def test_every_name_has_a_definition_here():
  assert set(ACTIVATIONS) == set(DEFINITIONS)


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_activation_matches_its_definition(name):
  got = np.asarray(jax.jit(ACTIVATIONS[name])(POINTS), np.float64)
  want = np.array([DEFINITIONS[name](float(x)) for x in POINTS])
  # 2e-6: float32 rounding; the exact GELU and its tanh approximation differ by 9.8e-5 at x = 2
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)

