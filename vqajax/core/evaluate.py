"""Evaluation: the task's masked metric sums under jit, its results files on the host."""

from __future__ import annotations

import contextlib
import functools
import os
import time

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from vqajax.core import checkpoint, device_features, pipeline, run_record, sharding
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.core.task import Task


class Evaluator:
  """`run(params, step) -> {name: value}` over the val split; optionally writes results."""

  def __init__(self, task: Task, config, data, model, mesh, features=None):
    self.task, self.config, self.data, self.mesh, self.features = task, config, data, mesh, features
    self.keys = self.task.eval_keys(data)
    eval_step = self.task.make_eval_step(model, data, mesh)
    step = jax.jit(sharding.in_mesh(mesh, lambda params, batch, table=None: eval_step(
        params, device_features.step_batch(batch, features, table))))
    # the table is an argument (keeping its sharding), not a constant copied into the program
    self._eval_step = step if features is None else functools.partial(step, table=features.table)

  def run(self, params, step: int, workdir: str | None = None) -> dict[str, float]:
    """The task's metrics; with `workdir`, also its results files of this step."""
    totals, kept = None, []
    batch_size = sharding.padded_batch_size(self.config.eval_batch_size, self.mesh)
    arrays, store, keys = device_features.host_inputs(self.data, self.features, "val", self.keys)
    for local in pipeline.eval_batches(arrays, store, batch_size, keys):
      batch = sharding.to_global(local, self.mesh)
      predictions, sums = self._eval_step(params, batch)
      totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
      if workdir is not None:
        kept.append((predictions, batch["mask"]))
    metrics = self.task.summarise(jax.device_get(totals))
    if workdir is not None:
      began = time.perf_counter()
      metrics.update(self._write_results(kept, step, workdir, metrics))
      logging.info("step %d: results files in %.2f s", step, time.perf_counter() - began)
    return metrics

  def _write_results(self, kept, step, workdir, metrics) -> dict[str, float]:
    """Process 0 writes the results; returns the metrics the task computed from them."""
    predictions = _gathered(kept)
    if jax.process_index() > 0:
      return {}
    return self.task.write_results(os.path.join(workdir, "results", f"step_{step}"), self.config, self.data,
                                   predictions, {"step": step, **metrics}) or {}


def _gathered(kept) -> dict[str, np.ndarray]:
  """The (predictions, mask) of every batch as host arrays of the unmasked rows in split
  order, gathered from every host (each process takes part)."""
  gathered = [jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), item)
              for item in kept]
  mask = np.concatenate([m for _, m in gathered]).astype(bool)
  return {k: np.concatenate([p[k] for p, _ in gathered])[mask] for k in gathered[0][0]}


def predict(step_fn, params, arrays: dict, store, batch_size: int, keys, mesh) -> dict[str, np.ndarray]:
  """`step_fn(params, batch) -> predictions` (jitted here) over every row of `arrays` in
  padded batches, as the eval step runs: {name: host array in row order}."""
  step = jax.jit(sharding.in_mesh(mesh, step_fn))
  kept = []
  for local in pipeline.eval_batches(arrays, store, sharding.padded_batch_size(batch_size, mesh), keys):
    batch = sharding.to_global(local, mesh)
    kept.append((step(params, batch), batch["mask"]))
  return _gathered(kept)


def evaluate_checkpoints(task: Task, config, workdir: str, step: int | None = None, every: bool = False) -> dict:
  """Evaluates saved checkpoints of `workdir` (latest, `step`, or all); returns {step: metrics}."""
  lock = run_record.WorkdirLock(workdir, "vqajax eval") if jax.process_index() == 0 else contextlib.nullcontext()
  with lock:
    return _evaluate(task, config, workdir, step, every)


def _evaluate(task: Task, config, workdir: str, step: int | None, every: bool) -> dict:
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints, task.BEST_METRIC)
  saved = ckpt.steps()
  if not saved:
    raise InputError(f"{workdir}: no checkpoints to evaluate")
  if step is not None and step not in saved:
    raise InputError(f"{workdir}: no checkpoint at step {step} (saved: {saved})")
  steps = saved if every else [step if step is not None else max(saved)]
  exp = Experiment.build(task, config)
  hint = "eval writes the run's own results: evaluate with its recorded config and data"
  run_record.check_same_run(workdir, config, task.sizes(exp.data), hint)  # its results are the run's
  run_record.check_encoders(workdir, config.task, exp.data.encoders.tables(), hint)
  if jax.process_index() == 0:
    run_record.record_encoders(workdir, config.task, exp.data.encoders.tables())  # a run older than them
  evaluator = Evaluator(task, config, exp.data, exp.model, exp.mesh, exp.features)
  target = exp.initial_state(abstract=True)
  results, failures = {}, []
  for s in steps:
    try:
      state, _ = ckpt.restore(s, target)
    except Exception as e:  # pylint: disable=broad-except  # orbax / tensorstore: many kinds
      failures.append(f"step {s}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
      logging.warning("checkpoint at step %d cannot be restored, skipped (%s)", s, failures[-1])
      continue
    results[s] = evaluator.run(state.params, s, workdir=workdir)
    logging.info("step %d: results in %s", s, os.path.join(workdir, "results", f"step_{s}"))
  ckpt.close()
  if not results:
    raise InputError(f"{workdir}: no checkpoint can be restored with this config ({'; '.join(failures)}); "
                     "without --config, eval uses the run's own (run.json)")
  return results
