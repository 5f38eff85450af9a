"""What the benches of a Hub model against transformers' PyTorch share: the contenders timed in
interleaved rounds beside the f32 matmul peak, and the command line over sizes.

A bench module gives `bench(size, batch, args) -> (printed lines, record rows, the rounds' peaks)`
and calls `main(name, doc, bench, batches)`: `--sizes`, `--batch-SIZE` (from `batches`, a size's
default batch), `--steps`, `--rounds`, `--threads`, `--json`, and what its `arguments(parser)` adds.
"""

import argparse
import os
import tempfile

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


def through_hub(model, hub) -> tuple:
  """(config, params) of transformers' `model` saved as a Hub folder and read back by vqajax's reader
  `hub` (its `read_config` and `read_params`): both sides start from the same weights."""
  with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    config = hub.read_config(folder)
    return config, hub.read_params(folder, config)


def versus_torch(what: str, seconds: dict, peaks: list[float], kinds) -> tuple[list[str], list[dict]]:
  """(printed lines, record rows) of "vqajax KIND" against "torch KIND" for each (kind, unit, units a
  step, useful FLOPs a step or None) of `kinds`: each side's rate (with its share of the matmul peak
  where FLOPs are given), then the ratio (target >= 1.0x)."""
  lines, rows = [], []
  for kind, unit, per, flops in kinds:
    for side in ("vqajax", "torch"):
      name = f"{side} {kind}"
      share = "" if flops is None else f", {median(flops / seconds[name] / np.array(peaks)):4.0%} of the f32 matmul peak"
      lines.append(f"  {name:20s} {per / median(seconds[name]):8.2f} {unit} (median {median(seconds[name]) * 1e3:.0f} ms)"
                   + share)
      rows.append(record.row(f"{what}: {name}", per / median(seconds[name]), unit, rounds=per / seconds[name]))
    ratios = seconds[f"torch {kind}"] / seconds[f"vqajax {kind}"]
    lines.append(f"  {kind} vs torch eager: {median(ratios):5.2f}x (target >= 1.0x)")
    rows.append(record.row(f"{what}: {kind} vs PyTorch eager, the same weights and threads", median(ratios), "x",
                           ">= 1.0x", rounds=ratios))
  return lines, rows


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
