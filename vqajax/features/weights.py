"""Model weights from torchvision state dicts (`.pth`) or their `.npz` conversion.

A file's names and shapes must be exactly torchvision's for the model (`features.N.*`,
`classifier.N.*` for VGG; `conv_proj`, `class_token`, `encoder.*`, `heads.head` for
ViT); anything else raises one `WeightsError` listing the missing keys, the unexpected
keys and the shape mismatches. The 1000-way classifier is checked but not used. torch is
imported only to read `.pth` files; `convert` writes the `.npz` that needs no torch.
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from typing import Callable, Mapping

import numpy as np

from vqajax.core.errors import InputError
from vqajax.core.files import write_atomic
from vqajax.core.official_files import check_file
from vqajax.features.models import POOLED, VGG, ViT

CLASSES = 1000  # ImageNet logits (classifier.6 / heads.head)
IMAGE_SIZE = 224  # ViT-B/16's position embeddings are for 224x224 input (14 x 14 patches)

# torchvision name -> (its shape, the Flax parameter path or None if unused, torch -> Flax)
Layout = dict[str, tuple[tuple[int, ...], tuple[str, ...] | None, Callable[[np.ndarray], np.ndarray]]]


class WeightsError(InputError):
  """A weights file that does not fit the model."""


def _same(w: np.ndarray) -> np.ndarray:
  return w


def _conv(w: np.ndarray) -> np.ndarray:
  return w.transpose(2, 3, 1, 0)  # [out, in, h, w] -> [h, w, in, out]


def _dense(w: np.ndarray) -> np.ndarray:
  return w.T


def _add(layout: Layout, key: str, out: int, inputs: int, path: tuple[str, ...] | None,
         kind: str = "dense") -> None:
  """A torch Linear / Conv2d (`kind` 'dense' or 'convK') and its bias."""
  shape = (out, inputs) if kind == "dense" else (out, inputs, int(kind[4:]), int(kind[4:]))
  kernel, bias = (None, None) if path is None else (path + ("kernel",), path + ("bias",))
  layout[f"{key}.weight"] = (shape, kernel, _dense if kind == "dense" else _conv)
  layout[f"{key}.bias"] = ((out,), bias, _same)


def _layer_norm(layout: Layout, key: str, width: int, path: tuple[str, ...]) -> None:
  layout[f"{key}.weight"] = ((width,), path + ("scale",), _same)
  layout[f"{key}.bias"] = ((width,), path + ("bias",), _same)


def _vgg_layout(model: VGG) -> Layout:
  layout: Layout = {}
  index, channels = 0, 3
  for s, widths in enumerate(model.stages, 1):
    for i, width in enumerate(widths, 1):
      _add(layout, f"features.{index}", width, channels, (f"conv{s}_{i}",), "conv3")
      index, channels = index + 2, width  # Conv2d, ReLU
    index += 1  # MaxPool2d
  _add(layout, "classifier.0", model.hidden, channels * POOLED * POOLED, ("fc6",))
  _add(layout, "classifier.3", model.hidden, model.hidden, ("fc7",))
  _add(layout, "classifier.6", CLASSES, model.hidden, None)
  return layout


def _vit_layout(model: ViT) -> Layout:
  width, tokens = model.width, (IMAGE_SIZE // model.patch) ** 2 + 1
  layout: Layout = {"class_token": ((1, 1, width), ("class_token",), _same),
                    "encoder.pos_embedding": ((1, tokens, width), ("pos_embedding",), _same)}
  _add(layout, "conv_proj", width, 3, ("conv_proj",), f"conv{model.patch}")
  for i in range(model.depth):
    key, path = f"encoder.layers.encoder_layer_{i}", (f"encoder_layer_{i}",)
    _layer_norm(layout, f"{key}.ln_1", width, path + ("ln_1",))
    layout[f"{key}.self_attention.in_proj_weight"] = ((3 * width, width), path + ("qkv", "kernel"), _dense)
    layout[f"{key}.self_attention.in_proj_bias"] = ((3 * width,), path + ("qkv", "bias"), _same)
    _add(layout, f"{key}.self_attention.out_proj", width, width, path + ("out",))
    _layer_norm(layout, f"{key}.ln_2", width, path + ("ln_2",))
    _add(layout, f"{key}.mlp.0", model.mlp, width, path + ("mlp_1",))
    _add(layout, f"{key}.mlp.3", width, model.mlp, path + ("mlp_2",))
  _layer_norm(layout, "encoder.ln", width, ("ln",))
  _add(layout, "heads.head", CLASSES, width, None)
  return layout


def torch_layout(model: VGG | ViT) -> Layout:
  """What a torchvision state dict of `model` holds (names in torchvision's order)."""
  return _vgg_layout(model) if isinstance(model, VGG) else _vit_layout(model)


def read_state(path: str) -> dict[str, np.ndarray]:
  """name -> float32 array from a `.pth` (torch.load, weights only) or `.npz` file."""
  check_file(path, max_bytes=None)  # a fifo would block the read forever
  if path.endswith(".npz"):
    try:
      with np.load(path, allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # a truncated zip: BadZipFile
      raise WeightsError(f"{path}: not a readable .npz of weights ({type(e).__name__}: {e})") from None
  if not path.endswith((".pth", ".pt")):
    raise WeightsError(f"{path}: unknown weights file type (expected .pth, .pt or .npz)")
  try:
    import torch
  except ImportError:
    raise WeightsError(f"{path}: reading .pth files needs torch (pip install torch), or convert "
                       "it once elsewhere: vqajax features convert IN.pth OUT.npz") from None
  try:
    state = torch.load(path, map_location="cpu", weights_only=True)
  except pickle.UnpicklingError:  # torch's paragraphs of advice (to load it unsafely) are not repeated
    raise WeightsError(f"{path}: not a readable torch state dict: not a pickle of tensors only (refused by torch's "
                       "weights-only loader, nothing in it was run)") from None
  except Exception as e:  # torch raises many kinds
    reason = next((line for line in str(e).splitlines() if line.strip()), "")
    raise WeightsError(f"{path}: not a readable torch state dict ({type(e).__name__}: {reason})") from None
  if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
    raise WeightsError(f"{path}: expected a state dict (names -> tensors), got {type(state).__name__}")
  return {name: tensor.detach().float().numpy() for name, tensor in state.items()}


def _listed(what: str, items: list[str], limit: int = 6) -> str:
  more = f", ... {len(items) - limit} more" if len(items) > limit else ""
  return f"{len(items)} {what} ({', '.join(items[:limit])}{more})"


def check(state: Mapping[str, np.ndarray], layout: Layout, source: str, name: str) -> None:
  """Raises one WeightsError naming every missing / unexpected key and shape mismatch."""
  missing = [k for k in layout if k not in state]
  unexpected = [k for k in state if k not in layout]
  mismatched = [f"{k} expected {layout[k][0]} found {tuple(np.shape(state[k]))}"
                for k in layout if k in state and tuple(np.shape(state[k])) != layout[k][0]]
  problems = [_listed(what, items) for what, items in (
      ("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", mismatched)) if items]
  if problems:
    raise WeightsError(f"{source}: does not fit {name}: {'; '.join(problems)}")


def load_params(source: str | Mapping[str, np.ndarray], model: VGG | ViT, name: str,
                where: str = "state dict") -> dict:
  """Flax params of `model` (called `name` in errors) from a weights file or a state dict
  (read from the file `where`)."""
  state = read_state(source) if isinstance(source, str) else source
  layout = torch_layout(model)
  check(state, layout, source if isinstance(source, str) else where, name)
  params: dict = {}
  for key, (_, path, to_flax) in layout.items():
    if path is not None:
      node = params
      for part in path[:-1]:
        node = node.setdefault(part, {})
      node[path[-1]] = to_flax(np.asarray(state[key], np.float32))
  return params


def sha256(path: str) -> str:
  """The hex sha256 of a weights file (recorded in the stores extracted with it)."""
  digest = hashlib.sha256()
  try:
    with open(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
  except OSError as e:
    raise WeightsError(f"{path}: cannot read the weights file ({e.strerror})") from None
  return digest.hexdigest()


def tensors_sha256(state: Mapping[str, np.ndarray]) -> str:
  """The hex sha256 of a state dict's tensors (names in order, shapes, float32 bytes): the
  same for a `.pth` and its `.npz` conversion, unlike the files' own digests."""
  digest = hashlib.sha256()
  for name in sorted(state):
    tensor = np.ascontiguousarray(state[name], np.float32)
    digest.update(f"{name} {tensor.shape}\n".encode())
    digest.update(tensor.reshape(-1).view(np.uint8))
  return digest.hexdigest()


def convert(pth: str, npz: str) -> int:
  """Writes the tensors of a `.pth` state dict as `.npz` (same names); returns their count."""
  if not npz.endswith(".npz"):
    raise WeightsError(f"{npz}: the output is a .npz file (name it OUT.npz)")
  state = read_state(pth)
  write_atomic(npz, lambda f: np.savez(f, **state), make_dirs=True)
  return len(state)
