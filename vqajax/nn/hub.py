"""Pretrained checkpoints (`config.model.init_from` of every model that starts from one): a local
folder, or a Hugging Face Hub model id resolved as `from_pretrained` resolves one, and the
files of either read as hostile input.

`resolve("ORG/NAME")` (or `ORG/NAME@REVISION`: a branch, tag or commit, as `from_pretrained`'s
`revision=`) goes through `huggingface_hub.snapshot_download`: the user's cache (`HF_HOME`,
`HF_HUB_CACHE`), `HF_HUB_OFFLINE=1` for the cache alone, the user's token (`hf auth login`,
`HF_TOKEN`) for gated repositories, only the files the model reads (`files`, its
`allow_patterns`). Its `name`, what a run records, is `ORG/NAME@COMMIT`: the commit the
revision was, never the cache's path, so a rerun or evaluation reads the same files. An
existing folder is taken as it is (first, as `from_pretrained` does).

`check` and `read_json` read a checkpoint's files as every input is read (`core/official_files`):
regular files only (a fifo or device could block or never end) of a bounded size.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Sequence

from vqajax.core.errors import InputError
from vqajax.core.official_files import check_file, load_json, read_bytes

# huggingface_hub's rule for a repo id (letters, digits, "-", "_", "."; 96 characters)
REPO_ID = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}", re.ASCII)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  folder: str  # its files on this machine
  name: str    # what a run records: the folder as given, or ORG/NAME@COMMIT


_RESOLVED: dict[tuple[str, tuple[str, ...]], Checkpoint] = {}  # an id and its pinned name: one download a process


def resolve(value: str, files: Sequence[str], field: str) -> Checkpoint:
  """The checkpoint `value` names (`field`: the config field, for messages): an existing folder,
  else a Hub id downloaded (or found in the cache) with the files matching `files`."""
  if os.path.isdir(value):
    return Checkpoint(value, value)
  key = (value, tuple(files))
  if key not in _RESOLVED:
    checkpoint = _download(value, tuple(files), field)
    _RESOLVED[key] = _RESOLVED[(checkpoint.name, key[1])] = checkpoint
  return _RESOLVED[key]


def _download(value: str, files: tuple[str, ...], field: str) -> Checkpoint:
  import huggingface_hub  # only where an id is named
  from huggingface_hub import constants, errors
  repo, at, revision = value.partition("@")
  not_an_id = InputError(f"{field} {value!r:.200}: no such folder, nor a Hugging Face Hub model id "
                         "(ORG/NAME or ORG/NAME@REVISION)")
  if not REPO_ID.fullmatch(repo) or (at and not revision):
    raise not_an_id
  where = f"{field} {value}"
  try:
    folder = huggingface_hub.snapshot_download(repo, revision=revision or None, allow_patterns=list(files))
  except errors.HFValidationError:  # huggingface_hub's finer rules ("--", "..", a leading "-")
    raise not_an_id from None
  except errors.LocalEntryNotFoundError:
    reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
    raise InputError(f"{where}: no such folder, and the Hub model is not in the Hugging Face cache "
                     f"({constants.HF_HUB_CACHE}) while {reason}; download it where the Hub can be reached "
                     f"(hf download {repo}{f' --revision {revision}' if revision else ''}), or name a folder") from None
  except errors.GatedRepoError:
    raise InputError(f"{where}: a gated model: accept its terms on https://huggingface.co/{repo} and log in "
                     "(hf auth login, or HF_TOKEN)") from None
  except errors.RepositoryNotFoundError:
    raise InputError(f"{where}: no such folder, nor a Hub model (a private one needs hf auth login or HF_TOKEN)"
                     ) from None
  except errors.RevisionNotFoundError:
    raise InputError(f"{where}: the Hub model has no revision {revision!r}") from None
  except (errors.HfHubHTTPError, OSError) as e:
    raise InputError(f"{where}: cannot download it ({type(e).__name__}: {str(e).splitlines()[0]:.200})") from None
  return Checkpoint(folder, f"{repo}@{os.path.basename(folder)}")  # the cache's snapshots/COMMIT


def check(folder: str, name: str, max_bytes: int | None = None) -> str:
  """The path of the checkpoint file `folder/name`, a regular file (of at most `max_bytes`), for
  a library that opens it itself."""
  path = os.path.join(folder, name)
  check_file(path, max_bytes)
  return path


def read_json(folder: str, name: str, max_bytes: int) -> Any:
  """The JSON of the checkpoint file `folder/name`, a regular file of at most `max_bytes`."""
  path = os.path.join(folder, name)
  return load_json(path, read_bytes(path, max_bytes))
