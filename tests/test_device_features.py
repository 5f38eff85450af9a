"""Features kept on the devices give the host path's losses, replicated or sharded (BoW Q + I:
the gather is the same for every model, and this one compiles fast), and the finite check of the
rows either path reads."""

import json
import os
import types

import jax
import numpy as np
import pytest

from experiments.vqa import bow_q_i
from vqajax import cli
from vqajax.core import config as config_lib
from vqajax.core import device_features, pipeline, sharding, train
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.features.store import FeatureStore, write_store


def _config(data_dir, **changes):
  return config_lib.override(bow_q_i.get_config("runlocal"), {"data.dir": data_dir, **changes})


def _losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]


class _Device:
  def __init__(self, stats):
    self._stats = stats

  def memory_stats(self):
    return self._stats


def _mesh(devices, stats):
  every = [_Device(stats)] * devices
  return types.SimpleNamespace(devices=np.array(every), local_devices=every)


def test_auto_chooses_by_size_against_a_share_of_the_device_memory():
  gib = 2**30
  limit = {"bytes_limit": 16 * gib}  # a share of 4 GiB per device
  assert device_features.DEVICE_SHARE == 0.25
  assert device_features.layout("auto", 4 * gib, _mesh(8, limit)) == "replicated"
  assert device_features.layout("auto", 4 * gib + 1, _mesh(8, limit)) == "sharded"
  assert device_features.layout("auto", 32 * gib, _mesh(8, limit)) == "sharded"
  assert device_features.layout("auto", 32 * gib + 8, _mesh(8, limit)) is None
  assert device_features.layout("auto", 1, _mesh(1, None)) is None  # a CPU: memory unknown -> streamed
  assert device_features.layout("true", 10 * gib, _mesh(1, None)) == "replicated"
  assert device_features.layout("false", 1, _mesh(8, limit)) is None
  assert device_features.layout("sharded", 1, _mesh(8, limit)) == "sharded"
  with pytest.raises(InputError, match="more than 25% of the memory of 8 devices"):
    device_features.layout("true", 33 * gib, _mesh(8, limit))
  with pytest.raises(InputError, match="config.data.features_on_device 'yes' is not one of"):
    device_features.layout("yes", 1, _mesh(8, limit))


@pytest.mark.parametrize("choice", ["true", "sharded"])
def test_on_eight_devices_the_table_holds_the_rows_the_splits_use_and_the_step_gathers_them(tiny_data, choice):
  exp = Experiment.build(cli.task_of(_config(tiny_data)), _config(tiny_data, **{"data.features_on_device": choice}))
  features, store = exp.features, exp.data.store
  assert features.sharded == (choice == "sharded")
  assert len(features.table.addressable_shards) == 8
  shard_rows = {s.data.shape[0] for s in features.table.addressable_shards}
  assert shard_rows == ({features.table.shape[0] // 8} if features.sharded else {features.table.shape[0]})
  rows = np.array([5, 0, 5, 17, 3, 9, 1, 2], np.int32)
  for split in ("train", "val"):
    got = jax.jit(sharding.in_mesh(exp.mesh, features.gather))(
        features.table, sharding.to_global({"r": features.splits[split]["image_row"][rows]}, exp.mesh)["r"])
    want = store.read(getattr(exp.data, split)["image_row"][rows])  # the host path's rows
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), want)


def test_one_device_steps_give_the_host_losses(tiny_data):
  config = _config(tiny_data)
  host = Experiment.build(cli.task_of(config), config, jax.devices()[:1])
  device = Experiment.build(cli.task_of(config), _config(tiny_data, **{"data.features_on_device": "true"}),
                            jax.devices()[:1])
  assert host.features is None and not device.features.sharded
  losses = []
  for exp in (host, device):
    arrays, store, keys = device_features.host_inputs(exp.data, exp.features, "train", exp.task.TRAIN_KEYS)
    assert ("image_row" in keys) == (exp is device)
    step = train.make_train_step(exp.model, exp.tx, exp.mesh, exp.task.make_loss(exp.config), exp.features)
    batches, state, out = pipeline.train_batches(arrays, store, 32, 0, 0, keys), \
        exp.initial_state(), []
    for _ in range(3):
      state, metrics = step(state, sharding.to_global(next(batches), exp.mesh))
      out.append(float(metrics["loss"]))
    losses.append(out)
  assert losses[0][0] != losses[0][2]  # it trains
  assert losses[0] == losses[1]


@pytest.mark.slow
def test_eight_devices_train_and_evaluate_with_a_sharded_table_as_the_host_path(tiny_data, tmp_path):
  runs = {}
  for choice in ("false", "sharded"):
    config = _config(tiny_data, num_train_steps=4, log_every_steps=1, eval_every_steps=4,
                     **{"data.features_on_device": choice})
    runs[choice] = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path / choice))
  np.testing.assert_allclose(_losses(tmp_path / "sharded"), _losses(tmp_path / "false"), rtol=1e-6)
  assert runs["sharded"].keys() == runs["false"].keys()
  for name, value in runs["false"].items():
    assert runs["sharded"][name] == pytest.approx(value, rel=1e-6), name


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_stores_refuse_inf_and_nan_rows_and_keep_the_largest_and_tiniest(tmp_path, dtype):
  info = np.finfo(dtype)
  rows = np.array([[info.max, -info.max], [info.smallest_subnormal, -0.0], [np.inf, 0], [0, -np.inf],
                   [np.nan, 1]], dtype)
  path = str(tmp_path / "f.npy")
  write_store(path, np.arange(10, 15), rows)
  store = FeatureStore(path)
  np.testing.assert_array_equal(store.read(np.array([1, 0, 1]), dtype), rows[[1, 0, 1]])
  for bad in (2, 3, 4):
    assert not np.isfinite(rows[bad]).all()
    with pytest.raises(InputError, match=f"the features of image_id {10 + bad} are not finite"):
      store.read(np.array([0, bad]))
  store.close()
