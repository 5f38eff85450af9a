"""The ('data', 'fsdp') mesh (vqajax/core/sharding.py) on 8 fake devices: the FSDP rule, the
mesh's refusal, fsdp=4 training with the losses of fsdp=1, a checkpoint written with fsdp=4
resumed with fsdp=2, and ViLT-B's memory per device (compiled, never run)."""

import json
import os
import shutil

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from bench import bench_fsdp
from experiments.vqa import deeper_lstm_norm_i
from experiments.vqa import vilt as vilt_row
from vqajax import cli
from vqajax.core import checkpoint, device_features, evals, pipeline, sharding, train
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.synthetic import embedded

SPLIT_ALL = {"mesh.min_shard_bytes": 0}  # every array with a dimension fsdp divides is split (tiny models)


def test_the_fsdp_rule_splits_the_largest_divisible_dimension_of_big_arrays():
  def spec(shape, fsdp, min_bytes=0):  # float32
    return sharding.fsdp_spec(shape, 4, fsdp, min_bytes)

  assert spec((768, 3072), 4) == P(None, "fsdp") and spec((3072, 768), 4) == P("fsdp")
  assert spec((12, 768, 768), 4) == P(None, "fsdp")  # the first of equal sizes; never a short stacked-layer axis
  assert spec((30522, 768), 4) == P(None, "fsdp")  # 30522 = 4 * 7630 + 2
  assert spec((30522, 768), 2) == P("fsdp")
  assert spec((5, 3), 4) == P() and spec((), 4) == P()  # nothing divisible; a scalar
  assert spec((768, 3072), 1) == P()  # fsdp 1: everything replicated
  assert spec((768,), 4, 3073) == P() and spec((768,), 4, 3072) == P("fsdp")  # 3072 bytes against the threshold


def test_a_mesh_eight_devices_cannot_form_is_refused_naming_config_mesh_fsdp(tiny_data):
  assert sharding.data_mesh(fsdp=4).shape == {"data": 2, "fsdp": 4}
  config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"data.dir": tiny_data, "mesh.fsdp": 3})
  with pytest.raises(InputError, match=r"^config.mesh.fsdp: expected a positive integer dividing the device count 8, "
                                       r"got 3$"):
    Experiment.build(cli.task_of(config), config)
  config.mesh.fsdp = 0  # the front door's check of every field (evals.check_config)
  with pytest.raises(InputError, match=r"^config.mesh.fsdp: expected a positive integer <= 4096, got 0$"):
    evals.check_config(config, cli.task_of(config))


def _steps(config, steps: int) -> tuple[list[float], Experiment, object]:
  """(the loss of each of the first `steps` steps, the experiment, the last state), trained in process."""
  exp = Experiment.build(cli.task_of(config), config)
  step = train.make_train_step(exp.model, exp.tx, exp.mesh, exp.task.make_loss(config), exp.features,
                               exp.state_sharding)
  arrays, store, keys = device_features.host_inputs(exp.data, exp.features, "train", exp.task.TRAIN_KEYS)
  batches = pipeline.train_batches(arrays, store, config.batch_size, config.seed, 0, keys, lengths=exp.task.LENGTHS)
  state, losses = exp.initial_state(), []
  try:
    for _ in range(steps):
      state, metrics = step(state, sharding.to_global(next(batches), exp.mesh))
      losses.append(float(metrics["loss"]))
  finally:
    batches.close()
  return losses, exp, state


def _split(state) -> list[str]:
  """The parameters split over 'fsdp' (their key paths)."""
  return [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_leaves_with_path(state.params)
          if "fsdp" in x.sharding.spec]


@pytest.mark.slow
@pytest.mark.parametrize("row", ["lstm", "vilt"])
def test_fsdp_4_of_eight_devices_trains_with_the_losses_of_fsdp_1(row, tiny_data, tmp_path):
  if row == "lstm":
    config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"data.dir": tiny_data})
  else:  # two layers (a real scan), remat'd as on an accelerator
    shutil.copytree(tiny_data, tmp_path / "tiny")  # its pixel store is written into it
    config = config_lib.override(vilt_row.get_config("runlocal"), {"data.dir": str(tmp_path / "tiny"),
                                                                   "model.num_hidden_layers": 2})
    embedded.prepare(config)
  one, _, state_1 = _steps(config, 3)
  sharded = config_lib.override(config, {"mesh.fsdp": 4, **SPLIT_ALL})
  if row == "vilt":
    sharded.model.remat = "dots"
  four, exp, state_4 = _steps(sharded, 3)
  assert _split(state_1) == [] and exp.mesh.shape == {"data": 2, "fsdp": 4}
  split = _split(state_4)
  assert len(split) > len(jax.tree.leaves(state_4.params)) // 3, split  # the kernels and embeddings at least
  assert len(set(one)) == 3  # it learns: three different losses
  np.testing.assert_allclose(four, one, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               jax.device_get(state_4.params), jax.device_get(state_1.params))


def _train(config, workdir, steps: int, fsdp: int) -> list[float]:
  config = config_lib.override(config, {"num_train_steps": steps, "mesh.fsdp": fsdp})
  train.train_and_evaluate(cli.task_of(config), config, str(workdir))
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]


@pytest.mark.slow
def test_a_checkpoint_written_with_fsdp_4_resumes_with_fsdp_2_on_eight_devices(tiny_data, tmp_path):
  config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {
      "data.dir": tiny_data, "log_every_steps": 1, "eval_every_steps": 100, "keep_checkpoints": 5, **SPLIT_ALL})
  whole = _train(config, tmp_path / "whole", 4, fsdp=4)
  _train(config, tmp_path / "split", 2, fsdp=4)
  saved, _, _ = checkpoint.read_params(str(tmp_path / "split" / "checkpoints"), 2)
  # restored onto fsdp=2's shardings: the same parameters, each split in two where the rule splits it
  target_config = config_lib.override(config, {"mesh.fsdp": 2})
  exp = Experiment.build(cli.task_of(target_config), target_config)
  ckpt = checkpoint.Checkpointer(str(tmp_path / "split" / "checkpoints"))
  try:
    state, _ = ckpt.restore(2, exp.initial_state(abstract=True))
  finally:
    ckpt.close()
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(state.params), saved)
  assert jax.tree.map(lambda x: x.sharding, state) == exp.state_sharding
  assert _split(state) and all(x.sharding.mesh.shape == {"data": 4, "fsdp": 2} for x in jax.tree.leaves(state.params))
  # and the run goes on with fsdp=2 (the mesh is no setting of the run), as the uninterrupted one did
  resumed = _train(config, tmp_path / "split", 4, fsdp=2)
  np.testing.assert_allclose(resumed, whole, rtol=1e-5)


@pytest.mark.slow
def test_vilt_b_memory_per_device_of_eight_devices_falls_as_1_over_fsdp():
  """ViLT-B/32 at 384 px (12 layers, 3129 answers, AdamW), lowered and compiled on 8 fake devices, never run."""
  memory, hlo = {}, {}
  for fsdp in (1, 4):
    step, state, batch, shardings, _ = bench_fsdp.vilt_step("base", fsdp, 8)
    compiled = step.lower(state, batch).compile()
    memory[fsdp], hlo[fsdp] = compiled.memory_analysis(), compiled.as_text()
    assert abs(memory[fsdp].argument_size_in_bytes - bench_fsdp.state_bytes_per_device(state)) < 2**20  # + the batch
  state_mib = memory[1].argument_size_in_bytes / 2**20
  assert 1200 < state_mib < 1500  # ~115M float32 parameters, twice as many AdamW moments
  assert 3.8 < memory[1].argument_size_in_bytes / memory[4].argument_size_in_bytes <= 4
  assert memory[4].temp_size_in_bytes < memory[1].temp_size_in_bytes  # gradients are split too
  assert "all-gather" not in hlo[1] and "all-gather" in hlo[4]
