"""Result tables (the paper's Tables II, III, IV) from official results directories.

A results directory holds official `*_results.json` files with their `*_accuracy.json`
and `*_evalQA.json` (as written by `vqa/results.write_official`). Tables are written as
Markdown, CSV and JSON (a list of row objects) together.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Sequence

from vqajax.core import fs, run_record
from vqajax.core.errors import InputError
from vqajax.core.official_files import load_json

COLUMNS = (("All", ""), ("Yes/No", "/yes/no"), ("Number", "/number"), ("Other", "/other"))
TASKS = (("OpenEnded", "accuracy", "OE"), ("MultipleChoice", "mc_accuracy", "MC"))


def accuracy_table(rows: dict[str, dict[str, float]]) -> str:
  """Markdown table: one row per run and task, columns All / Yes/No / Number / Other."""
  lines = ["| run | task | " + " | ".join(c for c, _ in COLUMNS) + " |",
           "|---|---|" + "---:|" * len(COLUMNS)]
  for name, metrics in rows.items():
    for task, key in (("open-ended", "accuracy"), ("multiple-choice", "mc_accuracy")):
      if key in metrics:
        cells = [metrics.get(key + suffix) for _, suffix in COLUMNS]
        lines.append(f"| {name} | {task} | " + " | ".join(
            "-" if v is None else f"{v:.2f}" for v in cells) + " |")
  return "\n".join(lines)


def metrics_from_official(scores: dict[str, dict]) -> dict[str, float]:
  """{task: official accuracy dict} -> the flat names of `accuracy_table`."""
  keys = {task: key for task, key, _ in TASKS}
  metrics = {}
  for task, accuracy in scores.items():
    metrics[keys[task]] = accuracy["overall"]
    metrics.update({f"{keys[task]}/{t}": v for t, v in accuracy["perAnswerType"].items()})
  return metrics


# ---------------------------------------------------------------------------- results dirs

def _official(results_dir: str, task: str, kind: str) -> str | None:
  names = fs.listdir(results_dir) if fs.isdir(results_dir) else []
  found = [os.path.join(results_dir, n) for n in fnmatch.filter(names, f"*{task}_*_{kind}.json")
           if not n.startswith(".")]  # as glob: no hidden files (nor temp files being written)
  if len(found) > 1:
    raise InputError(f"{results_dir}: several {task} {kind} files: {found}")
  return found[0] if found else None


def official_file(results_dir: str, task: str, kind: str) -> str:
  """The path of the `kind` ('results', 'accuracy', 'evalQA') file of `task`."""
  path = _official(results_dir, task, kind)
  if path is None:
    raise InputError(f"{results_dir}: no {task} *_{kind}.json file")
  return path


def read_accuracy(path: str) -> dict:
  """An official `*_accuracy.json` (the evaluation's object); InputError for another shape."""
  accuracy = load_json(path)
  number = lambda v: type(v) in (int, float) and 0 <= v <= 100  # a percentage; not NaN, not infinite
  if not (isinstance(accuracy, dict) and number(accuracy.get("overall")) and all(
      isinstance(accuracy.get(part), dict) and all(isinstance(k, str) and number(v) for k, v in accuracy[part].items())
      for part in ("perAnswerType", "perQuestionType"))):
    raise InputError(f'{path}: expected the official accuracy object ({{"overall": 0-100, "perAnswerType": '
                     '{type: 0-100}, "perQuestionType": {type: 0-100}, ...})')
  return accuracy


def read_scores(results_dir: str) -> dict[str, float]:
  """The flat metrics of a results directory (open-ended, and multiple-choice if present)."""
  scores = {task: read_accuracy(path) for task, _, _ in TASKS
            if (path := _official(results_dir, task, "accuracy")) is not None}
  if "OpenEnded" not in scores:
    raise InputError(f"{results_dir}: no OpenEnded *_accuracy.json file")
  return metrics_from_official(scores)


def find_results(path: str) -> dict[str, str]:
  """{row name: results dir} of a RUN argument: a results directory itself; a training
  workdir (its newest results/step_N); or a workdir of baselines (every results/<name>,
  alphabetically)."""
  if _official(path, "OpenEnded", "accuracy"):
    return {os.path.basename(os.path.normpath(path)): path}
  results = os.path.join(path, "results")
  steps = run_record.result_steps(path)
  name = os.path.basename(os.path.normpath(path))
  if steps:
    return {name: steps[0][1]}
  entries = fs.listdir(results) if fs.isdir(results) else []
  found = {e: os.path.join(results, e) for e in entries
           if _official(os.path.join(results, e), "OpenEnded", "accuracy")}
  if not found:
    raise InputError(f"{path}: no official results (expected *_accuracy.json files, "
                     "results/step_N/ or results/<baseline>/)")
  return found


def task_columns(tasks: Sequence[tuple[str, str, str]] = TASKS) -> list[tuple[str, str]]:
  """[(column name, metric key)]: 'OE All', 'OE Yes/No', ... then 'MC ...'."""
  return [(f"{short} {column}", key + suffix) for _, key, short in tasks for column, suffix in COLUMNS]


def table_ii(runs: dict[str, dict[str, float]]) -> tuple[list[str], list[dict]]:
  """Table II: one row per run, open-ended and multiple-choice accuracy by answer type."""
  cols = task_columns()
  rows = [{"run": name, **{c: metrics.get(k) for c, k in cols}} for name, metrics in runs.items()]
  return ["run"] + [c for c, _ in cols], rows


def table_iv(points: dict[str, dict[str, float]], info: dict[str, dict], base: str
           ) -> tuple[list[str], list[dict]]:
  """Table IV: open-ended accuracy of each ablation and its difference to `base`, with
  the vocabulary size and K of each point (`info`: the data sizes of its run)."""
  cols = task_columns(TASKS[:1])
  rows = []
  for name, metrics in points.items():
    row = {"point": name, "vocab": info.get(name, {}).get("vocab_size"),
           "K": info.get(name, {}).get("num_answers")}
    for c, k in cols:
      row[c] = metrics.get(k)
      base_value = points.get(base, {}).get(k)
      row[f"Δ {c}"] = None if row[c] is None or base_value is None else row[c] - base_value
    rows.append(row)
  return ["point", "vocab", "K"] + [c for c, _ in cols] + [f"Δ {c}" for c, _ in cols], rows
