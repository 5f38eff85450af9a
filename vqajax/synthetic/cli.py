"""`vqajax-data`: dataset tools.

  vqajax-data synth --out DIR [--seed S] [--scale tiny|small|medium|large]
  vqajax-data therapy --out DIR [--seed S] [--scale tiny|small|medium]

`synth` writes the embedded synthetic VQA dataset (official VQA v2 / v1 multiple-choice /
COCO captions formats plus feature stores), `therapy` the synthetic VQA-AnswerTherapy
dataset (released format plus a grid feature store), under DIR; both print a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from vqajax.synthetic.vqa import write as synthetic
from vqajax.synthetic.vqa import features as synthetic_features
from vqajax.synthetic.answertherapy import write as synthetic_therapy
from vqajax.core.errors import InputError


def _synth(args) -> int:
  start = time.time()
  try:
    paths = synthetic.generate(args.out, seed=args.seed, scale=args.scale)
  except OSError as e:
    print(f"error: could not write the synthetic dataset to {args.out}: {e}", file=sys.stderr)
    return 1
  manifest = synthetic.read_manifest(args.out)
  if manifest is None:  # cannot happen unless the directory changed under us
    print(f"error: {args.out}: the dataset was written but its MANIFEST.json is missing or incomplete",
          file=sys.stderr)
    return 1
  counts, shares = manifest["counts"], manifest["answer_type_shares"]
  split_text = "; ".join(
      f"{split}: {counts[f'{split}_images']} images, {counts[f'{split}_questions']} questions "
      f"(" + ", ".join(f"{t} {100 * v:.0f}%" for t, v in shares[split].items()) + ")"
      for split in synthetic.SPLITS)
  file_text = ", ".join(f"{role}={path}" for role, path in paths.items())
  print(f"Wrote the synthetic VQA dataset (scale {args.scale}, seed {args.seed}) to {args.out} in "
        f"{time.time() - start:.1f}s. {split_text}; {counts['feature_rows']} feature rows "
        f"(fc7 {synthetic_features.FC7_DIM}-d, grid 7x7x{synthetic_features.GRID_CHANNELS}). Files: {file_text}.")
  return 0


def _therapy(args) -> int:
  start = time.time()
  try:
    paths = synthetic_therapy.generate(args.out, seed=args.seed, scale=args.scale)
  except (InputError, OSError) as e:
    print(f"error: could not write the synthetic therapy dataset to {args.out}: {e}", file=sys.stderr)
    return 1
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
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="vqajax-data", description="vqajax dataset tools")
  sub = parser.add_subparsers(dest="command", required=True)
  synth = sub.add_parser("synth", help="write the embedded synthetic VQA dataset",
                         description="Write the synthetic VQA dataset in the official file formats.")
  synth.add_argument("--out", required=True, help="output directory")
  synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
  synth.add_argument("--scale", default="tiny", choices=list(synthetic.SCALES),
                     help="dataset size: " + ", ".join(
                         f"{k} ({v.train_images * v.questions_per_image} train questions)"
                         for k, v in synthetic.SCALES.items()))
  synth.set_defaults(func=_synth)
  therapy = sub.add_parser("therapy", help="write the synthetic VQA-AnswerTherapy dataset",
                           description="Write the synthetic VQA-AnswerTherapy dataset in the released format.")
  therapy.add_argument("--out", required=True, help="output directory")
  therapy.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
  therapy.add_argument("--scale", default="tiny", choices=list(synthetic_therapy.SCALES),
                       help="dataset size: " + ", ".join(
                           f"{k} ({sum(v)} questions)" for k, v in synthetic_therapy.SCALES.items()))
  therapy.set_defaults(func=_therapy)
  return parser


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  return args.func(args)


if __name__ == "__main__":
  sys.exit(main())
