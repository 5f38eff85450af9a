"""The floor under every ratio against PyTorch on this CPU: XLA's f32 matmul vs torch's, alone.

    pip install -e '.[bench]'
    python bench/bench_matmul.py [--rounds 3] [--reps 10] [--threads N] [--json PATH]

Each model bench (bench_train, bench_vilt, bench_clipseg, bench_paligemma) is mostly matmuls, so
its ratio against PyTorch eager cannot stay above the ratio of the two libraries' matmul kernels
at the shapes the model runs, whatever the model code does around them. This script times one
jitted `x @ w` against `torch.mm` on the same arrays and threads (bench_train.pin_threads) at
those shapes: the 2048^3 peak; the deeper LSTM Q gate matmul ([rows, embed + hidden] x
[embed + hidden, 4 hidden], the paper's sizes) at a full batch of 500 and at the 128 and 32 rows
that the length-sorted chunks' tail steps hold; ViLT-B/32's three layer matmuls at 384 px, batch
4 (740 tokens). Each round times every shape's two sides one after another, best of `--reps`
calls; a ratio is torch's seconds over XLA's (above 1: XLA faster), the figures medians over rounds.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import record  # noqa: E402
import torch  # noqa: E402
from bench_train import pin_threads  # noqa: E402
from jax_vqa import timed  # noqa: E402

from experiments.vqa import deeper_lstm_norm_i  # noqa: E402

VILT_TOKENS = 4 * (40 + (384 // 32) ** 2 + 1)  # batch 4: 40 text tokens, 144 patches and the class token


def shapes() -> dict:
  """{what: (rows, inner, columns)} of the matmuls timed."""
  m = deeper_lstm_norm_i.get_config().model
  gates = (m.embed_dim + m.lstm_dim, 4 * m.lstm_dim)
  return {"peak, 2048^3": (2048, 2048, 2048),
          **{f"LSTM gates, {rows} rows": (rows, *gates) for rows in (500, 128, 32)},
          "ViLT-B attention in, q k v": (VILT_TOKENS, 768, 3 * 768),
          "ViLT-B MLP up": (VILT_TOKENS, 768, 3072),
          "ViLT-B MLP down": (VILT_TOKENS, 3072, 768)}


def best(fn, reps: int) -> float:
  """The fewest seconds of `reps` calls of `fn` (after one call)."""
  fn()
  return min(timed(fn) for _ in range(reps))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--reps", type=record.count, default=10, help="timed calls per side, shape and round (the best counts)")
  parser.add_argument("--threads", type=record.count, default=len(os.sched_getaffinity(0)))
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  threads = pin_threads(args.threads)
  rng, mm, sizes = np.random.default_rng(0), jax.jit(lambda x, w: x @ w), shapes()
  sides = {}
  for what, (m, k, n) in sizes.items():
    x, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    ours, theirs = (jnp.asarray(x), jnp.asarray(w)), (torch.from_numpy(x), torch.from_numpy(w))
    np.testing.assert_allclose(np.asarray(mm(*ours)), torch.mm(*theirs).numpy(), rtol=1e-4, atol=1e-3 * k ** 0.5)
    sides[what] = (2 * m * k * n, lambda ours=ours: mm(*ours).block_until_ready(), lambda t=theirs: torch.mm(*t))
  rates = {what: ([], []) for what in sides}
  for r in range(args.rounds):
    for what, (flops, xla, torch_mm) in sides.items():
      rates[what][0].append(flops / best(xla, args.reps) / 1e9)
      rates[what][1].append(flops / best(torch_mm, args.reps) / 1e9)
    print(f"round {r + 1}: " + ", ".join(f"{what} {ours[-1]:.0f} / {theirs[-1]:.0f}"
                                         for what, (ours, theirs) in rates.items()) + " GFLOP/s (XLA / torch)",
          flush=True)
  print(f"\nthreads: {threads}; devices: {jax.devices()[0].platform}; {args.rounds} rounds, best of {args.reps} calls")
  rows = []
  for what, (ours, theirs) in rates.items():
    ratios = np.array(ours) / np.array(theirs)
    m, k, n = sizes[what]
    print(f"{what:28s} [{m}, {k}] x [{k}, {n}]: XLA {np.median(ours):5.0f}, torch {np.median(theirs):5.0f} GFLOP/s; "
          f"XLA vs torch {np.median(ratios):4.2f}x")
    rows += [record.row(f"f32 matmul, {what} [{m}, {k}] x [{k}, {n}]: XLA", np.median(ours), "GFLOP/s", rounds=ours),
             record.row(f"f32 matmul, {what} [{m}, {k}] x [{k}, {n}]: torch", np.median(theirs), "GFLOP/s",
                        rounds=theirs),
             record.row(f"f32 matmul, {what}: XLA vs torch, the same threads", np.median(ratios), "x",
                        rounds=ratios)]
  record.write(args.json, "bench_matmul", rows, peak=np.median(rates["peak, 2048^3"][0]) * 1e9)


if __name__ == "__main__":
  main()
