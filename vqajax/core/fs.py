"""The one file system layer: local paths through `os`, URLs through `tf.io.gfile`.

A path with a scheme (`gs://bucket/run`, `s3://...`, `ram://...`: TensorFlow's in-memory
file system, for tests) is a URL and goes to `tf.io.gfile` (TensorFlow is imported only
when one is used); anything else is a local path and goes to `os`, unchanged. Errors come
back as `OSError` (`FileNotFoundError`, `FileExistsError`, `PermissionError`) with the
message in `strerror`, whichever side raised them, so callers handle one kind.

Buckets differ from disks (what `files.py` and `run_record.py` build on): no symlinks, no
special files, no inodes, no atomic rename (GCS renames by copying, then deleting), no
exclusive create; an object appears whole when its upload completes, never partly.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import IO, Iterator

from vqajax.core.errors import InputError

SCHEMES = ("gs", "s3", "ram", "file")  # the URLs tf.io.gfile serves here (file://: the local disk)


def known_scheme(path: str) -> bool:
  """A local path, or a URL of one of `SCHEMES`."""
  return "://" not in path or path.partition("://")[0] in SCHEMES


def outlives_process(path: str) -> bool:
  """False for a path on a file system that ends with this process (TensorFlow's ram://)."""
  return not path.startswith("ram://")


def is_url(path: str) -> bool:
  """A URL of a known scheme; InputError for a scheme no file system here serves."""
  if "://" not in path:
    return False
  if not known_scheme(path):
    raise InputError(f"{path}: unknown URL scheme '{path.partition('://')[0]}' (expected a local path or "
                     f"{', '.join(s + '://' for s in SCHEMES)})")
  return True


def isabs(path: str) -> bool:
  """A path that is used as it is (absolute, or a URL), not joined to a data folder."""
  return is_url(path) or os.path.isabs(path)


def _gfile():
  from vqajax.core import runtime  # heavy: only for URLs
  tf = runtime.tensorflow()
  return tf.io.gfile


@contextlib.contextmanager
def _as_oserror() -> Iterator[None]:
  from vqajax.core import runtime
  tf = runtime.tensorflow()
  try:
    yield
  except tf.errors.OpError as e:
    kind = {tf.errors.NotFoundError: (FileNotFoundError, errno.ENOENT),
            tf.errors.AlreadyExistsError: (FileExistsError, errno.EEXIST),
            tf.errors.PermissionDeniedError: (PermissionError, errno.EACCES)}
    error, code = kind.get(type(e), (OSError, errno.EIO))
    raise error(code, e.message) from None


class _UrlFile:
  """A `tf.io.gfile.GFile` whose errors are OSErrors (a file object for json, numpy, h5py)."""

  def __init__(self, path: str, mode: str):
    with _as_oserror():
      self._file = _gfile().GFile(path, mode)

  def __getattr__(self, name: str):
    attr = getattr(self._file, name)
    if not callable(attr):
      return attr

    def call(*args, **kwargs):
      with _as_oserror():
        return attr(*args, **kwargs)
    return call

  def __enter__(self) -> "_UrlFile":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def open_file(path: str, mode: str = "rb") -> IO:
  """`open(path, mode)`; a URL in binary or text mode ('r', 'w', 'a' with 'b' or not; text
  is UTF-8)."""
  if is_url(path):
    return _UrlFile(path, mode)  # type: ignore[return-value]
  return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))  # noqa: SIM115


def exists(path: str) -> bool:
  if is_url(path):
    with _as_oserror():
      return _gfile().exists(path)
  return os.path.exists(path)


def isdir(path: str) -> bool:
  if is_url(path):
    with _as_oserror():
      return _gfile().isdir(path)
  return os.path.isdir(path)


def isfile(path: str) -> bool:
  return exists(path) and not isdir(path) if is_url(path) else os.path.isfile(path)


def size(path: str) -> int:
  if is_url(path):
    with _as_oserror():
      return _gfile().stat(path).length
  return os.path.getsize(path)


def listdir(path: str) -> list[str]:
  """The names in folder `path`, sorted."""
  if is_url(path):
    with _as_oserror():
      return sorted(name.rstrip("/") for name in _gfile().listdir(path))
  return sorted(os.listdir(path))


def makedirs(path: str) -> None:
  """Creates `path` and its parents if missing (a bucket's prefixes need nothing)."""
  if is_url(path):
    with _as_oserror():
      _gfile().makedirs(path)
  else:
    os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
  if is_url(path):
    with _as_oserror():
      _gfile().remove(path)
  else:
    os.remove(path)


def replace(source: str, target: str) -> None:
  """Moves `source` over `target`: atomic on a local disk (`os.replace`); on a bucket a
  server-side copy, then a delete (`target` is its old object or the whole new one)."""
  if is_url(source):
    with _as_oserror():
      _gfile().rename(source, target, overwrite=True)
  else:
    os.replace(source, target)


def dirname(path: str) -> str:
  """The folder of `path` (local: made absolute)."""
  return os.path.dirname(path.rstrip("/")) if is_url(path) else os.path.dirname(os.path.abspath(path))
