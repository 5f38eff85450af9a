"""The only module that talks to orbax: save / restore the train state and its metadata.

A checkpoint holds the train state (step, params, optimizer state, RNG) and a JSON
record with the input position, so a resumed run reads exactly the batches the
interrupted one would have. The last `keep` checkpoints and the best one by
`best_metric` (`EVAL/METRIC`, highest or lowest by `best_mode`: `core/evals.py`) are kept;
a checkpoint records that metric when its evaluation ran at its step. Orbax writes a step to
a temporary directory and renames it when complete, so a half-written checkpoint is never
listed.

Saves are asynchronous: `save` returns once the arrays are copied off the devices and orbax
writes them in the background, one save at a time. When every process has written a step, and
before orbax renames it into place, the sha256 of each of its files goes into `MANIFEST` inside
it (orbax's post-finalization callback), so a step appears with its manifest. Every restore
verifies the files against it before orbax reads a byte: a checkpoint damaged later
(truncated, missing or flipped bytes, which orbax may read back without complaint), or one
without a manifest, is refused whole, and orbax never starts reads that fail halfway (it would
leave their tasks behind, unretrieved). The arrays' shapes are checked against the restore
target the same way, from the checkpoint's metadata, before anything is read.

Only the process that holds the workdir (training, eval) opens a `Checkpointer`, which
removes temporary steps left by a kill. Readers (ask, submit, demo, export) go through
`read_params`: it lists the complete steps, pins one (its files hard-linked into a private
temporary folder, once its manifest is written, so a training deleting the step cannot take
them away mid-read), verifies it, restores its parameters alone (no optimizer state) as host
arrays and changes nothing in the run, so it is safe beside a running training.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import tempfile
import time
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from orbax.checkpoint import checkpoint_managers as policies

from vqajax.core import fs
from vqajax.core.errors import InputError, RunFailed
from vqajax.core.files import write_json_atomic
from vqajax.core.official_files import load_json

MANIFEST = "vqajax.sha256.json"  # {file: sha256} of a completed step, in its folder
_LATER = ("_CHECKPOINT_METADATA", "metrics")  # what orbax (re)writes after the manifest: not in it
_READ_TRIES = 4  # a reader racing a training that deletes the step it chose tries the newest again ...
_RETRY_SECONDS = 0.25  # ... after 0.25, 0.5, 0.75 s
_MANIFEST_WAIT = 10.0  # seconds a reader waits for the manifest of a step orbax has just completed
_ORBAX_SCHEMES = ("gs://", "s3://")


class DamagedCheckpointError(RunFailed):
  """A checkpoint restored, but its contents differ from what was saved."""


def _files(step_dir: str) -> list[str]:
  """The files of a checkpoint step, relative to it, sorted (the manifest and `_LATER` aside)."""
  found, folders = [], [""]
  while folders:
    folder = folders.pop()
    for name in fs.listdir(os.path.join(step_dir, folder) if folder else step_dir):
      rel = os.path.join(folder, name) if folder else name
      if fs.isdir(os.path.join(step_dir, rel)):
        folders.append(rel)
      elif rel != MANIFEST and rel.split(os.sep)[0] not in _LATER:
        found.append(rel)
  return sorted(found)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with fs.open_file(path, "rb") as f:
    while block := f.read(1 << 24):
      digest.update(block)
  return digest.hexdigest()


def write_manifest(step_dir: str) -> None:
  """Records the sha256 of every file of the completed step `step_dir` (`MANIFEST`)."""
  write_json_atomic(os.path.join(step_dir, MANIFEST), {rel: _sha256(os.path.join(step_dir, rel))
                                                       for rel in _files(step_dir)})


def _await_manifest(step_dir: str, wait: float) -> None:
  """Waits up to `wait` seconds for the step's manifest (a reader beside a training: it follows
  orbax's rename of the step by the time its files take to hash)."""
  deadline = time.monotonic() + wait
  while not fs.exists(os.path.join(step_dir, MANIFEST)):
    if time.monotonic() >= deadline or not fs.isdir(step_dir):
      raise DamagedCheckpointError(f"{step_dir}: no {MANIFEST} (its saving did not complete)")
    time.sleep(0.05)


def _inside(rel: str) -> bool:
  """Whether `rel` is a relative path that stays inside its folder."""
  return bool(rel) and not os.path.isabs(rel) and ".." not in rel.split(os.sep)


def verify(step_dir: str) -> None:
  """DamagedCheckpointError unless every file `MANIFEST` lists is there with its sha256."""
  _await_manifest(step_dir, 0.0)
  manifest = os.path.join(step_dir, MANIFEST)
  listed = load_json(manifest)
  if not (isinstance(listed, dict) and listed and all(
      isinstance(rel, str) and isinstance(digest, str) and _inside(rel) for rel, digest in listed.items())):
    raise DamagedCheckpointError(f"{manifest}: not a manifest, expected an object of the step's files (relative "
                                 "paths inside it) and their sha256 (damaged after saving)")
  for rel, digest in listed.items():
    path = os.path.join(step_dir, rel)
    if not fs.exists(path):
      raise DamagedCheckpointError(f"{path}: missing (damaged after saving)")
    if _sha256(path) != digest:
      raise DamagedCheckpointError(f"{path}: its sha256 is not the one saved in {MANIFEST} (damaged after saving)")


def _check_shapes(state_dir: str, target: Any) -> None:
  """InputError unless the saved arrays have the shapes and dtypes of `target`'s leaves
  (compared as multisets: the trees' key paths differ between orbax and flax)."""
  saved = ocp.PyTreeCheckpointHandler().metadata(epath.Path(state_dir)).tree
  shapes = lambda tree: sorted((tuple(x.shape), str(np.dtype(x.dtype))) for x in jax.tree.leaves(tree))
  if shapes(saved) != shapes(target):
    raise InputError(f"{state_dir}: its arrays do not have the shapes of this config's train state "
                     "(another model or optimizer)")


def metric_of(metrics: dict, name: str) -> float | None:
  """`metrics[name]` where it is a number."""
  value = metrics.get(name)
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
  compiled program per array shape and device count."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)  # orbax warns that a handler is replaced: replacing it is the point
  try:
    ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False),
                                            override=True)
  finally:
    logging.set_verbosity(verbosity)


def _check_space(directory: str, step: int, state: Any) -> None:
  """RunFailed before orbax writes a byte when the local disk has less room than the state's
  arrays take (an upper bound of what orbax writes): orbax's own threads would fail halfway,
  each logging its traceback, and leave their tasks behind."""
  existing = directory
  while not fs.is_url(existing) and not os.path.isdir(existing):
    existing = os.path.dirname(existing)
  needed = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
  if not fs.is_url(existing) and (free := shutil.disk_usage(existing).free) < needed:
    raise RunFailed(f"{directory}: cannot save the checkpoint of step {step} (it takes up to {needed / 2**20:.1f} "
                    f"MiB, {free / 2**20:.1f} MiB free); free space and rerun to resume")


class Checkpointer:

  def __init__(self, directory: str, keep: int = 3, best_metric: str = "val/accuracy", best_mode: str = "max"):
    self._best_metric = best_metric
    self._saving: Optional[int] = None  # the step being written in the background
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
                                           async_options=ocp.AsyncOptions(post_finalization_callback=self._seal),
                                           cleanup_tmp_directories=True)  # left by a kill / Ctrl-C
    self.directory = directory = orbax_path(directory)
    if jax.default_backend() == "cpu":
      _whole_arrays_per_replica()
    self.manager = ocp.CheckpointManager(directory, options=options, item_names=("state", "meta"))

  def _seal(self) -> None:
    """Orbax's callback on process 0 once every process has written the step, before it is
    renamed into place (a bucket's step is written in place): its manifest goes in with it."""
    names = fs.listdir(self.directory)
    tmp = [n for n in names if n.rstrip("/").startswith(f"{self._saving}.orbax-checkpoint-tmp")]
    write_manifest(os.path.join(self.directory, (tmp or [str(self._saving)])[0].rstrip("/")))

  def save(self, step: int, state: Any, meta: dict, metrics: Optional[dict] = None) -> None:
    """Starts saving `state` and `meta` at `step`, with `metrics`' best metric where it has it
    (`EVAL/METRIC` names: the metrics of the evaluations that ran at `step`), once the previous
    save is complete; `wait` (or `close`) for it."""
    metrics = {self._best_metric: float(metrics[self._best_metric])} if self._best_metric in (metrics or {}) else None
    self.wait()
    _check_space(self.directory, step, state)
    self._saving = step
    with self._failing():
      self.manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), metrics=metrics, force=True)

  def wait(self) -> None:
    """Returns when the save in progress, if any, is complete (its manifest written)."""
    with self._failing():
      self.manager.wait_until_finished()
    self._saving = None

  @contextlib.contextmanager
  def _failing(self):
    """A save that fails (a full disk, say) as RunFailed naming its step; its temporary folder goes."""
    try:
      yield
    except (OSError, ValueError) as e:  # tensorstore reports a full disk as ValueError(RESOURCE_EXHAUSTED)
      step, self._saving = self._saving, None
      if "://" not in self.directory:
        for name in os.listdir(self.directory):
          if name.startswith(f"{step}.orbax-checkpoint-tmp"):
            shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
      raise RunFailed(f"{self.directory}: cannot save the checkpoint of step {step} "
                      f"({str(e).splitlines()[0][:300]}); free space and rerun to resume") from None

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """Restores `step` straight onto the shardings of `target` (arrays or shape structs), its
    files verified first (DamagedCheckpointError) and its shapes checked (InputError)."""
    self.wait()
    step_dir = os.path.join(self.directory, str(step))
    verify(step_dir)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    _check_shapes(os.path.join(step_dir, "state"), abstract)
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return restored.state, dict(restored.meta)

  def restore_latest(self, target: Any) -> Optional[tuple[Any, dict, int]]:
    """(state, meta, step) of the newest checkpoint that restores, or None if there is none.

    Newer checkpoints that fail to restore while an older one succeeds are damaged: they
    are moved to `<directory>.unreadable/<step>` (kept for inspection, and so that the
    resumed run can save those steps again) and reported. When no checkpoint restores,
    nothing is moved and the error names each failure (typically a changed config).
    """
    failures = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state, meta = self.restore(step, target)
      except Exception as e:  # orbax / tensorstore: many kinds
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
    try:
      self.wait()
    finally:
      self.manager.close()


# ------------------------------------------------------------------- readers

def complete_steps(directory: str) -> list[int]:
  """The steps saved in `directory`, in order; a step still being written (orbax's temporary
  folder, renamed when complete) is not one. Nothing is changed."""
  names = fs.listdir(directory) if fs.isdir(directory) else []
  steps = sorted(int(n.rstrip("/")) for n in names if re.fullmatch(r"\d+/?", n))
  linked = [s for s in steps if os.path.islink(os.path.join(directory, str(s)))]
  if linked:  # training would delete it past keep_checkpoints: orbax refuses, the run fails every save
    raise InputError(f"{os.path.join(directory, str(linked[0]))}: a link; a run's checkpoints are the folders "
                     "it saved: move the link away")
  return steps


def step_metric(directory: str, step: int, name: str) -> float | None:
  """The metric `name` (`EVAL/METRIC`) saved with checkpoint `step`, if it has one."""
  path = os.path.join(directory, str(step), "metrics", "metrics")
  try:
    metrics = load_json(path)
  except InputError:  # none saved, or the step deleted meanwhile by a running training
    return None
  return metric_of(metrics, name) if isinstance(metrics, dict) else None


@contextlib.contextmanager
def _pinned(step_dir: str):
  """The complete step's files hard-linked into a private folder, so that a training deleting
  the step meanwhile cannot take them from under orbax's reads; the step itself where links
  cannot be made (a bucket, another file system)."""
  _await_manifest(step_dir, _MANIFEST_WAIT)
  if fs.is_url(step_dir):
    yield step_dir
    return
  private = tempfile.mkdtemp(prefix="vqajax-read-")
  try:
    shutil.copytree(step_dir, private, copy_function=os.link, dirs_exist_ok=True)
  except OSError:  # deleted meanwhile, or no hard links here (another file system)
    shutil.rmtree(private)
    if not os.path.isdir(step_dir):
      raise DamagedCheckpointError(f"{step_dir}: deleted while it was being read") from None
    private = None
  try:
    yield private or step_dir
  except DamagedCheckpointError as e:  # named by the run's own files, not the private links to them
    raise DamagedCheckpointError(str(e).replace(private, step_dir) if private else str(e)) from None
  finally:
    if private:
      shutil.rmtree(private, ignore_errors=True)


def _read_params(directory: str, step: int) -> tuple[Any, dict]:
  with _pinned(os.path.join(orbax_path(directory), str(step))) as path:
    verify(path)
    meta = load_json(os.path.join(path, "meta", "metadata"))
    tree = ocp.PyTreeCheckpointHandler().metadata(epath.Path(path) / "state").tree["params"]
    item = {"params": jax.tree.map(lambda m: np.zeros((), m.dtype), tree)}
    args = {"params": jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), tree)}
    params = ocp.PyTreeCheckpointer().restore(os.path.join(path, "state"), args=ocp.args.PyTreeRestore(
        item=item, restore_args=args, partial_restore=True))["params"]
  return params, meta


def read_params(directory: str, step: int, newest: bool = False) -> tuple[Any, dict, int]:
  """(host parameters, meta, step) of checkpoint `step`, read without changing anything.
  With `newest` (the caller asked for the latest), a failed read waits a moment and tries the
  newest complete step again: a running training deletes old steps as it saves new ones."""
  for attempt in range(_READ_TRIES):
    try:
      return (*_read_params(directory, step), step)
    except Exception as e:  # orbax / tensorstore: many kinds
      if not newest or attempt == _READ_TRIES - 1:
        if isinstance(e, DamagedCheckpointError):  # the run's files, damaged after saving: a reader's bad input
          raise InputError(str(e)) from None
        raise InputError(f"{os.path.join(directory, str(step))}: cannot be read ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
      time.sleep(_RETRY_SECONDS * (attempt + 1))
      step = (complete_steps(directory) or [step])[-1]
