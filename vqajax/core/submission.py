"""A workdir's predictions for a questions-only test file, in the evaluation server's files.

`write(task, config, workdir, path)` restores one checkpoint (the latest, `step`, or the
best by the task's val metric), reads the test file through the task (`Predicts` in
`core/task.py`), runs the task's predict step in padded batches exactly as evaluation
does (`evaluate.predict`) and hands the predictions to the task's writer. The outputs go
under `WORKDIR/submissions/<split>/` (or `out_dir`), never over an input.
"""

from __future__ import annotations

import contextlib
import os

import jax

from vqajax.core import checkpoint, evaluate, files, fs, run_record, trained
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.core.task import Predicts, Task

SUBMISSIONS = "submissions"


def write(task: Task, config, workdir: str, path: str, out_dir: str | None = None, step: int | None = None,
          best: bool = False) -> tuple[int, list[str]]:
  """(the step used, the files written) of the predictions for the test file `path`."""
  if not isinstance(task, Predicts):
    raise InputError(f"config.task '{config.task}' does not predict test files")
  files.protect(path)
  lock = run_record.WorkdirLock(workdir, "vqajax submit") if jax.process_index() == 0 else contextlib.nullcontext()
  with lock:
    directory = os.path.join(workdir, "checkpoints")
    if not fs.isdir(directory) or not fs.listdir(directory):  # (orbax would create the folder)
      raise InputError(f"{workdir}: no checkpoint (train the run first)")
    ckpt = checkpoint.Checkpointer(directory, config.keep_checkpoints, task.BEST_METRIC)
    chosen = trained.chosen_step(ckpt, workdir, step, best)
    exp = Experiment.build(task, config)
    run_record.check_same_run(workdir, config, task.sizes(exp.data),
                              "submit predicts with the run's own config (run.json)")
    test = task.read_test(config, exp.data, path)
    out_dir = out_dir or os.path.join(workdir, SUBMISSIONS, test.name)
    files.check_output(out_dir, folder=True)
    state, _ = ckpt.restore(chosen, exp.initial_state(abstract=True))
    ckpt.close()
    predictions = evaluate.predict(task.make_predict_step(exp.model, exp.data, exp.mesh), state.params,
                                   test.arrays, exp.data.store, config.eval_batch_size, test.keys, exp.mesh)
    if jax.process_index() > 0:
      return chosen, []
    return chosen, task.write_submission(out_dir, config, exp.data, test, predictions)
