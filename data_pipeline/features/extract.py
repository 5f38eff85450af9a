"""Image files -> features of a Flax model -> a resumable store (the command's engine).

Images are decoded and preprocessed on the host by a thread pool that works up to two
batches ahead; batches are `jax.jit`-ed over a 1-D ('data',) mesh of all local devices
(the last batch padded: `vqajax/features/forward.py`, which new images go through too),
and the next batch is dispatched before the previous one is fetched, so neither side
waits for the other. Finished rows go to a `ChunkedStore`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import os
import time
from concurrent import futures
from typing import Iterator

import flax.linen as nn
import jax
import numpy as np
from absl import logging

from data_pipeline.features.partial_store import ChunkedStore
from vqajax.core.errors import InputError
from vqajax.features import images
from vqajax.features.forward import Forward, Progress

MAX_CHUNK_BYTES = 2**30  # rows held before a chunk is written (its merge into one array doubles it)


@dataclasses.dataclass
class Summary:
  """What a run did; `unreadable` lists (file, reason)."""
  images: int = 0  # listed
  already: int = 0  # in the store before this run
  extracted: int = 0  # forwarded by this run
  unreadable: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  rows: int = 0  # in the store at the end
  seconds: float = 0.0

  def line(self) -> str:
    rate = self.extracted / self.seconds if self.seconds else 0.0
    return (f"{self.images} images: {self.already} already in the store, {self.extracted} extracted "
            f"({rate:.1f} images/s), {len(self.unreadable)} unreadable and skipped; the store has "
            f"{self.rows} rows")


def checked_ids(paths: list[str]) -> list[int]:
  """The image id of every file; files without an id (all named, up to 5) or two files
  with one id are an error."""
  seen: dict[int, str] = {}
  nameless: list[str] = []
  for path in paths:
    key = images.named_id(path)
    if key is None:
      nameless.append(path)
      continue
    if key in seen:
      raise InputError(f"{path}: image id {key} is also the id of {seen[key]}")
    seen[key] = path
  if len(nameless) == 1:
    images.image_id(nameless[0])  # raises its own one-line error
  if nameless:
    raise InputError(f"{len(nameless)} files have no image id in their name (expected COCO_<split>_<id>.jpg, "
                     f"VizWiz_<split>_<n>.jpg or a name ending in digits): {', '.join(nameless[:5])}"
                     + (", ..." if len(nameless) > 5 else ""))
  return list(seen)


def _decoded(todo: list[tuple[str, int]], preprocess: str, size: int, ahead: int
             ) -> Iterator[tuple[str, int, np.ndarray | None, str]]:
  """(path, id, input or None, reason unreadable) in order, decoded `ahead` images ahead."""
  with futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    pending: collections.deque = collections.deque()
    items = iter(todo)
    for path, key in itertools.islice(items, ahead):
      pending.append((path, key, pool.submit(images.load, path, preprocess, size)))
    while pending:
      path, key, future = pending.popleft()
      for next_path, next_key in itertools.islice(items, 1):
        pending.append((next_path, next_key, pool.submit(images.load, next_path, preprocess, size)))
      try:
        yield path, key, future.result(), ""
      except images.UnreadableImage as e:
        yield path, key, None, str(e)


def extract(paths: list[str], model: nn.Module, params, out: str, settings: dict, *,
            preprocess: str = "vqa", image_size: int = 224, batch: int = 32,
            dtype: str = "float16", chunk: int = 256, log_every: int = 1000) -> Summary:
  """Extracts the features of the images not yet in `out` and merges them in (see module
  and `store` docstrings); `settings` identify the run for resuming."""
  start = time.monotonic()
  ids = checked_ids(paths)
  row_shape = jax.eval_shape(lambda p, x: model.apply({"params": p}, x), params,
                             jax.ShapeDtypeStruct((1, *images.input_shape(preprocess, image_size)), np.float32)).shape[1:]
  row_bytes = np.dtype(dtype).itemsize * math.prod(row_shape)
  if chunk * row_bytes > MAX_CHUNK_BYTES:
    raise InputError(f"--chunk {chunk}: a chunk of {chunk} rows of {dtype} {tuple(row_shape)} would take "
                     f"{chunk * row_bytes / 2**30:.1f} GiB of memory, more than the {MAX_CHUNK_BYTES // 2**30} GiB "
                     f"allowed: give at most {MAX_CHUNK_BYTES // row_bytes}")
  with ChunkedStore(out, settings, row_shape, dtype) as store:  # a failure before a chunk leaves nothing
    todo = [(path, key) for path, key in zip(paths, ids) if key not in store.done]
    summary = Summary(images=len(paths), already=len(paths) - len(todo))

    forward = Forward(model, params, batch)
    batch = forward.batch
    ahead = 2 * batch  # images decoded ahead of the forward
    progress = Progress(len(todo), log_every, warmup=ahead)
    rows: list[tuple[list[int], np.ndarray]] = []  # fetched, not yet in a chunk
    path_of = {key: path for path, key in todo}

    def fetch(keys: list[int], outputs: jax.Array) -> None:
      rows.append((keys, np.asarray(jax.device_get(outputs))[:len(keys)].astype(dtype)))
      progress.add(len(keys))  # counted done when fetched: a batch in flight is still ahead
      if sum(len(k) for k, _ in rows) >= chunk:
        flush()

    def flush() -> None:
      if rows:
        keys = np.concatenate([k for k, _ in rows])
        store.append(keys, np.concatenate([f for _, f in rows]), [path_of[k] for k in keys.tolist()])
        rows.clear()

    in_flight = None
    decoded = _decoded(todo, preprocess, image_size, ahead)
    while True:
      keys, inputs = [], np.zeros((batch, *images.input_shape(preprocess, image_size)), np.float32)
      for path, key, pixels, reason in decoded:
        if pixels is None:
          logging.warning("%s: unreadable, skipped (%s)", path, reason)
          summary.unreadable.append((path, reason))
          progress.add(1)
          continue
        inputs[len(keys)] = pixels
        keys.append(key)
        if len(keys) == batch:
          break
      if not keys:
        break
      outputs = forward(inputs)  # dispatched, runs while we fetch
      if in_flight:
        fetch(*in_flight)
      in_flight = (keys, outputs)
      summary.extracted += len(keys)
    if in_flight:
      fetch(*in_flight)
    flush()
    summary.rows = store.finish()
    summary.seconds = time.monotonic() - start
    return summary
