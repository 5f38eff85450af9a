"""Metric writers: TensorBoard events and a JSON-lines file in the workdir (the console
gets one line per log step from `train`). Both write to local folders and URLs (`gs://`,
through `core/fs`) and append their records at each write, so a kill loses nothing written.
Neither imports TensorFlow, nor tensorboard's stand-in for it, which its record writer and
hparams summaries import (with boto3 where installed: ~0.2 s more CPU for a training process's
imports): an event file is TFRecord-framed `Event` protos, which the protos and `tfrecord` write."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import time

import jax
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from vqajax.core import files, fs

HPARAM_TYPES = (bool, int, float, str)  # what TensorBoard's hparams take; anything else as its text


def _crc32c_table() -> list[int]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli's polynomial, reflected
    table.append(crc)
  return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> bytes:
  crc = crc32c(data)
  return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def tfrecord(data: bytes) -> bytes:
  """One TFRecord: the length (uint64), its masked CRC-32C, the data, the data's masked CRC-32C."""
  length = struct.pack("<Q", len(data))
  return length + _masked_crc(length) + data + _masked_crc(data)


def hparams_summary(hparams: dict) -> summary_pb2.Summary:
  """The hparams plugin's session-start summary of `hparams` ({name: bool, int, float or str}), as
  tensorboard's `hparams_pb` makes it: its group named by the sha256 of the sorted JSON, a
  zero-length float tensor."""
  info = plugin_data_pb2.SessionStartInfo(
      group_name=hashlib.sha256(json.dumps(hparams, sort_keys=True, separators=(",", ":")).encode()).hexdigest(),
      start_time_secs=time.time())
  for name in sorted(hparams):
    field = ("bool_value" if isinstance(hparams[name], bool) else
             "string_value" if isinstance(hparams[name], str) else "number_value")
    setattr(info.hparams[name], field, hparams[name])
  content = plugin_data_pb2.HParamsPluginData(session_start_info=info).SerializeToString()  # version 0
  metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
      plugin_name="hparams", content=content))
  empty = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(
      dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=0)]))
  return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
      tag="_hparams_/session_start_info", metadata=metadata, tensor=empty)])


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
    for event in events:
      event.wall_time = time.time()
    with fs.open_file(self._path, "ab") as f:
      f.write(b"".join(tfrecord(event.SerializeToString()) for event in events))

  def write_scalars(self, step, scalars):
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(np.asarray(v))) for k, v in scalars.items()]
    self._write(event_pb2.Event(step=int(step), summary=summary_pb2.Summary(value=values)))

  def write_hparams(self, hparams):
    hparams = {k: v if isinstance(v, HPARAM_TYPES) else str(v) for k, v in hparams.items()}
    self._write(event_pb2.Event(summary=hparams_summary(hparams)))


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
