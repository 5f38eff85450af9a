"""Metric writers: TensorBoard events and a JSON-lines file in the workdir (the console
gets one line per log step from `train`). Both write to local folders and URLs
(`gs://`: TensorBoard through TensorFlow's file systems, the JSON lines through `core/fs`).
clu's writers import TensorFlow: only `create`, when training starts, imports them (a bad
input fails before that, seconds sooner)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import jax
import numpy as np

from vqajax.core import files, fs

if TYPE_CHECKING:
  from clu import metric_writers


class JsonlWriter:
  """Appends one `{"step": s, name: value, ...}` line per write_scalars call; the other
  kinds of summary belong to TensorBoard, so this writer takes only what train writes.
  (In a bucket an append re-uploads the file: cheap at one line per log step.)"""

  def __init__(self, path: str):
    self._path = files.check_output(path)  # not an input (also through a link), a regular file

  def write_scalars(self, step, scalars):
    record = {"step": int(step), **{k: float(np.asarray(v)) for k, v in scalars.items()}}
    with fs.open_file(self._path, "a") as f:
      f.write(json.dumps(record) + "\n")

  def write_hparams(self, hparams):
    del hparams  # recorded in run.json

  def flush(self):
    pass  # every line is written when it comes

  def close(self):
    pass


def create(workdir: str, name: str = "metrics.jsonl") -> metric_writers.MetricWriter:
  """Only the first process writes files."""
  from clu import metric_writers
  if jax.process_index() > 0:
    return metric_writers.MultiWriter([])
  fs.makedirs(workdir)
  return metric_writers.MultiWriter([metric_writers.SummaryWriter(workdir),
                                     JsonlWriter(os.path.join(workdir, name))])
