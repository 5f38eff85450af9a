"""Per-host tf.data input: deterministic, resumable train stream and padded eval batches.

The train stream is a function of (seed, step): epoch e visits the questions in the
order of a permutation seeded by (seed, e), so the input position of a checkpoint is
just its step. Each host reads its own slice of every global batch. TensorFlow is imported
when the first dataset is made (`runtime.tensorflow`), so a bad input fails before it.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

import jax
import numpy as np

from vqajax.core import runtime
from vqajax.core.errors import InputError
from vqajax.core.task import IMAGE_ROW, LABEL

if TYPE_CHECKING:
  import tensorflow as tf

# InputErrors raised by loaders inside tf.data's threads, newest last.
_FAILED: list[InputError] = []
_FAILED_LOCK = threading.Lock()

# `numpy_batches` not run to their end yet, closed at exit (`_close_open_batches`).
_OPEN: weakref.WeakSet = weakref.WeakSet()

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

  def tf_map(self, make_rows, host: slice):
    """A tf.data map fn: step -> this host's batch, from the global `make_rows(step)`."""
    tf = runtime.tensorflow()
    example = self(make_rows(np.int64(0)), host)
    names = list(example)

    def load(step):
      try:
        batch = self(make_rows(step), host)
      except InputError as e:  # kept, to come out of tf.data as itself (`numpy_batches`)
        with _FAILED_LOCK:
          _FAILED.append(e)
        raise
      return [batch[k] for k in names]

    def fn(step):
      values = tf.numpy_function(load, [step], [tf.as_dtype(example[k].dtype) for k in names])
      for v, k in zip(values, names):
        v.set_shape((None,) * example[k].ndim if k in self.lengths else example[k].shape)
      return dict(zip(names, values))

    return fn


def numpy_batches(ds: tf.data.Dataset) -> Iterator[dict[str, np.ndarray]]:
  """`ds.as_numpy_iterator()`, except that bad input met inside tf.data (an `InputError`
  raised by a loader, e.g. NaN features) comes out as that one-line error again rather
  than as a TensorFlow error wrapping a traceback; closed at exit if still open."""
  batches = _numpy_batches(ds)
  _OPEN.add(batches)
  return batches


@atexit.register
def _close_open_batches() -> None:
  """Closes the batches a program leaves open (a script's globals), letting their tf.data
  iterators go while the interpreter is whole: destroyed by Python's teardown, an iterator
  whose map calls Python (`numpy_function`) hangs the exit (tensorflow/tensorflow#21277)."""
  for batches in list(_OPEN):
    batches.close()


def _numpy_batches(ds: tf.data.Dataset) -> Iterator[dict[str, np.ndarray]]:
  tf = runtime.tensorflow()
  batches = ds.as_numpy_iterator()
  while True:
    try:
      batch = next(batches)
    except StopIteration:
      return
    except tf.errors.OpError:
      with _FAILED_LOCK:
        failed = _FAILED.pop() if _FAILED else None
        _FAILED.clear()
      if failed is None:
        raise
      break
    yield batch
  del batches  # raised from here, the error's traceback does not keep the iterator to the exit
  raise failed


def example_batch(arrays, store, n: int, keys: Sequence[str], lengths: Mapping[str, str] | None = None
                  ) -> dict[str, np.ndarray]:
  """`n` train rows (repeated if the split is smaller), for shape inference (model init)."""
  return _Loader(arrays, store, keys, lengths)(np.arange(n) % len(arrays[LABEL]))


def _host_slice(global_batch: int) -> slice:
  local = global_batch // jax.process_count()
  return slice(jax.process_index() * local, (jax.process_index() + 1) * local)


@functools.lru_cache(maxsize=4)
def _epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The visiting order of one epoch, made once (not per batch: 443k questions take ~10 ms)."""
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


def train_dataset(arrays, store, global_batch: int, seed: int, start_step: int, keys: Sequence[str],
                  readers: int | None = None, lengths: Mapping[str, str] | None = None) -> tf.data.Dataset:
  """This host's train batches from `start_step` on (endless), `readers` batches loaded at once
  (default: tf.data's autotuning); `lengths`: the token arrays cut to length buckets (`_Loader`).
  Iterate it with `numpy_batches`: a program's exit can hang on its own iterator left open."""
  tf = runtime.tensorflow()
  n, host = len(arrays[LABEL]), _host_slice(global_batch)
  loader = _Loader(arrays, store, keys, lengths)
  make_rows = lambda step: train_rows(n, global_batch, seed, int(step))
  return (tf.data.Dataset.range(start_step, np.iinfo(np.int64).max)
          .map(loader.tf_map(make_rows, host), num_parallel_calls=readers or tf.data.AUTOTUNE, deterministic=True)
          .prefetch(tf.data.AUTOTUNE))


def eval_batches(arrays, store, global_batch: int, keys: Sequence[str], lengths: Mapping[str, str] | None = None
                 ) -> Iterator[dict[str, np.ndarray]]:
  """This host's slices of the eval batches, in file order; the last one padded, with `mask`."""
  tf = runtime.tensorflow()
  n, host = len(next(iter(arrays.values()))), _host_slice(global_batch)  # one row per example
  loader = _Loader(arrays, store, keys, lengths)

  def make_rows(step):
    positions = int(step) * global_batch + np.arange(global_batch)
    return np.minimum(positions, n - 1)

  def with_mask(step, batch):
    positions = step * global_batch + tf.range(global_batch, dtype=tf.int64)
    batch["mask"] = (positions < n)[host.start:host.stop]
    return batch

  num_batches = -(-n // global_batch)
  ds = tf.data.Dataset.range(num_batches)
  ds = tf.data.Dataset.zip(ds, ds.map(loader.tf_map(make_rows, host), num_parallel_calls=tf.data.AUTOTUNE,
                                      deterministic=True))
  return numpy_batches(ds.map(with_mask).prefetch(tf.data.AUTOTUNE))
