"""The only module that talks to orbax: save / restore the train state and its metadata.

A checkpoint holds the train state (step, params, optimizer state, RNG) and a JSON
record with the input position, so a resumed run reads exactly the batches the
interrupted one would have. The last `keep` checkpoints and the best one by
`best_metric` (`EVAL/METRIC`, highest or lowest by `best_mode`: `core/evals.py`) are kept;
a checkpoint records that metric when its evaluation ran at its step. Orbax writes a step to a temporary directory and renames it when
complete, so a half-written checkpoint is never listed. The meta also records a sha256
of the saved state and meta (`checksum`), verified by every restore: a checkpoint damaged
later (truncated or missing files, or flipped bytes that orbax reads back without
complaint) fails to restore, and `restore_latest` skips it on resume.

Only the process that holds the workdir (training, eval) opens a `Checkpointer`, which
removes temporary steps left by a kill. Readers (ask, submit, demo, export) go through
`read_params`: it lists the complete steps, restores one step's parameters alone (no
optimizer state) as host arrays, verifies them against `params_checksum` (saved with
the meta since it exists) and changes nothing, so it is safe beside a running training.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from orbax.checkpoint import checkpoint_managers as policies

from vqajax.core import fs
from vqajax.core.errors import InputError, RunFailed
from vqajax.core.official_files import load_json

_CHECKSUM = "checksum"
_PARAMS_CHECKSUM = "params_checksum"
_READ_TRIES = 3  # a reader racing a training that deletes the step it chose tries the newest again
_ORBAX_SCHEMES = ("gs://", "s3://")


class DamagedCheckpointError(RunFailed):
  """A checkpoint restored, but its contents differ from what was saved."""


def checksum(state: Any, meta: dict) -> str:
  """sha256 over every leaf's tree path, dtype, shape and bytes (in tree order), then the meta.

  Each leaf is copied to the host once, one at a time (replicated arrays: this process's
  replica, so every host computes the same digest without communicating). Cost, once per
  save and once per restore, measured on a 2-core CPU box: 0.19 s for a 270 MB state (the
  paper-size one is ~210 MB; sha256 runs at ~1.3 GB/s with SHA-NI), where orbax takes
  1.0-1.6 s to save it; on an accelerator add one device-to-host copy of the state.
  """
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    replicated = isinstance(leaf, jax.Array) and leaf.is_fully_replicated
    host = np.asarray(leaf.addressable_data(0) if replicated else leaf)
    digest.update(f"{jax.tree_util.keystr(path)} {host.dtype.str} {host.shape}\n".encode())
    digest.update(host.reshape(-1).view(np.uint8))
  digest.update(json.dumps(meta, sort_keys=True).encode())
  return digest.hexdigest()


def metric_of(metrics: dict, name: str) -> float | None:
  """`metrics[name]`; a checkpoint saved before `config.evals` named its val metric without
  the evaluation (`accuracy` for `val/accuracy`)."""
  value = metrics.get(name)
  if value is None and name.startswith("val/"):
    value = metrics.get(name[len("val/"):])
  return float(value) if isinstance(value, (int, float)) else None


def orbax_path(directory: str) -> str:
  """`directory` as orbax takes it: a local path made absolute (a `file://` URL is one), gs:// and
  s3:// as they are (tensorstore's remote drivers); InputError for a URL orbax cannot use."""
  if directory.startswith("file://"):
    directory = directory[len("file://"):]
  if "://" not in directory:
    return os.path.abspath(directory)
  if not directory.startswith(_ORBAX_SCHEMES):
    raise InputError(f"{directory}: orbax cannot write there; checkpoints go to a local folder, "
                     f"{' or '.join(_ORBAX_SCHEMES)} (use such a --workdir)")
  return directory


@functools.cache
def _whole_arrays_per_replica() -> None:
  """Orbax saves without replica slices: CPU devices share one memory, and slicing costs a
  compiled program per array shape and device count (64 for a tiny run on 8 devices)."""
  ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False),
                                          override=True)


class Checkpointer:

  def __init__(self, directory: str, keep: int = 3, best_metric: str = "val/accuracy", best_mode: str = "max"):
    self._best_metric = best_metric
    worst = -np.inf if best_mode == "max" else np.inf

    def rank(metrics):  # a checkpoint without the metric (another rule's) is never the best
      value = metric_of(metrics, best_metric)
      return worst if value is None else value

    policy = policies.AnyPreservationPolicy([
        policies.LatestN(n=keep),
        policies.BestN(get_metric_fn=rank, reverse=best_mode == "min", n=1, keep_checkpoints_without_metrics=False),
    ])
    options = ocp.CheckpointManagerOptions(preservation_policy=policy, create=True,
                                           best_fn=rank, best_mode=best_mode,  # kept on disk
                                           enable_async_checkpointing=False,
                                           cleanup_tmp_directories=True)  # left by a kill / Ctrl-C
    self.directory = directory = orbax_path(directory)
    if jax.default_backend() == "cpu":
      _whole_arrays_per_replica()
    self.manager = ocp.CheckpointManager(directory, options=options, item_names=("state", "meta"))

  def save(self, step: int, state: Any, meta: dict, metrics: Optional[dict] = None) -> None:
    """Saves `state` and `meta` at `step`, with `metrics`' best metric where it has it
    (`EVAL/METRIC` names: the metrics of the evaluations that ran at `step`)."""
    metrics = {self._best_metric: float(metrics[self._best_metric])} if self._best_metric in (metrics or {}) else None
    if hasattr(state, "params"):  # a train state: its parameters alone are what readers restore
      meta = {**meta, _PARAMS_CHECKSUM: checksum(state.params, {})}
    meta = {**meta, _CHECKSUM: checksum(state, meta)}
    try:
      self.manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), metrics=metrics, force=True)
      self.manager.wait_until_finished()
    except (OSError, ValueError) as e:  # tensorstore reports a full disk as ValueError(RESOURCE_EXHAUSTED)
      if "://" not in self.directory:
        shutil.rmtree(os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp"), ignore_errors=True)
      raise RunFailed(f"{self.directory}: cannot save the checkpoint of step {step} "
                       f"({str(e).splitlines()[0][:300]}); free space and rerun to resume") from None

  def steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def best_step(self) -> Optional[int]:
    """The kept step with the best `best_metric` (None if no kept step has metrics)."""
    return self.manager.best_step()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """Restores `step` straight onto the shardings of `target` (arrays or shape structs) and
    verifies its checksum (DamagedCheckpointError on a mismatch). Checkpoints saved before
    checksums existed restore unverified, with a warning."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    meta = dict(restored.meta)
    saved = meta.pop(_CHECKSUM, None)
    if saved is None:
      logging.warning("checkpoint at step %d has no checksum (saved by an older vqajax); not verified", step)
    elif saved != checksum(restored.state, meta):
      raise DamagedCheckpointError(f"{os.path.join(self.directory, str(step))}: the restored state and meta "
                                   "do not match the checksum saved with them (damaged after saving)")
    return restored.state, meta

  def restore_latest(self, target: Any) -> Optional[tuple[Any, dict, int]]:
    """(state, meta, step) of the newest checkpoint that restores, or None if there is none.

    Newer checkpoints that fail to restore while an older one succeeds are damaged: they
    are moved to `<directory>.unreadable/<step>` (kept for inspection, and so that the
    resumed run can save those steps again) and reported. When no checkpoint restores,
    nothing is moved and the error names each failure (typically a changed config).
    """
    failures = []
    for step in sorted(self.steps(), reverse=True):
      try:
        state, meta = self.restore(step, target)
      except Exception as e:  # pylint: disable=broad-except  # orbax / tensorstore: many kinds
        failures.append((step, e))
        continue
      for bad, error in failures:
        self._set_aside(bad, error, step)
      return state, meta, step
    if failures:
      reasons = "; ".join(f"step {step}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                          for step, e in failures)
      raise InputError(f"{self.directory}: no checkpoint can be restored ({reasons})")
    return None

  def _set_aside(self, step: int, error: Exception, resumed: int) -> None:
    aside = os.path.join(self.directory + ".unreadable", str(step))
    os.makedirs(os.path.dirname(aside), exist_ok=True)
    shutil.move(os.path.join(self.directory, str(step)), aside)
    self.manager.reload()
    message = (f"checkpoint at step {step} cannot be restored ({type(error).__name__}); moved to "
               f"{aside}; resuming from step {resumed}")
    logging.warning(message)

  def close(self) -> None:
    self.manager.close()


# ------------------------------------------------------------------- readers

def complete_steps(directory: str) -> list[int]:
  """The steps saved in `directory`, in order; a step still being written (orbax's temporary
  folder, renamed when complete) is not one. Nothing is changed."""
  names = fs.listdir(directory) if fs.isdir(directory) else []
  return sorted(int(n.rstrip("/")) for n in names if re.fullmatch(r"\d+/?", n))


def step_metric(directory: str, step: int, name: str) -> float | None:
  """The metric `name` (`EVAL/METRIC`) saved with checkpoint `step`, if it has one."""
  path = os.path.join(directory, str(step), "metrics", "metrics")
  metrics = load_json(path) if fs.exists(path) else None
  return metric_of(metrics, name) if isinstance(metrics, dict) else None


def _read_params(directory: str, step: int) -> tuple[Any, dict]:
  path = os.path.join(orbax_path(directory), str(step))
  meta = load_json(os.path.join(path, "meta", "metadata"))
  checkpointer = ocp.PyTreeCheckpointer()
  tree = ocp.PyTreeCheckpointHandler().metadata(epath.Path(path) / "state").tree["params"]
  item = {"params": jax.tree.map(lambda m: np.zeros((), m.dtype), tree)}
  args = {"params": jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), tree)}
  params = checkpointer.restore(os.path.join(path, "state"), args=ocp.args.PyTreeRestore(
      item=item, restore_args=args, partial_restore=True))["params"]
  saved = meta.get(_PARAMS_CHECKSUM)
  if saved is None:
    logging.warning("checkpoint at step %d has no parameter checksum (saved by an older vqajax); not verified", step)
  elif saved != checksum(params, {}):
    raise DamagedCheckpointError(f"{path}: the restored parameters do not match the checksum saved with them "
                                 "(damaged after saving)")
  return params, meta


def read_params(directory: str, step: int, newest: bool = False) -> tuple[Any, dict, int]:
  """(host parameters, meta, step) of checkpoint `step`, read without changing anything.
  With `newest` (the caller asked for the latest), a step that a running training deleted
  meanwhile gives way to the newest complete one."""
  for _ in range(_READ_TRIES):
    try:
      return (*_read_params(directory, step), step)
    except DamagedCheckpointError:
      raise
    except Exception as e:  # pylint: disable=broad-except  # orbax / tensorstore: many kinds
      steps = complete_steps(directory)
      if not newest or not steps or steps[-1] == step and step in steps:
        raise InputError(f"{os.path.join(directory, str(step))}: cannot be read ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
      step = steps[-1]
  raise InputError(f"{directory}: its checkpoints kept changing while being read; try again")
