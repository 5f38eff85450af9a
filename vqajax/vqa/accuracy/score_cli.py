"""`vqajax score`: the official VQA accuracy of a results file (`score.py` computes it).

    vqajax score --questions Q.json --annotations A.json --results R.json \\
        [--per-question FILE] [--multiple-choice] [--out FILE]

Prints the official `accuracy` dict; `--out` also writes it to FILE and `--per-question`
writes the official `evalQA` ({question_id: percent}). Any malformed input is one line on
stderr naming the file, the record and what was expected, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

from vqajax.core import files
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.core.files import write_atomic_many
from vqajax.vqa.accuracy.score import evaluate_files


def _parse_args(argv: Sequence[str] | None, prog: str) -> argparse.Namespace:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("--questions", required=True, help="official questions JSON")
  parser.add_argument("--annotations", required=True, help="official annotations JSON")
  parser.add_argument("--results", required=True, help="results JSON [{question_id, answer}]")
  parser.add_argument("--per-question", type=files.path_arg, metavar="FILE", help="write {question_id: accuracy}")
  parser.add_argument(
    "--multiple-choice", action="store_true", help="check every answer is one of its question's multiple_choices"
  )
  parser.add_argument("--out", type=files.path_arg, metavar="FILE", help="also write the accuracy JSON here")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, prog: str = "vqajax score") -> int:
  args = _parse_args(argv, prog)

  def run() -> None:
    files.protect(args.questions, args.annotations, args.results)
    outputs = [p for p in (args.out, args.per_question) if p]
    for path in outputs:  # before any work
      files.check_output(path)
    if len(outputs) == 2 and files.check_output(args.out) == files.check_output(args.per_question):
      raise InputError(f"--out and --per-question are one file ({args.out})")
    accuracy, per_question = evaluate_files(args.questions, args.annotations, args.results, args.multiple_choice)
    outputs: dict[str, Any] = {}
    if args.out:
      outputs[args.out] = accuracy
    if args.per_question:
      outputs[args.per_question] = per_question
    write_atomic_many(outputs)
    print(json.dumps(accuracy, indent=2))

  return exit_status(prog, run)
