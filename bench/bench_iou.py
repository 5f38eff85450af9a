"""IoU / IoU-PQ on the device vs a per-mask numpy loop on the same masks.

    python bench/bench_iou.py [--rounds 5] [--scale 1.0]

Two settings, each on random answer groundings (2-4 valid answers per question, masks of
~30% coverage, some empty): the 14x14 grid masks the mask task evaluates on (20,000
questions) and image-resolution masks (448x448, 300 questions). The device side is the
jitted `vqajax.answertherapy.iou.iou_pq_sums` on masks already on the device; the reference loops
over questions and their valid groundings with numpy (one intersection, one union per
mask), as an evaluation script would. Asserts equal IoU-PQ, prints medians over rounds and
the ratio (target >= 20x) last, with the rate at which each side reads the masks beside
the machine's memory bandwidth (a numpy copy of the same bytes, measured in the run):
large masks are bandwidth-bound on a CPU, whoever loops over them. `--scale` multiplies
the question counts (the tests run it small).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from vqajax.answertherapy import iou  # noqa: E402

ANSWERS = 4
SETTINGS = (("grid 14x14", 20_000, 14), ("image 448x448", 300, 448))


def masks(rng, questions: int, size: int):
  pred = rng.random((questions, ANSWERS, size, size)) < 0.3
  gt = rng.random((questions, ANSWERS, size, size)) < 0.3
  pred[::7, 0] = gt[::7, 0] = False  # empty vs empty: IoU 1
  valid = np.arange(ANSWERS)[None] < rng.integers(2, ANSWERS + 1, questions)[:, None]
  return pred, gt, valid


def loop_iou_pq(pred, gt, valid) -> float:
  """The per-mask reference: mean over questions of the mean IoU of their groundings."""
  per_question = []
  for q in range(len(pred)):
    ious = []
    for a in np.flatnonzero(valid[q]):
      union = np.logical_or(pred[q, a], gt[q, a]).sum()
      ious.append(1.0 if union == 0 else np.logical_and(pred[q, a], gt[q, a]).sum() / union)
    per_question.append(sum(ious) / len(ious))
  return sum(per_question) / len(per_question)


def copy_bandwidth(a) -> float:
  """Bytes per second read by a numpy copy of `a` (the median of 3)."""
  return a.nbytes / statistics.median(timed(np.copy, a)[1] for _ in range(3))


def timed(fn, *args):
  start = time.perf_counter()
  out = fn(*args)
  return out, time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--scale", type=float, default=1.0)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  kernel = jax.jit(iou.iou_pq_sums)
  lines = []
  for name, questions, size in SETTINGS:
    questions = max(1, round(questions * args.scale))
    host = masks(rng, questions, size)
    device = [jax.device_put(a) for a in host]
    jax.block_until_ready(kernel(*device))  # compile
    loop_times, device_times = [], []
    for _ in range(args.rounds):
      expected, t_loop = timed(loop_iou_pq, *host)
      (total, count), t_device = timed(lambda *a: jax.block_until_ready(kernel(*a)), *device)
      np.testing.assert_allclose(float(total) / float(count), expected, rtol=1e-5)
      loop_times.append(t_loop)
      device_times.append(t_device)
    t_loop, t_device = statistics.median(loop_times), statistics.median(device_times)
    gb = (host[0].nbytes + host[1].nbytes) / 1e9
    print(f"{name}: {questions} questions, IoU-PQ {expected:.4f} (equal); numpy loop {t_loop * 1e3:.1f} ms "
          f"({gb / t_loop:.1f} GB/s), device {t_device * 1e3:.2f} ms ({gb / t_device:.1f} GB/s); "
          f"numpy copy {copy_bandwidth(host[0]) / 1e9:.1f} GB/s", flush=True)
    lines.append(f"{name:14s} device vs numpy loop {t_loop / t_device:7.1f}x (target >= 20x)")
  print(f"\n{args.rounds} rounds, medians; device: {jax.devices()[0].platform}")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
