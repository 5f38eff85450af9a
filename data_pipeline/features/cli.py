"""Extracts image features into a store that `vqajax` trains on (README: "Preparing data").

  vqajax features --images DIR|LIST.txt --model vgg16|vgg19|vit_b16|colour_cells|pixels \\
      --weights FILE.pth|FILE.npz --layer fc7|conv5|cls|patches|global|grid7|grid14|pixels --out STORE.h5|STORE.npy \\
      [--preprocess vqa|torchvision|vilt] [--size N] [--batch N] [--dtype float16|float32] [--chunk N]
  vqajax features convert IN.pth OUT.npz

`colour_cells` (the embedded datasets' extractor) takes no --weights and reads `--preprocess vqa`;
`pixels` (the store of a ViLT row: each image fitted into --size x --size, padded at the
bottom and right, uint8 RGB + the pixel mask) takes no --weights and reads `--preprocess vilt`.
Rerunning the same command resumes: images already in the store are skipped. Exit status 0
when the store is written (unreadable images are reported and skipped), 1 when images were
to be extracted and none could be read, 2 for bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

from absl import logging

from data_pipeline.features.extract import extract
from vqajax.core import files
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.features import images, models, recorded, store, weights

PIXELS_SIZE = 384  # ViLT's fine-tuning resolution
MAX_PIXELS_SIZE = 4096  # above the datasets' largest images (VizWiz's 2592 pixels): a larger side only pads
MAX_BATCH_BYTES = 2 * 2**30  # a batch's float32 inputs on the host (two more batches are decoded ahead)


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("--images", required=True, help="a directory of images or a file listing image paths")
  parser.add_argument("--model", required=True, choices=sorted(models.MODELS))
  parser.add_argument("--weights", help="torchvision state dict (.pth) or its .npz conversion (not for colour_cells)")
  parser.add_argument("--layer", required=True, choices=sorted({l for ls in models.LAYERS.values() for l in ls}))
  parser.add_argument("--out", type=files.path_arg, required=True, help="the store: .h5 / .hdf5 or .npy (+ .image_ids.npy)")
  parser.add_argument("--preprocess", choices=sorted(images.PREPROCESS),
                      help="default: the model's own (colour_cells vqa, pixels vilt), else vqa")
  parser.add_argument("--size", type=int, help="pixels: the images' side (default 384, ViLT's); the others read "
                      f"{weights.IMAGE_SIZE}")
  parser.add_argument("--batch", type=int, default=32, help="global batch (rounded up to a multiple of the devices)")
  parser.add_argument("--dtype", choices=("float16", "float32"), help="default float16 (pixels: uint8)")
  parser.add_argument("--chunk", type=int, default=256, help="images per durable chunk (lost at most on a kill)")
  parser.add_argument("--log-every", type=int, default=1000, help="images between progress lines")
  return parser


def run(args: argparse.Namespace) -> int:
  if args.layer not in models.LAYERS[args.model]:
    raise InputError(f"--layer {args.layer}: {args.model} has layers {', '.join(models.LAYERS[args.model])}")
  for flag in ("batch", "chunk", "log_every"):
    if getattr(args, flag) < 1:
      raise InputError(f"--{flag.replace('_', '-')}: expected a positive integer, got {getattr(args, flag)}")
  store.check_local(args.out)  # before any work
  if (args.weights is None) != (args.model in models.NO_WEIGHTS):
    raise InputError(f"--weights: {args.model} " + ("takes none" if args.weights else "needs its weights file"))
  own = models.PREPROCESS.get(args.model)
  preprocess = args.preprocess or own or "vqa"
  if own and preprocess != own:
    raise InputError(f"--preprocess {preprocess}: {args.model} reads the {own} preprocessing")
  if args.model in models.DTYPES and args.dtype:
    raise InputError(f"--dtype {args.dtype}: {args.model} stores {models.DTYPES[args.model]}")
  dtype = models.DTYPES.get(args.model, args.dtype or "float16")
  if args.size is not None and (args.model != "pixels" or not 1 <= args.size <= MAX_PIXELS_SIZE):
    raise InputError(f"--size {args.size}: only pixels takes a size, a number of pixels from 1 to {MAX_PIXELS_SIZE}")
  size = args.size or (PIXELS_SIZE if args.model == "pixels" else weights.IMAGE_SIZE)
  image_bytes = 4 * math.prod(images.input_shape(preprocess, size))
  if args.batch * image_bytes > MAX_BATCH_BYTES:
    raise InputError(f"--batch {args.batch}: the inputs of a batch of {size}x{size} images would take "
                     f"{args.batch * image_bytes / 2**30:.1f} GiB, more than the {MAX_BATCH_BYTES // 2**30} GiB "
                     f"allowed: give at most {MAX_BATCH_BYTES // image_bytes}")
  files.protect(args.images, args.weights)
  for path in store.files_of(args.out):  # a .npy store's ids and sidecar files are outputs too
    files.check_output(path)
  paths = images.list_images(args.images)
  if not paths:
    raise InputError(f"{args.images}: no image files (extensions {', '.join(images.EXTENSIONS)})")
  model = models.MODELS[args.model](layer=args.layer)
  if args.weights:
    state = weights.read_state(args.weights)
    params = weights.load_params(state, model, args.model, where=args.weights)
  else:
    state, params = None, {}
  settings = recorded.settings(args.model, args.layer, preprocess, size, dtype, args.weights, state)
  summary = extract(paths, model, params, args.out, settings, preprocess=preprocess,
                    image_size=size, batch=args.batch, dtype=dtype,
                    chunk=args.chunk, log_every=args.log_every)
  for path, reason in summary.unreadable:
    print(f"unreadable, skipped: {path}: {reason}")
  print(summary.line())
  return 1 if summary.unreadable and not summary.rows else 0  # nothing at all could be read


def main(argv: Sequence[str] | None = None, prog: str = "vqajax features") -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  logging.set_verbosity(logging.INFO)
  if argv[:1] == ["convert"]:
    parser = ArgumentParser(prog=f"{prog} convert", description="torchvision .pth -> .npz (same names)")
    parser.add_argument("pth")
    parser.add_argument("npz")
    args = parser.parse_args(argv[1:])
    files.protect(args.pth)  # the output rule: `convert X X` never replaces its input
    return exit_status(prog, lambda: print(f"{weights.convert(args.pth, args.npz)} tensors written to {args.npz}"))
  args = _parser(prog).parse_args(argv)
  return exit_status(prog, lambda: run(args))
