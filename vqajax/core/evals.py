"""The evaluations a run makes (`config.evals`, after big_vision's evaluators) and the rule
that picks its best checkpoint (`config.best_metric`, `config.best_mode`).

`config.evals` is a group of named evaluations (a ConfigDict: run in the order of their names):

  type         its evaluator, a name in `TYPES` (big_vision's `config.evals.NAME.type`): "task"
               (the default, `TaskEvaluator`) the task's masked metric sums under jit over its
               split, the metrics it computes on the host and its results files
  every_steps  how often it runs: 0 (the default) every `config.eval_every_steps`; the
               final step runs every evaluation
  results      "last": its results files, and the metrics the task computes from them on
               the host (`task.write_results`, e.g. pixel-level IoU), at the final step
               (and by `vqajax eval`) only; "every": at each of its evaluations
  data         fields of `config.data` set for its split, among those the task's
               `EVAL_DATA` names (VQA: `val_questions`, `val_annotations`, `format`,
               `features`, ...): its own files. Empty: the run's val split (`config.data`'s)

Its metrics are named `NAME/METRIC` in metrics.jsonl and TensorBoard, its results go to
`results/NAME/step_N/` (those of the evaluation named `val`, the default one: to
`results/step_N/`, as always). A checkpoint is saved at every step where an evaluation
runs. The best checkpoint is the one with the highest (`best_mode` "max") or lowest
("min") `best_metric`, `NAME/METRIC`.

An evaluator type is a class built as `Type(task, config, data, model, mesh, features, spec)`
(`config` with the `data` of its split, `data` the task's data of that split, `features` the
feature table on the devices or None, `spec` its `Spec`) with `spec`,
`run(params, step, workdir=None) -> {metric: value}` (with `workdir`, also its files of that
step, under `spec.results_dir`), and the static `metrics(task)` (a regular expression of its
metric names) and `table(task, name, metrics)` (its console table). `evaluators(exp)` makes
one per evaluation, `run_all` runs them at a step, `evaluate_checkpoints` is `vqajax eval`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
from typing import Any, Mapping

import jax
import ml_collections
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from vqajax.core import checkpoint, device_features, fs, pipeline, run_record, runs, sharding
from vqajax.core import config as config_lib
from vqajax.core.config import file_names
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.core.task import Task

DEFAULT = "val"  # the default evaluation; its results go to results/step_N
TASK = "task"    # the default evaluator type
RESULTS = ("last", "every")
FIELDS = {"type": config_lib.TEXT, "every_steps": config_lib.integer(0), "results": config_lib.one_of(*RESULTS)}
MODES = ("max", "min")


@dataclasses.dataclass(frozen=True)
class Spec:
  """One evaluation of `config.evals`."""
  name: str
  every_steps: int  # resolved: > 0
  results: str      # "last" | "every"
  data: dict        # config.data fields of its own split ({}: the run's val split)
  type: str = TASK  # its evaluator (TYPES)

  def runs_at(self, step: int, final: int) -> bool:
    return step % self.every_steps == 0 or step == final

  def results_dir(self, workdir: str, step: int) -> str:
    parts = ("results",) if self.name == DEFAULT else ("results", self.name)
    return os.path.join(workdir, *parts, f"step_{step}")


def new(every_steps: int = 0, results: str = "last", type: str = TASK, **data) -> ml_collections.ConfigDict:
  """The config group of one evaluation (`config.evals.NAME = evals.new(...)`); `data`: the
  `config.data` fields of its own split (none: the run's val split)."""
  return ml_collections.ConfigDict({"type": type, "every_steps": every_steps, "results": results,
                                    "data": ml_collections.ConfigDict(data)})


def default() -> ml_collections.ConfigDict:
  """`config.evals` of a run with one evaluation, `val`, on its val split."""
  return ml_collections.ConfigDict({DEFAULT: new()})


def specs(config) -> list[Spec]:
  """The evaluations of `config`, in the order of their names (checked by `check`)."""
  groups = config.evals
  return [Spec(name, group.get("every_steps", 0) or config.eval_every_steps, group.get("results", "last"),
               dict(group.get("data") or {}), group.get("type", TASK))
          for name, group in groups.items()]


def check_config(config, task) -> None:
  """InputError naming the first field of `config` that breaks its task's rules (`task.rules`: its
  FIELDS and its model's, then those across fields, `task.CHECKS`), its evaluations' or its best
  metric's: every config, given or recorded, before it is used."""
  config_lib.check(config, task.rules(config))
  for rule in task.CHECKS:
    rule(config)
  check(config, task)


def check(config, task) -> None:
  """InputError naming the first field of `config.evals` / `config.best_metric` that is not
  one of the task's (before anything is written)."""
  groups = config.get("evals")
  if groups is not None:
    if not isinstance(groups, ml_collections.ConfigDict) or not groups:
      raise InputError("config.evals: expected a group of named evaluations, e.g. config.evals.val")
    for name, group in groups.items():
      _check_one(name, group, task)
  metric, mode = config.best_metric, config.best_mode
  config_lib.check_value("config.best_mode", mode, config_lib.one_of(*MODES))
  types = {s.name: TYPES[s.type] for s in specs(config)}
  names = list(types)
  evaluation, _, measure = metric.partition("/")
  if evaluation not in types or not re.fullmatch(types[evaluation].metrics(task), measure):
    raise InputError(f"config.best_metric {metric!r}: expected EVAL/METRIC with EVAL one of {names} and a "
                     f"metric of config.task '{config.task}' (e.g. {DEFAULT}/{task.BEST_METRIC})")


def _check_one(name: str, group, task) -> None:
  where = f"config.evals.{name}"
  config_lib.check_value(f"{where} (its name)", name, config_lib.PLAIN_NAME)
  if re.fullmatch(r"step_\d+", name):
    raise InputError(f"{where}: 'step_N' names the results folders; choose another name")
  if not isinstance(group, ml_collections.ConfigDict):
    raise InputError(f"{where}: expected a group of fields {sorted(FIELDS) + ['data']}")
  for key, value in group.items():
    if key == "data":
      if not isinstance(value, ml_collections.ConfigDict):
        raise InputError(f"{where}.data: expected a group of config.data fields, one of {list(task.EVAL_DATA)}")
      for field, setting in value.items():
        if field not in task.EVAL_DATA:
          raise InputError(f"{where}.data has no field '{field}': an evaluation sets its split's "
                           f"config.data fields, one of {list(task.EVAL_DATA)}")
        config_lib.check_value(f"{where}.data.{field}", setting, task.FIELDS[f"data.{field}"])
    elif key in FIELDS:
      config_lib.check_value(f"{where}.{key}", value, FIELDS[key])
      if key == "type" and value not in TYPES:
        raise InputError(f"{where}.type '{value}' is not an evaluator type, one of {sorted(TYPES)}")
    else:
      raise InputError(f"{where} has no field '{key}' (its fields: {sorted(FIELDS) + ['data']})")


def split_config(config, spec: Spec, task) -> Any:
  """A copy of `config` whose `data` is that of `spec`'s split; InputError naming the field
  for a file it names that is not there (with `data.source` "tfds" they name TFDS splits)."""
  split = ml_collections.ConfigDict(config.to_dict())
  for field, value in spec.data.items():
    split.data[field] = value
    if task.FIELDS[f"data.{field}"] is config_lib.FILE_LIST and split.data.get("source") != "tfds":  # else splits
      for name in file_names(value):
        path = name if fs.isabs(name) else os.path.join(split.data.dir, name)
        if not fs.exists(path):
          raise InputError(f"config.evals.{spec.name}.data.{field}: {path}: file not found")
  return split


# ---------------------------------------------------------------------------- the task's evaluator

class TaskEvaluator:
  """`run(params, step) -> {name: value}` over the val split of `data` (of one evaluation,
  `spec`, a `Spec`); optionally writes its results."""

  def __init__(self, task: Task, config, data, model, mesh, features, spec):
    self.task, self.config, self.data, self.mesh, self.features, self.spec = task, config, data, mesh, features, spec
    self.keys = self.task.eval_keys(data)
    eval_step = self.task.make_eval_step(model, data, mesh)
    step = jax.jit(sharding.in_mesh(mesh, lambda params, batch, table=None: eval_step(
        params, device_features.step_batch(batch, features, table))))
    # the table is an argument (keeping its sharding), not a constant copied into the program
    self._eval_step = step if features is None else functools.partial(step, table=features.table)

  def run(self, params, step: int, workdir: str | None = None) -> dict[str, float]:
    """The task's metrics; with `workdir`, also its results files of this step (and the
    metrics the task computes from them)."""
    began, totals, kept = time.perf_counter(), None, []
    batch_size = sharding.padded_batch_size(self.config.eval_batch_size, self.mesh)
    arrays, store, keys = device_features.host_inputs(self.data, self.features, "val", self.keys)
    for local in pipeline.eval_batches(arrays, store, batch_size, keys, self.task.LENGTHS):
      batch = sharding.to_global(local, self.mesh)
      predictions, sums = self._eval_step(params, batch)
      totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
      if workdir is not None:
        kept.append((predictions, batch["mask"]))
    metrics = self.task.summarise(jax.device_get(totals))
    if workdir is not None:
      writing = time.perf_counter()
      metrics.update(self._write_results(kept, self.spec.results_dir(workdir, step), step, metrics))
      logging.info("step %d: %s results files in %.2f s", step, self.spec.name, time.perf_counter() - writing)
    logging.info("step %d: %s evaluation in %.2f s", step, self.spec.name, time.perf_counter() - began)
    return metrics

  def _write_results(self, kept, out_dir, step, metrics) -> dict[str, float]:
    """Process 0 writes the results; returns the metrics the task computed from them."""
    predictions = _gathered(kept)
    if jax.process_index() > 0:
      return {}
    return self.task.write_results(out_dir, self.config, self.data, predictions, {"step": step, **metrics}) or {}

  @staticmethod
  def metrics(task: Task) -> str:
    """A regular expression of its metric names (what `config.best_metric` may name)."""
    return task.METRICS

  @staticmethod
  def table(task: Task, name: str, metrics: Mapping[str, float]) -> str:
    """Its metrics as a Markdown table for the console."""
    return task.table(name, metrics)


def _gathered(kept) -> dict[str, np.ndarray]:
  """The (predictions, mask) of every batch as host arrays of the unmasked rows in split
  order, gathered from every host (each process takes part)."""
  gathered = [jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), item)
              for item in kept]
  mask = np.concatenate([m for _, m in gathered]).astype(bool)
  return {k: np.concatenate([p[k] for p, _ in gathered])[mask] for k in gathered[0][0]}


TYPES = {TASK: TaskEvaluator}  # config.evals.NAME.type -> its evaluator class


# ---------------------------------------------------------------------------- running them

def evaluators(exp: Experiment) -> list[Any]:
  """An evaluator of its type (`TYPES`) for each evaluation of `exp.config` (`specs`):
  on the run's val split (the feature table on the devices, where it is), or on its own files
  (its features streamed from its store); its files are read here, before anything is written."""
  out = []
  for spec in specs(exp.config):
    kind = TYPES[spec.type]
    if spec.data:
      config = split_config(exp.config, spec, exp.task)
      out.append(kind(exp.task, config, exp.task.load_eval(config, exp.data), exp.model, exp.mesh, None, spec))
    else:
      out.append(kind(exp.task, exp.config, exp.data, exp.model, exp.mesh, exp.features, spec))
  return out


def run_all(evaluators: list, params, step: int, workdir: str | None = None,
            results: bool = True) -> dict[str, dict[str, float]]:
  """{evaluation: metrics} of each evaluator; with `workdir`, those whose results are due
  (`results`, or its spec's "every") write them."""
  return {e.spec.name: e.run(params, step, workdir if workdir and (results or e.spec.results == "every") else None)
          for e in evaluators}


def prefixed(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
  """{`EVAL/METRIC`: value} of {evaluation: metrics}: the names of metrics.jsonl and the checkpoints."""
  return {f"{name}/{k}": v for name, values in metrics.items() for k, v in values.items()}


def evaluate_checkpoints(task: Task, config, workdir: str, step: int | None = None, every: bool = False
                         ) -> dict[int, dict[str, dict[str, float]]]:
  """Evaluates saved checkpoints of `workdir` (latest, `step`, or all) with every evaluation,
  writing their results; returns {step: {evaluation: metrics}}."""
  with runs.held(workdir, "vqajax eval"):
    return _evaluate(task, config, workdir, step, every)


def _evaluate(task: Task, config, workdir: str, step: int | None, every: bool) -> dict:
  saved = checkpoint.complete_steps(os.path.join(workdir, "checkpoints"))  # before orbax creates anything
  if not saved:
    raise InputError(f"{workdir}: no checkpoints to evaluate")
  if step is not None and step not in saved:
    raise InputError(f"{workdir}: no checkpoint at step {step} (saved: {saved})")
  steps = saved if every else [step if step is not None else max(saved)]
  hint = "eval writes the run's own results: evaluate with its recorded config and data"
  exp = runs.experiment(task, config, workdir, hint=hint)  # its results are the run's
  if jax.process_index() == 0:
    run_record.record_encoders(workdir, config.task, exp.data.encoders.tables())  # a run older than them
  evaluations = evaluators(exp)
  target = exp.initial_state(abstract=True)
  ckpt = runs.checkpointer(workdir, config, task)
  results, failures = {}, []
  try:
    for s in steps:
      try:
        state, _ = ckpt.restore(s, target)
      except Exception as e:  # orbax / tensorstore: many kinds
        failures.append(f"step {s}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        logging.warning("checkpoint at step %d cannot be restored, skipped (%s)", s, failures[-1])
        continue
      results[s] = run_all(evaluations, state.params, s, workdir)
      for e in evaluations:
        logging.info("step %d: %s results in %s", s, e.spec.name, e.spec.results_dir(workdir, s))
  finally:
    ckpt.close()
  if not results:
    raise InputError(f"{workdir}: no checkpoint can be restored with this config ({'; '.join(failures)}); "
                     "without --config, eval uses the run's own (run.json)")
  return results
