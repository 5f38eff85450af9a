"""Input pipeline: the examples/s the host hands to the step in both feature modes, each
beside the model's consumption rate, and peak RSS while training from a feature store of 8 GB.

    python bench/bench_pipeline.py [--rows 40000] [--grid-rows 4000] [--batch 500]
                                   [--store-gb 8] [--format h5|npy] [--dtype float32]
                                   [--dir /tmp] [--train-steps 8] [--grid-steps 2] [--buckets 0]

1. Device-resident global features (`core.device_features`): a random float16 fc7 table of
   --rows images on the devices; the host's `pipeline.train_batches` sends token ids, labels
   and row ids only (target >= 200k examples/s per host), beside deeper LSTM Q + norm I
   (the paper's config, the step of `vqajax.core.train` gathering the rows) consuming them.
2. Streamed grids, 7x7x512 and 14x14x512 float16 `.npy` stores of --grid-rows images (random
   rows, one read per run of rows, float16 to the step): the host's examples/s (target
   >= 20k), beside the AnswerTherapy grounding classifier (attention over the cells)
   consuming them at its batch of 64.
   Both with 1, 2 and all cores' worth of readers (`train_batches(readers=)`, batches loaded
   at once). Beside the grids' rates, the ceiling this machine sets, measured on one core: one
   numpy copy of a batch's rows (memory bandwidth) and the store's read alone (`pread`s from
   the page cache scattered straight into the batch, and the finite check); the batch reaches the
   step without a copy. Every rate is checked to be positive and finite, and one batch of each mode
   against the arrays / store it came from.
3. Peak RSS: a store of --store-gb GB of random 4096-d features (--dtype, --format) is
   written block by block under --dir (cut to what fits with 2 GB to spare, which is
   printed); a fresh process (whose peak RSS is the training process's alone) reads it for
   one epoch through the streamed pipeline, then trains deeper LSTM Q + norm I on it for
   --train-steps steps after compiling every length bucket (--buckets: the longest N only; a
   step on another bucket compiles and runs untimed, and one more is timed; target <= 2 GiB). It runs twice
   with one persistent compilation cache (as `vqajax train` has by default): the first
   compiles the step, the second, like a restarted run, loads it.
Stores are read from the page cache when RAM holds them (they were just written).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import h5py
import numpy as np
import record

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/

BATCH, VOCAB, ANSWERS, DIM, MAX_LEN = 500, 15000, 1000, 4096, 26
GRID_BATCH, GRID_CHANNELS, ANSWERS_PER_QUESTION, ANSWER_LEN = 64, 512, 4, 6
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


def worker(store_path: str, train_steps: int, config_arg: str, batch: int, buckets: int) -> dict:
  """Pipeline alone for an epoch, then training on it; runs in its own process."""
  import jax
  from jax_vqa import JaxTrainer, peak_device_memory

  from experiments.vqa import deeper_lstm_norm_i
  from vqajax.core import pipeline, sharding
  from vqajax.features.store import FeatureStore
  from vqajax.vqa import task as vqa_task

  store = FeatureStore(store_path)
  n = len(store.image_ids)
  arrays = question_arrays(np.random.default_rng(0), n)
  tokens = arrays["tokens"]

  phases = {"imports and question arrays": rss("VmRSS")}
  batches = pipeline.train_batches(arrays, store, batch, seed=0, start_step=0, keys=vqa_task.TRAIN_KEYS,
                                   lengths=vqa_task.LENGTHS)
  epoch = max(n // batch, 1)
  start = time.perf_counter()
  for _ in range(epoch):
    next(batches)
  pipeline_rate = epoch * batch / (time.perf_counter() - start)
  phases["the pipeline's epoch"] = rss()

  mesh = sharding.data_mesh()
  example = next(batches)
  trainer = JaxTrainer(deeper_lstm_norm_i.get_config(config_arg), VOCAB, ANSWERS, mesh, example)
  widths = (*pipeline.LENGTH_BUCKETS, MAX_LEN)
  compiled = set(widths[-buckets:] if buckets else widths)  # every bucket, or the longest `buckets`
  for width in sorted(compiled):
    jax.block_until_ready(trainer.step(sharding.to_global(
        dict(example, tokens=tokens[:batch, :width], length=np.minimum(example["length"], width)), mesh)))
  phases["model state and compiling"] = rss()
  took, timed, metrics, start = 0.0, 0, None, time.perf_counter()
  while timed < train_steps:
    host = next(batches)
    if host["tokens"].shape[1] not in compiled:  # a bucket --buckets left out: compiled and stepped untimed
      jax.block_until_ready(metrics)
      took += time.perf_counter() - start
      compiled.add(host["tokens"].shape[1])
      jax.block_until_ready(trainer.step(sharding.to_global(host, mesh)))
      start = time.perf_counter()
      continue
    metrics = trainer.step(sharding.to_global(host, mesh))
    timed += 1
  jax.block_until_ready(metrics)
  train_rate = train_steps * batch / (took + time.perf_counter() - start)
  return {"rows": n, "pipeline": pipeline_rate, "train": train_rate, "peak_rss": rss(), "phases": phases,
          "peak_device": peak_device_memory()}




def question_arrays(rng, n: int) -> dict:
  """VQA-like token ids, lengths and labels of `n` questions, one per image (row i)."""
  from jax_vqa import vqa_lengths
  lengths = vqa_lengths(rng, n)
  tokens = rng.integers(2, VOCAB, (n, MAX_LEN)).astype(np.int32)
  tokens[np.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0
  return {"tokens": tokens, "length": lengths, "label": rng.integers(0, ANSWERS, n).astype(np.int32),
          "image_row": np.arange(n, dtype=np.int32)}


def measured(rate: float) -> float:
  if not (np.isfinite(rate) and rate > 0):
    raise RuntimeError(f"not a measurement: {rate}")
  return rate


def host_rate(arrays, store, keys, batch: int, readers: int, check, min_batches: int) -> float:
  """examples/s that `pipeline.train_batches` hands over over an epoch and at least
  `min_batches` batches, after its first batch and those its readers had loaded ahead
  meanwhile (timed, they made 4 of 4 batches look free: 1.5 M examples/s of a 14x14 grid);
  `check(rows, batch)` is called on that first batch."""
  from vqajax.core import pipeline
  from vqajax.vqa import task as vqa_task  # the token arrays are cut to buckets as every task's
  batches = pipeline.train_batches(arrays, store, batch, seed=0, start_step=0, keys=keys,
                                   readers=readers, lengths=vqa_task.LENGTHS)
  check(pipeline.train_rows(len(arrays["label"]), batch, 0, 0), next(batches))
  for _ in range(pipeline.AHEAD_PER_READER * readers):
    next(batches)
  count = max(len(arrays["label"]) // batch, min_batches)
  start = time.perf_counter()
  for _ in range(count):
    next(batches)
  return measured(count * batch / (time.perf_counter() - start))


def model_rate(trainer, batches, steps: int) -> float:
  """examples/s the model consumes: `steps` train steps on global `batches` after a first
  (compiling) one."""
  import jax
  jax.block_until_ready(trainer.step(batches[0]))
  start = time.perf_counter()
  for i in range(steps):
    metrics = trainer.step(batches[i % len(batches)])
  jax.block_until_ready(metrics)
  if not np.isfinite(float(metrics["loss"])):
    raise RuntimeError("the model's loss is not finite")
  return measured(steps * len(batches[0]["label"]) / (time.perf_counter() - start))


def device_resident(rows: int, batch: int, steps: int, readers: list[int], config_arg: str,
                    min_batches: int) -> list[str]:
  """Part 1: host rates with the table on the devices, beside the model's."""
  import jax
  from jax_vqa import JaxTrainer

  from experiments.vqa import deeper_lstm_norm_i
  from vqajax.core import device_features, pipeline, sharding
  from vqajax.core.task import IMAGE_ROW
  from vqajax.vqa import task as vqa_task
  rng = np.random.default_rng(0)
  arrays = question_arrays(rng, rows)
  mesh = sharding.data_mesh()
  table = jax.device_put(rng.random((rows, DIM), np.float32).astype(np.float16), sharding.replicated(mesh))
  features = device_features.DeviceFeatures(table, sharded=False, splits={"train": arrays})
  keys = vqa_task.TRAIN_KEYS + (IMAGE_ROW,)

  def check(rows_, got):
    if "image" in got or not np.array_equal(got[IMAGE_ROW], arrays[IMAGE_ROW][rows_]):
      raise RuntimeError("the device-resident batch is not row ids of its examples")

  lines = [f"{'device-resident fc7':22} host {host_rate(arrays, None, keys, batch, k, check, min_batches):9.0f} examples/s "
           f"with {k} reader{'s' * (k > 1)} (target >= 200k)" for k in readers]
  example = pipeline.example_batch(arrays, None, batch, keys, vqa_task.LENGTHS)
  trainer = JaxTrainer(deeper_lstm_norm_i.get_config(config_arg), VOCAB, ANSWERS, mesh,
                       dict(example, image=np.zeros((batch, DIM), np.float32)), features)
  rate = model_rate(trainer, [trainer.to_device(example)], steps)
  return lines + [f"{'':22} deeper LSTM Q + norm I consumes {rate:9.0f} examples/s here (table gathered "
                  "in the step)"]


def moving_rates(store, batch: int, rounds: int = 5) -> dict[str, float]:
  """examples/s of the least work a streamed batch takes here, one core, median of `rounds`:
  one numpy copy of its rows (this machine's memory bandwidth), and the store's read alone
  (`pread`s of random rows from the page cache into their places, the finite check)."""
  from jax_vqa import timed
  rng = np.random.default_rng(1)
  rows = rng.permutation(len(store.image_ids))[:batch]
  source = store.read(rows, np.float16)
  target = np.empty_like(source)
  times = {"one copy": [], "the store's read": []}
  for _ in range(rounds):
    times["one copy"].append(timed(lambda: np.copyto(target, source)))
    times["the store's read"].append(timed(lambda: store.read(rng.permutation(len(store.image_ids))[:batch],
                                                                np.float16)))
  return {name: measured(len(rows) / float(np.median(t))) for name, t in times.items()}


def streamed_grid(tmp: str, grid: int, rows: int, batch: int, steps: int, readers: list[int],
                  config_arg: str, min_batches: int) -> list[str]:
  """Part 2: host rates streaming a grid store, beside the grounding classifier's."""
  from jax_vqa import JaxTrainer

  from experiments.therapy import grounding_class as grounding_config
  from vqajax.answertherapy import grounding_class
  from vqajax.answertherapy import models as grounding
  from vqajax.core import sharding
  from vqajax.features.store import FeatureStore, write_store_blocks
  from vqajax.vqa import task as vqa_task
  shape, rng = (grid, grid, GRID_CHANNELS), np.random.default_rng(grid)
  path = os.path.join(tmp, f"grid{grid}.npy")
  block = rng.random((256,) + shape, np.float32).astype(np.float16)
  write_store_blocks(path, np.arange(rows), shape, np.float16,
                     (block[:min(len(block), rows - s)] for s in range(0, rows, len(block))))
  store, arrays = FeatureStore(path), question_arrays(rng, rows)

  def check(rows_, got):
    if not np.array_equal(got["image"], store.read(rows_, np.float16)) or got["image"].dtype != np.float16:
      raise RuntimeError("the streamed batch is not its rows of the store")

  name = f"streamed grid {grid}x{grid}x{GRID_CHANNELS}"
  rates = {k: host_rate(arrays, store, vqa_task.TRAIN_KEYS, batch, k, check, min_batches) for k in readers}
  lines = [f"{name:22} host {rate:9.0f} examples/s with {k} reader{'s' * (k > 1)} (target >= 20k)"
           for k, rate in rates.items()]
  row_bytes = store.dtype.itemsize * int(np.prod(store.shape))
  lines += [f"{'':22} ceiling: {what} {rate:9.0f} examples/s ({rate * row_bytes / 1e9:.1f} GB/s; one core)"
            for what, rate in moving_rates(store, batch).items()]
  config = grounding_config.get_config(config_arg)
  model = grounding.build(config.model, types.SimpleNamespace(vocab=range(VOCAB), image_shape=store.shape),
                          "grounding_class")
  lengths = arrays["length"][:GRID_BATCH]
  example = {"tokens": arrays["tokens"][:GRID_BATCH, :16], "length": np.minimum(lengths, 16),
             "answer_tokens": rng.integers(2, VOCAB, (GRID_BATCH, ANSWERS_PER_QUESTION, ANSWER_LEN)).astype(np.int32),
             "answer_length": np.full((GRID_BATCH, ANSWERS_PER_QUESTION), 2, np.int32),
             "answer_valid": np.ones((GRID_BATCH, ANSWERS_PER_QUESTION), bool),
             "label": rng.integers(0, 2, GRID_BATCH).astype(np.int32), "weight": np.ones(GRID_BATCH, np.float32),
             "image": store.read(np.arange(GRID_BATCH), np.float16)}
  trainer = JaxTrainer(config, VOCAB, 2, sharding.data_mesh(), example, model=model, loss=grounding_class.loss)
  rate = model_rate(trainer, [sharding.to_global(example, trainer.mesh)], steps)
  store.close()
  return lines + [f"{'':22} the grounding classifier consumes {rate:9.0f} examples/s here"]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", type=record.count, default=40000)
  parser.add_argument("--grid-rows", type=record.count, default=4000)
  parser.add_argument("--batch", type=record.count, default=BATCH)
  parser.add_argument("--grid-steps", type=record.count, default=2)
  parser.add_argument("--min-batches", type=record.count, default=40, help="host batches per rate, at least")
  parser.add_argument("--config-arg", choices=("", "runlocal"), default="",
                      help="the models' config argument: the paper's sizes, or runlocal's (small runs)")
  parser.add_argument("--store-gb", type=record.amount, default=8.0)
  parser.add_argument("--format", choices=("h5", "npy"), default="h5")
  parser.add_argument("--dtype", choices=("float16", "float32"), default="float32")
  parser.add_argument("--dir", default=tempfile.gettempdir())
  parser.add_argument("--train-steps", type=record.count, default=8)
  parser.add_argument("--buckets", type=int, default=0,
                      help="the longest question-length buckets the peak-RSS run compiles before training "
                           "(default 0: all)")
  record.add_flag(parser)  # the figures below the reader rates, which it prints
  parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the measured process
  args = parser.parse_args()
  if args.worker:
    print(json.dumps(worker(args.worker, args.train_steps, args.config_arg, args.batch, args.buckets)))
    return
  record.begin(args.json)

  readers = sorted({1, 2, os.cpu_count()})
  print(f"readers: 1, 2 and all ({os.cpu_count()} cores here); host batch {args.batch}; models at "
        f"{'the paper' if not args.config_arg else args.config_arg}'s sizes", flush=True)
  for line in device_resident(args.rows, args.batch, args.train_steps, readers, args.config_arg,
                              args.min_batches):
    print(line, flush=True)
  with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
    for grid in (7, 14):
      for line in streamed_grid(tmp, grid, args.grid_rows, args.batch, args.grid_steps, readers,
                                args.config_arg, args.min_batches):
        print(line, flush=True)

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
        [sys.executable, os.path.abspath(__file__), "--worker", path, "--train-steps", str(args.train_steps),
         "--config-arg", args.config_arg, "--batch", str(args.batch), "--buckets", str(args.buckets)],
        check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]) for _ in range(2))
  for figure in (result["pipeline"], result["train"], result["peak_rss"], warm["peak_rss"]):
    measured(figure)
  print(f"store {store_bytes / 2**30:.2f} GiB, {result['rows']} images, one question each; batch {args.batch}")
  print(f"pipeline alone     {result['pipeline']:8.0f} examples/s (one epoch)")
  print(f"training on it     {result['train']:8.0f} examples/s ({args.train_steps} steps)")
  print(f"pipeline / model consumption {result['pipeline'] / result['train']:6.1f}x (target >= 10x)")
  print("RSS: " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in result["phases"].items())
        + " (current after the first, peak after the others)")
  print(f"peak RSS while training      {result['peak_rss'] / 2**30:6.2f} GiB compiling the step, "
        f"{warm['peak_rss'] / 2**30:.2f} GiB loading it from the compilation cache (a restarted run; "
        f"target <= 2 GiB)")
  print(f"peak device memory while training on it: {result['peak_device']}")
  what = f"a {store_bytes / 2**30:.2f} GiB {args.format} store, batch {args.batch}"
  record.write(args.json, "bench_pipeline", [
    record.row(f"the streamed fc7 pipeline alone vs what the model consumes, {what}",
               result["pipeline"] / result["train"], "x", ">= 10x"),
    record.row(f"peak RSS training from {what}, compiling the step", result["peak_rss"] / 2**30, "GiB", "<= 2 GiB"),
    record.row(f"peak RSS training from {what}, the step from the compilation cache", warm["peak_rss"] / 2**30,
               "GiB", "<= 2 GiB"),
  ])


if __name__ == "__main__":
  main()
