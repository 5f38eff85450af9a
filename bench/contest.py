"""What the benches of a Hub model against transformers' PyTorch share: the contenders timed in
interleaved rounds beside the f32 matmul peak, and the command line over sizes.

A bench module gives `bench(size, batch, args) -> (printed lines, record rows, the rounds' peaks)`
and calls `main(name, doc, bench, batches)`: `--sizes`, `--batch-SIZE` (from `batches`, a size's
default batch), `--steps`, `--rounds`, `--threads`, `--json`, and what its `arguments(parser)` adds.
"""

import argparse
import os

import jax
import numpy as np
import record
from bench_train import pin_threads
from jax_vqa import timed


def rounds(label: str, runs: dict, count: int, steps: int, per: str = "a step") -> tuple[dict, list[float]]:
  """({contender: each round's seconds per step}, each round's matmul peak): every run warmed up
  (compiled) once, then in each round every contender one after another, then the peak."""
  for run in runs.values():
    run()
  seconds, peaks = {name: [] for name in runs}, []
  for r in range(count):
    for name, run in runs.items():
      seconds[name].append(timed(run) / steps)
    peaks.append(record.matmul_peak())
    print(f"{label} round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.0f} ms" for k, v in seconds.items())
          + f" {per}; matmul peak {peaks[-1] / 1e9:.0f} GFLOP/s", flush=True)
  return {name: np.array(s) for name, s in seconds.items()}, peaks


def median(values) -> float:
  return float(np.median(values))


def main(name: str, doc: str, bench, batches: dict, arguments=None) -> None:
  parser = argparse.ArgumentParser(description=doc.splitlines()[0])
  parser.add_argument("--sizes", default=",".join(batches))
  for size, batch in batches.items():
    parser.add_argument(f"--batch-{size}", type=int, default=batch)
  parser.add_argument("--steps", type=int, default=2, help="steps per contender per round")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
  if arguments:
    arguments(parser)
  record.add_flag(parser)
  args = parser.parse_args()
  sizes = args.sizes.split(",")
  if not set(sizes) <= set(batches):
    parser.error(f"--sizes {args.sizes}: expected some of {','.join(batches)}")
  record.begin(args.json)
  threads = pin_threads(args.threads)  # before JAX's first computation creates its CPU client
  report, rows, peaks = [f"threads: {threads}; devices: {jax.devices()[0].platform}"], [], []
  for size in sizes:
    lines, size_rows, size_peaks = bench(size, getattr(args, f"batch_{size}"), args)
    report, rows, peaks = report + lines, rows + size_rows, peaks + size_peaks
  print("\n" + "\n".join(report))
  record.write(args.json, name, rows, peak=median(peaks))
