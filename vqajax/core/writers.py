"""Metric writers: TensorBoard events and a JSON-lines file in the workdir (the console
gets one line per log step from `train`). Both write to local folders and URLs (`gs://`,
through `core/fs`) and append their records at each write, so a kill loses nothing written.
Neither imports TensorFlow: a TensorBoard event file is TFRecord-framed `Event` protos, which
tensorboard's own record writer and protos write (TensorFlow's import costs seconds of every
training process)."""

from __future__ import annotations

import json
import os
import socket
import time

import jax
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import summary_v2
from tensorboard.summary.writer import record_writer

from vqajax.core import files, fs

HPARAM_TYPES = (bool, int, float, str)  # what TensorBoard's hparams take; anything else as its text


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


class EventWriter:
  """TensorBoard's events of a run: a new `events.out.tfevents.*` file per process start (TensorBoard
  reads a folder's files as one run), scalars as `simple_value`s, the hyperparameters as the hparams
  plugin's summary."""

  def __init__(self, workdir: str):
    name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.vqajax"
    self._path = files.check_output(os.path.join(workdir, name))
    self._write(event_pb2.Event(file_version="brain.Event:2"))

  def _write(self, *events) -> None:
    with fs.open_file(self._path, "ab") as f:
      records = record_writer.RecordWriter(f)
      for event in events:
        event.wall_time = time.time()
        records.write(event.SerializeToString())

  def write_scalars(self, step, scalars):
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(np.asarray(v))) for k, v in scalars.items()]
    self._write(event_pb2.Event(step=int(step), summary=summary_pb2.Summary(value=values)))

  def write_hparams(self, hparams):
    hparams = {k: v if isinstance(v, HPARAM_TYPES) else str(v) for k, v in hparams.items()}
    self._write(event_pb2.Event(summary=summary_v2.hparams_pb(hparams)))


class Writers:
  """Each write to every writer."""

  def __init__(self, writers: list):
    self._writers = writers

  def write_scalars(self, step, scalars):
    for w in self._writers:
      w.write_scalars(step, scalars)

  def write_hparams(self, hparams):
    for w in self._writers:
      w.write_hparams(hparams)


def create(workdir: str, name: str = "metrics.jsonl") -> Writers:
  """Only the first process writes files."""
  if jax.process_index() > 0:
    return Writers([])
  fs.makedirs(workdir)
  return Writers([EventWriter(workdir), JsonlWriter(os.path.join(workdir, name))])
