"""Evaluation: the task's masked metric sums under jit, its results files on the host;
the evaluations of `config.evals` (`core/evals.py`) and `vqajax eval`."""

from __future__ import annotations

import functools
import os
import time

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from vqajax.core import checkpoint, device_features, evals, pipeline, run_record, runs, sharding
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.core.task import Task


class Evaluator:
  """`run(params, step) -> {name: value}` over the val split of `data` (of one evaluation,
  `spec`: by default `val`); optionally writes its results."""

  def __init__(self, task: Task, config, data, model, mesh, features=None, spec: evals.Spec | None = None):
    self.task, self.config, self.data, self.mesh, self.features = task, config, data, mesh, features
    self.spec = spec or evals.Spec(evals.DEFAULT, config.eval_every_steps, "last", {})
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


def _gathered(kept) -> dict[str, np.ndarray]:
  """The (predictions, mask) of every batch as host arrays of the unmasked rows in split
  order, gathered from every host (each process takes part)."""
  gathered = [jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), item)
              for item in kept]
  mask = np.concatenate([m for _, m in gathered]).astype(bool)
  return {k: np.concatenate([p[k] for p, _ in gathered])[mask] for k in gathered[0][0]}


def evaluators(exp: Experiment) -> list[Evaluator]:
  """An evaluator for each evaluation of `exp.config` (`evals.specs`): on the run's
  val split (the feature table on the devices, where it is), or on its own files (its
  features streamed from its store); its files are read here, before anything is written."""
  out = []
  for spec in evals.specs(exp.config):
    if spec.data:
      config = evals.split_config(exp.config, spec, exp.task)
      out.append(Evaluator(exp.task, config, exp.task.load_eval(config, exp.data), exp.model, exp.mesh, spec=spec))
    else:
      out.append(Evaluator(exp.task, exp.config, exp.data, exp.model, exp.mesh, exp.features, spec))
  return out


def run_all(evaluators: list[Evaluator], params, step: int, workdir: str | None = None,
            results: bool = True) -> dict[str, dict[str, float]]:
  """{evaluation: metrics} of each evaluator; with `workdir`, those whose results are due
  (`results`, or its spec's "every") write them."""
  return {e.spec.name: e.run(params, step, workdir if workdir and (results or e.spec.results == "every") else None)
          for e in evaluators}


def prefixed(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
  """{`EVAL/METRIC`: value} of {evaluation: metrics}: the names of metrics.jsonl and the checkpoints."""
  return {f"{name}/{k}": v for name, values in metrics.items() for k, v in values.items()}


def evaluate_checkpoints(task: Task, config, workdir: str, step: int | None = None, every: bool = False
                         ) -> dict[int, dict[str, dict[str, float]]]:
  """Evaluates saved checkpoints of `workdir` (latest, `step`, or all) with every evaluation,
  writing their results; returns {step: {evaluation: metrics}}."""
  with runs.held(workdir, "vqajax eval"):
    return _evaluate(task, config, workdir, step, every)


def _evaluate(task: Task, config, workdir: str, step: int | None, every: bool) -> dict:
  saved = checkpoint.complete_steps(os.path.join(workdir, "checkpoints"))  # before orbax creates anything
  if not saved:
    raise InputError(f"{workdir}: no checkpoints to evaluate")
  if step is not None and step not in saved:
    raise InputError(f"{workdir}: no checkpoint at step {step} (saved: {saved})")
  steps = saved if every else [step if step is not None else max(saved)]
  hint = "eval writes the run's own results: evaluate with its recorded config and data"
  exp = runs.experiment(task, config, workdir, hint=hint)  # its results are the run's
  if jax.process_index() == 0:
    run_record.record_encoders(workdir, config.task, exp.data.encoders.tables())  # a run older than them
  evaluations = evaluators(exp)
  target = exp.initial_state(abstract=True)
  ckpt = runs.checkpointer(workdir, config, task)
  results, failures = {}, []
  try:
    for s in steps:
      try:
        state, _ = ckpt.restore(s, target)
      except Exception as e:  # orbax / tensorstore: many kinds
        failures.append(f"step {s}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        logging.warning("checkpoint at step %d cannot be restored, skipped (%s)", s, failures[-1])
        continue
      results[s] = run_all(evaluations, state.params, s, workdir)
      for e in evaluations:
        logging.info("step %d: %s results in %s", s, e.spec.name, e.spec.results_dir(workdir, s))
  finally:
    ckpt.close()
  if not results:
    raise InputError(f"{workdir}: no checkpoint can be restored with this config ({'; '.join(failures)}); "
                     "without --config, eval uses the run's own (run.json)")
  return results
