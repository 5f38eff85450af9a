"""Evaluation: an evaluator for each evaluation of `config.evals` (`core/evals.py`: its type,
e.g. the task's, `core/task_eval.py`), running them at a step, and `vqajax eval`."""

from __future__ import annotations

import os
from typing import Any

import jax
from absl import logging

from vqajax.core import checkpoint, evals, run_record, runs
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.core.task import Task


def evaluators(exp: Experiment) -> list[Any]:
  """An evaluator of its type (`evals.TYPES`) for each evaluation of `exp.config` (`evals.specs`):
  on the run's val split (the feature table on the devices, where it is), or on its own files
  (its features streamed from its store); its files are read here, before anything is written."""
  out = []
  for spec in evals.specs(exp.config):
    kind = evals.TYPES[spec.type]
    if spec.data:
      config = evals.split_config(exp.config, spec, exp.task)
      out.append(kind(exp.task, config, exp.task.load_eval(config, exp.data), exp.model, exp.mesh, None, spec))
    else:
      out.append(kind(exp.task, exp.config, exp.data, exp.model, exp.mesh, exp.features, spec))
  return out


def run_all(evaluators: list, params, step: int, workdir: str | None = None,
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
