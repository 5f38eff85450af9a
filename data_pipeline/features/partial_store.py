"""A feature store built in durable chunks, so an interrupted extraction resumes.

While extracting into `OUT` (`.h5` / `.hdf5` / `.npy`), finished rows go to
`OUT.partial/chunk_NNNNNN.npz` (image ids + features), each written to a temp file, synced
and renamed: a kill loses at most the chunk being filled. `meta.json` there records the
settings; a rerun with other settings is an error, as is adding to a finished store that
records other settings. The settings go into the store (`store` docstring). `finish()` streams the rows of an
existing `OUT` (images added to a finished store) and of the chunks into
`OUT.partial/store.*`, removes the chunks, then moves the merged store onto `OUT` (for `.npy`
the ids file first, then the features) and removes `OUT.partial`. A kill between those steps
is rolled forward by the next run, so `OUT` is never left as a pair that `FeatureStore`
rejects, nor given a chunk's rows twice. One extraction at a time writes a store: it locks
`OUT.partial`, and a second one is refused.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
from typing import Iterator

import numpy as np

from vqajax.core.errors import InputError
from vqajax.core.files import cannot_write, is_temp_name, write_atomic, write_json_atomic
from vqajax.features.store import FeatureStore, ids_path, sidecars, write_store_blocks

_BLOCK_ROWS = 1024  # rows copied at a time from an existing store


def differences(before: dict, now: dict) -> str:
  """'field: before's value, now this run's value' for each field that differs."""
  return "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in sorted(set(before) | set(now))
                   if before.get(k) != now.get(k))


class ChunkedStore:
  """The rows done so far (`done`) and the chunks still to merge into `out`."""

  def __init__(self, out: str, settings: dict, row_shape: tuple[int, ...], dtype: str):
    if not out.endswith((".h5", ".hdf5", ".npy")):
      raise InputError(f"{out}: unknown feature store type (expected .h5, .hdf5 or .npy)")
    self.out, self.row_shape, self.dtype, self.settings = out, tuple(row_shape), np.dtype(dtype), settings
    self.partial = out + ".partial"
    self._check_partial()
    begun = os.path.isdir(self.partial)
    self._lock = self._locked()
    try:
      self._open()
    except BaseException:  # refused: a folder this run made goes with it
      if not begun:
        shutil.rmtree(self.partial, ignore_errors=True)
      self._unlock()
      raise

  def _open(self) -> None:
    out, settings = self.out, self.settings
    self._staged = os.path.join(self.partial, "store" + os.path.splitext(out)[1])
    self._roll_forward()
    self.done: set[int] = set()
    if os.path.exists(out):
      store = FeatureStore(out)
      if store.shape != self.row_shape or store.dtype != self.dtype:
        raise InputError(f"{out}: holds {store.dtype} features of shape {store.shape}, this run makes "
                         f"{self.dtype} {self.row_shape}: extract into another store")
      if store.settings is not None and store.settings != settings:
        raise InputError(f"{out}: was extracted with other settings ({differences(store.settings, settings)}): "
                         "extract into another store")
      self.done.update(store.image_ids.tolist())
      store.close()
    meta = os.path.join(self.partial, "meta.json")
    if os.path.exists(meta):
      with open(meta, encoding="utf-8") as f:
        started = json.load(f)
      if started != settings:
        raise InputError(f"{meta}: this extraction was started with other settings ({differences(started, settings)}): "
                         f"rerun with those settings or delete {self.partial}")
    else:
      write_json_atomic(meta, settings, make_dirs=True)
    self._chunks = sorted(glob.glob(os.path.join(self.partial, "chunk_*.npz")))
    for chunk in self._chunks:
      with np.load(chunk) as arrays:
        ids = arrays["image_ids"].tolist()
      if not self.done.isdisjoint(ids):
        raise InputError(f"{chunk}: holds rows (image id {min(self.done.intersection(ids))}) that {out} or an "
                         f"earlier chunk already has: not this extraction's chunk; move {self.partial} away")
      self.done.update(ids)

  def _check_partial(self) -> None:
    """InputError unless `OUT.partial` is absent or a folder an extraction began (its meta.json,
    or nothing but a killed writer's temp files): it is written into and removed."""
    if os.path.islink(self.partial) or (os.path.exists(self.partial) and not os.path.isdir(self.partial)):
      what = "a link" if os.path.islink(self.partial) else "not a folder"
      raise InputError(f"{self.partial}: {what}; this store's chunks go into a folder of that name: move it away")
    if os.path.isdir(self.partial) and not os.path.exists(os.path.join(self.partial, "meta.json")) and any(
        not is_temp_name(name) for name in os.listdir(self.partial)):
      raise InputError(f"{self.partial}: holds files but no meta.json, so no extraction began it; this store's "
                       "chunks go into a folder of that name: move it away")

  def _locked(self) -> int:
    """A descriptor of the `OUT.partial` folder, locked; InputError while another extraction holds
    it. The lock is the folder's that lies there once locked (one that a finishing run removed is
    not), and is released when this run ends, killed too."""
    while True:
      try:
        os.makedirs(self.partial, exist_ok=True)
        fd = os.open(self.partial, os.O_RDONLY | os.O_DIRECTORY)
      except OSError as e:
        raise cannot_write(self.partial, e) from None
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        os.close(fd)
        raise InputError(f"{self.out}: another extraction is writing this store ({self.partial} is locked): wait "
                         "for it to end, or extract into another store") from None
      except OSError:  # a file system without locks on folders: one run at a time is the user's
        return fd
      try:
        if os.stat(self.partial).st_ino == os.fstat(fd).st_ino:
          return fd
      except FileNotFoundError:
        pass
      os.close(fd)

  def _unlock(self) -> None:
    if self._lock is not None:
      os.close(self._lock)
      self._lock = None

  def append(self, image_ids: np.ndarray, features: np.ndarray, paths: list[str] | None = None) -> None:
    """Adds rows (and their image files) as one durable chunk."""
    path = os.path.join(self.partial, f"chunk_{len(self._chunks):06d}.npz")
    paths = np.array([""] * len(image_ids) if paths is None else [os.path.abspath(p) for p in paths], str)
    write_atomic(path, lambda f: np.savez(f, image_ids=np.asarray(image_ids, np.int64),
                                          features=np.asarray(features, self.dtype), paths=paths))
    self._chunks.append(path)
    self.done.update(np.asarray(image_ids).tolist())

  def __enter__(self) -> "ChunkedStore":
    return self

  def __exit__(self, kind, error, trace) -> None:
    """After a failed extraction the folder of chunks is removed if it holds none (a full disk
    leaves nothing), else kept for the rerun that resumes."""
    if kind is not None and not self._chunks:
      shutil.rmtree(self.partial, ignore_errors=True)
    self._unlock()

  def finish(self) -> int:
    """Merges the existing store and the chunks into `out`; returns its row count."""
    if not self._chunks:
      shutil.rmtree(self.partial, ignore_errors=True)
      self._unlock()
      return len(self.done)
    existing = FeatureStore(self.out) if os.path.exists(self.out) else None
    ids = [existing.image_ids] if existing else []
    paths = (existing.image_paths or [""] * len(existing.image_ids)) if existing else []
    for chunk in self._chunks:
      with np.load(chunk) as arrays:
        ids.append(arrays["image_ids"])
        paths.extend(arrays["paths"].tolist() if "paths" in arrays.files else [""] * len(arrays["image_ids"]))
    try:
      write_store_blocks(self._staged, np.concatenate(ids), self.row_shape, self.dtype,
                         self._blocks(existing), self.settings, paths)
    finally:
      if existing:
        existing.close()
    self._roll_forward()
    self._unlock()
    return len(self.done)

  def _blocks(self, existing: FeatureStore | None) -> Iterator[np.ndarray]:
    if existing:
      for start in range(0, len(existing.image_ids), _BLOCK_ROWS):
        rows = np.arange(start, min(start + _BLOCK_ROWS, len(existing.image_ids)))
        yield existing.read(rows).astype(self.dtype)
    for chunk in self._chunks:
      with np.load(chunk) as arrays:
        yield arrays["features"]

  def _roll_forward(self) -> None:
    """Completes a finished merge (`_staged` lies there complete, or not at all): its chunks are
    removed before it is moved onto `out`, so a kill leaves either them or it, never both."""
    if not os.path.exists(self._staged):
      return  # no merge finished: chunks are merged (again) by finish()
    for chunk in glob.glob(os.path.join(self.partial, "chunk_*.npz")):
      os.remove(chunk)
    if self.out.endswith(".npy") and os.path.exists(ids_path(self._staged)):
      for staged, out in zip(sidecars(self._staged), sidecars(self.out)):
        if os.path.exists(staged):
          os.replace(staged, out)
      os.replace(ids_path(self._staged), ids_path(self.out))
    os.replace(self._staged, self.out)
    shutil.rmtree(self.partial)
