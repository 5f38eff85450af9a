"""Opening a workdir's run to train or evaluate it, one way for both: its lock, the
experiment checked against what the run recorded, and its checkpoints."""

from __future__ import annotations

import contextlib
import os

import jax

from vqajax.core import checkpoint, run_record
from vqajax.core.experiment import Experiment


def held(workdir: str, command: str):
  """`with held(workdir, "vqajax train"):` the workdir's lock, taken by process 0 (the one that
  writes its files); the other processes hold nothing."""
  return run_record.WorkdirLock(workdir, command) if jax.process_index() == 0 else contextlib.nullcontext()


def experiment(task, config, workdir: str, devices=None, hint: str | None = None) -> Experiment:
  """`Experiment.build`, refused when `workdir` records another run or other encoders than its
  data gives now (the error ends with `hint`, what to do); `hint` None: not checked."""
  exp = Experiment.build(task, config, devices)
  if hint is not None:
    run_record.check_same_run(workdir, config, task.sizes(exp.data), hint)
    run_record.check_encoders(workdir, config.task, exp.data.encoders.tables(), hint)
  return exp


def checkpointer(workdir: str, config, task) -> checkpoint.Checkpointer:
  """The run's checkpoints: the last `config.keep_checkpoints` and the best by `config.best_metric`."""
  return checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints, config.best_metric,
                                 config.best_mode)
