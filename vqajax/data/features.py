"""Image-feature stores: HDF5 or memory-mapped `.npy`, read lazily.

A store holds `features` [N, ...] (float16 or float32) and `image_ids` [N]:

* HDF5: one file with datasets `features` and `image_ids`;
* npy: `NAME.npy` (features) beside `NAME.image_ids.npy`.

Rows are read on demand, so a store larger than RAM trains.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

from vqajax.errors import InputError
from vqajax.files import temp_path

_FLOAT_DTYPES = (np.float16, np.float32)


class FeatureStoreError(InputError):
  """A store that does not match what the run expects."""


def ids_path(npy_path: str) -> str:
  return npy_path[: -len(".npy")] + ".image_ids.npy"


class FeatureStore:
  """Lazy row access by image id."""

  def __init__(self, path: str):
    self.path = path
    if path.endswith((".h5", ".hdf5")):
      self._file = h5py.File(path, "r")
      for key in ("features", "image_ids"):
        if key not in self._file:
          raise FeatureStoreError(f"{path}: missing dataset '{key}' (expected 'features' and 'image_ids')")
      self._features = self._file["features"]
      image_ids = self._file["image_ids"][...]
    elif path.endswith(".npy"):
      self._file = None
      self._features = np.load(path, mmap_mode="r")
      image_ids = np.load(ids_path(path))
    else:
      raise FeatureStoreError(f"{path}: unknown feature store type (expected .h5, .hdf5 or .npy)")
    if self._features.dtype not in _FLOAT_DTYPES:
      raise FeatureStoreError(f"{path}: features are {self._features.dtype}, expected float16 or float32")
    if image_ids.ndim != 1 or len(image_ids) != self._features.shape[0]:
      raise FeatureStoreError(
          f"{path}: {len(image_ids)} image ids for {self._features.shape[0]} feature rows")
    self.image_ids = image_ids.astype(np.int64)
    self._row_of = {int(i): r for r, i in enumerate(self.image_ids)}
    if len(self._row_of) != len(self.image_ids):
      raise FeatureStoreError(f"{path}: duplicate image ids")

  @property
  def shape(self) -> tuple[int, ...]:
    """Shape of one image's features, e.g. (4096,) or (14, 14, 512)."""
    return tuple(self._features.shape[1:])

  @property
  def dtype(self) -> np.dtype:
    return self._features.dtype

  def rows(self, image_ids, source: str = "") -> np.ndarray:
    """Store rows of `image_ids`; `source` names the file that asked, for errors."""
    try:
      return np.fromiter((self._row_of[int(i)] for i in image_ids), np.int64, len(image_ids))
    except KeyError as e:
      where = f" (needed by {source})" if source else ""
      raise FeatureStoreError(f"{self.path}: no features for image_id {e.args[0]}{where}") from None

  def check_shape(self, expected: tuple[int, ...]) -> None:
    if self.shape != tuple(expected):
      raise FeatureStoreError(
          f"{self.path}: features have shape {self.shape} per image, the config expects {tuple(expected)}")

  def read(self, rows: np.ndarray) -> np.ndarray:
    """Features of `rows` (any order, repeats allowed), as float32; NaN or inf is an error."""
    unique, inverse = np.unique(rows, return_inverse=True)
    features = np.asarray(self._features[unique], np.float32)
    finite = np.isfinite(features.reshape(len(unique), -1)).all(axis=1)
    if not finite.all():
      raise FeatureStoreError(f"{self.path}: the features of image_id "
                              f"{self.image_ids[unique[np.argmin(finite)]]} are not finite (NaN or inf)")
    return features[inverse]

  def close(self) -> None:
    if self._file is not None:
      self._file.close()


def write_store(path: str, image_ids, features) -> None:
  """Writes a store atomically (a failed write leaves no file behind)."""
  image_ids = np.asarray(image_ids, np.int64)
  features = np.asarray(features)
  if features.dtype not in _FLOAT_DTYPES or len(features) != len(image_ids):
    raise FeatureStoreError(f"{path}: need float16/float32 features with one row per image id")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  suffix = ".h5" if path.endswith((".h5", ".hdf5")) else ".npy"
  tmp = temp_path(path) + suffix
  try:
    if suffix == ".h5":
      with h5py.File(tmp, "w") as f:
        f.create_dataset("features", data=features, chunks=(1,) + features.shape[1:])
        f.create_dataset("image_ids", data=image_ids)
      os.replace(tmp, path)
    else:
      np.save(tmp, features)
      tmp_ids = ids_path(tmp)
      np.save(tmp_ids, image_ids)
      os.replace(tmp_ids, ids_path(path))
      os.replace(tmp, path)
  finally:
    for leftover in (tmp, ids_path(tmp) if suffix == ".npy" else None):
      if leftover and os.path.exists(leftover):
        os.remove(leftover)
