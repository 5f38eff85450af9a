"""Training throughput of deeper LSTM Q + norm I vs a PyTorch reference, in examples/s.

    pip install -e '.[bench]'   # torch==2.14.1 (the same pin as the test extra)
    python bench/bench_train.py [--batch 500] [--steps 3] [--rounds 3] [--batches 4] [--vocab 15000]
        [--answers 1000] [--config-arg runlocal]

The paper's sizes (vocabulary ~15k, K=1000, 4096-d features, RMSprop as configured; with
`--config-arg runlocal` the runlocal config's layer widths, as `device_check.sh --tiny`) on
random questions whose lengths follow a VQA-like distribution (mean ~6 words, tail to 26).
vqajax runs the sharded jitted step of `vqajax.core.train` on all local devices (input already
on the host: the input pipeline has its own benchmark); the reference is
`bench/torch_vqa.py`, padded to 26 tokens (the paper's code) and packed. Each round times
every contender on the same batches, one after another, so a ratio compares measurements
taken seconds apart; the figures are medians over rounds.

Fairness: both sides run on the same `--threads` cores (the process is pinned to them;
torch.set_num_threads and XLA's intra-op / Eigen threads are set to that number and
printed); every torch model starts from vqajax's initial parameters, and before timing
the packed model (the same encoding as vqajax's) must give vqajax's loss on one batch
with dropout off (asserted). The padded model under `torch.compile` is a third contender
(reported; the targets stay against eager padded / packed). Also measured:

- at a fixed length of 26, the useful matmul FLOP/s of the f32 step (counted from the
  layer sizes: forward, and backward for weights and activations) as a share of the
  f32 matmul peak, measured on a 2048^3 matmul in the same round;
- the step with bfloat16 matmul inputs (`config.model.dtype`), parameters in f32.
"""

import argparse
import functools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import record  # noqa: E402
import torch  # noqa: E402  (torch and its compiler stack first: the triton extension
import torch._dynamo  # noqa: E402,F401  that torch.optim loads segfaults when loaded after TensorFlow)
from jax_vqa import MAX_LEN, JaxTrainer, make_batches, peak_device_memory, timed, turn, vqa_lengths  # noqa: E402
from torch_vqa import Trainer, load_flax_params  # noqa: E402

from experiments.vqa import deeper_lstm_norm_i  # noqa: E402
from vqajax.core import sharding  # noqa: E402
from vqajax.core.pipeline import bucket_length  # noqa: E402
from vqajax.nn.question import LSTMEncoder  # noqa: E402


def lstm_flops(m, lengths):
  """Useful forward matmul FLOPs of the question LSTM on questions of `lengths` words."""
  words, total, width = int(np.sum(lengths)), 0, m.embed_dim
  for _ in range(m.lstm_layers):
    total += 2 * (width + m.lstm_dim) * 4 * m.lstm_dim * words
    width = m.lstm_dim
  return total


def train_flops(model_cfg, lengths, answers, image_dim=4096):
  """Useful matmul FLOPs of one training step: forward, and backward for weights and inputs."""
  m, lstm = model_cfg, lstm_flops(model_cfg, lengths)
  dims = (m.fused_dim,) + tuple(m.mlp_dims) + (answers,)
  dense = 2 * (2 * m.lstm_layers * m.lstm_dim * m.fused_dim + sum(a * b for a, b in zip(dims[:-1], dims[1:])))
  image = 2 * image_dim * m.fused_dim  # its input is data: no input gradient
  return 3 * len(lengths) * (dense + image) + 3 * lstm - len(lengths) * image


def seconds(fn, *args, reps=3):
  """The best of `reps` timed calls of a jitted `fn` (after one to compile)."""
  jax.block_until_ready(fn(*args))
  return min(timed(lambda: jax.block_until_ready(fn(*args))) for _ in range(reps))


def step_breakdown(trainer, config, vocab, batch, peak):
  """Where the f32 step's time goes on one VQA-like batch: the whole step, the question
  LSTM's forward + backward alone and the optimizer update alone (the rest: embedding
  lookup, image and fusion layers, MLP, classifier and loss)."""
  m = config.model
  encoder = LSTMEncoder(vocab, m.embed_dim, m.lstm_dim, m.lstm_layers)
  tokens, lengths = batch["tokens"][:, :bucket_length(int(batch["length"].max()), MAX_LEN)], batch["length"]
  params = jax.jit(encoder.init)(jax.random.key(0), tokens, lengths)["params"]
  lstm = jax.jit(jax.grad(lambda p, t, n: encoder.apply({"params": p}, t, n).sum()))
  update = jax.jit(lambda p, s: optax.apply_updates(p, trainer.tx.update(p, s, p)[0]))
  times = {"step": seconds(trainer.step, trainer.to_device(batch)),
           "question LSTM fwd + bwd": seconds(lstm, params, tokens, lengths),
           "optimizer update": seconds(update, trainer.state.params, trainer.state.opt_state)}
  times["the rest"] = times["step"] - times["question LSTM fwd + bwd"] - times["optimizer update"]
  lstm_share = 3 * lstm_flops(m, lengths) / times["question LSTM fwd + bwd"] / peak
  return "; ".join(f"{k} {v * 1e3:.0f} ms" + (f" ({v / times['step']:.0%})" if k != "step" else "")
                   for k, v in times.items()) + f"; the LSTM at {lstm_share:.0%} of the matmul peak"


def skinny_matmuls(m, peak, rows=(32, 128, 500)):
  """GFLOP/s of one LSTM step's fused matmul [rows, E + H] x [E + H, 4H] as a share of the
  peak, for row counts the length-sorted chunks run at (the tail steps of a VQA-like
  batch hold few rows)."""
  w = jnp.ones((m.embed_dim + m.lstm_dim, 4 * m.lstm_dim), jnp.float32)
  mm = jax.jit(lambda x, w: x @ w)
  shares = []
  for n in rows:
    x = jnp.ones((n, w.shape[0]), jnp.float32)
    shares.append(f"{n} rows {2 * n * w.size / seconds(mm, x, w, reps=20) / peak:.0%}")
  return ", ".join(shares)


class TorchRunner:

  def __init__(self, trainer, batches):
    self.trainer, self.batches = trainer, [trainer.to_torch(b) for b in batches]

  def run(self, steps):
    for i in range(steps):
      self.trainer.step(*self.batches[i % len(self.batches)])


def pin_threads(threads: int) -> str:
  """Pins this process to `threads` cores and both libraries to `threads` threads (before
  JAX creates its CPU client, which reads XLA_FLAGS); returns what was set."""
  cores = sorted(os.sched_getaffinity(0))[:threads]
  os.sched_setaffinity(0, cores)
  torch.set_num_threads(threads)
  flags = f"--xla_cpu_multi_thread_eigen={str(threads > 1).lower()} intra_op_parallelism_threads={threads}"
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
  return (f"pinned to cores {cores}; torch threads {torch.get_num_threads()} (intra-op), "
          f"{torch.get_num_interop_threads()} (inter-op); XLA_FLAGS {flags}")


def check_same_loss(jax_trainer, torch_trainers, packed, batch) -> str:
  """Copies vqajax's initial parameters into every torch model and asserts that the packed
  one gives vqajax's loss on `batch` (dropout off)."""
  params = jax.device_get(jax_trainer.state.params)
  for trainer in torch_trainers:
    load_flax_params(trainer.model, params)
  ours = jax_trainer.loss(batch)
  packed.model.eval()
  with torch.no_grad():
    theirs = float(packed.loss(*packed.to_torch(batch)))
  packed.model.train()
  assert abs(ours - theirs) <= 1e-4 * max(1.0, abs(ours)), (ours, theirs)
  return f"same initial weights, one batch, dropout off: loss vqajax {ours:.6f}, torch packed {theirs:.6f} (close)"


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=record.count, default=500)
  parser.add_argument("--steps", type=record.count, default=3, help="steps per contender per round")
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--batches", type=record.count, default=4,
                      help="host batches of VQA-like lengths each contender cycles through (each new length bucket "
                           "among them is one more program to compile)")
  parser.add_argument("--vocab", type=record.count, default=15000)
  parser.add_argument("--answers", type=record.count, default=1000)
  parser.add_argument("--threads", type=record.count, default=len(os.sched_getaffinity(0)),
                      help="cores and threads for both sides (default: all this process may use)")
  parser.add_argument("--config-arg", choices=("", "runlocal"), default="",
                      help="the model's sizes: the paper's, or runlocal's (small runs; the optimizer stays the paper's)")
  parser.add_argument("--lstm-impls", default="chunked",
                      help="comma-separated config.model.lstm_impl values: the first is vqajax's main contender, "
                           "each other one an f32 contender beside it")
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  threads = pin_threads(args.threads)
  impl, *others = args.lstm_impls.split(",")

  def row_config(**model):
    config = deeper_lstm_norm_i.get_config().unlock()  # the paper's optimizer on both sides, at any size
    config.model = deeper_lstm_norm_i.get_config(args.config_arg).model.unlock()
    config.model.update({"lstm_impl": impl, **model})
    return config

  config, bf16_config = row_config(), row_config(dtype="bfloat16")
  mesh = sharding.data_mesh()
  rng = np.random.default_rng(0)
  host = make_batches(rng, args.batches, args.batch, args.vocab, args.answers, vqa_lengths)
  host26 = make_batches(rng, 2, args.batch, args.vocab, args.answers,
                        lambda rng, n: np.full(n, MAX_LEN, np.int32))
  jax_f32 = JaxTrainer(config, args.vocab, args.answers, mesh, host[0])
  jax_bf16 = JaxTrainer(bf16_config, args.vocab, args.answers, mesh, host[0])
  jax_others = {name: JaxTrainer(row_config(lstm_impl=name), args.vocab, args.answers, mesh, host[0])
                for name in others}
  batches = [jax_f32.to_device(b) for b in host]
  batches26 = [jax_f32.to_device(b) for b in host26]
  torch_padded = TorchRunner(Trainer(config, args.vocab, args.answers, packed=False), host)
  torch_packed = TorchRunner(Trainer(config, args.vocab, args.answers, packed=True), host)
  torch_compiled = TorchRunner(Trainer(config, args.vocab, args.answers, packed=False, compiled=True), host)
  same_loss = check_same_loss(jax_f32, [r.trainer for r in (torch_padded, torch_packed, torch_compiled)],
                              torch_packed.trainer, host[0])
  contenders = {
      "vqajax f32": functools.partial(jax_f32.run, batches),
      "vqajax bf16": functools.partial(jax_bf16.run, batches),
      "torch padded": torch_padded.run,
      "torch packed": torch_packed.run,
      "torch padded, compiled": torch_compiled.run,
      "vqajax f32, length 26": functools.partial(jax_f32.run, batches26),
      **{f"vqajax f32, {name}": functools.partial(trainer.run, batches) for name, trainer in jax_others.items()},
  }
  jax_f32.run(batches + batches26, len(batches) + len(batches26))  # compile every bucket shape it runs
  for trainer in (jax_bf16, *jax_others.values()):
    trainer.run(batches, len(batches))
  torch_padded.run(1)
  torch_packed.run(1)
  torch_compiled.run(2)  # compiles (the first call) and runs compiled

  rates, peaks = {name: [] for name in contenders}, []
  for r in range(args.rounds):
    for name, run in contenders.items():
      rates[name].append(args.steps * args.batch / turn(run, args.steps))
    peaks.append(record.matmul_peak())
    print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()) + " examples/s; "
          f"matmul peak {peaks[-1] / 1e9:.0f} GFLOP/s", flush=True)

  median = lambda xs: float(np.median(xs))
  per_round = lambda a, b: np.array(rates[a]) / np.array(rates[b])
  ratio = lambda a, b: median(per_round(a, b))
  flops26 = train_flops(config.model, host26[0]["length"], args.answers)
  shares26 = 100 * np.array(rates["vqajax f32, length 26"]) / args.batch * flops26 / np.array(peaks)
  share26 = median(shares26) / 100
  words = np.mean([b["length"].mean() for b in host])
  print(f"\nthreads: {threads}")
  print(same_loss)
  print(f"devices: {mesh.devices.size} x {jax.devices()[0].platform}; lstm_impl {impl}; "
        f"{args.config_arg or 'the paper'}'s layer sizes, batch {args.batch}, vocab {args.vocab}, K {args.answers}, mean question length {words:.1f}; "
        f"{args.rounds} rounds x {args.steps} steps per contender")
  for name in contenders:
    print(f"{name:24s} {median(rates[name]):7.1f} examples/s (median)")
  print(f"f32 matmul peak          {median(peaks) / 1e9:7.0f} GFLOP/s; useful FLOPs per step at length 26: "
        f"{flops26 / 1e9:.0f} G")
  print(f"bf16 vs f32 (vqajax)     {ratio('vqajax bf16', 'vqajax f32'):5.2f}x (reported, no target)")
  for name in others:
    print(f"lstm_impl {name} vs {impl}  {ratio(f'vqajax f32, {name}', 'vqajax f32'):5.2f}x (reported, no target)")
  print(f"length 26: useful FLOP/s {share26:5.0%} of the f32 matmul peak (target >= 75%)")
  print(f"vqajax f32 step, VQA lengths: {step_breakdown(jax_f32, config, args.vocab, host[0], median(peaks))}")
  print(f"one LSTM step's matmul, share of the peak: {skinny_matmuls(config.model, median(peaks))}")
  print(f"vs torch padded          {ratio('vqajax f32', 'torch padded'):5.2f}x (target >= 2.0x)")
  print(f"vs torch packed          {ratio('vqajax f32', 'torch packed'):5.2f}x (target >= 1.5x)")
  print(f"vs torch padded, compiled {ratio('vqajax f32', 'torch padded, compiled'):5.2f}x (reported, no target)")
  print(f"peak device memory       {peak_device_memory()}")
  setting = f"deeper LSTM Q + norm I, {args.config_arg or 'the paper'}'s sizes, batch {args.batch}"
  against = lambda what, a, b, target="": record.row(f"training, {setting}: {what}", ratio(a, b), "x", target,
                                                     per_round(a, b))
  record.write(args.json, "bench_train", [
    *(record.row(f"training, {setting}: {name}", median(rates[name]), "examples/s", rounds=rates[name])
      for name in contenders),
    against("vqajax vs PyTorch padded to 26 (the paper's code)", "vqajax f32", "torch padded", ">= 2.0x"),
    against("vqajax vs PyTorch pack_padded_sequence", "vqajax f32", "torch packed", ">= 1.5x"),
    against("vqajax vs PyTorch padded under torch.compile", "vqajax f32", "torch padded, compiled"),
    against("bf16 vs f32 (vqajax)", "vqajax bf16", "vqajax f32"),
    record.row("useful FLOP/s at question length 26, share of the f32 matmul peak", 100 * share26, "%", ">= 75%",
               shares26),
    record.row("the f32 matmul peak", median(peaks) / 1e9, "GFLOP/s", rounds=np.array(peaks) / 1e9),
  ], peak=median(peaks))


if __name__ == "__main__":
  main()
