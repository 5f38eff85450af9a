"""Table 4 across runs: the single vs multiple classifiers (`grounding_class` workdirs) and
the decision from the predicted masks (`grounding_mask` workdirs, `from_masks`) side by
side with the naive baselines, per source.

A run is [NAME=]WORKDIR; its row is NAME, by default its `config.model.inputs` in capitals
(a mask run's followed by " from masks"). Each run's newest results/step_N/metrics.json is
read; a workdir whose newest results lack its Table 4 metrics (none yet, or written before
masks were scored as Table 4) has its newest checkpoint evaluated first, with its run.json.
The runs must have been evaluated on the same questions (the naive baselines agree).
"""

from __future__ import annotations

import os
from typing import Sequence

from vqajax.answertherapy import grounding_class, grounding_mask, table4
from vqajax.core import files, fs, run_record, tables, trained
from vqajax.core.errors import InputError
from vqajax.core.official_files import load_json

TASKS = {"grounding_class": (grounding_class, "", ""),
         "grounding_mask": (grounding_mask, grounding_mask.FROM_MASKS, " from masks")}


def _newest_metrics(workdir: str) -> tuple[str, dict] | None:
  """(results dir, metrics) of the newest results/step_N holding metrics.json."""
  for _, folder in run_record.result_steps(workdir):
    path = os.path.join(folder, "metrics.json")
    if fs.isfile(path):
      return folder, load_json(path)
  return None


def _run(argument: str) -> tuple[str, str, object]:
  """(row name or "", workdir, config) of a RUN argument."""
  name, path = run_record.run_argument(argument)
  return name, path, trained.read_config(path, TASKS)


def collect(arguments: Sequence[str]) -> list[tuple[str, dict, str, str]]:
  """[(row name, metrics, metric prefix, results dir)] of the runs, in order, evaluating
  those without Table 4 results (module docstring)."""
  from vqajax.core import evaluate  # pylint: disable=g-import-not-at-top  (jax only when needed)
  runs = []
  for argument in arguments:
    name, path, config = _run(argument)
    task, prefix, suffix = TASKS[config.task]
    found = _newest_metrics(path)
    if found is None or prefix + "recall/single" not in found[1]:
      print(f"{path}: no Table 4 results yet, evaluating the newest checkpoint")
      evaluate.evaluate_checkpoints(task, config, path)
      found = _newest_metrics(path)
    runs.append((name or config.model.inputs.upper() + suffix, found[1], prefix, found[0]))
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


def write(arguments: Sequence[str], out_dir: str) -> str:
  """Writes out_dir/table4.{md,csv,json} of the runs; returns its Markdown."""
  files.check_output(out_dir, folder=True)
  runs = collect(arguments)
  for argument in arguments:  # read from here on: no table goes into a run or its data
    run_record.protect(_run(argument)[1])
  files.check_output(out_dir, folder=True)
  rows = table4.baseline_rows(runs[0][1]) + [(name, metrics, prefix) for name, metrics, prefix, _ in runs]
  return tables.write_table(out_dir, "table4", *table4.table(rows))
