"""The default evaluator type, "task" (`config.evals.NAME.type`, `core/evals.py`): the task's
masked metric sums under jit over its val split, the metrics it computes on the host and its
results files.

An evaluator type is a class built as `Type(task, config, data, model, mesh, features, spec)`
(`config` with the `data` of its split, `data` the task's data of that split, `features` the
feature table on the devices or None, `spec` its `evals.Spec`) with `spec`,
`run(params, step, workdir=None) -> {metric: value}` (with `workdir`, also its files of that
step, under `spec.results_dir`), and the static `metrics(task)` (a regular expression of its
metric names) and `table(task, name, metrics)` (its console table).
"""

from __future__ import annotations

import functools
import time
from typing import Mapping

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from vqajax.core import device_features, pipeline, sharding
from vqajax.core.task import Task


class Evaluator:
  """`run(params, step) -> {name: value}` over the val split of `data` (of one evaluation,
  `spec`, an `evals.Spec`); optionally writes its results."""

  def __init__(self, task: Task, config, data, model, mesh, features, spec):
    self.task, self.config, self.data, self.mesh, self.features, self.spec = task, config, data, mesh, features, spec
    self.keys = self.task.eval_keys(data)
    eval_step = self.task.make_eval_step(model, data, mesh)
    step = jax.jit(sharding.in_mesh(mesh, lambda params, batch, table=None: eval_step(
        params, device_features.step_batch(batch, features, table))))
    # the table is an argument (keeping its sharding), not a constant copied into the program
    self._eval_step = step if features is None else functools.partial(step, table=features.table)

  def run(self, params, step: int, workdir: str | None = None) -> dict[str, float]:
    """The task's metrics; with `workdir`, also its results files of this step (and the
    metrics the task computes from them)."""
    began, totals, kept = time.perf_counter(), None, []
    batch_size = sharding.padded_batch_size(self.config.eval_batch_size, self.mesh)
    arrays, store, keys = device_features.host_inputs(self.data, self.features, "val", self.keys)
    for local in pipeline.eval_batches(arrays, store, batch_size, keys, self.task.LENGTHS):
      batch = sharding.to_global(local, self.mesh)
      predictions, sums = self._eval_step(params, batch)
      totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
      if workdir is not None:
        kept.append((predictions, batch["mask"]))
    metrics = self.task.summarise(jax.device_get(totals))
    if workdir is not None:
      writing = time.perf_counter()
      metrics.update(self._write_results(kept, self.spec.results_dir(workdir, step), step, metrics))
      logging.info("step %d: %s results files in %.2f s", step, self.spec.name, time.perf_counter() - writing)
    logging.info("step %d: %s evaluation in %.2f s", step, self.spec.name, time.perf_counter() - began)
    return metrics

  def _write_results(self, kept, out_dir, step, metrics) -> dict[str, float]:
    """Process 0 writes the results; returns the metrics the task computed from them."""
    predictions = _gathered(kept)
    if jax.process_index() > 0:
      return {}
    return self.task.write_results(out_dir, self.config, self.data, predictions, {"step": step, **metrics}) or {}

  @staticmethod
  def metrics(task: Task) -> str:
    """A regular expression of its metric names (what `config.best_metric` may name)."""
    return task.METRICS

  @staticmethod
  def table(task: Task, name: str, metrics: Mapping[str, float]) -> str:
    """Its metrics as a Markdown table for the console."""
    return task.table(name, metrics)


def _gathered(kept) -> dict[str, np.ndarray]:
  """The (predictions, mask) of every batch as host arrays of the unmasked rows in split
  order, gathered from every host (each process takes part)."""
  gathered = [jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), item)
              for item in kept]
  mask = np.concatenate([m for _, m in gathered]).astype(bool)
  return {k: np.concatenate([p[k] for p, _ in gathered])[mask] for k in gathered[0][0]}
