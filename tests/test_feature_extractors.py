"""The Flax feature extractors against torchvision with the same (random) weights, and the
weights loader. Skipped without torch / torchvision (the `test` extra installs them)."""

import os
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from data_pipeline.features import images, models, weights

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

SAMPLE_DATA = os.path.join(os.path.dirname(__import__("matplotlib").__file__), "mpl-data", "sample_data")


def _state(net) -> dict:
  return {name: tensor.numpy() for name, tensor in net.state_dict().items()}


def _flax(name: str, layer: str, state: dict, nchw: np.ndarray) -> np.ndarray:
  model = models.MODELS[name](layer=layer)
  params = weights.load_params(state, model, name)
  return np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x))(params, nchw.transpose(0, 2, 3, 1)))


@pytest.mark.parametrize("name", ["vgg16", "vgg19"])
def test_vgg_fc7_and_conv5_match_torchvision(name):
  torch.manual_seed(0)
  net = getattr(torchvision.models, name)(weights=None).eval()
  # 32x32: conv5 is 2x2 and the adaptive average pool spreads each cell over 7x7 cells.
  x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
  with torch.no_grad():
    conv5 = net.features[:-1](torch.from_numpy(x))  # before the last max-pool
    fc7 = net.classifier[:5](torch.flatten(net.avgpool(net.features[-1](conv5)), 1))  # after the 2nd ReLU
  state = _state(net)
  got_fc7, got_conv5 = _flax(name, "fc7", state, x), _flax(name, "conv5", state, x)
  assert got_fc7.shape == (2, 4096) and got_conv5.shape == (2, 2, 2, 512)
  # Measured max abs differences: 4e-7 (fc7) and 2e-7 (conv5), for values up to ~0.2.
  np.testing.assert_allclose(got_fc7, fc7.numpy(), rtol=0, atol=5e-6)
  np.testing.assert_allclose(got_conv5, conv5.numpy().transpose(0, 2, 3, 1), rtol=0, atol=5e-6)


def test_vit_b16_cls_and_patches_match_torchvision():
  torch.manual_seed(0)
  net = torchvision.models.vit_b_16(weights=None).eval()
  x = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
  with torch.no_grad():
    tokens = net._process_input(torch.from_numpy(x))  # pylint: disable=protected-access
    tokens = net.encoder(torch.cat([net.class_token.expand(1, -1, -1), tokens], dim=1)).numpy()
  state = _state(net)
  # Measured max abs differences: 5e-6 (cls and patches), for values up to ~4.5.
  np.testing.assert_allclose(_flax("vit_b16", "cls", state, x), tokens[:, 0], rtol=0, atol=5e-5)
  np.testing.assert_allclose(_flax("vit_b16", "patches", state, x),
                             tokens[:, 1:].reshape(1, 14, 14, 768), rtol=0, atol=5e-5)


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


@pytest.mark.parametrize("name", ["grace_hopper.jpg", "Minduka_Present_Blue_Pack.png"])
def test_torchvision_preprocessing_equals_torchvision_transforms(name):
  image = images.decode(os.path.join(SAMPLE_DATA, name))
  transforms = torchvision.transforms
  reference = transforms.Compose([
      transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
      transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])(image)
  np.testing.assert_allclose(images.torchvision(image, 224), reference.numpy().transpose(1, 2, 0), atol=1e-6)
  assert Image.open(os.path.join(SAMPLE_DATA, name)).size != (224, 224)
