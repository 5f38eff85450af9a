"""A trained run's predictions for a questions-only test file, in the evaluation server's files.

`write(path, tasks, questions)` opens the run (a workdir or a bundle, `core/trained.py`:
read-only, no training data) at one checkpoint (the latest, `step`, or the best by the
run's `config.best_metric`), reads the test file through the task (`Predicts` in `core/task.py`)
with the run's encoders, runs the task's predict step in padded batches and hands the
predictions to the task's writer. The outputs go under `WORKDIR/submissions/<split>/`
(a bundle's: `--out`), never over an input.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from vqajax.core import bundle, files, trained
from vqajax.core.errors import InputError
from vqajax.core.task import Predicts

SUBMISSIONS = "submissions"
RUN_PARTS = ("checkpoints", "results", "run.json", "encoders.json")  # what a submission never touches


def write(path: str, tasks: Mapping[str, Any], questions: str, out_dir: str | None = None,
          step: int | None = None, best: bool = False, data_dir: str | None = None) -> tuple[int, list[str]]:
  """(the step used, the files written) of the predictions for the test file `questions`
  (`data_dir`: a bundle's data folder on this machine)."""
  config = trained.read_config(path, tasks, data_dir)
  if not isinstance(tasks[config.task], Predicts):
    raise InputError(f"config.task '{config.task}' does not predict test files")
  if bundle.is_bundle(path):
    if out_dir is None:
      raise InputError(f"{path}: a bundle is not written into: give --out FOLDER")
    files.protect(questions, path)
  else:  # a workdir takes submissions beside its run, never into it
    files.protect(questions, *(os.path.join(path, name) for name in RUN_PARTS))
  run = trained.open_run(path, tasks, step, best, data_dir=data_dir)
  store = run.store if run.encoders.image_shape is not None else None
  test = run.task.read_test(config, run.encoders, store, questions)
  out_dir = out_dir or os.path.join(path, SUBMISSIONS, test.name)
  files.check_output(out_dir, folder=True)
  inputs = {k: test.arrays[k] for k in (*test.keys, "image_row") if k in test.arrays}
  predictions = run.predict(run.jit(run.task.make_predict_step(run.model)), inputs)
  return run.step, run.task.write_submission(out_dir, config, run.encoders, test, predictions)
