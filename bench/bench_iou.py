"""IoU / IoU-PQ on the device vs vectorised numpy and a per-mask numpy loop, on the same masks.

    python bench/bench_iou.py [--rounds 5] [--scale 1.0]

Two settings, each on random answer groundings (2-4 valid answers per question, masks of
~30% coverage, some empty, every question in a source and a grounding label): the 14x14
grid masks the mask task evaluates on (20,000 questions) and image-resolution masks
(448x448, 300 questions). Every side computes what the mask task's evaluator
(`answertherapy/grounding_mask.py`) sums per batch: `vqajax.answertherapy.iou.group_sums`
over the 9 groups of `answertherapy.groups.weights` (all, each source, each label, each
source x label). The device side is that function jitted, on masks already on the device;
the reference that matters is the same function on numpy (`xp=np`: whole-array numpy, as a
careful evaluation script would be); the per-mask loop (one intersection and one union per
mask, in Python) is what a plain script does. Asserts equal sums on every side, prints
medians over rounds and the ratios last (each round's ratio of the sides timed one after
another, their median), with the rate at which each side reads the masks beside the
machine's memory bandwidth (a numpy copy of the same bytes, measured in the run).

Targets, device vs numpy vectorised: on an accelerator >= 20x (the device path is the point:
the evaluator's sums stay in the jitted step); on a CPU, where XLA and numpy share the same
cores and memory, >= 3x on the grid and >= 1.5x at 448x448 (`iou.py` says how each size is
counted). The per-mask loop is reported. `--scale` multiplies the question counts (the tests
run it small).
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
import record  # noqa: E402
from jax_vqa import peak_device_memory  # noqa: E402

from vqajax.answertherapy import groups as therapy_groups  # noqa: E402
from vqajax.answertherapy import iou  # noqa: E402
from vqajax.answertherapy.files import SOURCES  # noqa: E402

ANSWERS = 4
SETTINGS = (("grid 14x14", 20_000, 14), ("image 448x448", 300, 448))
SUMS = ("iou_pq", "questions", "iou", "groundings")
CPU_TARGETS = {"grid 14x14": 3.0, "image 448x448": 1.5}  # device vs numpy vectorised; elsewhere ACCELERATOR_TARGET
ACCELERATOR_TARGET = 20.0


def masks(rng, questions: int, size: int):
  """Predicted and true masks [Q, A, size, size], valid groundings [Q, A], group weights [Q, 9]."""
  pred = rng.random((questions, ANSWERS, size, size)) < 0.3
  gt = rng.random((questions, ANSWERS, size, size)) < 0.3
  pred[::7, 0] = gt[::7, 0] = False  # empty vs empty: IoU 1
  valid = np.arange(ANSWERS)[None] < rng.integers(2, ANSWERS + 1, questions)[:, None]
  batch = {"mask": np.ones(questions, bool), "source": rng.integers(0, len(SOURCES), questions),
           "label": rng.integers(0, len(therapy_groups.LABELS), questions)}
  return pred, gt, valid, np.asarray(therapy_groups.weights(batch, by_label=True))


def loop_group_sums(pred, gt, valid, groups) -> dict[str, np.ndarray]:
  """The per-mask reference: each question's mean IoU over its groundings, summed per group."""
  sums = {name: np.zeros(groups.shape[1]) for name in SUMS}
  for q in range(len(pred)):
    ious = []
    for a in np.flatnonzero(valid[q]):
      union = np.logical_or(pred[q, a], gt[q, a]).sum()
      ious.append(1.0 if union == 0 else np.logical_and(pred[q, a], gt[q, a]).sum() / union)
    if ious:
      for name, value in zip(SUMS, (sum(ious) / len(ious), 1, sum(ious), len(ious))):
        sums[name] += value * groups[q]
  return sums


def copy_bandwidth(a) -> float:
  """Bytes per second read by a numpy copy of `a` (the median of 3)."""
  return a.nbytes / statistics.median(timed(np.copy, a)[1] for _ in range(3))


def timed(fn, *args):
  start = time.perf_counter()
  out = fn(*args)
  return out, time.perf_counter() - start


def check_equal(name: str, got: dict, expected: dict) -> None:
  for k in SUMS:
    np.testing.assert_allclose(np.asarray(got[k], np.float64), expected[k], rtol=1e-5, err_msg=f"{name}: {k}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=record.count, default=5)
  parser.add_argument("--scale", type=record.amount, default=1.0)
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  rng = np.random.default_rng(0)
  kernel = jax.jit(iou.group_sums)
  lines, rows = [], []
  for name, questions, size in SETTINGS:
    questions = max(1, round(questions * args.scale))
    host = masks(rng, questions, size)
    device = [jax.device_put(a) for a in host]
    jax.block_until_ready(kernel(*device))  # compile
    times = {"loop": [], "numpy": [], "device": []}
    for _ in range(args.rounds):
      expected, t = timed(loop_group_sums, *host)
      times["loop"].append(t)
      vectorised, t = timed(lambda *a: iou.group_sums(*a, xp=np), *host)
      times["numpy"].append(t)
      on_device, t = timed(lambda *a: jax.block_until_ready(kernel(*a)), *device)
      times["device"].append(t)
      check_equal(f"{name} numpy", vectorised, expected)
      check_equal(f"{name} device", on_device, expected)
    t = {k: statistics.median(v) for k, v in times.items()}
    vs_numpy, vs_loop = (np.array(times[k]) / np.array(times["device"]) for k in ("numpy", "loop"))
    gb = (host[0].nbytes + host[1].nbytes) / 1e9
    iou_pq = expected["iou_pq"][0] / expected["questions"][0]
    print(f"{name}: {questions} questions, IoU-PQ {iou_pq:.4f} and every group's sums (equal); "
          + ", ".join(f"{label} {t[k] * 1e3:.2f} ms ({gb / t[k]:.1f} GB/s)"
                      for k, label in (("loop", "numpy loop"), ("numpy", "numpy vectorised"), ("device", "device")))
          + f"; numpy copy {copy_bandwidth(host[0]) / 1e9:.1f} GB/s", flush=True)
    target = f">= {CPU_TARGETS[name] if jax.default_backend() == 'cpu' else ACCELERATOR_TARGET:g}x"
    lines.append(f"{name:14s} device vs numpy vectorised {np.median(vs_numpy):7.1f}x (target {target})")
    lines.append(f"{name:14s} device vs numpy loop       {np.median(vs_loop):7.1f}x (reported)")
    rows += [record.row(f"{name}, {questions} questions: device vs numpy vectorised", np.median(vs_numpy), "x",
                         target, vs_numpy),
             record.row(f"{name}, {questions} questions: device vs a per-mask numpy loop", np.median(vs_loop), "x",
                         rounds=vs_loop)]
  print(f"\n{args.rounds} rounds, medians of each round's ratio; device: {jax.devices()[0].platform}; "
        f"each side computes iou.group_sums over {len(therapy_groups.BY_SOURCE_AND_LABEL)} groups")
  print("\n".join(lines))
  print(f"peak device memory: {peak_device_memory()}")
  record.write(args.json, "bench_iou", rows)


if __name__ == "__main__":
  main()
