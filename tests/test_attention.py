"""Attention over grid features (Show, Ask, Attend, and Answer): the module against numpy,
the model's shapes and input checks, and a short sharded run on the tiny set."""

import functools
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench.reference import reference_accuracy
from experiments.vqa import attention
from vqajax import cli
from vqajax.core import config as config_lib
from vqajax.core import train
from vqajax.core.errors import InputError
from vqajax.nn.attention import GlimpseAttention
from vqajax.vqa import models as vqa_models


def _numpy_glimpses(grid, question, p):
  """The paper's attention written out: a 1x1 conv over [grid ; tiled question], ReLU, a
  1x1 conv to the glimpse logits, softmax over locations, weighted sums per glimpse."""
  b, locations, channels = grid.shape
  tiled = np.repeat(question[:, None, :], locations, axis=1)
  w1 = np.concatenate([p["grid"]["kernel"], p["question"]["kernel"]])      # the conv over the concatenation
  hidden = np.maximum(np.concatenate([grid, tiled], axis=-1) @ w1 + p["question"]["bias"], 0.0)
  logits = hidden @ p["glimpses"]["kernel"] + p["glimpses"]["bias"]        # [B, L, G]
  out = np.zeros((b, logits.shape[-1], channels))
  for i in range(b):
    for g in range(logits.shape[-1]):
      e = np.exp(logits[i, :, g] - logits[i, :, g].max())
      out[i, g] = (e / e.sum()) @ grid[i]
  return out.reshape(b, -1)


def test_glimpse_attention_matches_numpy():
  rng = np.random.default_rng(0)
  grid = rng.standard_normal((2, 6, 4)).astype(np.float32)  # 2 images, 2x3 locations, 4 channels
  question = rng.standard_normal((2, 5)).astype(np.float32)
  module = GlimpseAttention(hidden=3, glimpses=2, dropout=0.5)
  params = jax.jit(functools.partial(module.init, train=False))(jax.random.key(0), grid, question)["params"]
  params = jax.tree.map(lambda x: x + rng.standard_normal(x.shape).astype(np.float32), params)  # non-zero biases
  ours = jax.jit(functools.partial(module.apply, train=False))({"params": params}, grid, question)
  assert ours.shape == (2, 8)
  np.testing.assert_allclose(ours, _numpy_glimpses(grid, question, jax.tree.map(np.asarray, params)),
                             rtol=1e-5, atol=1e-5)
  # each glimpse is a convex combination of the locations' features
  pooled = np.asarray(ours).reshape(2, 2, 4)
  assert (pooled <= grid.max(axis=1)[:, None] + 1e-6).all() and (pooled >= grid.min(axis=1)[:, None] - 1e-6).all()


def _data(store_shape, vocab=50, answers=1000):
  return types.SimpleNamespace(vocab=range(vocab), answers=range(answers), image_shape=store_shape,
                               bag_sizes={"question_bow": 1030, "caption_bow": 1000})


def test_the_papers_shapes_on_a_resnet_grid():
  model = vqa_models.build(attention.get_config().model, _data((14, 14, 2048)))
  batch = {"tokens": jnp.zeros((2, 26), jnp.int32), "length": jnp.array([3, 26]), "image": jnp.ones((2, 14, 14, 2048))}
  p = jax.tree.map(jnp.shape, jax.eval_shape(lambda: model.init(jax.random.key(0), batch, train=False))["params"])
  assert p["question"]["lstm_0"]["cell"]["ii"]["kernel"] == (300, 1024) and "lstm_1" not in p["question"]
  assert p["attention"]["grid"]["kernel"] == (2048, 512)
  assert p["attention"]["question"]["kernel"] == (2048, 512)  # last (cell, hidden) of the 1024 LSTM
  assert p["attention"]["glimpses"]["kernel"] == (512, 2)
  assert p["mlp_0"]["kernel"] == (2 * 2048 + 2048, 1024) and p["classifier"]["kernel"] == (1024, 1000)


def test_locations_are_normalised_and_a_global_store_is_refused():
  cfg = attention.get_config("runlocal").model
  model = vqa_models.build(cfg, _data((3, 3, 8)))
  grid = jax.random.uniform(jax.random.key(1), (2, 3, 3, 8))
  batch = {"tokens": jnp.ones((2, 4), jnp.int32), "length": jnp.array([2, 4]), "image": grid}
  params = jax.jit(functools.partial(model.init, train=False))(jax.random.key(0), batch)
  apply = jax.jit(functools.partial(model.apply, train=False))  # as in a run: one compile, not one an op
  scale = jnp.arange(1.0, 10.0).reshape(1, 3, 3, 1)  # another factor at every location
  np.testing.assert_allclose(apply(params, batch), apply(params, dict(batch, image=grid * scale)),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(InputError, match=r"config.data.features: .* grid store of \[H, W, C\] per image, got \(4096,\)"):
    vqa_models.build(cfg, _data((4096,)))


@pytest.mark.slow
def test_trains_on_the_tiny_set_over_eight_devices_and_its_results_score_as_on_the_device(tiny_data, tmp_path):
  config = config_lib.override(attention.get_config("runlocal"), {
      "data.dir": tiny_data, "num_train_steps": 12, "eval_every_steps": 12, "log_every_steps": 1})
  workdir = str(tmp_path / "run")
  assert jax.device_count() == 8  # train and eval steps sharded over 8 devices
  metrics = train.train_and_evaluate(cli.task_of(config), config, workdir)["val"]
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    losses = [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]
  assert len(losses) == 12 and np.mean(losses[-3:]) < losses[0]
  out = os.path.join(workdir, "results", "step_12", "v2_OpenEnded_mscoco_val2014_attention_results.json")
  with open(out) as f:
    results = {r["question_id"]: r["answer"] for r in json.load(f)}
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  assert sorted(results) == sorted(a["question_id"] for a in annotations)  # every val question, once
  official, _ = reference_accuracy(annotations, results)
  assert metrics["accuracy"] == pytest.approx(official["overall"], abs=0.01)
