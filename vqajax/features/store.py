"""Image-feature stores: HDF5 or `.npy`, read lazily.

A store holds `features` [N, ...] (float16 or float32; uint8 for pixels, `vqajax features
--model pixels`) and `image_ids` [N]:

* HDF5: one file with datasets `features` and `image_ids`;
* npy: `NAME.npy` (features) beside `NAME.image_ids.npy`.

A store made by `vqajax features` also holds the extractor's settings (`settings`: model,
layer, preprocessing, image size, dtype, the weights file and its sha256), so features of
new images can be computed the same way (`vqajax ask`): the HDF5 attribute `settings`
(JSON), or `NAME.settings.json` beside a `.npy` store; and the image file of each row
(`image_paths`, "" where unknown, a relative path relative to the store's folder): the
HDF5 dataset `image_paths`, or `NAME.image_paths.json` (a list in row order). Other stores
have neither.

Rows are read on demand into private buffers (HDF5, or `pread` for .npy, not a memory
map: mapped pages that were read stay in the process's RSS), so a store larger than RAM
trains and the process's memory does not grow with the store
(bench/bench_pipeline.py measures peak RSS on an 8 GB store).

A store may also be read from a URL (`gs://bucket/fc7.h5`, through `core/fs`): each run
of rows is then one ranged read of the object (one at a time per store). Stores are
written on a local disk (atomically) and copied to a bucket whole.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Callable, Iterable

import h5py
import numpy as np

from vqajax.core import fs
from vqajax.core.errors import InputError
from vqajax.core.files import cannot_write, temp_path, write_json_atomic
from vqajax.core.official_files import load_json

_DTYPES = (np.float16, np.float32, np.uint8)
_EXPONENT_BITS = {np.dtype(np.float16): (np.uint16, 0x7C00), np.dtype(np.float32): (np.uint32, 0x7F800000)}
_CHECK_BLOCK_BYTES = 2**20
_IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one preadv fills


class FeatureStoreError(InputError):
  """A store that does not match what the run expects."""


def ids_path(npy_path: str) -> str:
  return npy_path[: -len(".npy")] + ".image_ids.npy"


def _finite_rows(features: np.ndarray) -> np.ndarray:
  """[N] whether each row is finite: no all-ones exponent (inf or NaN); ~4x np.isfinite.
  Checked in blocks of rows: the temporary stays in cache (a batch-sized one would cost
  its page faults and a pass through memory)."""
  bits, exponent = _EXPONENT_BITS[features.dtype]
  words = features.reshape(len(features), -1).view(bits)
  step = max(1, _CHECK_BLOCK_BYTES // max(words.shape[1] * words.itemsize, 1))
  finite = np.empty(len(words), bool)
  for start in range(0, len(words), step):
    finite[start:start + step] = (words[start:start + step] & bits(exponent)).max(axis=1) != exponent
  return finite


def settings_path(npy_path: str) -> str:
  return npy_path[: -len(".npy")] + ".settings.json"


def paths_path(npy_path: str) -> str:
  return npy_path[: -len(".npy")] + ".image_paths.json"


def sidecars(npy_path: str) -> tuple[str, str]:
  """The optional files beside a `.npy` store, moved in before its ids file."""
  return settings_path(npy_path), paths_path(npy_path)


def files_of(path: str) -> list[str]:
  """Every file a store at `path` is made of: itself and, for `.npy`, its ids file and sidecars."""
  return [path, ids_path(path), *sidecars(path)] if path.endswith(".npy") else [path]


def _runs(rows: np.ndarray) -> list[tuple[int, int]]:
  """(start, stop) positions of the runs of consecutive values in sorted unique `rows`."""
  breaks = np.flatnonzero(np.diff(rows) != 1) + 1
  return list(zip(np.r_[0, breaks].tolist(), np.r_[breaks, len(rows)].tolist()))


class _H5Rows:
  """Rows of an HDF5 dataset, a slice per run (h5py's fancy indexing is much slower).

  Contiguous datasets (what `write_store` writes) read fastest; a dataset chunked one row
  per chunk reads slower and HDF5 keeps its chunk index in memory.
  """

  def __init__(self, dataset):
    self._dataset, self.shape, self.dtype = dataset, dataset.shape, dataset.dtype

  def read_into(self, out: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> None:
    """Sorted unique `rows` into `out[positions]`."""
    for start, stop in _runs(rows):
      first = int(rows[start])
      try:
        out[positions[start:stop]] = self._dataset[first:first + stop - start]
      except (OSError, RuntimeError) as e:  # a damaged chunk
        raise FeatureStoreError(f"{self._dataset.file.filename}: rows {first}..{first + stop - start - 1} "
                                f"cannot be read ({e})") from None


class _NpyRows:
  """Rows of a C-order .npy array, read with `pread` (thread-safe, no memory map); from a
  URL with a seek and a read under a lock."""

  def __init__(self, path: str):
    with fs.open_file(path, "rb") as f:
      version = np.lib.format.read_magic(f)
      shape, fortran_order, self.dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                          else np.lib.format.read_array_header_2_0(f))
      self._offset = f.tell()
    if fortran_order or not shape:
      raise FeatureStoreError(f"{path}: expected a C-order array of feature rows")
    self.path, self.shape = path, shape
    self._row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * self.dtype.itemsize
    if fs.size(path) < self._offset + shape[0] * self._row_bytes:
      raise FeatureStoreError(f"{path}: truncated (its header promises {shape[0]} rows)")
    if fs.is_url(path):
      self._url_file, self._lock = fs.open_file(path, "rb"), threading.Lock()
    else:
      self._fd = os.open(path, os.O_RDONLY)

  def _read_into(self, buffers: list[np.ndarray], offset: int) -> int:
    """The bytes from `offset` on into `buffers` in turn; how many were read."""
    if not fs.is_url(self.path):
      return os.preadv(self._fd, buffers, offset)
    with self._lock:
      self._url_file.seek(offset)
      data = np.frombuffer(self._url_file.read(sum(b.nbytes for b in buffers)), np.uint8)
    for buffer, start in zip(buffers, range(0, len(data), self._row_bytes)):
      buffer[:len(data) - start] = data[start:start + buffer.nbytes]
    return len(data)

  def read_into(self, out: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> None:
    """Sorted unique `rows` into `out[positions]`: each run of consecutive rows is one read,
    scattered to its rows' places (`preadv`)."""
    flat = out.reshape(len(out), -1).view(np.uint8)
    for start, stop in _runs(rows):
      buffers = [flat[p] for p in positions[start:stop].tolist()]
      for first in range(0, len(buffers), _IOV_MAX):
        part = buffers[first:first + _IOV_MAX]
        row = int(rows[start]) + first
        if self._read_into(part, self._offset + row * self._row_bytes) != len(part) * self._row_bytes:
          raise FeatureStoreError(f"{self.path}: short read at row {row}")

  def close(self) -> None:
    if fs.is_url(self.path):
      self._url_file.close()
    else:
      os.close(self._fd)


class FeatureStore:
  """Lazy row access by image id."""

  def __init__(self, path: str):
    self.path = path
    if not path.endswith((".h5", ".hdf5", ".npy")):
      raise FeatureStoreError(f"{path}: unknown feature store type (expected .h5, .hdf5 or .npy)")
    if not fs.isfile(path):
      raise FeatureStoreError(f"{path}: feature store not found")
    try:
      if path.endswith(".npy"):
        self._file = self._features = _NpyRows(path)
        with fs.open_file(ids_path(path), "rb") as f:
          image_ids = np.load(f, allow_pickle=False)
        settings, paths = (load_json(p) if fs.exists(p) else None for p in sidecars(path))
      else:
        self._file = h5py.File(fs.open_file(path, "rb") if fs.is_url(path) else path, "r")
        for key in ("features", "image_ids"):
          if key not in self._file:
            raise FeatureStoreError(f"{path}: missing dataset '{key}' (expected 'features' and 'image_ids')")
        self._features = _H5Rows(self._file["features"])
        image_ids = self._file["image_ids"][...]
        text = self._file.attrs.get("settings")
        settings = json.loads(text) if text is not None else None
        paths = self._file["image_paths"].asstr()[...].tolist() if "image_paths" in self._file else None
    except FeatureStoreError:
      raise
    except (OSError, ValueError, EOFError) as e:  # 0-byte, truncated or not a store at all
      raise FeatureStoreError(f"{path}: not a readable feature store ({type(e).__name__}: {e})") from None
    if settings is not None and not isinstance(settings, dict):
      raise FeatureStoreError(f"{path}: its extractor settings are {type(settings).__name__}, expected an object")
    self.settings: dict | None = settings  # the extractor's (module docstring), None if not extracted
    if paths is not None and (not isinstance(paths, list) or len(paths) != len(image_ids)
                              or not all(isinstance(p, str) for p in paths)):
      raise FeatureStoreError(f"{path}: its image paths are not one string per image id")
    self.image_paths: list[str] | None = paths  # row order, "" unknown
    if not np.issubdtype(image_ids.dtype, np.integer):
      raise FeatureStoreError(f"{path}: image ids are {image_ids.dtype}, expected integers")
    if self._features.dtype not in _DTYPES:
      raise FeatureStoreError(f"{path}: features are {self._features.dtype}, expected float16, float32 or uint8")
    if image_ids.ndim != 1 or len(image_ids) != self._features.shape[0]:
      raise FeatureStoreError(
          f"{path}: {len(image_ids)} image ids for {self._features.shape[0]} feature rows")
    self.image_ids = image_ids.astype(np.int64)
    self._order = np.argsort(self.image_ids, kind="stable")  # ids -> rows by binary search:
    self._sorted_ids = self.image_ids[self._order]             # a dict would cost ~100 B per image
    if (np.diff(self._sorted_ids) == 0).any():
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
    ids = np.asarray(image_ids, np.int64).reshape(-1)
    pos = np.searchsorted(self._sorted_ids, ids)
    found = pos < len(self._sorted_ids)
    found[found] = self._sorted_ids[pos[found]] == ids[found]
    if not found.all():
      where = f" (needed by {source})" if source else ""
      raise FeatureStoreError(f"{self.path}: no features for image_id {ids[np.argmin(found)]}{where}")
    return self._order[pos]

  def image_path(self, image_id: int) -> str | None:
    """The image file the row of `image_id` was extracted from, if recorded and still there."""
    if self.image_paths is None:
      return None
    path = self.image_paths[int(self.rows([image_id])[0])]
    path = path and os.path.join(os.path.dirname(self.path), path)  # a relative one: to the store's folder
    return path if path and os.path.isfile(path) else None

  @property
  def holds_pixels(self) -> bool:
    """Images' pixels, not features: the store of `vqajax features --model pixels`, the only uint8 one."""
    return self.dtype == np.uint8

  def check_features(self, reader: str) -> None:
    """FeatureStoreError for a pixel store given to `reader`, a model that reads image features
    (however its shape happens to fit, as 32x32x4 fits 4096)."""
    if self.holds_pixels:
      raise FeatureStoreError(f"{self.path}: holds images' pixels (vqajax features --model pixels, for ViLT), while "
                              f"{reader} reads image features (vqajax features --model vgg16 --layer fc7, say)")

  def check_pixels(self, reader: str) -> None:
    """FeatureStoreError unless the store holds square pictures' pixels, uint8 [S, S, 4], which
    `reader` reads."""
    s = self.shape
    if not (self.holds_pixels and len(s) == 3 and s[0] == s[1] and s[2] == 4):
      raise FeatureStoreError(f"{self.path}: holds {np.dtype(self.dtype).name} of shape {s} per image, while {reader} "
                              "reads pictures' pixels, uint8 [S, S, 4] (vqajax features --model pixels)")

  def check_shape(self, expected: tuple[int, ...]) -> None:
    if self.shape != tuple(expected):
      raise FeatureStoreError(
          f"{self.path}: features have shape {self.shape} per image, the config expects {tuple(expected)}")

  def read(self, rows: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Features of `rows` (any order, repeats allowed), as `dtype`; NaN or inf is an error
    (uint8 pixels are always finite).
    Each row is read once, straight to its place (a repeated row is copied there)."""
    rows = np.asarray(rows, np.int64).reshape(-1)
    unique, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    features = np.empty((len(rows),) + self.shape, self.dtype)
    self._features.read_into(features, unique, first)
    repeated = np.flatnonzero(first[inverse] != np.arange(len(rows)))
    features[repeated] = features[first[inverse[repeated]]]
    finite = _finite_rows(features) if features.dtype in _EXPONENT_BITS else np.ones(len(rows), bool)
    if not finite.all():
      raise FeatureStoreError(f"{self.path}: the features of image_id "
                              f"{self.image_ids[rows[~finite].min()]} are not finite (NaN or inf)")
    return features.astype(dtype, copy=False)

  def close(self) -> None:
    if self._file is not None:
      self._file.close()


def check_local(path: str) -> None:
  """Stores are written on a local disk: a URL is refused (before any work, by the extractor)."""
  if fs.is_url(path):
    raise FeatureStoreError(f"{path}: stores are written on a local disk; copy the finished store "
                            "to the bucket (a .npy store is two files)")


def write_store(path: str, image_ids, features, settings: dict | None = None,
                image_paths: list[str] | None = None) -> None:
  """Writes a store atomically (a failed write leaves no file behind)."""
  features = np.asarray(features)
  write_store_blocks(path, image_ids, features.shape[1:], features.dtype, [features], settings, image_paths)


def write_store_blocks(path: str, image_ids, row_shape, dtype, blocks: Iterable,
                       settings: dict | None = None, image_paths: list[str] | None = None) -> None:
  """Writes a store atomically from consecutive blocks of feature rows (one row per image
  id, in order), holding one block at a time; the file is synced before it is moved in.
  `settings`, `image_paths`: the extractor's (module docstring); beside a `.npy` store they
  are moved in first."""
  image_ids = np.asarray(image_ids, np.int64)
  dtype, shape = np.dtype(dtype), (len(image_ids),) + tuple(row_shape)
  check_local(path)
  if dtype not in _DTYPES:
    raise FeatureStoreError(f"{path}: need float16/float32/uint8 features with one row per image id")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  suffix = ".h5" if path.endswith((".h5", ".hdf5")) else ".npy"
  tmp = temp_path(path) + suffix
  try:
    if suffix == ".h5":
      with h5py.File(tmp, "w") as f:
        features = f.create_dataset("features", shape=shape, dtype=dtype)  # contiguous: see _H5Rows
        written = _write_blocks(path, shape, dtype, blocks, features.__setitem__)
        f.create_dataset("image_ids", data=image_ids)
        if settings is not None:
          f.attrs["settings"] = json.dumps(settings, sort_keys=True)
        if image_paths is not None:
          f.create_dataset("image_paths", data=list(image_paths), dtype=h5py.string_dtype())
    else:
      with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
        written = _write_blocks(path, shape, dtype, blocks, lambda _, block: f.write(block.data))
      np.save(ids_path(tmp), image_ids)
    if written != len(image_ids):
      raise FeatureStoreError(f"{path}: need float16/float32/uint8 features with one row per image id")
    for done in ((ids_path(tmp),) if suffix == ".npy" else ()) + (tmp,):
      with open(done, "rb") as f:
        os.fsync(f.fileno())
    if suffix == ".npy":
      for side, content in zip(sidecars(path), (settings, image_paths)):
        if content is not None:
          write_json_atomic(side, content)
        elif os.path.exists(side):  # an older store's, not this one's
          os.remove(side)
      os.replace(ids_path(tmp), ids_path(path))
    os.replace(tmp, path)
  except OSError as e:  # a full disk fails the run (exit 3), the store untouched
    raise cannot_write(path, e) from None
  finally:
    for leftover in (tmp, ids_path(tmp) if suffix == ".npy" else None):
      if leftover and os.path.exists(leftover):
        os.remove(leftover)


def _write_blocks(path: str, shape: tuple[int, ...], dtype: np.dtype, blocks: Iterable,
                  write: Callable[[slice, np.ndarray], object]) -> int:
  """Calls `write(rows, block)` for each block (checked against `shape`, `dtype`); returns
  the number of rows written."""
  written = 0
  for block in blocks:
    block = np.ascontiguousarray(block)
    if block.dtype != dtype or block.shape[1:] != shape[1:] or written + len(block) > shape[0]:
      raise FeatureStoreError(f"{path}: need float16/float32/uint8 features with one row per image id")
    write(slice(written, written + len(block)), block)
    written += len(block)
  return written
