"""A trained run opened for answering (`vqa/ask.py`, `answertherapy/ask.py`, submissions,
export): a workdir or an export bundle (`core/bundle.py`), read, never changed.

`open_run(path, tasks)` reads the run's config, its encoders (`core/encoders.py`) and one
checkpoint's parameters, and builds the model: no training data, no optimizer, no
training feature table, no TensorFlow. A checkpoint is read with `checkpoint.read_params`, which is safe beside a training writing the workdir.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Mapping

import jax
import numpy as np
from flax import errors as flax_errors

from vqajax.core import bundle, checkpoint, encoders, evals, fs, run_record, sharding
from vqajax.core.errors import InputError


def read_config(path: str, tasks: Mapping[str, Any], data_dir: str | None = None):
  """The locked config of the run at `path` (a workdir or a bundle); InputError without one
  or for a task not in `tasks`. `data_dir`: a bundle's data folder on this machine (both paths
  a str or an os.PathLike)."""
  path, data_dir = os.fspath(path), data_dir and os.fspath(data_dir)
  if not fs.isdir(path):
    raise InputError(f"{path}: no such run")
  is_bundle = bundle.is_bundle(path)
  config = bundle.read_config(path) if is_bundle else run_record.read_config(path)
  if config is None:
    raise InputError(f"{path}: no {run_record.RUN_FILE} (not a vqajax run) and no {bundle.FILE} (not a bundle)")
  if data_dir:
    if not is_bundle:
      raise InputError(f"--data_dir {data_dir}: {path} is a workdir, which reads the data it recorded; "
                       "--data_dir names a bundle's data folder")
    if not fs.isdir(data_dir):
      raise InputError(f"--data_dir {data_dir}: no such folder (it names the folder of the bundle's data)")
    config.data.dir = data_dir
  if config.get("task") not in tasks:
    raise InputError(f"{path}: a {config.get('task')} run; expected a {' or '.join(tasks)} run")
  try:
    evals.check_config(config, tasks[config.task])
  except InputError as e:
    raise InputError(f"{path}: its config: {e}") from None
  return config


def synthetic_note(config) -> str:
  """What to say about a run trained on the embedded synthetic dataset ("" for any other): its
  pictures are drawn shapes, so what it answers about anyone else's pictures means little."""
  if not config.data.get("synthetic"):
    return ""
  return ("this run was trained on the embedded synthetic dataset (config.data.synthetic: drawn shapes), "
          "so its answers about other pictures mean little")


def chosen_step(directory: str, path: str, step: int | None, best: tuple[str, str] | None) -> int:
  """The complete checkpoint to use: `step`, the best by `best` ((metric, "max" | "min"),
  `config.best_metric`, `config.best_mode`), or the latest."""
  saved = checkpoint.complete_steps(directory)
  if not saved:
    raise InputError(f"{path}: no checkpoint (train the run first)")
  if best is not None:
    metric, mode = best
    scored = [(m, s) for s in saved if (m := checkpoint.step_metric(directory, s, metric)) is not None]
    if not scored:
      raise InputError(f"{path}: no kept checkpoint has the metric {metric} to pick the best by (saved: {saved})")
    sign = 1 if mode == "max" else -1  # ties: the latest, as the checkpoints kept
    return max(scored, key=lambda pair: (sign * pair[0], pair[1]))[1]
  if step is not None and step not in saved:
    raise InputError(f"{path}: no checkpoint at step {step} (saved: {saved})")
  return saved[-1] if step is None else step


@dataclasses.dataclass
class Trained:
  """One checkpoint of a run, ready to apply: its config, task, encoders and model, the
  parameters replicated over `mesh`, and what it records beside them."""
  path: str
  config: Any
  task: Any
  encoders: Any
  params: Any
  step: int
  extractor: dict | None  # the settings its image features were extracted with, if recorded
  metrics: dict           # its val metrics at `step`, where recorded
  mesh: Any
  model: Any

  @functools.cached_property
  def store(self):
    """The run's feature store (its image ids' features), opened on first use."""
    if not self.config.data.dir:
      raise InputError(f"{self.path}: names no data folder on this machine (a bundle records none outside the "
                       "home folder): give the folder of its data with --data_dir")
    store = self.task.open_store(self.config)
    if store is None:
      raise InputError(f"{self.path}: a text-only run has no feature store")
    return store

  def extractor_settings(self) -> dict | None:
    """The settings its image features were extracted with: recorded with the run, else
    those its feature store records (None: neither has any)."""
    if self.extractor is not None:
      return self.extractor
    try:
      return self.store.settings
    except InputError:
      return None

  @property
  def batch(self) -> int:
    return sharding.padded_batch_size(self.config.eval_batch_size, self.mesh)

  def jit(self, fn, **kwargs):
    """`fn(params, batch, ...)` jitted with the mesh in scope (as the eval step is)."""
    return jax.jit(sharding.in_mesh(self.mesh, fn), **kwargs)

  def predict(self, jitted, inputs: dict[str, np.ndarray], *args) -> Any:
    """`jitted(params, batch, *args)` over every row of `inputs` (host arrays) in padded
    batches of the run's eval batch size (fewer rows: the next power of two, so one question
    costs one row's work and a few shapes are ever compiled); `image_row` rows are read from
    the store a batch at a time. Host arrays of the outputs, one row per input row."""
    n = len(next(iter(inputs.values())))
    size = min(self.batch, sharding.padded_batch_size(1 << (n - 1).bit_length(), self.mesh))  # few rows: fewer
    pad = -n % size  # the last batch repeats its last row
    inputs = {k: np.concatenate([v, np.repeat(v[-1:], pad, axis=0)]) for k, v in inputs.items()}
    dispatched = []
    for start in range(0, n + pad, size):
      batch = {k: v[start:start + size] for k, v in inputs.items()}
      if "image_row" in batch:
        batch["image"] = self.store.read(batch.pop("image_row"))
      try:
        dispatched.append(jitted(self.params, sharding.to_global(batch, self.mesh), *args))
      except flax_errors.FlaxError as e:  # parameters of another shape than its config's model
        raise InputError(f"{self.path}: its parameters do not fit the model its config describes "
                         f"({str(e).splitlines()[0][:200]})") from None
    return jax.tree.map(lambda *parts: np.concatenate(parts)[:n], *jax.device_get(dispatched))


@dataclasses.dataclass
class Checkpoint:
  """What a run records for one checkpoint, read from a workdir or a bundle (host arrays)."""
  config: Any
  task: Any
  record: dict   # run.json or the bundle's record
  tables: dict   # the encoders' tables
  params: Any
  step: int
  metrics: dict  # its val metrics, where recorded


def read(path: str, tasks: Mapping[str, Any], step: int | None = None, best: bool = False,
         data_dir: str | None = None) -> Checkpoint:
  """Checkpoint `step` (default: the latest; `best`: the best by `config.best_metric`) of
  the run at `path` (a workdir or a bundle) of one of `tasks` ({config.task: module})."""
  path = os.fspath(path)
  if step is not None and best:
    raise InputError(f"{path}: step {step} and best: give one of them (--step N or --best)")
  config = read_config(path, tasks, data_dir)
  task = tasks[config.task]
  if bundle.is_bundle(path):
    if step is not None or best:
      raise InputError(f"{path}: a bundle holds one checkpoint (step {bundle.read_record(path)['step']}); "
                       "give no --step / --best")
    record, tables, params = bundle.read(path, config.task)
    return Checkpoint(config, task, record, tables, params, record["step"], record.get("metrics") or {})
  record = run_record.read_record(path)
  directory = os.path.join(path, "checkpoints")
  rule = config.best_metric, config.best_mode
  chosen = chosen_step(directory, path, step, rule if best else None)
  if "encoders" not in record:  # training records them before its first checkpoint
    raise InputError(f"{os.path.join(path, run_record.RUN_FILE)}: records no encoders, though the run has checkpoints "
                     "(an edited file?)")
  tables = encoders.read(path, config.task, record["encoders"])
  params, _, chosen = checkpoint.read_params(directory, chosen, newest=step is None and not best)
  metrics = run_record.step_metrics(path, chosen)
  if not metrics and (value := checkpoint.step_metric(directory, chosen, rule[0])) is not None:
    evaluation, _, name = rule[0].partition("/")  # val's metrics are named as in its metrics.json
    metrics = {name if evaluation == evals.DEFAULT else rule[0]: value}
  return Checkpoint(config, task, record, tables, params, chosen, metrics)


def open_run(path: str, tasks: Mapping[str, Any], step: int | None = None, best: bool = False,
             devices=None, data_dir: str | None = None) -> Trained:
  """The run at `path` (`read`) with its model built and its parameters on `devices`."""
  path = os.fspath(path)
  saved = read(path, tasks, step, best, data_dir)
  mesh = sharding.data_mesh(devices)  # parameters replicated: a reader runs on whatever devices it has
  enc = saved.task.encoders_from_tables(saved.tables)
  return Trained(path=path, config=saved.config, task=saved.task, encoders=enc,
                 params=jax.device_put(saved.params, sharding.replicated(mesh)), step=saved.step,
                 extractor=saved.record.get("extractor"), metrics=saved.metrics, mesh=mesh,
                 model=saved.task.build_model(saved.config.model, enc))
