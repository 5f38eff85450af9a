"""A workdir is one run: its record (`run.json`) and its lock.

`run.json` holds its `format` (`FORMAT`: a run.json of another format is refused, never
read as this one), the run's config, the sizes of its data, the sha256 of its encoders
(`encoders.json`, `core/encoders.py`), its feature extractor's settings (when its store
records them) and, once the final checkpoint
and the final results are both written, `finished_step`. Every later command on the
workdir reads the config from it (`read_config`); a rerun of `vqajax train` whose
settings would change the run (anything but the budget fields below) is refused with
the fields that differ (`check_same_run`), unless the user says so explicitly.

One process holds a workdir at a time (`WorkdirLock`: a `lock` file with the holder's
host and pid, created exclusively); a lock left by a dead process on this host is
taken over. In a bucket (a URL workdir, see `core/fs.py`) nothing creates exclusively:
the lock is written only if absent, then read back, and held if it still names this
process (a random token). That refuses a command started after the lock was written;
two started within the same moment can both see no lock and, if each reads back before
the other's write lands, both hold it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time

import ml_collections

from vqajax.core import encoders, files, fs
from vqajax.core.errors import InputError
from vqajax.core.files import write_json_atomic
from vqajax.core.official_files import load_json

RUN_FILE = "run.json"
FORMAT = 2  # run.json's layout; a change to it (or to what a config field means) makes it 3
LOCK_FILE = "lock"
LAUNCH_DIR = "launch"  # a launcher's logs of the run's jobs (`vqajax/launch.py`), made before run.json
# Fields a rerun may change: how long it trains, how often it logs / evaluates / keeps, which
# evaluations it makes (`evals.*`), where its features live, how the devices split the work
# (`mesh.*`) and what the backward pass recomputes (`model.remat`): the same values either way.
BUDGET_FIELDS = ("num_train_steps", "num_epochs", "log_every_steps", "eval_every_steps", "keep_checkpoints",
                 "checkpoint_every_steps", "profile_steps",
                 "eval_batch_size", "data.features_on_device", "model.remat")
BUDGET_GROUPS = ("evals.", "mesh.")


_GROUPS = ("data", "model", "optimizer", "mesh")  # every task's config has these groups of fields
_TYPES = {"data": dict, "encoders": str, "extractor": dict, "finished_step": int}  # what the record adds
_WORDS = {dict: "an object", str: "a string", int: "an integer"}


def read_record(workdir: str) -> dict | None:
  """`workdir`'s run.json, None without one; InputError for a file that is not a run record
  (edited, or a user's own run.json in a folder given as a workdir)."""
  path = os.path.join(workdir, RUN_FILE)
  if not fs.exists(path):
    return None
  record = load_json(path)
  if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
    raise InputError(f'{path}: not a vqajax run record (expected an object with a "config" object); '
                     "is this folder a vqajax workdir?")
  if record.get("format") != FORMAT:
    raise InputError(f'{path}: expected "format": {FORMAT}, got {record.get("format")!r:.20} (a run recorded by '
                     "another version of vqajax: train it again, or use that version)")
  for where, value, kind in ([(f'"config"."{group}"', record["config"].get(group), dict) for group in _GROUPS]
                             + [(f'"{key}"', record[key], kind) for key, kind in _TYPES.items() if key in record]):
    if not isinstance(value, kind) or isinstance(value, bool):
      raise InputError(f"{path}: {where}: expected {_WORDS[kind]}, got {value!r:.40} (an edited run record?)")
  return record



def check_workdir(workdir: str) -> None:
  """InputError unless `workdir` is new, empty or a run (it holds run.json, written before
  anything else): a folder of other files (a user's, an export bundle) is never written into."""
  if not fs.isdir(workdir) or fs.exists(os.path.join(workdir, RUN_FILE)):
    return
  if any(name not in (LOCK_FILE, LAUNCH_DIR) and not files.is_temp_name(name) for name in fs.listdir(workdir)):
    raise InputError(f"{workdir}: holds files but no {RUN_FILE}, so it is not a vqajax run: name a new or empty "
                     "folder as the workdir")


def write_run_file(workdir: str, config, sizes: dict, encoders_sha256: str | None = None, finished_step: int | None = None,
                   extractor: dict | None = None) -> None:
  """workdir/run.json: the config of a run, the sizes of its data (its task's `sizes`), its
  encoders' sha256, the settings its image features were extracted with (`extractor`,
  when its store records them) and, when it is complete, its final step."""
  record = {"format": FORMAT, "config": config.to_dict(), "data": sizes}
  if encoders_sha256 is not None:
    record["encoders"] = encoders_sha256
  if extractor is not None:
    record["extractor"] = extractor
  if finished_step is not None:
    record["finished_step"] = finished_step
  write_json_atomic(os.path.join(workdir, RUN_FILE), record, make_dirs=True)


def read_config(workdir: str) -> ml_collections.ConfigDict | None:
  """The locked config recorded in `workdir`/run.json, or None without one."""
  record = read_record(workdir)
  if record is None:
    return None
  config = ml_collections.ConfigDict(record["config"])
  config.lock()
  return config


def run_argument(argument: str) -> tuple[str, str]:
  """(row name or "", path) of a report's [NAME=]PATH argument (an existing path is a path,
  '=' or not); the name names output files: a plain name only."""
  if fs.exists(argument) or "=" not in argument:
    return "", argument
  name, _, path = argument.partition("=")
  return files.check_name(name, f"{argument}: run name"), path


def protect(workdir: str) -> None:
  """Registers a run that a command only reads: no output goes into its workdir or its data
  folder (`files.protect`)."""
  config = read_config(workdir)
  files.protect(workdir, config.data.get("dir") if config is not None else None)


def _flat(tree: dict, prefix: str = "") -> dict:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
  return out


def differences(recorded: dict, config, sizes: dict | None) -> list[str]:
  """`field recorded -> now` for every setting (and data size) that differs; `sizes` None: before
  the data is prepared (its sizes and the feature store's path, resolved with it, not compared)."""
  old = {**_flat(recorded["config"]), **_flat(recorded.get("data", {}) if sizes is not None else {}, "data sizes: ")}
  new = {**_flat(json.loads(json.dumps(config.to_dict()))), **_flat(sizes or {}, "data sizes: ")}
  if sizes is None:
    old.pop("data.features", None)
  keys = sorted(set(old) | set(new))  # a field the record lacks is newer than the run: not a change
  return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys
          if k not in BUDGET_FIELDS and not k.startswith(BUDGET_GROUPS) and k in old and old.get(k) != new.get(k)]


def check_same_run(workdir: str, config, sizes: dict | None, hint: str) -> None:
  """InputError listing the differences when `workdir` records another run (`sizes` None: `differences`)."""
  recorded = read_record(workdir)
  if recorded is None:
    return
  changed = differences(recorded, config, sizes)
  if changed:
    raise InputError(f"{workdir}: holds a run with other settings ({'; '.join(changed)}); {hint}")


def check_encoders(workdir: str, task: str, tables: dict, hint: str) -> None:
  """InputError naming the tables that differ when `workdir`'s run recorded other encoders
  than its data gives now (`tables`)."""
  recorded = (read_record(workdir) or {}).get("encoders")
  if recorded is None or recorded == encoders.digest(task, tables):
    return
  changed = encoders.differences(encoders.read(workdir, task, recorded), tables)
  raise InputError(f"{workdir}: its data now gives other encoders than the run recorded in "
                   f"{encoders.FILE} ({'; '.join(changed)}); {hint}")


def record_encoders(workdir: str, task: str, tables: dict) -> str:
  """Writes `workdir`/encoders.json unless the run records these already; returns their sha256."""
  digest = encoders.digest(task, tables)
  if (read_record(workdir) or {}).get("encoders") != digest or not fs.exists(os.path.join(workdir, encoders.FILE)):
    encoders.write(workdir, task, tables)
  return digest


def finished_step(workdir: str) -> int | None:
  record = read_record(workdir)
  return None if record is None else record.get("finished_step")


def read_metrics(path: str) -> dict:
  """The metrics.json at `path` an evaluation wrote: {name: number or null}; InputError for
  anything else (an edited or damaged file is never read as no metrics, nor shown)."""
  metrics = load_json(path)
  if not isinstance(metrics, dict):
    raise InputError(f"{path}: expected an object of metrics (name: number), got {type(metrics).__name__}")
  for name, value in metrics.items():
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
      raise InputError(f"{path}: metric {name!r}: expected a number, got {str(value)[:40]!r}")
  return metrics


def step_metrics(workdir: str, step: int) -> dict:
  """The val metrics the evaluation of `step` wrote with its results, if it wrote them."""
  path = os.path.join(workdir, "results", f"step_{step}", "metrics.json")
  metrics = read_metrics(path) if fs.exists(path) else {}
  return {k: v for k, v in metrics.items() if k != "step"}


def result_steps(workdir: str) -> list[tuple[int, str]]:
  """[(step, folder)] of `workdir`'s results/step_N folders (written by the evaluator),
  newest first."""
  results = os.path.join(workdir, "results")
  names = fs.listdir(results) if fs.isdir(results) else []
  steps = [(int(n[5:]), os.path.join(results, n)) for n in names if re.fullmatch(r"step_\d+", n)]
  return sorted(steps, reverse=True)


def _alive(pid: int) -> bool:
  if pid <= 0:  # no process has it (kill() would signal a process group)
    return False
  try:
    os.kill(pid, 0)
  except (ProcessLookupError, OverflowError, ValueError):
    return False
  except PermissionError:
    return True
  return True


class WorkdirLock:
  """`with WorkdirLock(workdir):` holds the workdir for this process (see module docstring)."""

  def __init__(self, workdir: str, command: str):
    self.path, self.command = os.path.join(workdir, LOCK_FILE), command
    self._held = False

  def _holder(self) -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "command": self.command,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"), "token": secrets.token_hex(8)}

  def _create(self) -> bool:
    """Creates the lock whole (written aside, then linked into place: never empty)."""
    if fs.is_url(self.path):
      return self._create_url()
    temp = f"{self.path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as f:
      json.dump(self._holder(), f)
    try:
      os.link(temp, self.path)
    except FileExistsError:
      return False
    finally:
      os.remove(temp)
    return True

  def _create_url(self) -> bool:
    """Writes the lock if absent, then reads it back (see module docstring)."""
    if fs.exists(self.path):
      return False
    holder = self._holder()
    with fs.open_file(self.path, "w") as f:
      f.write(json.dumps(holder))
    with fs.open_file(self.path, "r") as f:
      return json.loads(f.read()).get("token") == holder["token"]

  def __enter__(self) -> "WorkdirLock":
    fs.makedirs(fs.dirname(self.path))
    if not self._create():
      try:
        with fs.open_file(self.path, "r") as f:
          holder = json.loads(f.read())
        pid = holder["pid"] if isinstance(holder, dict) and type(holder.get("pid")) is int else None
      except (OSError, ValueError):
        holder, pid = {}, None
      # stale: a dead process of this host, or not a lock this code writes (it writes them whole)
      stale = pid is None or (holder.get("host") == socket.gethostname() and not _alive(pid))
      if not stale:
        raise InputError(f"{os.path.dirname(self.path)}: in use by another run ({holder.get('command', '?')}, "
                         f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since "
                         f"{holder.get('since', '?')}); if that process is gone, remove {self.path}")
      fs.remove(self.path)  # left by a dead process: take it over
      if not self._create():
        raise InputError(f"{os.path.dirname(self.path)}: in use by another run (it took the lock just now)")
    self._held = True
    return self

  def __exit__(self, *exc) -> None:
    if self._held:
      fs.remove(self.path)
      self._held = False
