"""Other datasets' files as the official VQA files (README: "Preparing data").

  vqajax convert vizwiz FILE.json... --out DIR

`vizwiz`: VizWiz-VQA split files -> v2_OpenEnded_vizwiz_<split>_questions.json (+
v2_vizwiz_<split>_annotations.json) in DIR (`vizwiz.py`). Prints each file written. Exit
status 0, or 2 for bad input (one line naming the file and record; nothing written).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from data_pipeline.convert import vizwiz
from vqajax.core import files
from vqajax.core.errors import ArgumentParser, exit_status


def _vizwiz(args: argparse.Namespace) -> None:
  files.protect(*args.files)
  files.check_output(args.out, folder=True)
  for path, written in vizwiz.write(args.files, args.out).items():
    print(f"{path} -> {', '.join(written)}")


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  formats = parser.add_subparsers(dest="format", required=True)
  command = formats.add_parser("vizwiz", help="VizWiz-VQA train.json / val.json / test.json -> VQA v2 files")
  command.set_defaults(fn=_vizwiz)
  command.add_argument("files", nargs="+", metavar="FILE", help="a VizWiz-VQA split file, e.g. val.json")
  command.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax convert") -> int:
  args = _parser(prog).parse_args(argv)
  return exit_status(prog, lambda: args.fn(args))
