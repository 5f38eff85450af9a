"""The Flax feature extractors against torchvision with the same (random) weights, and the
weights loader. Skipped without torch / torchvision (the `test` extra installs them)."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from vqajax.features import models, weights

torch = pytest.importorskip("torch")  # torch itself imports fine beside TensorFlow, torchvision not
if importlib.util.find_spec("torchvision") is None:
  pytest.skip("torchvision is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def parity():
  """tests/torchvision_parity.py's measurements, run in a subprocess (see its docstring)."""
  script = os.path.join(os.path.dirname(__file__), "torchvision_parity.py")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
  done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["vgg16", "vgg19"])
def test_vgg_fc7_and_conv5_match_torchvision(parity, name):
  # Measured max abs differences: 4e-7 (fc7) and 2e-7 (conv5), for values up to ~0.2.
  assert parity[name]["fc7"]["shape"] == [2, 4096] and parity[name]["conv5"]["shape"] == [2, 2, 2, 512]
  for layer in ("fc7", "conv5"):
    assert parity[name][layer]["max_abs_diff"] < 5e-6 and parity[name][layer]["max_abs"] > 0.05


def test_vit_b16_cls_and_patches_match_torchvision(parity):
  # Measured max abs differences: 5e-6 (cls and patches), for values up to ~4.5.
  assert parity["vit_b16"]["cls"]["shape"] == [1, 768] and parity["vit_b16"]["patches"]["shape"] == [1, 14, 14, 768]
  for layer in ("cls", "patches"):
    assert parity["vit_b16"][layer]["max_abs_diff"] < 5e-5 and parity["vit_b16"][layer]["max_abs"] > 1


def test_torchvision_preprocessing_equals_torchvision_transforms(parity):
  for diff in parity["torchvision_preprocessing"].values():
    assert diff["shape"] == [224, 224, 3] and diff["max_abs_diff"] < 1e-5


def _zeros_like_layout(model) -> dict:
  return {key: np.zeros(shape, np.float32) for key, (shape, _, _) in weights.torch_layout(model).items()}


def test_vgg16_weights_for_vgg19_name_every_mismatch():
  # torchvision's Conv2d indices: VGG16 0 2 | 5 7 | 10 12 14 | 17 19 21 | 24 26 28,
  # VGG19 0 2 | 5 7 | 10 12 14 16 | 19 21 23 25 | 28 30 32 34 (ReLUs and max-pools between).
  vgg16 = _zeros_like_layout(models.MODELS["vgg16"]())
  with pytest.raises(weights.WeightsError) as error:
    weights.load_params(vgg16, models.MODELS["vgg19"](), "vgg19")
  assert str(error.value) == (
      "state dict: does not fit vgg19: 12 missing keys (features.16.weight, features.16.bias, "
      "features.23.weight, features.23.bias, features.25.weight, features.25.bias, ... 6 more); "
      "6 unexpected keys (features.17.weight, features.17.bias, features.24.weight, features.24.bias, "
      "features.26.weight, features.26.bias); 1 shape mismatches (features.19.weight expected "
      "(512, 256, 3, 3) found (512, 512, 3, 3))")


def test_pth_converts_to_npz_and_both_load_the_same(tmp_path):
  model = models.VGG(((4,), (8,)), hidden=16)
  torch.manual_seed(0)
  state = {key: torch.randn(shape) for key, (shape, _, _) in weights.torch_layout(model).items()}
  pth, npz = str(tmp_path / "w.pth"), str(tmp_path / "w.npz")
  torch.save(state, pth)
  assert weights.convert(pth, npz) == 10
  from_pth, from_npz = weights.load_params(pth, model, "tiny"), weights.load_params(npz, model, "tiny")
  jax.tree.map(np.testing.assert_array_equal, from_pth, from_npz)
  np.testing.assert_array_equal(from_npz["fc7"]["kernel"], state["classifier.3.weight"].numpy().T)
  np.testing.assert_array_equal(from_npz["conv2_1"]["kernel"][1, 2, 3, 4], state["features.3.weight"][4, 3, 1, 2])


def test_unreadable_weights_and_missing_torch_are_one_line_errors(tmp_path, monkeypatch):
  bad = tmp_path / "w.pth"
  bad.write_bytes(b"not a pickle")
  with pytest.raises(weights.WeightsError, match=r"w\.pth: not a readable torch state dict"):
    weights.read_state(str(bad))
  monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
  with pytest.raises(weights.WeightsError, match=r"w\.pth: reading \.pth files needs torch .* convert"):
    weights.read_state(str(bad))
