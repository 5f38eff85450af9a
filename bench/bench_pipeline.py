"""Input pipeline: throughput alone vs the model's consumption, and peak RSS while training
from a feature store of 8 GB.

    python bench/bench_pipeline.py [--store-gb 8] [--format h5|npy] [--dtype float32]
                                   [--dir /tmp] [--train-steps 8]

Writes a store of --store-gb GB of random 4096-d features (--dtype) block by block into a
temporary directory under --dir (cut to what fits with 2 GB to spare, which is printed)
and deletes it at the end; one question per stored image (VQA-like lengths, vocabulary
15k, K 1000), so one epoch reads every image once. Then a fresh process, whose peak RSS
is the training process's alone, runs:

1. `pipeline.train_dataset` (batch 500, tf.data) alone for one epoch: examples/s;
2. deeper LSTM Q + norm I (the paper's config, the jitted step of `vqajax.core.train`) trained
   for --train-steps steps on that pipeline, after compiling every length bucket:
   examples/s, i.e. the rate at which the model consumes input;

and prints the ratio of 1. to 2. (target >= 10x) and its peak RSS (target <= 2 GB) last.
The worker runs twice with one persistent compilation cache (as `vqajax train` has by
default): the first compiles the step, the second, like a restarted run, loads it; XLA's
compiler alone takes ~0.5 GB at its peak.
The store was just written, so it is read from the page cache when RAM holds it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/

BATCH, VOCAB, ANSWERS, DIM, MAX_LEN = 500, 15000, 1000, 4096, 26
SPARE_BYTES = 2 * 2**30


def write_store(path: str, rows: int, dtype: str) -> None:
  """`rows` random feature rows in the layout of `vqajax.features.store.write_store`,
  written a block at a time (the store need not fit in memory)."""
  block = np.random.default_rng(0).random((4096, DIM), np.float32).astype(dtype)
  if path.endswith(".h5"):
    with h5py.File(path, "w") as f:
      features = f.create_dataset("features", (rows, DIM), dtype)
      for start in range(0, rows, len(block)):
        features[start:start + len(block)] = block[:rows - start] + np.asarray(start % 7, dtype)
      f.create_dataset("image_ids", data=np.arange(rows, dtype=np.int64))
  else:
    with open(path, "wb") as f:
      np.lib.format.write_array_header_1_0(f, dict(np.lib.format.header_data_from_array_1_0(block),
                                                   shape=(rows, DIM)))
      for start in range(0, rows, len(block)):
        f.write((block[:rows - start] + np.asarray(start % 7, dtype)).tobytes())
    np.save(path[:-len(".npy")] + ".image_ids.npy", np.arange(rows, dtype=np.int64))


def rss(field: str = "VmHWM") -> int:
  """This process's peak (VmHWM; unlike ru_maxrss, not inherited through fork + exec from
  the parent that wrote the store) or current (VmRSS) resident set, in bytes."""
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def worker(store_path: str, train_steps: int) -> dict:
  """Pipeline alone for an epoch, then training on it; runs in its own process."""
  import jax
  from jax_vqa import JaxTrainer, vqa_lengths

  from experiments.vqa import deeper_lstm_norm_i
  from vqajax.core import pipeline, sharding
  from vqajax.features.store import FeatureStore

  store = FeatureStore(store_path)
  n = len(store.image_ids)
  rng = np.random.default_rng(0)
  lengths = vqa_lengths(rng, n)
  tokens = rng.integers(2, VOCAB, (n, MAX_LEN)).astype(np.int32)
  tokens[np.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0
  arrays = {"tokens": tokens, "length": lengths, "label": rng.integers(0, ANSWERS, n).astype(np.int32),
            "image_row": store.rows(store.image_ids).astype(np.int32)}

  phases = {"imports and question arrays": rss("VmRSS")}
  batches = pipeline.train_dataset(arrays, store, BATCH, seed=0, start_step=0).as_numpy_iterator()
  epoch = n // BATCH
  start = time.perf_counter()
  for _ in range(epoch):
    next(batches)
  pipeline_rate = epoch * BATCH / (time.perf_counter() - start)
  phases["the pipeline's epoch"] = rss()

  mesh = sharding.data_mesh()
  example = next(batches)
  trainer = JaxTrainer(deeper_lstm_norm_i.get_config(), VOCAB, ANSWERS, mesh, example)
  for width in (*pipeline.LENGTH_BUCKETS, MAX_LEN):  # compile every bucket
    jax.block_until_ready(trainer.step(sharding.to_global(
        dict(example, tokens=tokens[:BATCH, :width], length=np.minimum(example["length"], width)), mesh)))
  phases["model state and compiling"] = rss()
  start = time.perf_counter()
  for _ in range(train_steps):
    metrics = trainer.step(sharding.to_global(next(batches), mesh))
  jax.block_until_ready(metrics)
  train_rate = train_steps * BATCH / (time.perf_counter() - start)
  return {"rows": n, "pipeline": pipeline_rate, "train": train_rate, "peak_rss": rss(), "phases": phases}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--store-gb", type=float, default=8.0)
  parser.add_argument("--format", choices=("h5", "npy"), default="h5")
  parser.add_argument("--dtype", choices=("float16", "float32"), default="float32")
  parser.add_argument("--dir", default=tempfile.gettempdir())
  parser.add_argument("--train-steps", type=int, default=8)
  parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the measured process
  args = parser.parse_args()
  if args.worker:
    print(json.dumps(worker(args.worker, args.train_steps)))
    return

  row_bytes = DIM * np.dtype(args.dtype).itemsize
  wanted = int(args.store_gb * 2**30)
  size = min(wanted, shutil.disk_usage(args.dir).free - SPARE_BYTES)
  rows = size // row_bytes
  note = "" if size == wanted else f" (cut from {args.store_gb:g} GiB to fit the free disk)"
  with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
    path = os.path.join(tmp, f"features.{args.format}")
    start = time.perf_counter()
    write_store(path, rows, args.dtype)
    store_bytes = sum(e.stat().st_size for e in os.scandir(tmp))
    print(f"wrote {store_bytes / 2**30:.2f} GiB ({rows} x {DIM} {args.dtype}, {args.format}){note} "
          f"in {time.perf_counter() - start:.0f}s", flush=True)
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, "xla"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    result, warm = (json.loads(subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", path, "--train-steps", str(args.train_steps)],
        check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]) for _ in range(2))
  print(f"store {store_bytes / 2**30:.2f} GiB, {result['rows']} images, one question each; batch {BATCH}")
  print(f"pipeline alone     {result['pipeline']:8.0f} examples/s (one epoch)")
  print(f"training on it     {result['train']:8.0f} examples/s ({args.train_steps} steps)")
  print(f"pipeline / model consumption {result['pipeline'] / result['train']:6.1f}x (target >= 10x)")
  print("RSS: " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in result["phases"].items())
        + " (current after the first, peak after the others)")
  print(f"peak RSS while training      {result['peak_rss'] / 2**30:6.2f} GiB compiling the step, "
        f"{warm['peak_rss'] / 2**30:.2f} GiB loading it from the compilation cache (a restarted run; "
        f"target <= 2 GiB)")


if __name__ == "__main__":
  main()
