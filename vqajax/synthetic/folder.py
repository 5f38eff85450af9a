"""The embedded datasets are written only into a folder of their own.

A dataset is written into a hidden temporary sibling of its folder and renamed into place
when complete, so the folder is either absent or complete; it is never written into a
folder that already holds files (a user's real data, say).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from typing import Callable

from vqajax.core import files
from vqajax.core.errors import InputError, RunFailed


def _is_empty_folder(path: str) -> bool:
  return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)


def check_new(out_dir: str) -> None:
  """Raises InputError unless `out_dir` does not exist or is an empty folder."""
  if os.path.lexists(out_dir) and not _is_empty_folder(out_dir):
    raise InputError(f"{out_dir}: already exists and is not an empty folder; an embedded "
                     "dataset is written only into a new or empty folder")


def write_new(out_dir: str, fill: Callable[[str], dict[str, str]]) -> dict[str, str]:
  """Runs `fill(tmp)` (returns {role: path under tmp}) in a temporary sibling of `out_dir`,
  then renames it to `out_dir` (a link to a folder is followed, as every output folder's is);
  returns the paths under `out_dir`. The folder gets the permissions the umask gives."""
  out_dir = files.check_output(out_dir, folder=True)
  check_new(out_dir)
  parent = os.path.dirname(out_dir)
  try:
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.partial-{secrets.token_hex(4)}")
    os.mkdir(tmp)  # not mkdtemp's 0700: the folder renamed into place keeps them
  except OSError as e:
    raise InputError(f"{out_dir}: cannot create it ({e.strerror})") from None
  try:
    paths = fill(tmp)
    try:
      os.rename(tmp, out_dir)  # replaces an empty folder; fails if files appeared meanwhile
    except OSError:
      check_new(out_dir)
      raise
  except BaseException as e:
    shutil.rmtree(tmp, ignore_errors=True)
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
      raise RunFailed(f"{out_dir}: cannot write the dataset ({e.strerror}); nothing was left; free space and "
                      "rerun") from None
    raise
  return {role: os.path.join(out_dir, os.path.relpath(p, tmp)) for role, p in paths.items()}
