"""The extractor settings a store records (`store` docstring), and an extractor that
computes the features of new images with exactly those settings (`vqajax ask`)."""

from __future__ import annotations

import os

import numpy as np

from vqajax.core.errors import InputError
from vqajax.features import extract, models, weights

KEYS = ("model", "layer", "preprocess", "image_size", "dtype", "weights", "weights_sha256")


def settings(model: str, layer: str, preprocess: str, image_size: int, dtype: str, weights_file: str | None) -> dict:
  """What `vqajax features` records: the model and how images became its input, and the
  weights file (absolute path) with its sha256 ("" for a model of `models.NO_WEIGHTS`)."""
  return {"model": model, "layer": layer, "preprocess": preprocess, "image_size": image_size, "dtype": dtype,
          "weights": weights_file and os.path.abspath(weights_file),
          "weights_sha256": weights_file and weights.sha256(weights_file)}


class Extractor:
  """Features of image files made as `store`'s were (`recorded`: its extractor settings);
  `weights_file` replaces the recorded path (a moved file; its sha256 must still match).
  Refuses (one InputError) settings it cannot reproduce: missing fields, a missing or other
  file, features of another shape than the store's."""

  def __init__(self, recorded: dict | None, store, weights_file: str | None = None, batch: int = 32):
    source = store.path
    if not recorded:
      raise InputError(f"{source}: the features were not extracted by vqajax features (no extractor "
                       "settings recorded): ask about its own image ids instead")
    missing = [k for k in KEYS if k not in recorded]
    if missing or recorded["model"] not in models.MODELS:
      raise InputError(f"{source}: extractor settings {recorded} lack {', '.join(missing)} or name an unknown "
                       f"model (expected fields {', '.join(KEYS)})")
    model = models.MODELS[recorded["model"]](layer=recorded["layer"])
    self.settings, self._store = recorded, store
    if recorded["model"] in models.NO_WEIGHTS:  # defined by its code alone (the embedded datasets')
      self._forward = extract.Forward(model, {}, batch)
      return
    path = weights_file or recorded["weights"]
    if not os.path.isfile(path):
      raise InputError(f"{path}: the weights the features were extracted with are not there; give the file "
                       f"with sha256 {recorded['weights_sha256']} (--weights)")
    found = weights.sha256(path)
    if found != recorded["weights_sha256"]:
      raise InputError(f"{path}: sha256 {found} differs from {recorded['weights_sha256']}, the weights the "
                       "features were extracted with: new images would not get comparable features")
    self._forward = extract.Forward(model, weights.load_params(path, model, recorded["model"]), batch)

  def __call__(self, paths: list[str]) -> np.ndarray:
    s = self.settings
    features = extract.features_of(paths, self._forward, s["preprocess"], s["image_size"], s["dtype"])
    if features.shape[1:] != self._store.shape:
      raise InputError(f"{self._store.path}: holds features of shape {self._store.shape}, the recorded "
                       f"extractor makes {features.shape[1:]}")
    return features
