"""Max abs differences between the Flax extractors and torchvision with the same random
weights, and between our torchvision preprocessing and `torchvision.transforms`, printed as
JSON. Run by test_feature_extractors.py in a subprocess: importing torchvision after
TensorFlow (which other tests load) crashes the process.

  python tests/torchvision_parity.py
"""

import json
import os

import jax
import numpy as np
import torch
import torchvision
from torchvision import transforms

from vqajax.features import images, models, weights

SAMPLE_DATA = os.path.join(os.path.dirname(__import__("matplotlib").__file__), "mpl-data", "sample_data")


def _flax(name: str, layer: str, state: dict, nchw: np.ndarray) -> np.ndarray:
  model = models.MODELS[name](layer=layer)
  params = weights.load_params(state, model, name)
  return np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x))(params, nchw.transpose(0, 2, 3, 1)))


def _diff(got: np.ndarray, want: np.ndarray) -> dict:
  assert got.shape == want.shape, (got.shape, want.shape)
  return {"max_abs_diff": float(np.abs(got - want).max()), "max_abs": float(np.abs(want).max()),
          "shape": list(got.shape)}


def vgg(name: str) -> dict:
  torch.manual_seed(0)
  net = getattr(torchvision.models, name)(weights=None).eval()
  # 32x32: conv5 is 2x2 and the adaptive average pool spreads each cell over 7x7 cells.
  x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
  with torch.no_grad():
    conv5 = net.features[:-1](torch.from_numpy(x))  # before the last max-pool
    fc7 = net.classifier[:5](torch.flatten(net.avgpool(net.features[-1](conv5)), 1))  # after the 2nd ReLU
  state = {key: tensor.numpy() for key, tensor in net.state_dict().items()}
  return {"fc7": _diff(_flax(name, "fc7", state, x), fc7.numpy()),
          "conv5": _diff(_flax(name, "conv5", state, x), conv5.numpy().transpose(0, 2, 3, 1))}


def vit_b16() -> dict:
  torch.manual_seed(0)
  net = torchvision.models.vit_b_16(weights=None).eval()
  x = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
  with torch.no_grad():
    tokens = net._process_input(torch.from_numpy(x))  # pylint: disable=protected-access
    tokens = net.encoder(torch.cat([net.class_token.expand(1, -1, -1), tokens], dim=1)).numpy()
  state = {key: tensor.numpy() for key, tensor in net.state_dict().items()}
  return {"cls": _diff(_flax("vit_b16", "cls", state, x), tokens[:, 0]),
          "patches": _diff(_flax("vit_b16", "patches", state, x), tokens[:, 1:].reshape(1, 14, 14, 768))}


def preprocessing() -> dict:
  reference = transforms.Compose([
      transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
      transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
  out = {}
  for name in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png", "logo2.png"):  # 512x600, 128x128, 542x130
    image = images.decode(os.path.join(SAMPLE_DATA, name))
    out[name] = _diff(images.torchvision(image, 224), reference(image).numpy().transpose(1, 2, 0))
  return out


if __name__ == "__main__":
  print(json.dumps({"vgg16": vgg("vgg16"), "vgg19": vgg("vgg19"), "vit_b16": vit_b16(),
                    "torchvision_preprocessing": preprocessing()}))
