"""End-to-end training on the tiny synthetic set: sharding, checkpoints, resume, results."""

import json
import os

import jax
import numpy as np
import pytest

from experiments.vqa import deeper_lstm_norm_i
from tests.reference import reference_accuracy
from vqajax import cli
from vqajax.core import checkpoint, evaluate, pipeline, sharding, train
from vqajax.core import config as config_lib
from vqajax.core.experiment import Experiment


def _config(data_dir, **changes):
  return config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"data.dir": data_dir, **changes})


def _losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]


def _params(workdir, config):
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
  exp = Experiment.build(cli.task_of(config), config)
  state, _ = ckpt.restore(ckpt.latest_step(), exp.initial_state(abstract=True))
  ckpt.close()
  return jax.device_get(state.params)


@pytest.mark.slow
def test_eight_devices_give_the_losses_of_one(tiny_data, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # relative workdirs work too
  config = _config(tiny_data, num_train_steps=6, log_every_steps=1, eval_every_steps=6)
  train.train_and_evaluate(cli.task_of(config), config, "eight")
  train.train_and_evaluate(cli.task_of(config), config, "one", devices=jax.devices()[:1])
  assert len(_losses(tmp_path / "eight")) == 6
  np.testing.assert_allclose(_losses(tmp_path / "eight"), _losses(tmp_path / "one"), rtol=2e-5)


def test_the_sharded_step_never_gathers_the_batch(tiny_data):
  exp = Experiment.build(cli.task_of(_config(tiny_data)), _config(tiny_data))
  assert exp.mesh.devices.size == 8
  batch = sharding.to_global(pipeline.example_batch(exp.data.train, exp.data.store, 32, exp.task.TRAIN_KEYS), exp.mesh)
  step = train.make_train_step(exp.model, exp.tx, exp.mesh, exp.task.make_loss(exp.config))
  hlo = step.lower(exp.initial_state(abstract=True), batch).compile().as_text()
  assert "all-reduce" in hlo and "all-gather" not in hlo and "all-to-all" not in hlo


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint_exactly(tiny_data, tmp_path):
  full = _config(tiny_data, num_train_steps=20, log_every_steps=5, eval_every_steps=10)
  train.train_and_evaluate(cli.task_of(full), full, str(tmp_path / "full"))
  first = _config(tiny_data, num_train_steps=10, log_every_steps=5, eval_every_steps=10)
  train.train_and_evaluate(cli.task_of(first), first, str(tmp_path / "split"))
  train.train_and_evaluate(cli.task_of(full), full, str(tmp_path / "split"))  # resumes at step 10
  assert _losses(tmp_path / "split") == _losses(tmp_path / "full")
  a, b = _params(tmp_path / "full", full), _params(tmp_path / "split", full)
  jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.slow
def test_results_files_are_official_and_scored_like_the_device(tiny_data, tmp_path):
  config = _config(tiny_data, num_train_steps=10, eval_every_steps=10, log_every_steps=5)
  workdir = str(tmp_path / "run")
  metrics = train.train_and_evaluate(cli.task_of(config), config, workdir)["val"]
  evaluated = evaluate.evaluate_checkpoints(cli.task_of(config), config, workdir)
  assert evaluated[10]["val"] == pytest.approx(metrics, abs=1e-4)
  out = os.path.join(workdir, "results", "step_10")
  name = "v2_OpenEnded_mscoco_val2014_deeper_lstm_norm_i_results.json"
  with open(os.path.join(out, name)) as f:
    results = json.load(f)
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  assert [r["question_id"] for r in results] == [a["question_id"] for a in annotations]
  official, _ = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
  with open(os.path.join(out, name.replace("_results", "_accuracy"))) as f:
    assert json.load(f) == official
  assert metrics["accuracy"] == pytest.approx(official["overall"], abs=0.01)
  for answer_type, value in official["perAnswerType"].items():
    assert metrics[f"accuracy/{answer_type}"] == pytest.approx(value, abs=0.01)
  with open(os.path.join(out, "MultipleChoice_mscoco_val2014_deeper_lstm_norm_i_results.json")) as f:
    mc = {r["question_id"]: r["answer"] for r in json.load(f)}
  with open(os.path.join(tiny_data, "MultipleChoice_mscoco_val2014_questions.json")) as f:
    choices = {q["question_id"]: q["multiple_choices"] for q in json.load(f)["questions"]}
  assert all(mc[q] in choices[q] for q in choices)
  mc_official, _ = reference_accuracy(annotations, mc)
  assert metrics["mc_accuracy"] == pytest.approx(mc_official["overall"], abs=0.01)
