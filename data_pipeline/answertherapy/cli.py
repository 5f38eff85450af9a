"""vqajax therapy construct: the VQA-AnswerTherapy dataset from raw VQA v2 / VizWiz files and
the annotators' groundings (paper section 3.1; `construct`: the input formats, the steps),
printing what each step removed.

  vqajax therapy construct --groundings G.json --out DIR [--questions Q.json --annotations A.json]
      [--vizwiz FILE...] [--seed S]
"""

from __future__ import annotations

import argparse
from typing import Sequence

from data_pipeline.answertherapy import construct
from vqajax.core import config as config_lib
from vqajax.core import files
from vqajax.core.errors import ArgumentParser, exit_status


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])  # the first paragraph, whole
  parser.add_argument("--questions", help="VQA v2 questions file (official format)")
  parser.add_argument("--annotations", help="VQA v2 annotations file (official format)")
  parser.add_argument("--vizwiz", nargs="+", default=[], metavar="FILE", help="VizWiz-VQA split files")
  parser.add_argument("--groundings", required=True, help="the annotators' groundings (construct.py's docstring)")
  parser.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  parser.add_argument("--seed", type=int, default=0, help="seed of the VQAv2 70/10/20 split")
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax therapy construct") -> int:
  args = _parser(prog).parse_args(argv)

  def run() -> None:
    config_lib.check_value("--seed", args.seed, config_lib.TRAINING["seed"])  # numpy's seeds: 0 to 2**32 - 1
    files.protect(args.groundings, args.questions, args.annotations, *args.vizwiz)
    files.check_output(args.out, folder=True)
    print(construct.build(args.out, args.groundings, args.questions, args.annotations, args.vizwiz, args.seed))
    print(f"written to {args.out}")

  return exit_status(prog, run)
