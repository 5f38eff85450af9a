"""Feeding a ViLT step: a raw uint8 pixel store against encoded JPEGs decoded by tf.data.

  python bench/bench_pixels.py [--images 256] [--size 384] [--batch 32] [--rounds 3] [--step-rate 1500]

Writes `--images` generated photos-like pictures (smooth noise, 640 x 480 JPEG quality 90) and
their `pixels` store (`vqajax features`' preprocessing) into a temp folder, then measures on one
core: (a) the store's batches as the train stream reads them (`FeatureStore.read` of random
rows: uint8, ~442 KB an image at 384 px) and (b) the JPEGs through tf.data's own ops
(`tf.io.decode_jpeg`, aspect-preserving resize into size x size, pad, mask: what a JPEG stream
would hand the step), each in images/s; the ratio of each to `--step-rate`, the images/s a ViLT-B/32
384 px training step consumes on the accelerator (default 1500: ~100 GFLOP per example for
the forward and backward over 185 tokens, at ~150 TFLOP/s of bf16 on one H200-class GPU; pass a
measured rate), and the cores each needs to keep up. At VQA v2's 123,287 images the store is
123287 x size^2 x 4 bytes (54 GB at 384) and the JPEGs ~5 GB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import record
from PIL import Image

from vqajax.core import runtime
from vqajax.features import forward, recorded
from vqajax.features.store import FeatureStore, write_store


def _pictures(folder: str, count: int) -> list[str]:
  rng = np.random.default_rng(0)
  paths = []
  for i in range(count):
    low = rng.integers(0, 256, (30, 40, 3), np.uint8)
    image = Image.fromarray(low).resize((640, 480), Image.BICUBIC)
    path = os.path.join(folder, f"img_{i}.jpg")
    image.save(path, "JPEG", quality=90)
    paths.append(path)
  return paths


def _store(paths: list[str], out: str, size: int) -> None:
  rows = [np.asarray(x)[:n].astype(np.uint8) for n, x in forward.input_batches(paths, 64, "vilt", size)]
  write_store(out, np.arange(len(paths)), np.concatenate(rows),
              recorded.settings("pixels", "pixels", "vilt", size, "uint8", None))


def _rates(fns: dict, images: int, rounds: int) -> dict[str, list[float]]:
  """{name: images/s of each round}, the contenders timed one after another in each round."""
  rates = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn()
      rates[name].append(images / (time.perf_counter() - start))
  return rates


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--images", type=record.count, default=256)
  parser.add_argument("--size", type=record.count, default=384)
  parser.add_argument("--batch", type=record.count, default=32)
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--step-rate", type=record.amount, default=1500.0)
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  tf = runtime.tensorflow()
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  with tempfile.TemporaryDirectory() as folder:
    paths = _pictures(folder, args.images)
    jpeg_bytes = sum(os.path.getsize(p) for p in paths) / len(paths)
    store_path = os.path.join(folder, "pixels.npy")
    _store(paths, store_path, args.size)
    store = FeatureStore(store_path)
    rng = np.random.default_rng(1)

    def read_store():
      for _ in range(0, args.images, args.batch):
        store.read(rng.permutation(args.images)[:args.batch], np.uint8)

    def decode(path):
      image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
      resized = tf.image.resize(image, (args.size, args.size), preserve_aspect_ratio=True, method="bicubic")
      shape = tf.shape(resized)
      pixels = tf.pad(tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8),
                      [[0, args.size - shape[0]], [0, args.size - shape[1]], [0, 0]])
      mask = tf.pad(tf.ones(shape[:2], tf.uint8), [[0, args.size - shape[0]], [0, args.size - shape[1]]])
      return tf.concat([pixels, mask[..., None]], -1)

    dataset = (tf.data.Dataset.from_tensor_slices(paths).map(decode, num_parallel_calls=1).batch(args.batch))

    def read_jpegs():
      for _ in dataset.as_numpy_iterator():
        pass

    rates = _rates({"store": read_store, "jpeg": read_jpegs}, args.images, args.rounds)
  store_rate, jpeg_rate = statistics.median(rates["store"]), statistics.median(rates["jpeg"])
  ratios = np.array(rates["store"]) / np.array(rates["jpeg"])
  row_mb = args.size ** 2 * 4 / 1e6
  print(f"pixel store ({args.size} px, {row_mb:.2f} MB an image): {store_rate:.0f} images/s on one core "
        f"({store_rate * row_mb:.0f} MB/s), {store_rate / args.step_rate:.2f}x the step's {args.step_rate:.0f} "
        f"images/s: {args.step_rate / store_rate:.1f} cores' worth of readers")
  print(f"JPEG via tf.data ({jpeg_bytes / 1e3:.0f} KB an image): {jpeg_rate:.0f} images/s on one core, "
        f"{jpeg_rate / args.step_rate:.2f}x the step: {args.step_rate / jpeg_rate:.1f} cores to keep up")
  print(f"store / JPEG: {np.median(ratios):.1f}x; at VQA v2's 123,287 images: store "
        f"{123287 * row_mb / 1e3:.0f} GB, JPEGs {123287 * jpeg_bytes / 1e9:.1f} GB "
        f"(the store's read is page cache or disk: {args.step_rate * row_mb:.0f} MB/s at the step's rate)")
  record.write(args.json, "bench_pixels", [
    record.row(f"the pixel store at {args.size} px, one core", store_rate, "images/s", rounds=rates["store"]),
    record.row(f"JPEG decoding through tf.data at {args.size} px, one core", jpeg_rate, "images/s",
               rounds=rates["jpeg"]),
    record.row("the pixel store vs JPEG decoding", np.median(ratios), "x", rounds=ratios),
  ])


if __name__ == "__main__":
  main()
