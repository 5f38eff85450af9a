"""Test session setup: 8 fake CPU devices (before jax is imported) and shared fixtures."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pytest  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
  """The embedded synthetic dataset at scale 'tiny', written once per session."""
  from vqajax.data import synthetic  # pylint: disable=g-import-not-at-top
  out = str(tmp_path_factory.mktemp("synthetic_tiny"))
  synthetic.generate(out, seed=0, scale="tiny")
  return out
