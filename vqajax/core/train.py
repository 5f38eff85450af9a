"""train_and_evaluate(task, config, workdir): jitted, sharded training with periodic evaluation.

Restarting with the same workdir resumes from the newest checkpoint, including the
input position, so the resumed run sees the batches the interrupted one would have.
The evaluations of `config.evals` (`core/evals.py`) run at their steps; the final step's
write their results files (results/step_N/ for `val`). A checkpoint is saved, in the
background, at every evaluation step, every `config.checkpoint_every_steps` (0: no more),
at the final step and on SIGTERM; `config.profile_steps` traces a window of steps. A run of 0
steps evaluates its start at step 0 and saves it as its one checkpoint (`_untrained`).
"""

from __future__ import annotations

import datetime
import functools
import os
import signal
import time

import jax
import numpy as np
import optax
from absl import logging
from jax.experimental import multihost_utils

from vqajax.core import (
  device_features,
  encoders,
  evals,
  files,
  phases,
  pipeline,
  run_record,
  runs,
  sharding,
  writers,
)
from vqajax.core.errors import RunFailed
from vqajax.core.experiment import Experiment, TrainState, learning_rate
from vqajax.core.task import Task


class NonFiniteLossError(RunFailed):
  """The run diverged: one line for the user (learning rate, clipping, the inputs)."""


def _check_finite(metrics: list[dict], first_step: int, newest_checkpoint: int | None) -> None:
  """Raises NonFiniteLossError naming the first step whose loss or gradient norm is NaN/inf.

  The newest checkpoint is named, not called good: parameters can turn non-finite before
  the loss shows it, so whether it is finite is unknown here.
  """
  for i, m in enumerate(metrics):
    if not (np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"])):
      raise NonFiniteLossError(
          f"non-finite {'loss' if not np.isfinite(m['loss']) else 'gradients'} at step "
          f"{first_step + i}; nothing was saved after it (newest checkpoint: {newest_checkpoint or 'none'}); "
          "lower the learning rate, enable gradient clipping or check the inputs for NaN/inf")


def make_train_step(model, tx, mesh, task_loss, features=None, state_sharding=None):
  """The jitted step `(state, batch)`, the state donated and kept on `state_sharding`
  (`Experiment.state_sharding`; None: replicated); `task_loss(outputs, batch)` is the task's loss.
  With `features` (`device_features`), batches carry `image_row` and the step gathers `image`."""
  replicated, data = sharding.replicated(mesh), sharding.data_sharding(mesh)
  state_sharding = replicated if state_sharding is None else state_sharding
  table = () if features is None else (features.table.sharding,)

  @functools.partial(jax.jit, in_shardings=(state_sharding, data, *table), out_shardings=(state_sharding, replicated),
                     donate_argnums=0)
  @functools.partial(sharding.in_mesh, mesh)
  def train_step(state: TrainState, batch, table=None):
    batch = device_features.step_batch(batch, features, table)
    dropout_rng = jax.random.fold_in(state.rng, state.step)

    def loss_fn(params):
      outputs = model.apply({"params": params}, batch, train=True, rngs={"dropout": dropout_rng})
      return task_loss(outputs, batch)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    return new_state, {"loss": loss, "grad_norm": optax.global_norm(grads)}

  # the table is an argument, not a constant copied into the program
  return train_step if features is None else lambda state, batch: train_step(state, batch, features.table)


class _Progress:
  """One console line per log step: step, loss, steps/s and examples/s since the last line,
  ETA; returns the rates for the writers."""

  def __init__(self, start: int, final: int, batch_size: int):
    self.final, self.batch_size, self.step, self.time = final, batch_size, start, time.monotonic()

  def log(self, step: int, loss: float) -> dict[str, float]:
    now = time.monotonic()
    rate = (step - self.step) / max(now - self.time, 1e-9)
    eta = datetime.timedelta(seconds=round((self.final - step) / max(rate, 1e-9)))
    logging.info("step %d/%d: loss %.4f, %.2f steps/s (%.0f examples/s), ETA %s", step, self.final, loss, rate,
                 rate * self.batch_size, eta)
    self.step, self.time = step, now
    return {"train/steps_per_second": rate, "train/examples_per_second": rate * self.batch_size}


class _Preemption:
  """SIGTERM -> stop after a step on which every process agrees, to save it together.

  One process: a handler sets a flag that the loop reads between steps. Several
  (jax.distributed): the coordination service's notifier catches SIGTERM on any host and
  every host reaches the same sync step (`reached_preemption_sync_point`, to be asked
  at every step); a Python handler would replace the notifier's, so none is set.
  """

  def __init__(self):
    self._sync = jax.process_count() > 1
    self._flag = False
    if not self._sync:
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    del signum, frame
    self._flag = True

  def requested(self, step: int) -> bool:
    return multihost_utils.reached_preemption_sync_point(step) if self._sync else self._flag

  def restore(self):
    if not self._sync:
      signal.signal(signal.SIGTERM, self._previous)


CHANGED_RUN = "use another --workdir, or --allow-changed-run to continue this one with the new settings"


def _first_step(train_step, state, batches, mesh):
  """The first step, its phases timed (its batch, the transfer, compiling and running it) and
  logged with what came before (`core/phases.py`)."""
  with phases.timed("first batch"):
    batch = next(batches)
  with phases.timed("device transfer"):
    batch = jax.block_until_ready(sharding.to_global(batch, mesh))
  with phases.timed("compile + first step"):
    out = jax.block_until_ready(train_step(state, batch))
  logging.info("first step done at %.3f (epoch s), %.1f s of CPU (all threads); startup: %s", time.time(),
               time.process_time(), phases.summary())
  return out


def train_and_evaluate(task: Task, config, workdir: str, devices=None, allow_changed_run: bool = False
                       ) -> dict[str, dict[str, float]]:
  """Trains `config` of `task` in `workdir` on `devices` (default: all); returns the last
  metrics of each evaluation, {evaluation: metrics} (`val` by default). A workdir that
  records another run is refused unless `allow_changed_run`."""
  exp = runs.experiment(task, config, workdir, devices, None if allow_changed_run else CHANGED_RUN)
  evaluators = evals.evaluators(exp)
  with runs.held(workdir, "vqajax train"):
    return _train(exp, evaluators, workdir)


def _train(exp: Experiment, evaluators: list, workdir: str) -> dict:
  record = _run_record(exp, workdir)
  ckpt = runs.checkpointer(workdir, exp.config, exp.task)
  try:
    restored = ckpt.restore_latest(exp.initial_state(abstract=True))
    if restored is None:
      state, start = exp.initial_state(), 0
    else:
      state, meta, start = restored
      logging.info("resumed from checkpoint at step %d (input position %d)", start, meta["input_step"])
    if restored is None and exp.config.num_train_steps == 0:
      return _untrained(exp, evaluators, workdir, record, ckpt, state)
    if start >= exp.config.num_train_steps:  # nothing to train: say so, and finish what a failure left undone
      return _finish(evaluators, state.params, start, exp.config.num_train_steps, workdir, record)
    if jax.process_index() == 0:
      record()
    return _loop(exp, evaluators, workdir, record, ckpt, state, start)
  finally:
    ckpt.close()  # after the save in progress


def _run_record(exp: Experiment, workdir: str):
  """run.json written first of all for a new run (a folder holding run.json is a run:
  `run_record.check_workdir`), the encoders recorded; returns `record(**fields)`, which rewrites it."""
  for folder in ("checkpoints", "results"):  # through a link into an input? refused before training
    files.check_output(os.path.join(workdir, folder), folder=True)
  config, data = exp.config, exp.data
  digest = encoders.digest(config.task, data.encoders.tables())
  extractor = getattr(data.store, "settings", None)  # how the features were made
  record = functools.partial(run_record.write_run_file, workdir, config, exp.task.sizes(data), digest,
                             extractor=extractor)
  if jax.process_index() == 0:
    if run_record.read_record(workdir) is None:
      record()
    run_record.record_encoders(workdir, config.task, data.encoders.tables())
  return record


def _untrained(exp: Experiment, evaluators, workdir: str, record, ckpt, state: TrainState) -> dict:
  """A run of no steps (`num_train_steps` 0: a model evaluated as it starts, e.g. zero-shot from a
  checkpoint): its evaluations at step 0 with their results files, their metrics logged, and its
  initial state saved as the checkpoint of step 0, which every command on a run reads."""
  if jax.process_index() == 0:
    record()
  metrics = evals.run_all(evaluators, state.params, 0, workdir)
  writers.create(workdir).write_scalars(0, _scalars(metrics))
  ckpt.save(0, state, {"input_step": 0, "seed": exp.config.seed}, evals.prefixed(metrics))
  ckpt.wait()
  if jax.process_index() == 0:
    record(finished_step=0)
  return metrics


def _scalars(metrics: dict) -> dict[str, float]:
  """The evaluations' metrics TensorBoard can plot: an undefined one (None, e.g. the precision of a
  class never predicted) is left out."""
  return {k: v for k, v in evals.prefixed(metrics).items() if v is not None}


def _finish(evaluators, params, step: int, final: int, workdir: str, record) -> dict:
  """The evaluations of a run trained to its end; their results files and `finished_step` too
  if a failure left them undone."""
  if run_record.finished_step(workdir) == step:
    logging.info("already finished at step %d (num_train_steps %d)", step, final)
    return evals.run_all(evaluators, params, step)
  metrics = evals.run_all(evaluators, params, step, workdir)
  if jax.process_index() == 0:
    record(finished_step=step)
  return metrics


class _Log:
  """The run's metric writers: train means, learning rate and rates at log steps, evaluations."""

  def __init__(self, config, workdir: str, start: int):
    self.writer = writers.create(workdir)
    if start == 0:
      self.writer.write_hparams({k: v for k, v in config.to_dict().items() if not isinstance(v, dict)})
    self.every, self.final = config.log_every_steps, config.num_train_steps
    self.progress = _Progress(start, self.final, config.batch_size)
    self.schedule = learning_rate(config.optimizer, config.num_train_steps)

  def due(self, step: int) -> bool:
    return step % self.every == 0 or step == self.final

  def train(self, step: int, metrics: list[dict]) -> None:
    means = {f"train/{k}": float(np.mean([m[k] for m in metrics])) for k in metrics[0]}
    lr = self.schedule(step - 1) if callable(self.schedule) else self.schedule  # the last update's
    means["train/learning_rate"] = float(lr)
    self.writer.write_scalars(step, {**means, **self.progress.log(step, means["train/loss"])})

  def evaluations(self, step: int, metrics: dict, best_metric: str) -> dict[str, float]:
    named = evals.prefixed(metrics)
    self.writer.write_scalars(step, _scalars(metrics))
    if best_metric in named:
      logging.info("step %d: %s %.2f", step, best_metric, named[best_metric])
    return named


class _Profile:
  """A profiler trace of the steps `config.profile_steps` (first, last), or of those a resumed run
  reaches, into `workdir`/plugins/profile/ (TensorBoard's profile tab); () traces nothing."""

  def __init__(self, steps, workdir: str):
    self.first, self.last = tuple(steps) or (0, -1)
    self.workdir, self.on = workdir, False

  def before(self, step: int) -> None:
    if not self.on and self.first <= step <= self.last:
      jax.profiler.start_trace(self.workdir)
      self.on = True

  def after(self, step: int, state) -> None:
    if step == self.last:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    if self.on:
      jax.profiler.stop_trace()
      self.on = False


def _loop(exp: Experiment, evaluators, workdir: str, record, ckpt, state: TrainState, start: int) -> dict:
  """Steps `start` + 1 to the end or a SIGTERM: logs, evaluations and checkpoints at their steps."""
  config, task, mesh = exp.config, exp.task, exp.mesh
  final, every = config.num_train_steps, config.checkpoint_every_steps
  train_step = make_train_step(exp.model, exp.tx, mesh, task.make_loss(config), exp.features, exp.state_sharding)
  arrays, store, keys = device_features.host_inputs(exp.data, exp.features, "train", task.TRAIN_KEYS)
  batches = pipeline.train_batches(arrays, store, config.batch_size, config.seed, start, keys, lengths=task.LENGTHS)
  best_metric = config.best_metric
  log, profile, preemption = _Log(config, workdir, start), _Profile(config.profile_steps, workdir), _Preemption()
  metrics, eval_metrics = [], {}
  try:
    for step in range(start + 1, final + 1):
      profile.before(step)
      if step == start + 1:
        state, step_metrics = _first_step(train_step, state, batches, mesh)
      else:
        state, step_metrics = train_step(state, sharding.to_global(next(batches), mesh))
      profile.after(step, state)
      metrics.append(step_metrics)
      last, stop = step == final, preemption.requested(step)
      due = [e for e in evaluators if e.spec.runs_at(step, final)]
      save = bool(due) or stop or last or (every > 0 and step % every == 0)
      if log.due(step) or save:  # never log or save past a NaN
        metrics = jax.device_get(metrics)
        _check_finite(metrics, step - len(metrics) + 1, ckpt.latest_step())
      if log.due(step):
        log.train(step, metrics)
        metrics = []
      named = {}
      if due:  # the final step (and evaluations with results "every") also write results files
        now = evals.run_all(due, state.params, step, workdir, results=last)
        eval_metrics.update(now)
        named = log.evaluations(step, now, best_metric)
      if save:
        ckpt.save(step, state, {"input_step": step, "seed": config.seed}, named)
      if last:
        ckpt.wait()  # the run is finished once its final checkpoint is complete
        if jax.process_index() == 0:
          record(finished_step=step)
      if stop:
        ckpt.wait()
        logging.warning("SIGTERM: saved checkpoint at step %d; rerun the same command to resume", step)
        break
  finally:
    batches.close()
    profile.stop()
    preemption.restore()
  return eval_metrics
