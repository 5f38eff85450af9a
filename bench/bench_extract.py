"""Feature extraction throughput: vqajax's VGG16 fc7 extractor vs torchvision's VGG16 in torch, in images/s.

    pip install -e '.[bench]'   # torch
    python bench/bench_extract.py [--batch 16] [--rounds 3] [--size 224] [--images 96] [--threads N]

The torch side is torchvision's VGG16 written in `torch.nn` (`torch_models.py`: torchvision's
layers, names and initialisation, without torchvision). Both sides get the same random weights
(copied with `features/weights.py`), the same input batch in their own layout (NHWC / NCHW) and the same
`--threads` cores and threads (bench_train's pinning); their fc7 outputs are checked close.
Each round times both forwards (`forward.Forward`, jitted over the local devices, vs
torch under `inference_mode`), each after one untimed call at its turn (`contest.rounds`),
and an f32 2048^3 matmul for the peak; the figures are
medians: images/s, vqajax vs torch (target >= 1.0x) and the useful FLOP/s (from the
layer sizes) as a share of the matmul peak (target >= 50%). Then the whole
`extract.extract` on generated JPEG files (decode and preprocessing in threads, forward,
store) in images/s, and its first progress line's ETA against the time the rest took
(target within 25%).
"""

import argparse
import logging
import os
import re
import sys
import tempfile
import time

import contest
import jax
import numpy as np
import record
import torch  # before anything imports TensorFlow (see bench_train)
import torch_models
from absl import logging as absl_logging
from bench_train import pin_threads
from PIL import Image

from data_pipeline.features import extract
from vqajax.features import forward, models, weights


def vgg_flops(stages, size: int, hidden: int = 4096) -> int:
  """Multiply-add FLOPs x 2 of one VGG image up to fc7 at `size` x `size` input."""
  total, width, channels = 0, size, 3
  for widths in stages:
    for out in widths:
      total += 2 * width * width * 9 * channels * out
      channels = out
    width //= 2
  return total + 2 * (channels * models.POOLED**2 * hidden + hidden * hidden)


def torch_fc7(net):
  """The VGG up to fc7 after its ReLU (classifier[:5]; dropout is off in eval)."""
  return torch.nn.Sequential(net.features, net.avgpool, torch.nn.Flatten(1), *net.classifier[:5]).eval()


class _Lines(logging.Handler):
  """Keeps (time, message) of absl's log records."""

  def __init__(self):
    super().__init__()
    self.lines = []

  def emit(self, record):
    self.lines.append((time.monotonic(), record.getMessage()))


def end_to_end(model, params, args) -> tuple[float, float, float]:
  """`extract.extract` over `args.images` generated JPEGs: images/s, the first progress
  line's (at half the images) predicted seconds for the rest, and the seconds the rest took."""
  rng = np.random.default_rng(0)
  with tempfile.TemporaryDirectory() as tmp:
    paths = []
    for i in range(args.images):
      paths.append(os.path.join(tmp, f"COCO_val2014_{i + 1:012d}.jpg"))
      Image.fromarray(rng.integers(0, 256, (args.size + 32, args.size + 64, 3), np.uint8)).save(paths[-1])
    settings = {"model": "vgg16", "layer": "fc7", "image_size": args.size, "weights": "random"}
    lines = _Lines()
    absl_logging.get_absl_logger().addHandler(lines)
    absl_logging.set_verbosity(absl_logging.INFO)
    summary = extract.extract(paths, model, params, os.path.join(tmp, "fc7.h5"), settings, image_size=args.size,
                              batch=args.batch, log_every=args.images // 2)
    end = time.monotonic()
    absl_logging.get_absl_logger().removeHandler(lines)
  at, first = next((t, m) for t, m in lines.lines if " images/s, ETA " in m)
  done, total, rate = re.match(r"(\d+) / (\d+) images, ([\d.]+) images/s", first).groups()
  return summary.extracted / summary.seconds, (int(total) - int(done)) / float(rate), end - at


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=record.count, default=16)
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--size", type=record.count, default=224, help="input pixels per side")
  parser.add_argument("--images", type=record.count, default=96, help="generated files for the whole extractor")
  parser.add_argument("--threads", type=record.count, default=len(os.sched_getaffinity(0)),
                      help="cores and threads for both sides (default: all this process may use)")
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  threads = pin_threads(args.threads)

  torch.manual_seed(0)
  net = torch_models.vgg16().eval()
  theirs = torch_fc7(net)
  model = models.MODELS["vgg16"](layer="fc7")
  params = weights.load_params({k: v.numpy() for k, v in net.state_dict().items()}, model, "vgg16")
  ours = forward.Forward(model, params, args.batch)
  nhwc = np.random.default_rng(0).normal(size=(ours.batch, args.size, args.size, 3)).astype(np.float32)
  nchw = torch.from_numpy(np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)))

  def run_torch():
    with torch.inference_mode():
      return theirs(nchw).numpy()

  got, want = np.asarray(ours(nhwc)), run_torch()
  error = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
  assert got.shape == want.shape and error < 1e-3, (got.shape, want.shape, error)

  def batches(forward):  # run(calls), as contest.rounds times it
    return lambda calls: [forward() for _ in range(calls)]

  seconds, peaks = contest.rounds(f"VGG16 fc7 at {args.size} px", {
      "vqajax": batches(lambda: jax.block_until_ready(ours(nhwc))), "torch": batches(run_torch)}, args.rounds, 1,
      "a batch")
  rates = {name: ours.batch / s for name, s in seconds.items()}
  flops = vgg_flops(models.VGG16_STAGES, args.size)
  shares = 100 * np.array(rates["vqajax"]) * flops / np.array(peaks)
  ratios = np.array(rates["vqajax"]) / np.array(rates["torch"])
  share, ratio = np.median(shares) / 100, np.median(ratios)
  whole, predicted, took = end_to_end(model, params, args)

  print(f"\nthreads: {threads}")
  print(f"devices: {len(jax.local_devices())} x {jax.devices()[0].platform}; VGG16 fc7 at {args.size}x{args.size}, "
        f"batch {ours.batch}, {flops / 1e9:.2f} GFLOP per image; {args.rounds} rounds")
  print(f"same weights and batch: fc7 max abs difference {error:.1e} of the largest output (close)")
  for name, values in rates.items():
    print(f"{name:12s} {np.median(values):8.2f} images/s (median, the model alone)")
  print(f"f32 matmul peak {np.median(peaks) / 1e9:6.0f} GFLOP/s")
  print(f"vs torch                {ratio:5.2f}x (target >= 1.0x)")
  print(f"useful FLOP/s            {share:5.0%} of the f32 matmul peak (target >= 50%)")
  print(f"whole extractor        {whole:8.2f} images/s ({args.images} generated JPEGs: decode, preprocess, "
        f"forward, store)")
  print(f"first ETA {predicted:.1f} s vs {took:.1f} s taken: {predicted / took:5.2f}x of the real time "
        "(target 0.75-1.25x)")
  what = f"VGG16 fc7 at {args.size} px, batch {ours.batch}"
  record.write(args.json, "bench_extract", [
    *(record.row(f"{what}, the model alone: {name}", np.median(values), "images/s", rounds=values)
      for name, values in rates.items()),
    record.row(f"{what}: vqajax vs PyTorch, the same weights and threads", ratio, "x", ">= 1.0x", ratios),
    record.row(f"{what}: useful FLOP/s, share of the f32 matmul peak", 100 * share, "%", ">= 50%", shares),
    record.row(f"the whole extractor on {args.images} generated JPEGs (decode, preprocess, forward, store)", whole,
               "images/s"),
    record.row("`vqajax features`' first ETA vs the time the rest took", predicted / took, "x", "0.75-1.25x"),
  ], peak=np.median(peaks))


if __name__ == "__main__":
  sys.exit(main())
