"""Safe file writing: an output appears whole or not at all, and never over an input.

Each file is written to a temp file in its own directory (same file system) and moved
into place with `os.replace`; the temp file is removed on any failure. A failure to
write raises `InputError` naming the target path (a missing directory or a read-only
location is the user's to fix).

The output rule, one for every verb (`check_output`, which every write goes through): a
command registers what it reads (`protect`: its input files, and the folders it reads as
folders: a workdir, a results folder, a data folder, a store folder); an output may not be
an input file, may not lie inside a folder it reads, and may not replace anything it did
not write itself: an existing file output that is not a plain regular file (a device, a
fifo, a socket, a folder; a symlink, whose target is someone else's; a file with other
hard links) is refused, never renamed over. Any other path the user names is written,
including a new path beside input files. A folder output (a workdir, an --out folder) may
be a link to a folder: it is followed.

URLs (`gs://...`, see `fs.py`) get the nearest honest equivalent: the file is uploaded
under a temp name beside the target and renamed into place, which on GCS is a copy and
a delete: a reader sees the old object or the whole new one, never part of one, but a
crash between the two can leave the temp object (`.NAME.PID.HEX.tmp`) behind. Inputs
are protected by their URL (a folder: every URL under it); a bucket has no links or
special files, and an existing folder ("prefix") where a file should go is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import secrets
import stat
from typing import IO, Any, Callable

from vqajax.core import fs
from vqajax.core.errors import InputError, RunFailed

SAFE_NAME = re.compile(r"[\w.+-]+")
_PROTECTED_FILES: set[tuple[int, int]] = set()  # (st_dev, st_ino) of this process' inputs
_PROTECTED_FOLDERS: set[str] = set()  # real paths
_PROTECTED_URLS: set[str] = set()  # files and folders given as URLs (no trailing '/')


def protect(*paths: str) -> None:
  """Registers inputs of the running command: no output may be written over them (a
  folder: nor anywhere inside it)."""
  for path in paths:
    if not path or not fs.exists(path):
      continue
    if fs.is_url(path):
      _PROTECTED_URLS.add(path.rstrip("/"))
    elif os.path.isdir(path):
      _PROTECTED_FOLDERS.add(os.path.realpath(path))
    else:
      st = os.stat(path)
      _PROTECTED_FILES.add((st.st_dev, st.st_ino))


@contextlib.contextmanager
def protection_scope():
  """The inputs registered inside the block are forgotten at its end: inputs for a check made
  before the command writes into them (a run a report evaluates first)."""
  saved = set(_PROTECTED_FILES), set(_PROTECTED_FOLDERS), set(_PROTECTED_URLS)
  try:
    yield
  finally:
    for registered, before in zip((_PROTECTED_FILES, _PROTECTED_FOLDERS, _PROTECTED_URLS), saved):
      registered.intersection_update(before)


def unprotect_all() -> None:
  """Forgets the registered inputs (a new command in the same process)."""
  _PROTECTED_FILES.clear()
  _PROTECTED_FOLDERS.clear()
  _PROTECTED_URLS.clear()


def _inside_protected(real: str) -> str | None:
  return next((f for f in _PROTECTED_FOLDERS if real == f or real.startswith(f + os.sep)), None)


def check_new_folder(path: str, what: str) -> None:
  """InputError unless `--out` `path` is absent or an empty folder (`what` is written there)."""
  if fs.exists(path) and (not fs.isdir(path) or fs.listdir(path)):
    raise InputError(f"--out {path}: already exists; {what} is written into a new (or empty) folder")


def check_output(path: str, folder: bool = False) -> str:
  """The real path to write `path` to (a folder's links followed); InputError when the
  output rule (module docstring) refuses it."""
  if not path.strip():
    raise InputError("an empty output path: name one (. for the current folder)")
  if fs.is_url(path):
    return _check_url_output(path, folder)
  real = os.path.realpath(path)
  inside = _inside_protected(real)
  if inside is not None:
    raise InputError(f"{path}: lies in {inside}, an input of this command; write the output elsewhere")
  try:
    st = os.stat(real)
  except FileNotFoundError:
    if os.path.islink(path):  # dangling: writing would make its target, wherever it points
      if folder:
        raise InputError(f"{path}: a link to nothing ({os.readlink(path)}); make the folder it names or name "
                         "another output") from None
      _refuse_replacing(path, "link")
    return real
  except OSError as e:
    raise InputError(f"{path}: cannot write: {e.strerror}") from None
  if (st.st_dev, st.st_ino) in _PROTECTED_FILES:
    raise InputError(f"{path}: is an input of this command; refusing to write over it")
  if folder and not stat.S_ISDIR(st.st_mode):
    raise InputError(f"{path}: exists and is not a folder")
  if not folder:
    _check_replaceable(path, st)
  return real


def _check_replaceable(path: str, st: os.stat_result) -> None:
  """An existing file output is replaced only when it is a plain file of its own."""
  if not stat.S_ISREG(st.st_mode):
    raise InputError(f"{path}: exists and is not a regular file; refusing to replace it")
  if os.path.islink(path) or st.st_nlink > 1:
    _refuse_replacing(path, "link" if os.path.islink(path) else "file with other hard links")


def _refuse_replacing(path: str, what: str) -> None:
  raise InputError(f"{path}: is a {what}; refusing to replace what this command did not write (name another output)")


def _check_url_output(url: str, folder: bool) -> str:
  url = url.rstrip("/")
  inside = next((u for u in _PROTECTED_URLS if url == u or url.startswith(u + "/")), None)
  if inside == url:
    raise InputError(f"{url}: is an input of this command; refusing to write over it")
  if inside is not None:
    raise InputError(f"{url}: lies in {inside}, an input of this command; write the output elsewhere")
  try:
    exists, is_folder = fs.exists(url), fs.isdir(url)
  except OSError as e:
    raise InputError(f"{url}: cannot write: {e.strerror}") from None
  if exists and folder and not is_folder:
    raise InputError(f"{url}: exists and is not a folder")
  if exists and not folder and is_folder:
    raise InputError(f"{url}: exists and is not a regular file; refusing to replace it")
  return url


def path_arg(text: str) -> str:
  """argparse `type` of every path flag: an empty value is refused, not taken as the current
  folder (a command writes there only when told so by `.`)."""
  if not text.strip():
    raise argparse.ArgumentTypeError("expected a path, got an empty one (write . for the current folder)")
  return text


def check_name(name: str, what: str) -> str:
  """`name` (taken from an input file or argument) if it is safe as one path component."""
  if not SAFE_NAME.fullmatch(name) or name in (".", ".."):
    raise InputError(f"{what} {name!r}: expected a plain name (letters, digits, '.', '-', '_', '+')")
  return name


def temp_path(path: str) -> str:
  """A fresh temp name next to `path` (same directory, so os.replace is atomic; a URL too)."""
  head, tail = os.path.split(path)
  return os.path.join(head, f".{tail}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def is_temp_name(name: str) -> bool:
  """A file name `temp_path` makes (left behind only by a killed writer)."""
  return re.fullmatch(r"\..+\.\d+\.[0-9a-f]{8}\.tmp", name) is not None


def _write_temp(path: str, write: Callable[[IO[bytes]], None], fsync: bool) -> str:
  """Writes a temp file next to `path` with `write(binary file)`; returns its path."""
  temp = temp_path(path)
  if fs.is_url(path):  # a fresh random name: no exclusive create in buckets, none needed
    return _write_temp_url(path, temp, write)
  try:
    # O_EXCL: never clobber; mode 0o666 & ~umask like a plain open(), unlike mkstemp's 0o600.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  except OSError as e:
    raise cannot_write(path, e) from None
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
      if fsync:
        f.flush()
        os.fsync(f.fileno())
  except BaseException as e:
    os.remove(temp)
    if isinstance(e, OSError):
      raise cannot_write(path, e) from None
    raise
  return temp


def _write_temp_url(path: str, temp: str, write: Callable[[IO[bytes]], None]) -> str:
  try:
    with fs.open_file(temp, "wb") as f:
      write(f)  # closing completes the upload: the object then exists whole
  except BaseException as e:
    with contextlib.suppress(OSError):
      fs.remove(temp)
    if isinstance(e, OSError):
      raise cannot_write(path, e) from None
    raise
  return temp


def cannot_write(path: str, e: OSError) -> InputError | RunFailed:
  """The error of a failed write of `path`: a full disk (or quota) fails the run, exit 3 (the
  input was fine), anything else (permissions, a read-only file system) is the output named."""
  if e.errno in (errno.ENOSPC, errno.EDQUOT):
    return RunFailed(f"{path}: cannot write: {os.strerror(e.errno)}; free space and rerun")  # h5py's: paragraphs
  return InputError(f"{path}: cannot write: {e.strerror}")


def _replace(temp: str, path: str) -> None:
  try:
    fs.replace(temp, path)
  except OSError as e:
    raise cannot_write(path, e) from None


def _json_writer(obj: Any) -> Callable[[IO[bytes]], None]:
  return lambda f: f.write(json.dumps(obj).encode("utf-8"))


def write_atomic(path: str, write: Callable[[IO[bytes]], None], *, fsync: bool = True,
                 make_dirs: bool = False) -> None:
  """Writes `path` with `write(binary file)`, atomically (see module docstring).

  `fsync` makes the content durable before the rename (skip it for caches);
  `make_dirs` creates missing parent directories first.
  """
  path = check_output(path)
  created = _make_dirs(path) if make_dirs else []
  try:
    temp = _write_temp(path, write, fsync)
  except BaseException:
    _remove_empty(created)
    raise
  try:
    _replace(temp, path)
  except BaseException:
    fs.remove(temp)
    _remove_empty(created)
    raise


def write_json_atomic(path: str, obj: Any, *, make_dirs: bool = False) -> None:
  """Writes `obj` as JSON (UTF-8) to `path`, atomically."""
  write_atomic(path, _json_writer(obj), make_dirs=make_dirs)


def _writer(obj: Any) -> Callable[[IO[bytes]], None]:
  if isinstance(obj, (bytes, str)):
    data = obj.encode("utf-8") if isinstance(obj, str) else obj
    return lambda f: f.write(data)
  return _json_writer(obj)


def write_atomic_many(outputs: dict[str, Any], *, make_dirs: bool = False) -> None:
  """Writes {path: content}, all or nothing as far as the file system allows: bytes and
  str are written as they are (str as UTF-8), anything else as JSON.

  Every file is fully written to its temp file before the first is moved into place, so
  a bad path, a full disk or an unserialisable object leaves none of them behind. (Only
  a failure of `os.replace` itself, after others succeeded, can leave some written.)
  """
  real = {check_output(path): path for path in outputs}
  if len(real) < len(outputs):
    raise InputError(f"{', '.join(outputs)}: two of these outputs are one file")
  outputs = {path: outputs[given] for path, given in real.items()}
  temps: dict[str, str] = {}
  created: list[str] = []  # folders made here: removed again if nothing is written
  try:
    for path, obj in outputs.items():
      if make_dirs:
        created += _make_dirs(path)
      temps[path] = _write_temp(path, _writer(obj), fsync=True)
    for path in list(temps):
      _replace(temps[path], path)
      del temps[path]
    created = []  # all written: the folders stay
  finally:
    for temp in temps.values():
      fs.remove(temp)
    _remove_empty(created)


def _remove_empty(folders: list[str]) -> None:
  """Removes the folders (made here, outermost first) that are still empty."""
  for folder in reversed(folders):
    with contextlib.suppress(OSError):
      os.rmdir(folder)  # only if empty


def _make_dirs(path: str) -> list[str]:
  """Creates the folder of `path` and its missing parents; returns those it created (local
  ones, outermost first)."""
  directory = fs.dirname(path)
  missing = []
  if not fs.is_url(directory):
    parent = directory
    while not os.path.exists(parent):
      missing.insert(0, parent)
      parent = os.path.dirname(parent)
  try:
    fs.makedirs(directory)
  except OSError as e:
    raise InputError(f"{path}: cannot create directory {directory}: {e.strerror}") from None
  return missing
