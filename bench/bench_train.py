"""Training throughput of deeper LSTM Q + norm I (the paper's sizes), in examples/s.

    python bench/bench_train.py [--batch 500] [--steps 10] [--vocab 15000] [--answers 1000]

Random questions whose lengths follow a VQA-like distribution (mean ~6 words, tail to
26), 4096-d features, RMSprop; the sharded jitted step of `vqajax.train` on all local
devices, input already on the host (the input pipeline has its own benchmark). Prints
examples/s last; the PyTorch comparison belongs to the performance benchmark.
"""

import argparse
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/

import jax
import numpy as np

from experiments.vqa import deeper_lstm_norm_i
from vqajax import sharding
from vqajax.data.pipeline import bucket_length
from vqajax.experiment import TrainState, make_optimizer
from vqajax.models import vqa as vqa_models
from vqajax.train import make_train_step


def vqa_lengths(rng, n, max_len=26):
  """Question lengths like VQA's: mostly 4-8 words, a long tail up to max_len."""
  return np.clip(np.round(rng.lognormal(np.log(5.8), 0.3, n)), 2, max_len).astype(np.int32)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=500)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--vocab", type=int, default=15000)
  parser.add_argument("--answers", type=int, default=1000)
  args = parser.parse_args()

  config = deeper_lstm_norm_i.get_config()
  mesh = sharding.data_mesh()
  sizes = types.SimpleNamespace(vocab=range(args.vocab), answers=range(args.answers),
                                bag_sizes={"question_bow": 1030})  # what build reads of VQAData
  model = vqa_models.build(config.model, sizes)
  tx = make_optimizer(config.optimizer)
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(4):
    lengths = vqa_lengths(rng, args.batch)
    width = bucket_length(int(lengths.max()), 26)
    tokens = rng.integers(2, args.vocab, (args.batch, width)).astype(np.int32)
    tokens[np.arange(width)[None, :] >= lengths[:, None]] = 0
    batches.append(sharding.to_global({
        "tokens": tokens, "length": lengths,
        "image": rng.random((args.batch, 4096), np.float32),
        "label": rng.integers(0, args.answers, args.batch).astype(np.int32)}, mesh))
  params = jax.jit(lambda: model.init(jax.random.key(0), batches[0], train=False)["params"])()
  state = jax.device_put(TrainState(step=np.int32(0), params=params, opt_state=tx.init(params),
                                    rng=jax.random.PRNGKey(1)), sharding.replicated(mesh))
  step = make_train_step(model, tx, mesh)
  for b in batches:  # compile every bucket shape
    state, _ = step(state, b)
  jax.block_until_ready(state)
  start = time.perf_counter()
  for i in range(args.steps):
    state, metrics = step(state, batches[i % len(batches)])
  jax.block_until_ready(metrics)
  seconds = time.perf_counter() - start
  print(f"devices: {mesh.devices.size} x {jax.devices()[0].platform}; batch {args.batch}, "
        f"vocab {args.vocab}, K {args.answers}, {args.steps} steps in {seconds:.2f}s")
  print(f"training throughput: {args.steps * args.batch / seconds:.1f} examples/s")


if __name__ == "__main__":
  main()
