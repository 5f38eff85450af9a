"""`vqajax data`: write the embedded synthetic datasets.

  vqajax data synth --out DIR [--seed S] [--scale tiny|small|medium|large]
  vqajax data therapy --out DIR [--seed S] [--scale tiny|small|medium]
  vqajax data therapy-raw --out DIR [--seed S]

`synth` writes the synthetic VQA dataset (official VQA v2 / v1 multiple-choice / COCO
captions formats plus feature stores), `therapy` the synthetic VQA-AnswerTherapy dataset
(released format plus a grid feature store), `therapy-raw` a raw input of the
AnswerTherapy construction (`vqajax therapy construct`). DIR must not exist yet (or be
empty): nothing is ever written into a folder that holds files.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Sequence

from absl import logging

from vqajax.core import config as config_lib
from vqajax.core import files, fs
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.synthetic import folder
from vqajax.synthetic.answertherapy import raw as synthetic_raw
from vqajax.synthetic.answertherapy import write as synthetic_therapy
from vqajax.synthetic.vqa import write as synthetic


def _synth(args) -> int:
  start = time.time()
  paths = synthetic.generate(args.out, seed=args.seed, scale=args.scale)
  manifest = synthetic.read_manifest(os.path.dirname(paths["manifest"]))
  counts, shares = manifest["counts"], manifest["answer_type_shares"]
  split_text = "; ".join(
      f"{split}: {counts[f'{split}_images']} images, {counts[f'{split}_questions']} questions "
      f"(" + ", ".join(f"{t} {100 * v:.0f}%" for t, v in shares[split].items()) + ")"
      for split in synthetic.SPLITS)
  split_text += (f"; test: {counts['test_images']} images, {counts['test_questions']} questions without "
                 f"answers ({counts['test-dev_questions']} of them test-dev)")
  file_text = ", ".join(f"{role}={path}" for role, path in paths.items())
  print(f"Wrote the synthetic VQA dataset (scale {args.scale}, seed {args.seed}) to {args.out} in "
        f"{time.time() - start:.1f}s. {split_text}; {counts['feature_rows']} pictures and their feature rows "
        f"(colour_cells global 4096-d and grid7 7x7x64). Files: {file_text}.")


def _therapy(args) -> int:
  start = time.time()
  paths = synthetic_therapy.generate(args.out, seed=args.seed, scale=args.scale)
  with open(paths["manifest"]) as f:
    manifest = json.load(f)
  counts, grid = manifest["counts"], manifest["grid"]
  total = sum(c["samples"] for c in counts.values())
  multiple = sum(c["multiple"] for c in counts.values())
  file_text = "; ".join(f"{name} {c['samples']} ({c['multiple']} multiple)" for name, c in counts.items())
  print(f"Wrote the synthetic VQA-AnswerTherapy dataset (scale {args.scale}, seed {args.seed}) to {args.out} "
        f"in {time.time() - start:.1f}s: {total} questions, {100 * multiple / total:.1f}% with multiple "
        f"groundings ({file_text}); grid features {grid['size']}x{grid['size']}x{grid['channels']} for "
        f"{total} images.")


def _raw(args) -> None:
  for name, path in folder.write_new(args.out, lambda tmp: synthetic_raw.generate(tmp, args.seed)).items():
    print(f"{name}: {path}")


def build_parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  synth = sub.add_parser("synth", help="write the embedded synthetic VQA dataset",
                         description="Write the synthetic VQA dataset in the official file formats.")
  synth.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
  synth.add_argument("--scale", default="tiny", choices=list(synthetic.SCALES),
                     help="dataset size: " + ", ".join(
                         f"{k} ({v.train_images * v.questions_per_image} train questions)"
                         for k, v in synthetic.SCALES.items()))
  synth.set_defaults(func=_synth)
  therapy = sub.add_parser("therapy", help="write the synthetic VQA-AnswerTherapy dataset",
                           description="Write the synthetic VQA-AnswerTherapy dataset in the released format.")
  therapy.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  therapy.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
  therapy.add_argument("--scale", default="tiny", choices=list(synthetic_therapy.SCALES),
                       help="dataset size: " + ", ".join(
                           f"{k} ({sum(v)} questions)" for k, v in synthetic_therapy.SCALES.items()))
  therapy.set_defaults(func=_therapy)
  raw = sub.add_parser("therapy-raw", help="write a raw input of the AnswerTherapy construction",
                       description="Write raw VQA v2 / VizWiz files and two annotators' groundings.")
  raw.add_argument("--out", type=files.path_arg, required=True, help="output directory")
  raw.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
  raw.set_defaults(func=_raw)
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax data") -> int:
  args = build_parser(prog).parse_args(argv)
  logging.set_verbosity(logging.INFO)  # minutes of drawing and extracting: their progress lines

  def run() -> int | None:
    config_lib.check_value("--seed", args.seed, config_lib.TRAINING["seed"])  # the runs' own seed
    if not fs.outlives_process(args.out):
      raise InputError(f"--out {args.out}: that file system ends with this process; write the dataset to a "
                       "folder or a bucket")
    return args.func(args)

  return exit_status(prog, run)
