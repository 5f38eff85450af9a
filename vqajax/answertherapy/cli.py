"""vqajax therapy: VQA-AnswerTherapy's analysis (3.2), construction (3.1) and tables across runs.

The dataset analysis (paper section 3.2), its construction (3.1), and Table 4 and the grounding
table across runs.

  vqajax therapy analyze FILE... --out DIR
  vqajax therapy table4 [NAME=]WORKDIR... --out DIR
  vqajax therapy grounding [NAME=]WORKDIR... --out DIR
  vqajax therapy construct ...   (3.1, an offline pipeline: `data_pipeline/answertherapy/cli.py`,
                                  which the front door runs; listed here for --help)

FILE is a released annotation file (e.g. VQA_train.json, VizWiz_train.json). Writes
agreement, disagreements, relation_pairs, table1, table2, table3 and degenerate as
Markdown, CSV and JSON into DIR and prints them (`analysis.therapy`). A file given twice
(by any path to it) and a record repeated in or across files (the same image_id,
question_id, question and answers: `files.check_unique`) are refused, naming both.

`table4` writes DIR/table4.{md,csv,json} of classifier (`grounding_class`) and mask
(`grounding_mask`: single vs multiple from the predicted masks) workdirs with the naive
baselines, per source (`report`), and prints it. `grounding` writes DIR/grounding.{md,csv,json}
of mask workdirs (`grounding_mask`: the grid predictor, ViLT, CLIPSeg zero-shot and fine-tuned,
...): the whole image, then each run at the grid and pixel levels (IoU-PQ overall, per source and
per single / multiple; IoU), and prints it. Both evaluate a run's newest checkpoint first where
its newest results lack the table's metrics.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from typing import Callable, Mapping, Sequence

from vqajax.answertherapy import analysis as therapy
from vqajax.answertherapy.files import read_therapy
from vqajax.core import files
from vqajax.core.errors import ArgumentParser, InputError, exit_status


def analyze(args) -> None:
  start = time.perf_counter()
  files.protect(*args.files)  # a new folder beside them is written (the output rule: core/files)
  files.check_output(args.out, folder=True)
  given = {}
  for path in args.files:
    real = os.path.realpath(path)
    if real in given:
      raise InputError(f"{path}: given twice (also as {given[real]})")
    given[real] = path
  samples = []
  for path in args.files:
    read = read_therapy(path)
    sources = collections.Counter(s.source for s in read)
    print(f"{path}: {len(read)} samples (" + ", ".join(f"{n} {s}" for s, n in sorted(sources.items())) + ")")
    samples += read
  summary = therapy.write_report(therapy.analyze(samples), args.out)
  print(f"\n{summary}\n{len(samples)} samples analysed in {time.perf_counter() - start:.1f} s; "
        f"tables in {args.out}")


def across(args) -> None:
  """Table 4 or the grounding table (the sub-command, `report.KINDS`) of the runs."""
  from vqajax.answertherapy import report  # jax, the models
  kind = report.KINDS[args.command]
  with files.protection_scope():  # refused before any run is evaluated (which writes into the run)
    report.protect(args.runs)
    files.check_output(args.out, folder=True)
  for path in report.evaluate_missing(args.runs, args.tasks(), kind):
    print(f"{path}: no {kind.title} results yet, evaluating the newest checkpoint")
  print(report.write(args.runs, args.out, args.tasks(), kind))
  print(f"{kind.title} in {args.out}")


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  command = commands.add_parser("analyze", help="single vs multiple groundings, Tables 1-3")
  command.set_defaults(fn=analyze)
  command.add_argument("files", nargs="+", metavar="FILE", help="VQA-AnswerTherapy JSON file")
  command.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  command = commands.add_parser("table4", help="Table 4 of classifier and mask runs (single vs multiple "
                                "from the predicted masks) with the naive baselines")
  command.set_defaults(fn=across)
  command.add_argument("runs", nargs="+", metavar="[NAME=]WORKDIR",
                       help="a grounding_class or grounding_mask training workdir (evaluated first if needed)")
  command.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  command = commands.add_parser("grounding", help="one grounding table of mask runs (IoU-PQ / IoU, grid and pixel "
                                "level) with the whole-image baseline")
  command.set_defaults(fn=across)
  command.add_argument("runs", nargs="+", metavar="[NAME=]WORKDIR",
                       help="a grounding_mask workdir (evaluated first if needed)")
  command.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax therapy", tasks: Callable[[], Mapping] = dict
         ) -> int:
  """`tasks`: the front door's task registry (`vqajax.commands.tasks`), for the tables across runs."""
  args = _parser(prog).parse_args(argv)
  args.tasks = tasks
  return exit_status(prog, lambda: args.fn(args))
