"""A run's encoders: everything that turns a question into ids and an id into an answer.

A task's encoders (the VQA vocabulary, answer table, question types, bag-of-words word
lists, caption words, the image input's shape; AnswerTherapy's vocabulary) are built from
the training data when a run starts and written once into its workdir as `encoders.json`:
`{"format": FORMAT, "task": ..., "tables": {name: value}}`, canonical JSON whose sha256 is
recorded in run.json (`encoders`). Every later command reads them from there (and from an
export bundle), so a trained run answers without its training data. A command that reads
data too (resume, eval) compares what the data gives with what was recorded and refuses a
difference in one line naming the table (`differences`).
"""

from __future__ import annotations

import hashlib
import json
import os

from vqajax.core import fs
from vqajax.core.errors import InputError
from vqajax.core.files import write_atomic
from vqajax.core.official_files import load_json, read_bytes

FILE = "encoders.json"
FORMAT = "vqajax-encoders/1"


def to_bytes(task: str, tables: dict) -> bytes:
  """The canonical JSON of a task's tables (sorted keys, no spaces): its digest is stable."""
  record = {"format": FORMAT, "task": task, "tables": tables}
  return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(task: str, tables: dict) -> str:
  return hashlib.sha256(to_bytes(task, tables)).hexdigest()


def write(folder: str, task: str, tables: dict) -> str:
  """Writes `folder`/encoders.json (whole or not at all); returns its sha256."""
  blob = to_bytes(task, tables)
  write_atomic(os.path.join(folder, FILE), lambda f: f.write(blob), make_dirs=True)
  return hashlib.sha256(blob).hexdigest()


def read(folder: str, task: str, expected: str) -> dict:
  """The tables of `folder`/encoders.json, checked against the sha256 its run recorded."""
  path = os.path.join(folder, FILE)
  if not fs.exists(path):
    raise InputError(f"{path}: not found (the run records encoders with sha256 {expected[:12]}...)")
  found = hashlib.sha256(read_bytes(path)).hexdigest()
  if found != expected:
    raise InputError(f"{path}: sha256 {found[:12]}... is not the {expected[:12]}... its run recorded "
                     "(edited or damaged): the model would read questions differently from how it was trained")
  record = load_json(path)
  if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("task") != task:
    raise InputError(f"{path}: expected {FORMAT} encoders of a {task} run")
  return record["tables"]


def _first_difference(old, new) -> str:
  if isinstance(old, list) and isinstance(new, list):
    at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    seen = (f"[{at}] {old[at]!r} -> {new[at]!r}" if at < min(len(old), len(new))
            else f"from [{at}] on, only in the {'recorded' if len(old) > len(new) else 'new'} table")
    return f"{len(old)} -> {len(new)} entries, first difference {seen}"
  return f"{old!r} -> {new!r}"


def differences(recorded: dict, now: dict) -> list[str]:
  """`table: what differs` for every table of `now` that differs from `recorded`."""
  return [f"{name}: {_first_difference(recorded.get(name), now[name])}"
          for name in sorted(set(recorded) | set(now)) if recorded.get(name) != now.get(name)]
