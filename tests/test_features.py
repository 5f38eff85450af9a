import os

import numpy as np
import pytest

from vqajax.features.store import FeatureStore, FeatureStoreError, write_store


@pytest.mark.parametrize("ext,dtype", [("h5", np.float16), ("npy", np.float32), ("hdf5", np.float32)])
def test_round_trip_reads_rows_in_any_order(tmp_path, ext, dtype):
  feats = np.random.default_rng(0).normal(size=(5, 3, 2)).astype(dtype)
  path = str(tmp_path / f"f.{ext}")
  write_store(path, [10, 11, 12, 13, 14], feats)
  store = FeatureStore(path)
  assert store.shape == (3, 2) and store.dtype == dtype
  rows = store.rows([14, 10, 14])
  np.testing.assert_array_equal(rows, [4, 0, 4])
  out = store.read(rows)
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, feats[[4, 0, 4]].astype(np.float32))


def test_npy_store_reads_runs_and_scattered_rows(tmp_path):
  feats = np.arange(7 * 6, dtype=np.float16).reshape(7, 2, 3)
  path = str(tmp_path / "f.npy")
  write_store(path, np.arange(7), feats)
  rows = np.array([6, 0, 1, 2, 4, 4, 6])
  np.testing.assert_array_equal(FeatureStore(path).read(rows), feats[rows].astype(np.float32))


@pytest.mark.parametrize("ext", ["npy", "h5"])
def test_rows_land_in_request_order_across_read_and_check_blocks(tmp_path, monkeypatch, ext):
  from vqajax.features import store as store_module
  monkeypatch.setattr(store_module, "_IOV_MAX", 2)  # a run of 5 rows: three reads of at most 2
  monkeypatch.setattr(store_module, "_CHECK_BLOCK_BYTES", 20)  # rows of 12 bytes: one per check block
  feats = np.arange(8 * 6, dtype=np.float16).reshape(8, 2, 3)
  path = str(tmp_path / f"f.{ext}")
  write_store(path, np.arange(100, 108), feats)
  rows = np.array([3, 7, 1, 2, 5, 4, 3, 0])  # rows 1..5 are one run, read scattered; 3 twice
  out = FeatureStore(path).read(rows, np.float16)
  assert out.dtype == np.float16
  np.testing.assert_array_equal(out, feats[rows])
  feats[[2, 6]] = np.inf  # two bad rows, asked for in the other order: the lower row is named
  feats[2, 1, 2] = np.nan
  write_store(str(tmp_path / f"bad.{ext}"), np.arange(100, 108), feats)
  with pytest.raises(FeatureStoreError, match=r"image_id 102 are not finite"):
    FeatureStore(str(tmp_path / f"bad.{ext}")).read(np.array([0, 6, 5, 2]))


def test_truncated_or_fortran_npy_store_is_rejected(tmp_path):
  path = str(tmp_path / "f.npy")
  write_store(path, np.arange(4), np.zeros((4, 8), np.float32))
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 4)
  with pytest.raises(FeatureStoreError, match="truncated"):
    FeatureStore(path)
  np.save(path, np.asfortranarray(np.zeros((4, 8), np.float32)))
  with pytest.raises(FeatureStoreError, match="C-order"):
    FeatureStore(path)


def test_unknown_image_id_names_store_and_source(tmp_path):
  path = str(tmp_path / "f.h5")
  write_store(path, [1, 2], np.zeros((2, 4), np.float32))
  with pytest.raises(FeatureStoreError, match=r"f\.h5: no features for image_id 7 \(needed by q\.json\)"):
    FeatureStore(path).rows([1, 7], source="q.json")


def test_dimension_mismatch_is_reported(tmp_path):
  path = str(tmp_path / "f.h5")
  write_store(path, [1], np.zeros((1, 4), np.float32))
  with pytest.raises(FeatureStoreError, match=r"shape \(4,\) per image, the config expects \(4096,\)"):
    FeatureStore(path).check_shape((4096,))


def test_bad_stores_are_rejected_without_leftovers(tmp_path):
  with pytest.raises(FeatureStoreError, match="float16/float32/uint8 features"):
    write_store(str(tmp_path / "f.h5"), [1], np.zeros((1, 4), np.int32))
  assert os.listdir(tmp_path) == []
  path = str(tmp_path / "g.npy")
  np.save(path, np.zeros((3, 2), np.float32))
  np.save(str(tmp_path / "g.image_ids.npy"), np.array([1, 1, 2]))
  with pytest.raises(FeatureStoreError, match="duplicate image ids"):
    FeatureStore(path)
