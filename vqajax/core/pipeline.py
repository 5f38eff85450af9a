"""Per-host input: a deterministic, resumable train stream and padded eval batches.

The train stream is a function of (seed, step): epoch e visits the questions in the
order of a permutation seeded by (seed, e), so the input position of a checkpoint is
just its step. Each host reads its own slice of every global batch.

A batch is numpy fancy indexing plus a feature store's reads (h5py, `pread`s), so it is
loaded by a few threads, in order, some batches ahead (`Batches`); tf.data could only wrap
the same Python in `numpy_function`, with a copy, and its iterators hang the exit when
Python's teardown destroys them. A loader's InputError comes out of `next` as itself.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import os
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import jax
import numpy as np

from vqajax.core.task import IMAGE_ROW, LABEL

LENGTH_BUCKETS = (8, 12, 16)  # and the padded length itself


def bucket_length(longest: int, max_len: int) -> int:
  """The shortest bucket that holds `longest` words: a few static shapes for jit."""
  return next((b for b in LENGTH_BUCKETS if longest <= b < max_len), max_len)


class _Loader:
  """Gathers rows of the split arrays (those of `keys` that it has) and their image features
  (none when `store` is None: text-only data).

  The token arrays of `lengths` ({token array: its lengths' array}, the task's `LENGTHS`)
  are cut to the length bucket of the longest row in the GLOBAL batch, which every host
  can tell from the global rows, so all hosts agree on the shape.
  """

  def __init__(self, arrays: dict[str, np.ndarray], store, keys: Sequence[str],
               lengths: Mapping[str, str] | None = None):
    self.arrays, self.store = arrays, store
    self.keys = tuple(k for k in keys if k in arrays)
    self.lengths = {k: n for k, n in (lengths or {}).items() if k in self.keys}

  def __call__(self, global_rows: np.ndarray, host: slice = slice(None)) -> dict[str, np.ndarray]:
    rows = global_rows[host]
    batch = {k: self.arrays[k][rows] for k in self.keys}
    for k, length in self.lengths.items():
      longest = int(self.arrays[length][global_rows].max())
      batch[k] = batch[k][:, :bucket_length(longest, batch[k].shape[1])]
    if self.store is not None:
      batch["image"] = self.store.read(self.arrays[IMAGE_ROW][rows], self.store.dtype)  # float32 in the step
    return batch


AHEAD_PER_READER = 2  # batches loaded ahead per reader thread


class Batches(Iterator[dict[str, np.ndarray]]):
  """`load(step)` for each of `steps`, in order, `readers` threads loading up to
  `AHEAD_PER_READER` times as many batches ahead; `close()` (or the end) drops what is ahead.
  At a program's exit the threads finish the batches they hold and end, so a batches left
  open never holds the exit."""

  def __init__(self, load: Callable[[int], dict], steps: Iterable[int], readers: int | None = None):
    readers = readers or min(8, os.cpu_count() or 1)
    self._load, self._steps = load, iter(steps)
    self._pool = concurrent.futures.ThreadPoolExecutor(readers, thread_name_prefix="vqajax-input")
    first = itertools.islice(self._steps, AHEAD_PER_READER * readers)
    self._ahead = collections.deque(self._pool.submit(load, s) for s in first)

  def __next__(self) -> dict[str, np.ndarray]:
    if not self._ahead:
      raise StopIteration
    step = next(self._steps, None)
    if step is not None:
      self._ahead.append(self._pool.submit(self._load, step))
    try:
      return self._ahead.popleft().result()
    except BaseException:
      self.close()
      raise

  def close(self) -> None:
    self._ahead.clear()
    self._pool.shutdown(wait=False, cancel_futures=True)


def example_batch(arrays, store, n: int, keys: Sequence[str], lengths: Mapping[str, str] | None = None
                  ) -> dict[str, np.ndarray]:
  """`n` train rows (repeated if the split is smaller), for shape inference (model init)."""
  return _Loader(arrays, store, keys, lengths)(np.arange(n) % len(arrays[LABEL]))


def _host_slice(global_batch: int) -> slice:
  local = global_batch // jax.process_count()
  return slice(jax.process_index() * local, (jax.process_index() + 1) * local)


@functools.lru_cache(maxsize=4)
def _epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The visiting order of one epoch, made once (not per batch)."""
  order = np.random.default_rng([seed, epoch]).permutation(num_examples)
  order.flags.writeable = False
  return order


def train_rows(num_examples: int, global_batch: int, seed: int, step: int) -> np.ndarray:
  """Rows of global batch `step` of the endless shuffled stream (repeat, then batch)."""
  positions = step * global_batch + np.arange(global_batch, dtype=np.int64)
  epochs, offsets = np.divmod(positions, num_examples)
  rows = np.empty(global_batch, np.int64)
  for epoch in np.unique(epochs):
    rows[epochs == epoch] = _epoch_order(num_examples, seed, int(epoch))[offsets[epochs == epoch]]
  return rows


def train_batches(arrays, store, global_batch: int, seed: int, start_step: int, keys: Sequence[str],
                  readers: int | None = None, lengths: Mapping[str, str] | None = None) -> Batches:
  """This host's train batches from `start_step` on (endless), loaded by `readers` threads
  (`Batches`); `lengths`: the token arrays cut to length buckets (`_Loader`)."""
  n, host = len(arrays[LABEL]), _host_slice(global_batch)
  loader = _Loader(arrays, store, keys, lengths)
  return Batches(lambda step: loader(train_rows(n, global_batch, seed, step), host), itertools.count(start_step),
                 readers)


def eval_batches(arrays, store, global_batch: int, keys: Sequence[str], lengths: Mapping[str, str] | None = None
                 ) -> Batches:
  """This host's slices of the eval batches, in file order; the last one padded, with `mask`."""
  n, host = len(next(iter(arrays.values()))), _host_slice(global_batch)  # one row per example
  loader = _Loader(arrays, store, keys, lengths)

  def load(step: int) -> dict[str, np.ndarray]:
    positions = step * global_batch + np.arange(global_batch)
    return {**loader(np.minimum(positions, n - 1), host), "mask": (positions < n)[host]}

  return Batches(load, range(-(-n // global_batch)))
