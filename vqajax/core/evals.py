"""The evaluations a run makes (`config.evals`, after big_vision's evaluators) and the rule
that picks its best checkpoint (`config.best_metric`, `config.best_mode`).

`config.evals` is a group of named evaluations (a ConfigDict: run in the order of their names):

  type         its evaluator, a name in `TYPES` (big_vision's `config.evals.NAME.type`): "task"
               (the default) the task's metrics and results files (`core/task_eval.py`, which
               describes what an evaluator type is)
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
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import ml_collections

from vqajax.core import config as config_lib
from vqajax.core import fs, task_eval
from vqajax.core.config import file_names
from vqajax.core.errors import InputError

DEFAULT = "val"  # the default evaluation; its results go to results/step_N
TASK = "task"    # the default evaluator type
TYPES = {TASK: task_eval.Evaluator}  # config.evals.NAME.type -> its evaluator class
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
  """InputError naming the first field of `config` that breaks its task's rules (`task.FIELDS`,
  then those across fields, `task.CHECKS`), its evaluations' or its best metric's: every config,
  given or recorded, before it is used."""
  config_lib.check(config, task.FIELDS)
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
