"""Tables across runs: Table 4 (single vs multiple) and the grounding table (a mask per answer).

Table 4 (`TABLE4`): the single vs multiple classifiers (`grounding_class` workdirs) and the
decision from the predicted masks (`grounding_mask` workdirs, `from_masks`) side by side with
the naive baselines, per source. The grounding table (`GROUNDING`): every mask run (the grid
predictor, ViLT, CLIPSeg zero-shot and fine-tuned, ...) at the grid and pixel levels, after the
whole-image baseline (`grounding_mask.grounding_table`).

A run is [NAME=]WORKDIR of a task with that table (its `TABLE4` or `GROUNDING`, of the front
door's registry `tasks`); its row is NAME, by default `row_name`: its `config.model.inputs` in
capitals after its model's label where it has one, "zero-shot" between them for a run of no
training steps ("I+Q+A", "ViLT I+Q+A", "CLIPSeg zero-shot I+Q"; Table 4's mask rows followed by
" from masks"). Each run's newest results/step_N/metrics.json is read; a workdir whose newest
results lack the table's metrics has its newest checkpoint evaluated first, with its run.json
(`evaluate_missing`, which the command drives and reports). The runs must have been evaluated on
the same questions (their baselines agree). Adding a row is naming its run.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, Mapping, NamedTuple, Sequence

from vqajax.answertherapy import models as therapy_models
from vqajax.answertherapy import table4
from vqajax.core import files, fs, run_record, tables, trained
from vqajax.core.errors import InputError


class Kind(NamedTuple):
  """A table across runs: its name (its files) and title, its tasks' attribute, the metrics a run's results
  must hold one of (of the task), a row's name suffix and metric prefix, the baseline metrics the runs
  share (`shared` in words), and its rows -> (columns, rows)."""
  name: str
  title: str
  attribute: str
  shared: str
  needs: Callable[[object], tuple[str, ...]]
  row: Callable[[object], tuple[str, str]]
  baselines: Callable[[Mapping[str, float], object], dict]
  table: Callable[[list[tuple[str, Mapping[str, float], str]], Mapping[str, float], object], tuple]


TABLE4 = Kind(
    "table4", "Table 4", "TABLE4", "naive baselines",
    lambda task: (task.TABLE4[0] + "recall/single", task.TABLE4[0] + table4.LEFT_OUT),  # a run may answer none
    lambda task: (task.TABLE4[1], task.TABLE4[0]),
    lambda metrics, task: {k: v for k, v in metrics.items() if k.startswith(("always_single/", "always_multiple/"))},
    lambda rows, first, task: table4.table(table4.baseline_rows(first) + rows))
GROUNDING = Kind(
    "grounding", "grounding table", "GROUNDING", "whole-image scores", lambda task: (task.GROUNDING,), lambda task: ("", ""),
    lambda metrics, task: {k: v for k, v in metrics.items() if k.startswith(task.BASELINE)},
    lambda rows, first, task: task.grounding_table([("whole image", first, task.BASELINE)] + rows))

KINDS = {kind.name: kind for kind in (TABLE4, GROUNDING)}  # `vqajax therapy NAME`


def _results(workdir: str, needed: tuple[str, ...]) -> tuple[str, dict] | None:
  """(results dir, metrics) of the newest results/step_N holding metrics.json, if they hold one of the `needed` metrics."""
  for _, folder in run_record.result_steps(workdir):
    path = os.path.join(folder, "metrics.json")
    if fs.isfile(path):
      metrics = run_record.read_metrics(path)
      return (folder, metrics) if any(m in metrics for m in needed) else None
  return None


def _run(argument: str, tasks: Mapping, kind: Kind) -> tuple[str, str, object]:
  """(row name or "", workdir, config) of a RUN argument, a run of a task of `tasks` with `kind`'s table."""
  name, path = run_record.run_argument(argument)
  return name, path, trained.read_config(path, {n: task for n, task in tasks.items() if hasattr(task, kind.attribute)})


def evaluate_missing(arguments: Sequence[str], tasks: Mapping, kind: Kind = TABLE4) -> Iterator[str]:
  """Evaluates the newest checkpoint of each run whose newest results lack `kind`'s metrics (module
  docstring), yielding the run's workdir before it does."""
  from vqajax.core import evals  # jax only when needed
  for argument in arguments:
    _, path, config = _run(argument, tasks, kind)
    task = tasks[config.task]
    if _results(path, kind.needs(task)) is None:
      yield path
      evals.evaluate_checkpoints(task, config, path)


def row_name(config) -> str:
  """A run's default row: its inputs in capitals ("I+Q+A", where its model has inputs), after its model's
  `label` where it has one, "zero-shot" between them for a run of no training steps."""
  untrained = config.num_train_steps == 0 and not config.get("num_epochs", 0) > 0  # else its steps are its epochs'
  words = [therapy_models.MODELS[config.model.name].label, "zero-shot" if untrained else "",
           config.model.get("inputs", "").upper()]
  return " ".join(w for w in words if w)


def collect(arguments: Sequence[str], tasks: Mapping, kind: Kind = TABLE4
            ) -> tuple[list[tuple[str, dict, str, str]], object]:
  """([(row name, metrics, metric prefix, results dir)] of the runs, in order (each run's newest
  results: `evaluate_missing` first), the first run's task)."""
  runs, first = [], None
  for argument in arguments:
    name, path, config = _run(argument, tasks, kind)
    task = tasks[config.task]
    first = first or task
    found = _results(path, kind.needs(task))
    if found is None:
      raise InputError(f"{path}: no {kind.title} results (evaluate its newest checkpoint first)")
    suffix, prefix = kind.row(task)
    runs.append((name or row_name(config) + suffix, found[1], prefix, found[0]))
  names = [r[0] for r in runs]
  repeated = sorted({n for n in names if names.count(n) > 1})
  if repeated:
    raise InputError(f"row name(s) {repeated} given to several runs; name them NAME=WORKDIR")
  for (_, metrics, _, where), argument in zip(runs[1:], arguments[1:]):
    if kind.baselines(metrics, first) != kind.baselines(runs[0][1], first):
      raise InputError(f"{argument}: {where} was evaluated on other questions than {runs[0][3]} "
                       f"(their {kind.shared} differ); a table across runs compares them on one val split")
  return runs, first


def protect(arguments: Sequence[str]) -> None:
  """The runs are read from here on: no output goes into a run or its data."""
  for argument in arguments:
    run_record.protect(run_record.run_argument(argument)[1])


def write(arguments: Sequence[str], out_dir: str, tasks: Mapping, kind: Kind = TABLE4) -> str:
  """Writes out_dir/NAME.{md,csv,json} of `kind`'s table of the runs (evaluated: `evaluate_missing`);
  returns its Markdown."""
  runs, task = collect(arguments, tasks, kind)
  protect(arguments)
  files.check_output(out_dir, folder=True)
  rows = [(name, metrics, prefix) for name, metrics, prefix, _ in runs]
  return tables.write_table(out_dir, kind.name, *kind.table(rows, runs[0][1], task))
