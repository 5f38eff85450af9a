"""The extractor model over image files: decoding in threads, a forward jitted over a 1-D
('data',) mesh of the local devices, features in order (`vqajax ask` on new images, the
embedded datasets' stores; the resumable extraction over a folder,
`data_pipeline/features/extract.py`, runs the same forward).
"""

from __future__ import annotations

import functools
import os
import time
from concurrent import futures
from typing import Callable, Iterator

import flax.linen as nn
import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vqajax.core.errors import InputError
from vqajax.features import images, models

# XLA:CPU hands a convolutional net's layers to YNNPACK as one fusion by default; XLA's own
# convolutions ran VGG16 1.3x faster (bench_extract, a 2-core AMD EPYC, 2026-12-07): on the CPU a
# VGG's forward compiles without YNNPACK fusions, where this jaxlib knows the option.
_XLA_CONVOLUTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.cache
def _known(option: str, value: str) -> bool:
  """Whether XLA takes the compile option (an experimental one may go in another jaxlib)."""
  try:
    jax.jit(lambda x: x + 1, compiler_options={option: value})(0)
    return True
  except jax.errors.JaxRuntimeError:
    return False


def compiler_options(model: nn.Module) -> dict:
  """The compile options of `model`'s forward on this backend."""
  if jax.default_backend() != "cpu" or not isinstance(model, models.VGG):
    return {}
  return {k: v for k, v in _XLA_CONVOLUTIONS.items() if _known(k, v)}


class Progress:
  """A line every `every` images (`say`: the log by default): done / total, rate and ETA.
  From the `warmup`-th image on, the rate counts from there (the first batches pay
  compiling, and the decoder filled its lookahead meanwhile), so the first ETA holds."""

  def __init__(self, total: int, every: int, warmup: int, say: Callable[[str], None] = logging.info):
    self.total, self.every, self.warmup, self.done, self._next = total, every, warmup, 0, every
    self._start = (time.monotonic(), 0)  # (time, images done then)
    self.say = say

  def add(self, count: int) -> None:
    self.done += count
    if self.done >= self._next or self.done == self.total:
      self._next = self.done + self.every
      start, before = self._start
      rate = (self.done - before) / max(time.monotonic() - start, 1e-9)
      eta = time.strftime("%H:%M:%S", time.gmtime((self.total - self.done) / rate))
      self.say(f"{self.done} / {self.total} images, {rate:.1f} images/s, ETA {eta}")
    if not self._start[1] and self.done >= self.warmup:
      self._start = (time.monotonic(), self.done)


class Forward:
  """The model jitted over a 1-D ('data',) mesh of the local devices; `batch` is the
  requested batch rounded up to a multiple of the device count."""

  def __init__(self, model: nn.Module, params, batch: int):
    devices = jax.local_devices()
    self.batch = -(-batch // len(devices)) * len(devices)
    mesh = Mesh(np.array(devices), ("data",))
    self._data, replicated = NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())
    self._forward = jax.jit(lambda p, x: model.apply({"params": p}, x), in_shardings=(replicated, self._data),
                            out_shardings=self._data, compiler_options=compiler_options(model))
    self._params = jax.device_put(params, replicated)

  def __call__(self, inputs: np.ndarray) -> jax.Array:
    """The outputs of a [batch, size, size, channels] input batch (dispatched, not fetched)."""
    return self._forward(self._params, jax.device_put(inputs, self._data))


def input_batches(paths: list[str], batch: int, preprocess: str, image_size: int
                  ) -> Iterator[tuple[int, np.ndarray]]:
  """(n, [batch, *images.input_shape] inputs of the next n image files, zeros after them) in order,
  decoded by a thread pool; a file that cannot be decoded is an InputError naming it."""
  def load(path: str) -> np.ndarray:
    try:
      return images.load(path, preprocess, image_size)
    except images.UnreadableImage as e:
      raise InputError(f"{path}: not a readable image ({e})") from None

  with futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for start in range(0, len(paths), batch):
      chunk = paths[start:start + batch]
      inputs = np.zeros((batch, *images.input_shape(preprocess, image_size)), np.float32)
      for i, pixels in enumerate(pool.map(load, chunk)):
        inputs[i] = pixels
      yield len(chunk), inputs


def feature_batches(paths: list[str], forward: Forward, preprocess: str, image_size: int, dtype: str
                    ) -> Iterator[np.ndarray]:
  """Float32 features of image files as `extract` stores them (cast to its `dtype`), in
  order, one forward batch at a time (a caller of long work counts them: `Progress`); a file
  that cannot be decoded is an InputError naming it."""
  for n, inputs in input_batches(paths, forward.batch, preprocess, image_size):
    yield np.asarray(jax.device_get(forward(inputs)))[:n].astype(dtype).astype(np.float32)
