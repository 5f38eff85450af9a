"""vqajax report: the paper's tables and figures from finished runs.

  vqajax report table2 RUN... --out DIR          Table II (open-ended + multiple-choice)
  vqajax report question-types RUN... --out DIR  Table III (accuracy per question type)
  vqajax report answers RUN... --out DIR         Fig. 9 / Fig. 10 (PNG + CSV per run)
  vqajax report humans --annotations F --out DIR inter-human agreement (Table I style)

A RUN is [NAME=]PATH: a results directory, a training workdir (its newest results/step_N;
a workdir with checkpoints but no results is evaluated first, from its run.json), or a
workdir of `vqajax baselines` (one row per baseline). Question types and answers come
from the val annotations: --annotations, or the file named by the first run's run.json.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from vqajax.core import config as config_lib
from vqajax.core import files, fs, official_files, run_record, tables
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.core.files import check_name
from vqajax.vqa import answers, humans, reports
from vqajax.vqa import task as vqa_task
from vqajax.vqa.accuracy import inputs


def _evaluate_if_needed(path: str) -> None:
  """A training workdir with checkpoints but no results: evaluate its newest checkpoint."""
  config = run_record.read_config(path)
  if (config is None or fs.isdir(os.path.join(path, "results"))
      or not fs.isdir(os.path.join(path, "checkpoints"))):
    return
  from vqajax.core import evals
  print(f"{path}: no results yet, evaluating the newest checkpoint")
  evals.evaluate_checkpoints(vqa_task, config, path)


def collect(runs: Sequence[str]) -> tuple[dict[str, str], list[str]]:
  """({row name: results dir}, workdirs) of the RUN arguments, in order."""
  found, workdirs = {}, []
  for run in runs:
    name, path = run_record.run_argument(run)
    if not fs.exists(path):
      raise InputError(f"{run}: no such run or results folder")
    _evaluate_if_needed(path)
    rows = reports.find_results(path)
    for row in [] if name else rows:
      check_name(row, f"{run}: run name")
    if name:
      if len(rows) > 1:
        raise InputError(f"{run}: a name is given but {path} holds several runs {sorted(rows)}")
      rows = {name: next(iter(rows.values()))}
    duplicate = set(rows) & set(found)
    if duplicate:
      raise InputError(f"{run}: row name(s) {sorted(duplicate)} already used; name it NAME=PATH")
    found.update(rows)
    workdirs.append(path)
  for path in workdirs:  # read from here on: no table goes into a run or its data
    run_record.protect(path)
  return found, workdirs


def _annotations(given: str | None, workdirs: Sequence[str]) -> list[dict]:
  from vqajax.core import official_files
  from vqajax.vqa import dataset as vqa_dataset
  if given is None:
    config = next((c for c in map(run_record.read_config, workdirs) if c is not None), None)
    if config is None:
      raise InputError("no --annotations given and no run.json in the runs to take it from")
    paths = vqa_dataset.resolve_all(config.data, "val_annotations")  # one or several files
  else:
    paths = [given]
  return [a for path in paths for a in official_files.read_annotations(path)["annotations"]]


def _results(results_dir: str) -> dict[int, str]:
  path = reports.official_file(results_dir, "OpenEnded", "results")
  return inputs.checked_results(path, official_files.read_bytes(path))


def table_ii(args) -> None:
  rows, _ = collect(args.runs)
  columns, table = reports.table_ii({name: reports.read_scores(d) for name, d in rows.items()})
  print(tables.write_table(args.out, "table2", columns, table))


def question_types(args) -> None:
  rows, workdirs = collect(args.runs)
  annotations = _annotations(args.annotations, workdirs)
  human = humans.human_agreement(annotations)["perQuestionType"]
  counts: dict[str, int] = {}
  for a in annotations:
    counts[a["question_type"]] = counts.get(a["question_type"], 0) + 1
  per_type = {name: reports.read_accuracy(reports.official_file(d, "OpenEnded", "accuracy"))["perQuestionType"]
              for name, d in rows.items()}
  table = [{"question type": t, "share %": 100 * counts[t] / len(annotations),
            **{name: acc.get(t) for name, acc in per_type.items()}, "human": human[t]}
           for t in sorted(counts)]
  columns = ["question type", "share %", *rows, "human"]
  print(tables.write_table(args.out, "table3", columns, table))


def answer_figures(args) -> None:
  rows, workdirs = collect(args.runs)
  annotations = _annotations(args.annotations, workdirs)
  for name, results_dir in rows.items():
    per_question = official_files.load_json(reports.official_file(results_dir, "OpenEnded", "evalQA"))
    written = answers.write_figures(
        args.out, name, answers.correct_given_answer(annotations, per_question, args.top),
        answers.answer_given_correct(_results(results_dir), per_question, args.top))
    print("\n".join(written))


def human_table(args) -> None:
  """Table I's "Question + Image" human row: All and per answer type."""
  agreement = humans.human_agreement(_annotations(args.annotations, []))
  by_type = {"": agreement["overall"], **{f"/{t}": v for t, v in agreement["perAnswerType"].items()}}
  row = {"input": "Question + Image", **{c: by_type.get(suffix) for c, suffix in reports.COLUMNS}}
  print(tables.write_table(args.out, "humans", ["input", *(c for c, _ in reports.COLUMNS)], [row]))


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  for name, fn, runs, help_ in (("table2", table_ii, True, "Table II"),
                                ("question-types", question_types, True, "Table III"),
                                ("answers", answer_figures, True, "Fig. 9 and Fig. 10"),
                                ("humans", human_table, False, "inter-human agreement")):
    command = commands.add_parser(name, help=help_)
    command.set_defaults(fn=fn)
    if runs:
      command.add_argument("runs", nargs="+", metavar="RUN", help="[NAME=]PATH")
    command.add_argument("--out", type=files.path_arg, required=True, help="output directory")
    if name != "table2":
      command.add_argument("--annotations", required=not runs, help="val annotations JSON" + (
          " (default: from the first run's run.json)" if runs else ""))
    if name == "answers":
      command.add_argument("--top", type=int, default=50, help="answers per figure")
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax report") -> int:
  args = _parser(prog).parse_args(argv)

  def run() -> None:
    if args.command == "answers":
      config_lib.check_value("--top", args.top, config_lib.integer())
    files.protect(getattr(args, "annotations", None))  # the file: a new folder beside it is the user's to ask for
    files.check_output(args.out, folder=True)
    args.fn(args)

  return exit_status(prog, run)
