"""The extractor settings a store records (`store` docstring), and an extractor that
computes the features of new images with exactly those settings (`vqajax ask`).

The weights are identified by the digest of their tensors (`weights_tensors_sha256`), so a
`.pth` and its `.npz` conversion are the same weights. The model, with its weights, is built once per
process and file (`_forward`): the demo's uploads and repeated asks reuse it.
"""

from __future__ import annotations

import functools
import os
from typing import Iterator

import numpy as np

from vqajax.core.errors import InputError
from vqajax.features import forward, models, weights

KEYS = ("model", "layer", "preprocess", "image_size", "dtype", "weights", "weights_sha256", "weights_tensors_sha256")


def settings(model: str, layer: str, preprocess: str, image_size: int, dtype: str, weights_file: str | None,
             state=None) -> dict:
  """What `vqajax features` records: the model and how images became its input, and the
  weights file (absolute path) with its sha256 and its tensors' (`state`) digest (None for
  a model of `models.NO_WEIGHTS`)."""
  if weights_file is None:
    return {"model": model, "layer": layer, "preprocess": preprocess, "image_size": image_size, "dtype": dtype,
            "weights": None, "weights_sha256": None, "weights_tensors_sha256": None}
  return {"model": model, "layer": layer, "preprocess": preprocess, "image_size": image_size, "dtype": dtype,
          "weights": os.path.abspath(weights_file), "weights_sha256": weights.sha256(weights_file),
          "weights_tensors_sha256": weights.tensors_sha256(state)}


@functools.lru_cache(maxsize=2)
def _forward(model_name: str, layer: str, path: str, identity: tuple, tensors_sha256: str, batch: int
             ) -> forward.Forward:
  """The jitted model with the weights of `path` (`identity`: its mtime and size, so a
  replaced file is read again), verified against the recorded digest of their tensors."""
  del identity
  model = models.MODELS[model_name](layer=layer)
  state = weights.read_state(path)
  found = weights.tensors_sha256(state)
  if found != tensors_sha256:
    raise InputError(f"{path}: the sha256 of its tensors {found[:12]}... differs from {tensors_sha256[:12]}..., the "
                     "weights the features were extracted with: new images would not get comparable features")
  return forward.Forward(model, weights.load_params(state, model, model_name, where=path), batch)


@functools.lru_cache(maxsize=2)
def _weightless(model_name: str, layer: str, batch: int) -> forward.Forward:
  return forward.Forward(models.MODELS[model_name](layer=layer), {}, batch)


class Extractor:
  """Features of image files made as a store's were (`recorded`: its extractor settings;
  `shape`: its features per image; `source`: what recorded them, for errors);
  `weights_file` replaces the recorded path (a moved or converted file; its tensors must
  still match). Refuses (one InputError) settings it cannot reproduce: missing fields, a
  missing or other file, features of another shape than the store's."""

  def __init__(self, recorded: dict | None, shape: tuple[int, ...], source: str, weights_file: str | None = None,
               batch: int = 32):
    if not recorded:
      raise InputError(f"{source}: the features were not extracted by vqajax features (no extractor "
                       "settings recorded): ask about its own image ids instead")
    missing = [k for k in KEYS if k not in recorded]
    if missing or recorded["model"] not in models.MODELS:
      raise InputError(f"{source}: extractor settings {recorded} lack {', '.join(missing)} or name an unknown "
                       f"model (expected fields {', '.join(KEYS)})")
    self.settings, self.shape, self.source = recorded, tuple(shape), source
    if recorded["model"] in models.NO_WEIGHTS:  # defined by its code alone (the embedded datasets')
      if weights_file:
        raise InputError(f"--weights {weights_file}: {source}'s extractor, {recorded['model']}, takes no weights file")
      self._forward = _weightless(recorded["model"], recorded["layer"], batch)
      return
    if not (weights_file or recorded["weights"]):
      raise InputError(f"{source}: names no weights file of its extractor ({recorded['model']}; a bundle exported "
                       f"without --with-weights): give the file with sha256 {recorded['weights_sha256']} (--weights)")
    path = os.path.abspath(weights_file or recorded["weights"])
    if not os.path.isfile(path):
      raise InputError(f"{path}: the weights the features were extracted with are not there; give the file "
                       f"(or its .npz conversion) with sha256 {recorded['weights_sha256']} (--weights)")
    stat = os.stat(path)
    self._forward = _forward(recorded["model"], recorded["layer"], path, (stat.st_mtime_ns, stat.st_size),
                             recorded["weights_tensors_sha256"], batch)

  def batches(self, paths: list[str]) -> Iterator[np.ndarray]:
    """The features of image files, one forward batch at a time (`forward.feature_batches`)."""
    s = self.settings
    for features in forward.feature_batches(paths, self._forward, s["preprocess"], s["image_size"], s["dtype"]):
      if features.shape[1:] != self.shape:
        raise InputError(f"{self.source}: reads features of shape {self.shape}, the recorded extractor makes "
                         f"{features.shape[1:]}")
      yield features

  def __call__(self, paths: list[str]) -> np.ndarray:
    return np.concatenate(list(self.batches(paths)))
