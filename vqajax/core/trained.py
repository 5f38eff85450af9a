"""A trained run, for answering new inputs (`vqa/ask.py`, `answertherapy/ask.py`): its
recorded config (run.json), its data as it was trained on and a checkpoint's parameters."""

from __future__ import annotations

import os
from typing import Any, Mapping

from vqajax.core import checkpoint, run_record
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment


def read_config(workdir: str, tasks: Mapping[str, Any]):
  """The locked config of `workdir`'s run; InputError without one or for a task not in `tasks`."""
  if not os.path.isdir(workdir):
    raise InputError(f"{workdir}: no such run")
  config = run_record.read_config(workdir)
  if config is None:
    raise InputError(f"{workdir}: no {run_record.RUN_FILE} (not a vqajax run)")
  if config.task not in tasks:
    raise InputError(f"{workdir}: a {config.task} run; expected a {' or '.join(tasks)} run")
  return config


def restore_params(workdir: str, exp: Experiment, step: int | None):
  """The parameters of checkpoint `step` of `workdir` (default: the latest)."""
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), exp.config.keep_checkpoints)
  try:
    saved = ckpt.steps()
    if not saved:
      raise InputError(f"{workdir}: no checkpoint (train the run first)")
    if step is not None and step not in saved:
      raise InputError(f"{workdir}: no checkpoint at step {step} (saved: {saved})")
    state, _ = ckpt.restore(max(saved) if step is None else step, exp.initial_state(abstract=True))
  finally:
    ckpt.close()
  return state.params


def load(workdir: str, tasks: Mapping[str, Any], step: int | None = None) -> tuple[Experiment, Any, dict]:
  """(experiment, parameters, run.json record) of a trained run of one of `tasks`
  ({config.task: task module}); refused when its data no longer has the recorded sizes."""
  config = read_config(workdir, tasks)
  task = tasks[config.task]
  exp = Experiment.build(task, config)
  run_record.check_same_run(workdir, config, task.sizes(exp.data),
                            "its data changed since it was trained; asking needs the run's own data")
  return exp, restore_params(workdir, exp, step), run_record.read_record(workdir)
