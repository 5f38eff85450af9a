"""Table 4 across runs: the single vs multiple classifiers (`grounding_class` workdirs) and
the decision from the predicted masks (`grounding_mask` workdirs, `from_masks`) side by
side with the naive baselines, per source.

A run is [NAME=]WORKDIR of a task with a Table 4 (`TABLE4`: grounding_class, grounding_mask, of
the front door's registry `tasks`); its row is NAME, by default its `config.model.inputs` in capitals,
after its model's label where it has one (`row_name`: "I+Q+A", a pretrained model's e.g. "<label> I+Q+A";
a mask run's followed by " from masks"). Each run's newest results/step_N/metrics.json is
read; a workdir whose newest results lack its Table 4 metrics has its newest checkpoint evaluated first, with its run.json
(`evaluate_missing`, which the command drives and reports).
The runs must have been evaluated on the same questions (the naive baselines agree).
"""

from __future__ import annotations

import os
from typing import Iterator, Mapping, Sequence

from vqajax.answertherapy import models as therapy_models
from vqajax.answertherapy import table4
from vqajax.core import files, fs, run_record, tables, trained
from vqajax.core.errors import InputError
from vqajax.core.official_files import load_json


def _table4_results(workdir: str, prefix: str) -> tuple[str, dict] | None:
  """(results dir, metrics) of the newest results/step_N holding metrics.json, if they hold
  the Table 4 metrics (named after `prefix`)."""
  for _, folder in run_record.result_steps(workdir):
    path = os.path.join(folder, "metrics.json")
    if fs.isfile(path):
      metrics = load_json(path)
      found = prefix + "recall/single" in metrics or prefix + table4.LEFT_OUT in metrics  # a run may answer none
      return (folder, metrics) if found else None
  return None


def _run(argument: str, tasks: Mapping) -> tuple[str, str, object]:
  """(row name or "", workdir, config) of a RUN argument, a run of a task of `tasks` with a Table 4."""
  name, path = run_record.run_argument(argument)
  return name, path, trained.read_config(path, {n: task for n, task in tasks.items() if hasattr(task, "TABLE4")})


def evaluate_missing(arguments: Sequence[str], tasks: Mapping) -> Iterator[str]:
  """Evaluates the newest checkpoint of each run whose newest results lack its Table 4
  metrics (module docstring), yielding the run's workdir before it does."""
  from vqajax.core import evals  # jax only when needed
  for argument in arguments:
    _, path, config = _run(argument, tasks)
    task = tasks[config.task]
    if _table4_results(path, task.TABLE4[0]) is None:
      yield path
      evals.evaluate_checkpoints(task, config, path)


def row_name(model_cfg) -> str:
  """A run's default row: its inputs in capitals ("I+Q+A"), after its model's `label` where it has one."""
  label = therapy_models.MODELS[model_cfg.name].label
  return (label + " " if label else "") + model_cfg.inputs.upper()


def collect(arguments: Sequence[str], tasks: Mapping) -> list[tuple[str, dict, str, str]]:
  """[(row name, metrics, metric prefix, results dir)] of the runs, in order (each run's
  newest results: `evaluate_missing` first)."""
  runs = []
  for argument in arguments:
    name, path, config = _run(argument, tasks)
    prefix, suffix = tasks[config.task].TABLE4
    found = _table4_results(path, prefix)
    if found is None:
      raise InputError(f"{path}: no Table 4 results (evaluate its newest checkpoint first)")
    runs.append((name or row_name(config.model) + suffix, found[1], prefix, found[0]))
  names = [r[0] for r in runs]
  repeated = sorted({n for n in names if names.count(n) > 1})
  if repeated:
    raise InputError(f"row name(s) {repeated} given to several runs; name them NAME=WORKDIR")
  baselines = lambda metrics: {k: v for k, v in metrics.items() if k.startswith(("always_single/", "always_multiple/"))}
  for (name, metrics, _, where), argument in zip(runs[1:], arguments[1:]):
    if baselines(metrics) != baselines(runs[0][1]):
      raise InputError(f"{argument}: {where} was evaluated on other questions than {runs[0][3]} "
                       "(their naive baselines differ); Table 4 compares runs on the same val split")
  return runs


def write(arguments: Sequence[str], out_dir: str, tasks: Mapping) -> str:
  """Writes out_dir/table4.{md,csv,json} of the runs (evaluated: `evaluate_missing`);
  returns its Markdown."""
  runs = collect(arguments, tasks)
  for argument in arguments:  # read from here on: no table goes into a run or its data
    run_record.protect(_run(argument, tasks)[1])
  files.check_output(out_dir, folder=True)
  rows = table4.baseline_rows(runs[0][1]) + [(name, metrics, prefix) for name, metrics, prefix, _ in runs]
  return tables.write_table(out_dir, "table4", *table4.table(rows))
