"""End-to-end training on the tiny synthetic set: sharding, checkpoints, resume, results."""

import glob
import io
import json
import os

import jax
import numpy as np
import pytest

from bench.reference import reference_accuracy
from experiments.vqa import deeper_lstm_norm_i
from vqajax import cli
from vqajax.core import checkpoint, evals, pipeline, sharding, train, writers
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


def test_the_step_sharded_over_eight_devices_never_gathers_the_batch(tiny_data):
  exp = Experiment.build(cli.task_of(_config(tiny_data)), _config(tiny_data))
  assert exp.mesh.devices.size == 8
  batch = sharding.to_global(pipeline.example_batch(exp.data.train, exp.data.store, 32, exp.task.TRAIN_KEYS), exp.mesh)
  step = train.make_train_step(exp.model, exp.tx, exp.mesh, exp.task.make_loss(exp.config), None, exp.state_sharding)
  hlo = step.lower(exp.initial_state(abstract=True), batch).compile().as_text()  # fsdp 1: nothing gathered
  assert "all-reduce" in hlo and "all-gather" not in hlo and "all-to-all" not in hlo


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint_exactly(tiny_data, twenty_step_run, tmp_path):
  full = _config(tiny_data, num_train_steps=20, log_every_steps=5, eval_every_steps=10)
  first = _config(tiny_data, num_train_steps=10, log_every_steps=5, eval_every_steps=10)
  train.train_and_evaluate(cli.task_of(first), first, str(tmp_path / "split"))
  train.train_and_evaluate(cli.task_of(full), full, str(tmp_path / "split"))  # resumes at step 10
  assert _losses(tmp_path / "split") == _losses(twenty_step_run)
  a, b = _params(twenty_step_run, full), _params(tmp_path / "split", full)
  jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.slow
def test_checkpoints_at_their_cadence_and_a_profiled_window(tiny_data, tmp_path):
  """Checkpoints at every evaluation (steps 6 and the final 7) and, with checkpoint_every_steps 2,
  at 2 and 4 too, each complete with its manifest; the saves in the background change no loss;
  profile_steps (2, 3) leaves a trace where TensorBoard's profile tab looks."""
  steps = {"num_train_steps": 7, "log_every_steps": 1, "eval_every_steps": 6, "keep_checkpoints": 10}
  default = _config(tiny_data, **steps)
  cadence = _config(tiny_data, **steps, checkpoint_every_steps=2, profile_steps=(2, 3))
  saved = {}
  for name, config in (("default", default), ("cadence", cadence)):
    train.train_and_evaluate(cli.task_of(config), config, str(tmp_path / name))
    saved[name] = checkpoint.complete_steps(str(tmp_path / name / "checkpoints"))
    for step in saved[name]:
      checkpoint.verify(str(tmp_path / name / "checkpoints" / str(step)))
  assert saved == {"default": [6, 7], "cadence": [2, 4, 6, 7]}
  assert _losses(tmp_path / "cadence") == _losses(tmp_path / "default")
  assert glob.glob(str(tmp_path / "cadence" / "plugins" / "profile" / "*" / "*.xplane.pb"))
  assert not os.path.exists(tmp_path / "default" / "plugins")


@pytest.mark.slow
def test_results_files_are_official_and_scored_like_the_device(tiny_data, tmp_path):
  config = _config(tiny_data, num_train_steps=10, eval_every_steps=10, log_every_steps=5)
  workdir = str(tmp_path / "run")
  metrics = train.train_and_evaluate(cli.task_of(config), config, workdir)["val"]
  evaluated = evals.evaluate_checkpoints(cli.task_of(config), config, workdir)
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


@pytest.mark.slow
def test_each_log_step_records_its_throughput_and_learning_rate(tiny_lstm_run):
  workdir = tiny_lstm_run[0]
  with open(os.path.join(workdir, "run.json")) as f:
    batch_size = json.load(f)["config"]["batch_size"]
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    logged = [r for r in map(json.loads, f) if "train/loss" in r]
  assert [r["step"] for r in logged] == [1, 2, 3, 4]
  with open(os.path.join(workdir, "run.json")) as f:
    optimizer = json.load(f)["config"]["optimizer"]
  for r in logged:
    assert r["train/steps_per_second"] > 0
    assert r["train/examples_per_second"] == pytest.approx(r["train/steps_per_second"] * batch_size)
    # the rate of the step's update (the runlocal rows decay it per step, if at all)
    lr = optimizer["learning_rate"] * optimizer["lr_decay_per_step"] ** (r["step"] - 1)
    assert r["train/learning_rate"] == pytest.approx(lr, rel=1e-6)


def test_the_learning_rate_schedules_by_hand():
  from ml_collections import ConfigDict

  from vqajax.core.experiment import learning_rate
  adamw = learning_rate(ConfigDict({"name": "adamw", "learning_rate": 1e-4, "warmup": 0.1}), 100)
  # ViLT's: linear warmup over 10 updates, then linear decay to 0 at update 100
  assert [float(adamw(n)) for n in (0, 5, 10, 55, 100)] == pytest.approx([0, 5e-5, 1e-4, 5e-5, 0], rel=1e-6, abs=1e-12)
  rmsprop = learning_rate(ConfigDict({"name": "rmsprop", "learning_rate": 3e-4, "lr_decay_per_step": 0.5}))
  assert [float(rmsprop(n)) for n in (0, 1, 3)] == pytest.approx([3e-4, 1.5e-4, 3.75e-5])
  assert learning_rate(ConfigDict({"name": "adam", "learning_rate": 1e-3, "lr_decay_per_step": 1.0})) == 1e-3


def test_event_records_are_tfrecords_as_tensorboard_frames_them(monkeypatch):
  """CRC-32C's check value (RFC 3720: "123456789" -> 0xE3069283), each record framed byte for byte
  as TensorBoard's own record writer frames it, the hparams summary equal to its `hparams_pb`'s."""
  from tensorboard.plugins.hparams import plugin_data_pb2, summary_v2
  from tensorboard.summary.writer import record_writer
  assert writers.crc32c(b"123456789") == 0xE3069283 and writers.crc32c(b"") == 0
  for data in (b"", b"x", bytes(range(256)) * 5):
    theirs = io.BytesIO()
    record_writer.RecordWriter(theirs).write(data)
    assert writers.tfrecord(data) == theirs.getvalue()
  hparams = {"task": "vqa", "seed": 0, "learning_rate": 1e-3, "shuffle": True, "steps": 5}
  monkeypatch.setattr(writers.time, "time", lambda: 1234.5)
  ours, theirs = writers.hparams_summary(hparams), summary_v2.hparams_pb(hparams, start_time_secs=1234.5)
  contents = [plugin_data_pb2.HParamsPluginData.FromString(s.value[0].metadata.plugin_data.content) for s in (ours, theirs)]
  assert contents[0] == contents[1] and contents[0].session_start_info.hparams["shuffle"].bool_value
  for summary in (ours, theirs):  # the rest (a map's serialised order varies)
    summary.value[0].metadata.plugin_data.content = b""
  assert ours == theirs


@pytest.mark.slow
def test_tensorboard_reads_every_logged_scalar_and_the_hyperparameters(tiny_lstm_run):
  """The event file, written without TensorFlow, read by TensorBoard's own loader: each scalar of
  metrics.jsonl at its step (float32, as events hold them), the run's hyperparameters in the hparams
  plugin."""
  from tensorboard.backend.event_processing import event_accumulator
  workdir = tiny_lstm_run[0]
  events = event_accumulator.EventAccumulator(workdir, size_guidance={event_accumulator.SCALARS: 0})
  events.Reload()
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    logged = [(r.pop("step"), r) for r in map(json.loads, f)]
  expected = {}
  for step, scalars in logged:
    for tag, value in scalars.items():
      expected.setdefault(tag, []).append((step, pytest.approx(np.float32(value), rel=1e-6)))
  assert set(events.Tags()["scalars"]) == set(expected) and "val/accuracy" in expected
  for tag, values in expected.items():
    assert [(e.step, e.value) for e in events.Scalars(tag)] == values, tag
  from tensorboard.plugins.hparams import plugin_data_pb2
  content = events.summary_metadata["_hparams_/session_start_info"].plugin_data.content
  hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
  with open(os.path.join(workdir, "run.json")) as f:
    config = json.load(f)["config"]
  assert hparams["task"].string_value == config["task"] and hparams["seed"].number_value == config["seed"]
  assert hparams["num_train_steps"].number_value == 4
