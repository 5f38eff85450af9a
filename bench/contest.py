"""What the benches of a Hub model against transformers' PyTorch share: the contenders timed in
interleaved rounds beside the f32 matmul peak, and the command line over sizes.

A bench module gives `bench(size, batch, args) -> (printed lines, record rows, the rounds' peaks)`
and calls `main(name, doc, bench, batches)`: `--sizes`, `--batch-SIZE` (from `batches`, a size's
default batch), `--steps`, `--rounds`, `--threads`, `--json`, and what its `arguments(parser)` adds.
"""

import argparse
import collections
import os
import re
import tempfile

import jax
import numpy as np
import record
from bench_train import pin_threads
from jax_vqa import turn


def rounds(label: str, runs: dict, count: int, steps: int, per: str = "a step") -> tuple[dict, list[float]]:
  """({contender: each round's seconds per step}, each round's matmul peak) of `runs`, {contender:
  run(steps)}: every run warmed up (compiled for each of its batches) once, then in each round
  every contender's `turn` one after another, then the peak."""
  for run in runs.values():
    run(steps)
  seconds, peaks = {name: [] for name in runs}, []
  for r in range(count):
    for name, run in runs.items():
      seconds[name].append(turn(run, steps) / steps)
    peaks.append(record.matmul_peak())
    print(f"{label} round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.0f} ms" for k, v in seconds.items())
          + f" {per}; matmul peak {peaks[-1] / 1e9:.0f} GFLOP/s", flush=True)
  return {name: np.array(s) for name, s in seconds.items()}, peaks


_MATMUL = {"ynn", "xnn", "onednn", "dot", "convolution"}
_MOVING = {"copy", "slice", "transpose", "concatenate", "pad", "gather", "scatter", "dynamic", "broadcast"}


def thunk_shares(run) -> dict:
  """{kind: share} of the time XLA:CPU's thunks (one per fused op) took in one traced call of `run`,
  by kind: matmuls (XLA's dot and YNNPACK / XNNPACK / oneDNN fusions), moving data (copies, slices,
  transposes, concatenations, broadcasts) and the rest (elementwise fusions and reductions); {} off
  the CPU. Thunks are traced only with `--xla_cpu_enable_xprof_traceme=true` (`main` sets it)."""
  if jax.devices()[0].platform != "cpu":
    return {}
  with tempfile.TemporaryDirectory() as folder:
    jax.profiler.start_trace(folder)
    run()
    jax.profiler.stop_trace()
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".xplane.pb")]
    profile = jax.profiler.ProfileData.from_file(path)
  took = collections.Counter()
  for line in (line for plane in profile.planes for line in plane.lines):
    for event in line.events:  # thunks are named as HLO instructions (fusion.12, ynn_fusion), the rest is not
      if not re.fullmatch(r"[a-z][a-z0-9_-]*(\.\d+)?", event.name):
        continue
      words = [w for w in re.sub(r"\.\d+$", "", event.name).split("_") if w not in ("bitcast", "wrapped", "fusion")]
      first = words[0] if words else ""
      if first in ("while", "conditional", "call"):
        continue  # control flow: the thunks inside count
      took["matmuls" if first in _MATMUL else "moving data" if first in _MOVING else
           "elementwise and reductions"] += event.duration_ns
  total = sum(took.values())
  return {kind: took[kind] / total for kind in ("matmuls", "moving data", "elementwise and reductions")} if total else {}


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
    parser.add_argument(f"--batch-{size}", type=record.count, default=batch)
  parser.add_argument("--steps", type=record.count, default=2, help="steps per contender per round")
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--threads", type=record.count, default=len(os.sched_getaffinity(0)))
  if arguments:
    arguments(parser)
  record.add_flag(parser)
  args = parser.parse_args()
  sizes = args.sizes.split(",")
  if not set(sizes) <= set(batches):
    parser.error(f"--sizes {args.sizes}: expected some of {','.join(batches)}")
  record.begin(args.json)
  threads = pin_threads(args.threads)  # before JAX's first computation creates its CPU client
  os.environ["XLA_FLAGS"] += " --xla_cpu_enable_xprof_traceme=true"  # thunk_shares' events
  report, rows, peaks = [f"threads: {threads}; devices: {jax.devices()[0].platform}"], [], []
  for size in sizes:
    lines, size_rows, size_peaks = bench(size, getattr(args, f"batch_{size}"), args)
    report, rows, peaks = report + lines, rows + size_rows, peaks + size_peaks
  print("\n" + "\n".join(report))
  record.write(args.json, name, rows, peak=median(peaks))
