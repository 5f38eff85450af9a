"""The Flax feature extractors against torchvision's architectures (plain torch.nn
references with torchvision's names and initialisation, `bench/torch_models.py`) with the same
random weights, torchvision's preprocessing against a PIL + numpy reference, and the weights
loader. Skipped without torch (the `test` extra installs it)."""

import importlib.util
import os
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from vqajax.features import forward, images, models, weights

# torch is imported by the tests that run, not at collection: every worker collects every module
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the test extra)")
SAMPLE_DATA = os.path.join(importlib.util.find_spec("matplotlib").submodule_search_locations[0], "mpl-data",
                           "sample_data")


def _flax(name: str, layer: str, net, nchw: np.ndarray) -> np.ndarray:
  """`name`'s Flax extractor at `layer` with `net`'s weights, on `nchw` (as NHWC)."""
  state = {key: tensor.numpy() for key, tensor in net.state_dict().items()}
  model = models.MODELS[name](layer=layer)
  params = weights.load_params(state, model, name)
  return np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x))(params, nchw.transpose(0, 2, 3, 1)))


def _redraw_constants(net) -> None:
  """The parameters torchvision's initialisation leaves constant (biases 0, LayerNorm scales 1
  and offsets 0, the class token 0) drawn at random around those values, so that a weight
  dropped or swapped in the mapping changes the outputs."""
  import torch
  with torch.no_grad():
    for key, value in net.state_dict().items():
      layer_norm_scale = key.endswith(("ln.weight", "ln_1.weight", "ln_2.weight"))
      if layer_norm_scale or key.endswith("bias") or key == "class_token":
        value.copy_(float(layer_norm_scale) + 0.1 * torch.randn_like(value))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16", "vgg19"])
def test_vgg_fc7_and_conv5_match_torchvision(name):
  import torch

  from bench import torch_models
  torch.manual_seed(0)
  net = getattr(torch_models, name)().eval()
  _redraw_constants(net)
  # 32x32: conv5 is 2x2 and the adaptive average pool spreads each cell over 7x7 cells.
  x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
  with torch.no_grad():
    conv5 = net.features[:-1](torch.from_numpy(x))  # before the last max-pool
    fc7 = net.classifier[:5](torch.flatten(net.avgpool(net.features[-1](conv5)), 1)).numpy()  # after the 2nd ReLU
  conv5 = conv5.numpy().transpose(0, 2, 3, 1)
  # Measured max abs differences: 4e-7 (fc7) and 3e-7 (conv5), for values up to ~0.5.
  for got, want, shape in ((_flax(name, "fc7", net, x), fc7, (2, 4096)),
                           (_flax(name, "conv5", net, x), conv5, (2, 2, 2, 512))):
    assert got.shape == want.shape == shape
    assert np.abs(got - want).max() < 5e-6 and np.abs(want).max() > 0.05


@pytest.mark.slow
def test_vit_b16_cls_and_patches_match_torchvision():
  import torch

  from bench import torch_models
  torch.manual_seed(0)
  net = torch_models.vit_b_16().eval()
  _redraw_constants(net)
  x = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
  with torch.no_grad():
    tokens = net.tokens(torch.from_numpy(x)).numpy()
  # Measured max abs differences: 3e-6 (cls) and 5e-6 (patches), for values up to ~4.6.
  for layer, want, shape in (("cls", tokens[:, 0], (1, 768)), ("patches", tokens[:, 1:].reshape(1, 14, 14, 768),
                                                              (1, 14, 14, 768))):
    got = _flax("vit_b16", layer, net, x)
    assert got.shape == want.shape == shape
    assert np.abs(got - want).max() < 5e-5 and np.abs(want).max() > 1


def _torchvision_reference(image: Image.Image, shift: int = 0) -> tuple[np.ndarray, tuple[int, int]]:
  """torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize on a PIL image, by hand
  (HWC, and the crop's top / left): the shorter side to 256 and the longer to
  int(256 * long / short) (PIL bilinear, as torchvision resizes PIL images), the crop at
  int(round((side - 224) / 2)) (Python's round: half to even), /255, minus the ImageNet mean,
  over its std. `shift` moves the crop that many pixels right and down."""
  width, height = image.size
  size = (256, int(256 * height / width)) if width <= height else (int(256 * width / height), 256)
  pixels = np.asarray(image.resize(size, Image.Resampling.BILINEAR), np.float64) / 255.0
  top, left = int(round((size[1] - 224) / 2.0)), int(round((size[0] - 224) / 2.0))
  pixels = pixels[top + shift:top + shift + 224, left + shift:left + shift + 224]
  return (pixels - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225]), (top, left)


@pytest.mark.parametrize("name, size, crop", [
    ("grace_hopper.jpg", (512, 600), (38, 16)),  # -> 256 x 300: top (300 - 224) / 2
    ("Minduka_Present_Blue_Pack.png", (128, 128), (16, 16)),  # -> 256 x 256
    ("logo2.png", (542, 130), (16, 422))])  # -> 1067 x 256 (256 * 542 / 130 = 1067.4): left 421.5 -> 422
def test_torchvision_preprocessing_equals_the_reference(name, size, crop):
  image = images.decode(os.path.join(SAMPLE_DATA, name))
  want, offsets = _torchvision_reference(image)
  assert image.size == size and offsets == crop
  got = images.torchvision(image, 224)
  assert got.shape == want.shape == (224, 224, 3) and np.abs(got - want).max() < 1e-5  # measured 4e-7
  assert np.abs(got - _torchvision_reference(image, shift=1)[0]).max() > 0.1  # the check sees a crop one pixel off


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
  import torch
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


def test_a_vggs_forward_compiles_without_ynnpack_fusions_on_the_cpu():
  # XLA:CPU's default hands the convolutions to YNNPACK (`forward.py` says why not); a ViT keeps it
  vgg = models.VGG(((4,), (8,)), hidden=16)
  params = jax.jit(vgg.init)(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32))["params"]
  ours = forward.Forward(vgg, params, 2)  # a batch a multiple of the devices
  x = np.random.default_rng(0).normal(size=(ours.batch, 32, 32, 3)).astype(np.float32)
  plain = jax.jit(lambda p, x: vgg.apply({"params": p}, x))
  assert "ynn_fusion" in plain.lower(params, x).compile().as_text()
  assert "ynn_fusion" not in ours._forward.lower(ours._params, x).compile().as_text()
  np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(plain(params, x)), rtol=1e-5, atol=1e-6)
  assert forward.compiler_options(models.MODELS["vit_b16"]()) == {}
  assert not forward._known("xla_cpu_no_such_option", "")  # another jaxlib: the option left out, not an error
