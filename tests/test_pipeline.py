import itertools
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import devices
from vqajax.core import pipeline, sharding
from vqajax.features.store import FeatureStore, write_store
from vqajax.vqa.task import TRAIN_KEYS as KEYS


def _split(tmp_path, n=10):
  path = str(tmp_path / "f.h5")
  write_store(path, np.arange(100, 100 + n), np.arange(n * 3, dtype=np.float32).reshape(n, 3))
  arrays = {"tokens": np.arange(n * 2, dtype=np.int32).reshape(n, 2), "length": np.full(n, 2, np.int32),
            "label": np.arange(n, dtype=np.int32), "question_id": np.arange(n, dtype=np.int64) + 1000,
            "image_row": np.arange(n, dtype=np.int32)[::-1].copy()}
  return arrays, FeatureStore(path)


def test_train_rows_visit_every_example_once_per_epoch_and_cross_epochs():
  rows = np.concatenate([pipeline.train_rows(10, 4, seed=3, step=s) for s in range(5)])  # 2 epochs
  assert sorted(rows[:10]) == list(range(10)) and sorted(rows[10:20]) == list(range(10))
  assert not np.array_equal(rows[:10], rows[10:20])  # reshuffled each epoch
  np.testing.assert_array_equal(pipeline.train_rows(10, 4, seed=3, step=3), rows[12:16])


def test_train_batches_resume_at_any_step_with_the_same_batches(tmp_path):
  arrays, store = _split(tmp_path)
  full = list(itertools.islice(pipeline.train_batches(arrays, store, 4, seed=1, start_step=0, keys=KEYS), 6))
  resumed = list(itertools.islice(pipeline.train_batches(arrays, store, 4, seed=1, start_step=4, keys=KEYS), 2))
  for a, b in zip(full[4:], resumed):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  batch = full[0]
  rows = pipeline.train_rows(10, 4, seed=1, step=0)
  np.testing.assert_array_equal(batch["label"], rows)
  np.testing.assert_array_equal(batch["image"], store.read(arrays["image_row"][rows]))


def test_eval_batches_cover_file_order_once_with_padded_masked_last_batch(tmp_path):
  arrays, store = _split(tmp_path)
  batches = list(pipeline.eval_batches(arrays, store, 4, keys=("question_id",)))
  assert len(batches) == 3
  np.testing.assert_array_equal(batches[-1]["mask"], [True, True, False, False])
  ids = np.concatenate([b["question_id"] for b in batches])[np.concatenate([b["mask"] for b in batches])]
  np.testing.assert_array_equal(ids, arrays["question_id"])


def test_global_batch_is_sharded_over_eight_devices(tmp_path):
  arrays, store = _split(tmp_path, n=16)
  mesh = sharding.data_mesh()
  assert mesh.devices.size == 8
  local = next(pipeline.train_batches(arrays, store, 8, seed=0, start_step=0, keys=KEYS))
  batch = sharding.to_global(local, mesh)
  assert batch["image"].shape == (8, 3)
  assert len(batch["image"].addressable_shards) == 8
  np.testing.assert_array_equal(jax.device_get(batch["label"]), local["label"])


def test_tokens_are_cut_to_the_length_bucket_of_the_global_batch(tmp_path):
  arrays, store = _split(tmp_path, n=8)
  arrays["tokens"] = np.zeros((8, 26), np.int32)
  arrays["length"] = np.array([3, 9, 2, 2, 2, 2, 2, 2], np.int32)
  assert [pipeline.bucket_length(n, 26) for n in (1, 8, 9, 13, 16, 17, 26)] == [8, 8, 12, 16, 16, 26, 26]
  batches = list(pipeline.eval_batches(arrays, store, 4, keys=("tokens",), lengths={"tokens": "length"}))
  assert [b["tokens"].shape for b in batches] == [(4, 12), (4, 8)]
  whole = list(pipeline.eval_batches(arrays, store, 4, keys=("tokens",)))  # no lengths named: not cut
  assert [b["tokens"].shape for b in whole] == [(4, 26), (4, 26)]


def test_store_batches_reach_the_step_without_a_copy(tmp_path):
  arrays, store = _split(tmp_path)
  read, made = store.read, []

  def recorded(rows, dtype=np.float32):
    features = read(rows, dtype)
    made.append(features)  # kept alive: its address is not reused
    return features

  store.read = recorded
  batches = list(itertools.islice(pipeline.train_batches(arrays, store, 4, seed=1, start_step=0, keys=KEYS), 3))
  by_address = {f.ctypes.data: f for f in made}
  for batch in batches:  # the very buffer the store filled
    np.testing.assert_array_equal(by_address[batch["image"].ctypes.data], batch["image"])


_OPEN_AT_EXIT = """
import sys
import numpy as np
from vqajax.core import pipeline
from vqajax.features.store import FeatureStore, write_store
from vqajax.vqa.task import TRAIN_KEYS
n = 8192
features = np.ones((n, 1024), np.float32)
features[5000] = np.nan if sys.argv[2] == "nan" else 1  # met in the first epoch's batches
write_store(sys.argv[1], np.arange(n), features)
arrays = {"tokens": np.ones((n, 4), np.int32), "length": np.full(n, 4, np.int32),
          "label": np.zeros(n, np.int32), "image_row": np.arange(n, dtype=np.int32)}
train = pipeline.train_batches(arrays, FeatureStore(sys.argv[1]), 256, seed=0, start_step=0, keys=TRAIN_KEYS)
evaluation = pipeline.eval_batches(arrays, FeatureStore(sys.argv[1]), 256, keys=TRAIN_KEYS)
next(train), next(evaluation)
print("took a batch of each", flush=True)
for _ in range(n // 256):
  next(train)
"""


@pytest.mark.slow
def test_a_script_exits_with_its_batches_still_open(tmp_path):
  # Both kinds of batches left open at the end of a script (module globals), their threads
  # loading ahead: the script exits, and prints no "Exception ignored" from a torn-down module.
  done = subprocess.run([sys.executable, "-c", _OPEN_AT_EXIT, str(tmp_path / "f.h5"), "finite"],
                        env=devices.env(1), capture_output=True, text=True, timeout=120)
  assert done.returncode == 0 and "took a batch of each" in done.stdout, done.stderr[-2000:]
  assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_a_script_exits_on_bad_features_it_does_not_catch(tmp_path):
  # The one-line error escapes the script with its traceback, which keeps the batches alive
  # to Python's teardown: the script still exits.
  path = tmp_path / "f.h5"
  done = subprocess.run([sys.executable, "-c", _OPEN_AT_EXIT, str(path), "nan"], env=devices.env(1),
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 1 and "took a batch of each" in done.stdout, done.stderr[-2000:]
  assert done.stderr.rstrip().endswith(f"{path}: the features of image_id 5000 are not finite (NaN or inf)")
