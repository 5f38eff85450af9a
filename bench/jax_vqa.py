"""The vqajax side of the training benchmarks (no torch): VQA-like batches and the jitted,
sharded step of `vqajax.core.train` on deeper LSTM Q + norm I at given sizes."""

import time
import types

import jax
import numpy as np

from vqajax.core import sharding
from vqajax.core.experiment import TrainState, make_optimizer
from vqajax.core.pipeline import bucket_length
from vqajax.core.train import make_train_step
from vqajax.vqa import models as vqa_models
from vqajax.vqa import task as vqa_task

MAX_LEN = 26


def timed(fn) -> float:
  """Seconds one call of `fn()` takes."""
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def turn(run, steps: int) -> float:
  """Seconds `run(steps)` takes after one untimed `run(1)`: a contender's turn in a round. The step
  right after another library's is slower (its page faults), which a training run that never
  alternates libraries does not pay."""
  run(1)
  return timed(lambda: run(steps))


def peak_device_memory() -> str:
  """The largest peak of allocated memory over this process's local devices, or why none."""
  stats = [d.memory_stats() or {} for d in jax.local_devices()]
  peaks = [s["peak_bytes_in_use"] for s in stats if "peak_bytes_in_use" in s]
  return f"{max(peaks) / 2**30:.2f} GiB" if peaks else f"not reported on {jax.devices()[0].platform}"


def vqa_lengths(rng, n, max_len=MAX_LEN):
  """Question lengths like VQA's: mostly 4-8 words, a long tail up to max_len."""
  return np.clip(np.round(rng.lognormal(np.log(5.8), 0.3, n)), 2, max_len).astype(np.int32)


def make_batches(rng, count, batch, vocab, answers, lengths_fn):
  """Host batches with right-padded tokens [batch, 26]."""
  out = []
  for _ in range(count):
    lengths = lengths_fn(rng, batch)
    tokens = rng.integers(2, vocab, (batch, MAX_LEN)).astype(np.int32)
    tokens[np.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0
    out.append({"tokens": tokens, "length": lengths, "image": rng.random((batch, 4096), np.float32),
                "label": rng.integers(0, answers, batch).astype(np.int32)})
  return out


class JaxTrainer:
  """The jitted, sharded step of `vqajax.core.train` with its own train state."""

  def __init__(self, config, vocab, answers, mesh, example, features=None, model=None, loss=vqa_task.loss):
    """Deeper LSTM Q + norm I of `config` (or `model`, trained on `loss`); with `features`
    (`core.device_features`), batches carry `image_row` and `example` its `image`."""
    sizes = types.SimpleNamespace(vocab=range(vocab), answers=range(answers),
                                  bag_sizes={"question_bow": 1030}, image_shape=(4096,))  # what build reads
    model, tx = model or vqa_models.build(config.model, sizes), make_optimizer(config.optimizer)
    example = {k: v[:2] for k, v in example.items()}  # shapes only, as `Experiment.initial_state`
    params = jax.jit(lambda: model.init(jax.random.key(0), example, train=False)["params"])()
    self.state = jax.device_put(TrainState(step=np.int32(0), params=params, opt_state=jax.jit(tx.init)(params),
                                           rng=jax.random.PRNGKey(1)), sharding.replicated(mesh))
    self.train_step, self.mesh, self.tx = make_train_step(model, tx, mesh, loss, features), mesh, tx
    self.model = model
    self._eval_loss = jax.jit(lambda params, batch: vqa_task.loss(model.apply({"params": params}, batch, train=False),
                                                                  batch))

  def loss(self, batch) -> float:
    """The loss of the current parameters on a host batch, dropout off (no step taken)."""
    return float(self._eval_loss(jax.device_get(self.state.params), batch))

  def to_device(self, batch):
    width = bucket_length(int(batch["length"].max()), MAX_LEN)
    return sharding.to_global(dict(batch, tokens=batch["tokens"][:, :width]), self.mesh)

  def step(self, batch):
    """One step on a global batch; returns its metrics (not waited for)."""
    self.state, metrics = self.train_step(self.state, batch)
    return metrics

  def run(self, batches, steps):
    for i in range(steps):
      metrics = self.step(batches[i % len(batches)])
    jax.block_until_ready(metrics)
