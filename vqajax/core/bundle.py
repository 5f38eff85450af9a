"""An export bundle: one checkpoint of a run as a folder to share (`vqajax export`).

Laid out as a Hugging Face Hub model repository, so it can be published as it is:

  README.md           the model card (YAML metadata, what it was trained on, its val
                      metrics, the commands to use it)
  config.json         the run's config
  encoders.json       its encoders (`core/encoders.py`)
  flax_model.msgpack  the parameters (`flax.serialization` msgpack: nested dicts of arrays)
  extractor/*.npz     with --with-weights: the image feature extractor's weights
  vqajax.json         {"format", "task", "step", "metrics", "data" (sizes), "extractor"
                      (settings), "encoders" (sha256), "files": {name: sha256}}

`read` verifies every listed file's sha256 before anything is used, so a bundle copied
to another folder, machine or bucket gives the same answers or a one-line refusal.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import jax
import ml_collections
import numpy as np
from flax import serialization

from vqajax.core import encoders, fs
from vqajax.core.errors import InputError
from vqajax.core.files import temp_path, write_atomic_many
from vqajax.core.official_files import load_json, read_bytes

FILE = "vqajax.json"
FORMAT = "vqajax-bundle/1"
PARAMS = "flax_model.msgpack"
CONFIG = "config.json"
CARD = "README.md"


def is_bundle(path: str) -> bool:
  return fs.exists(os.path.join(path, FILE))


MAX_FILE_BYTES = 16 * 2**30  # a bundle file larger than this is refused before it is read
_FIELDS = {"task": str, "step": int, "encoders": str, "files": dict}  # what every reader uses


def read_record(path: str) -> dict:
  """The bundle's `vqajax.json`, checked: its fields, and every file it lists a plain path
  inside the bundle (shipped extractor weights among them)."""
  where = os.path.join(path, FILE)
  record = load_json(where, read_bytes(where, MAX_FILE_BYTES))
  if not isinstance(record, dict) or record.get("format") != FORMAT:
    raise InputError(f"{where}: expected a {FORMAT} record")
  for field, kind in _FIELDS.items():
    if not isinstance(record.get(field), kind) or isinstance(record.get(field), bool):
      raise InputError(f'{where}: expected "{field}" to be a {kind.__name__}, got {record.get(field)!r:.80}')
  for name, digest in record["files"].items():
    if not (isinstance(digest, str) and _inside(name)):
      raise InputError(f"{where}: files: {name!r:.80}: expected a path inside the bundle and its sha256")
  if not isinstance(record.get("extractor") or {}, dict) or not isinstance(record.get("metrics") or {}, dict):
    raise InputError(f'{where}: expected "extractor" and "metrics" to be objects')
  weights = (record.get("extractor") or {}).get("weights")
  if weights is not None and weights not in record["files"]:
    raise InputError(f"{where}: extractor weights {weights!r:.80}: expected one of the bundle's listed files or null")
  return record


def _inside(name) -> bool:
  """A relative path that stays inside the bundle (no '..', not absolute, no URL)."""
  return (isinstance(name, str) and bool(name) and "://" not in name and not os.path.isabs(name)
          and ".." not in name.replace("\\", "/").split("/"))


def _verified(path: str, name: str, files: dict) -> bytes:
  blob = read_bytes(os.path.join(path, name), MAX_FILE_BYTES)
  found = hashlib.sha256(blob).hexdigest()
  if found != files.get(name):
    raise InputError(f"{os.path.join(path, name)}: sha256 {found[:12]}... is not the {str(files.get(name))[:12]}... "
                     f"that {FILE} lists (damaged or edited since the export)")
  return blob


def read_config(path: str):
  record = read_record(path)
  value = load_json(os.path.join(path, CONFIG), _verified(path, CONFIG, record["files"]))
  if not isinstance(value, dict) or value.get("task") != record["task"]:
    raise InputError(f'{os.path.join(path, CONFIG)}: expected the config object of a {record["task"]} run')
  # a path recorded under the home folder (`~/...`, `export.portable`) expanded for this machine
  config = ml_collections.ConfigDict(jax.tree.map(
      lambda v: os.path.expanduser(v) if isinstance(v, str) and v.startswith("~/") else v, value))
  config.lock()
  return config


def read(path: str, task: str) -> tuple[dict, dict, dict]:
  """(record, encoders' tables, host parameters) of the bundle at `path`, every file verified."""
  record = read_record(path)
  tables = encoders.read(path, task, record["encoders"])  # checked against its sha256 there
  params = _params(os.path.join(path, PARAMS), _verified(path, PARAMS, record["files"]))
  weights = (record.get("extractor") or {}).get("weights")
  if weights is not None:  # shipped inside
    record["extractor"]["weights"] = os.path.join(path, weights)
  return record, tables, params


def _params(where: str, blob: bytes) -> dict:
  """The parameters in `blob`: nested dicts of arrays (any bytes whose sha256 was listed may
  come here: a file replaced with its checksum updated)."""
  try:
    params = serialization.msgpack_restore(blob)
  except (ValueError, TypeError) as e:  # msgpack's errors are ValueErrors (ExtraData, FormatError, ...)
    raise InputError(f"{where}: not Flax msgpack parameters ({type(e).__name__})") from None
  if not isinstance(params, dict) or not all(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(params)):
    raise InputError(f"{where}: expected nested objects of arrays (Flax msgpack parameters), got {type(params).__name__}")
  return params


def write(out: str, *, task: str, config, tables: dict, params, step: int, metrics: dict, sizes: dict,
          extractor: dict | None, card: str, weights: tuple[str, bytes] | None = None) -> list[str]:
  """Writes the bundle into `out` (all files or none); `weights`: (file name, .npz bytes) of
  the extractor's weights, shipped under extractor/. Returns the files written."""
  files = {
      CONFIG: _json(config),
      encoders.FILE: encoders.to_bytes(task, tables),
      PARAMS: serialization.msgpack_serialize(jax.tree.map(np.asarray, params)),
      CARD: card.encode(),
  }
  if weights is not None:
    name = f"extractor/{weights[0]}"
    files[name] = weights[1]
    extractor = {**extractor, "weights": name}
  record = {"format": FORMAT, "task": task, "step": step, "metrics": metrics, "data": sizes,
            "extractor": extractor, "encoders": hashlib.sha256(files[encoders.FILE]).hexdigest(),
            "files": {name: hashlib.sha256(blob).hexdigest() for name, blob in files.items()}}
  blobs = {**files, FILE: _json(record)}
  if fs.is_url(out):  # buckets rename nothing atomically: each file appears whole
    write_atomic_many({os.path.join(out, name): blob for name, blob in blobs.items()}, make_dirs=True)
  else:
    _write_folder(out, blobs)
  return [os.path.join(out, name) for name in blobs]


def _write_folder(out: str, blobs: dict[str, bytes]) -> None:
  """The bundle written in a temporary folder beside `out`, then renamed to it: it appears
  whole or not at all (a full disk leaves nothing), and of two commands writing the same new
  `out` one fails (a folder is renamed only over an empty one)."""
  real = os.path.realpath(out)  # a link to an empty folder: the folder
  temp = temp_path(real)
  try:
    write_atomic_many({os.path.join(temp, name): blob for name, blob in blobs.items()}, make_dirs=True)
    os.rename(temp, real)
  except OSError as e:
    raise InputError(f"--out {out}: cannot write the bundle there ({e.strerror}); another command may have "
                     "written it meanwhile") from None
  finally:
    shutil.rmtree(temp, ignore_errors=True)


def _json(obj) -> bytes:
  return json.dumps(obj, indent=1, sort_keys=True).encode()
