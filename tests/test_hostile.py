"""Every command over a folder of bad inputs: exit status 2, one line on stderr naming the
file / record / field and what was expected, no traceback, every input byte-identical."""

import glob
import json
import os
import re
import shutil
import socket

import h5py
import numpy as np
import pytest

from tests.digests import digests
from vqajax import ask_cli, cli
from vqajax.core import bundle, official_files
from vqajax.core.errors import InputError
from vqajax.features.store import FeatureStore, write_store_blocks
from vqajax.vqa import models as vqa_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"
ATTENTION = f"{ROOT}/experiments/vqa/attention.py:runlocal"
STEPS = ["--config.num_train_steps=2", "--config.eval_every_steps=2", "--config.log_every_steps=1"]
GRACE = os.path.join(os.path.dirname(__import__("matplotlib").__file__), "mpl-data", "sample_data", "grace_hopper.jpg")
VAL_Q, VAL_A = "v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json"
TRAIN_Q, TRAIN_A = "v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json"


def _json(path):
  with open(path) as f:
    return json.load(f)


def _write(path, obj):
  with open(path, "w") as f:
    f.write(obj if isinstance(obj, str) else json.dumps(obj))


@pytest.fixture(scope="module")
def bad(tiny_data, tmp_path_factory):
  """A folder of bad inputs (each case's files), built once."""
  root = tmp_path_factory.mktemp("bad")
  ids = [a["question_id"] for a in _json(os.path.join(tiny_data, VAL_A))["annotations"]]
  _write(root / "truncated.json", open(os.path.join(tiny_data, VAL_A)).read()[:1000])
  _write(root / "nested.json", "[" * 100_000 + "]" * 100_000)
  _write(root / "huge_int.json", '[{"question_id": ' + "9" * 5000 + ', "answer": "yes"}]')
  _write(root / "big_id.json", [{"question_id": 10**20, "answer": "yes"}]
         + [{"question_id": q, "answer": "yes"} for q in ids[1:]])
  _write(root / "empty.h5", "")
  _write(root / "garbage.h5", "this is not HDF5 " * 100)
  with h5py.File(root / "float_ids.h5", "w") as f:
    f["features"] = np.zeros((2, 4), np.float32)
    f["image_ids"] = np.array([1.5, 2.0])
  _write(root / "a_file", "not a folder")
  data = root / "data_big_image_id"
  shutil.copytree(tiny_data, data)
  questions = _json(data / TRAIN_Q)
  annotations = _json(data / TRAIN_A)
  questions["questions"][0]["image_id"] = annotations["annotations"][0]["image_id"] = 10**20
  _write(data / TRAIN_Q, questions)
  _write(data / TRAIN_A, annotations)
  edited = lambda **changes: {"format": 2, "config": {"data": {}, "model": {}, "optimizer": {}, "mesh": {}},
                               **changes}
  for name, record in (("run_list", []), ("run_without_config", {"data": {}}), ("user_folder", {"title": "notes"}),
                       ("run_model_null", edited(config={"data": {}, "model": None, "optimizer": {}, "mesh": {}})),
                       ("run_encoders_5", edited(encoders=5))):
    os.makedirs(root / name)
    _write(root / name / "run.json", record)
  (root / "images").mkdir()
  shutil.copy(GRACE, root / "images" / "COCO_val2014_000000000001.jpg")
  np.savez(root / "weights.npz", w=np.zeros(10_000, np.float32))
  _write(root / "truncated.npz", open(root / "weights.npz", "rb").read()[:3000].decode("latin-1"))
  _write(root / "text.pth", "these are not weights\n")
  os.mkfifo(root / "fifo.pth")  # opened, it would block the read forever
  ids = FeatureStore(os.path.join(tiny_data, "features", "fc7.h5")).image_ids
  write_store_blocks(str(root / "pixels.h5"), ids, (32, 32, 4), np.uint8, [np.zeros((len(ids), 32, 32, 4), np.uint8)])
  write_store_blocks(str(root / "float_pixels.h5"), ids, (32, 32, 4), np.float32,
                     [np.zeros((len(ids), 32, 32, 4), np.float32)])
  _write(root / "exits.py", "import sys\nsys.exit(0)\n")
  _write(root / "raises_sweep.py", "def get_sweep(arg):\n  raise RuntimeError('no points today')\n")
  return root


def _train(tiny_data, workdir, *flags):
  return ["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}", *STEPS, *flags]


def _score(tiny_data, results):
  return ["score", "--questions", os.path.join(tiny_data, VAL_Q), "--annotations", os.path.join(tiny_data, VAL_A),
          "--results", results]


CASES = [
    # (name, argv builder (tiny_data, bad folder, workdir), prog, what the line must say)
    ("truncated annotations", lambda d, b, w: ["score", "--questions", os.path.join(d, VAL_Q), "--annotations",
                                               str(b / "truncated.json"), "--results", str(b / "big_id.json")],
     "vqajax score", "truncated.json: not valid JSON"),
    ("deeply nested results", lambda d, b, w: _score(d, str(b / "nested.json")), "vqajax score",
     "nested.json: not valid JSON (nested too deeply)"),
    ("a 5000-digit integer", lambda d, b, w: _score(d, str(b / "huge_int.json")), "vqajax score",
     "huge_int.json: not valid JSON"),
    ("question_id 10**20 in results", lambda d, b, w: _score(d, str(b / "big_id.json")), "vqajax score",
     "big_id.json"),
    ("0-byte feature store", lambda d, b, w: _train(d, w, f"--config.data.features={b / 'empty.h5'}"),
     "vqajax train", "empty.h5: not a readable feature store"),
    ("garbage feature store", lambda d, b, w: _train(d, w, f"--config.data.features={b / 'garbage.h5'}"),
     "vqajax train", "garbage.h5: not a readable feature store"),
    ("a pixel store for a features model (32x32x4 == 4096)",
     lambda d, b, w: _train(d, w, f"--config.data.features={b / 'pixels.h5'}"), "vqajax train",
     "pixels.h5: holds images' pixels (vqajax features --model pixels, for ViLT), while this model"),
    ("a float [S, S, 4] store for ViLT",
     lambda d, b, w: ["train", f"--config={ROOT}/experiments/vqa/vilt.py:runlocal", f"--workdir={w}",
                      f"--config.data.dir={d}", f"--config.data.features={b / 'float_pixels.h5'}"], "vqajax train",
     "float_pixels.h5: holds float32 of shape (32, 32, 4) per image, while this model (config.model.name) reads "
     "pictures' pixels, uint8 [S, S, 4] (vqajax features --model pixels)"),
    ("an fc7 store for ViLT", lambda d, b, w: ["train", f"--config={ROOT}/experiments/vqa/vilt.py:runlocal",
                                                f"--workdir={w}", f"--config.data.dir={d}",
                                                f"--config.data.features={d}/features/fc7.h5"], "vqajax train",
     "fc7.h5: holds float16 of shape (4096,) per image, while this model (config.model.name) reads pictures' pixels"),
    ("float image ids in a store", lambda d, b, w: _train(d, w, f"--config.data.features={b / 'float_ids.h5'}"),
     "vqajax train", "float_ids.h5: image ids are float64, expected integers"),
    ("batch_size 0", lambda d, b, w: _train(d, w, "--config.batch_size=0"), "vqajax train",
     "config.batch_size: expected a positive integer <= 2147483647, got 0"),
    ("batch_size -8", lambda d, b, w: _train(d, w, "--config.batch_size=-8"), "vqajax train",
     "config.batch_size: expected a positive integer <= 2147483647, got -8"),
    ("batch not divisible by eight_devices", lambda d, b, w: _train(d, w, "--config.batch_size=7"), "vqajax train",
     "config.batch_size 7 does not split over 8 devices"),
    ("workdir that is a file", lambda d, b, w: _train(d, str(b / "a_file")), "vqajax train",
     "a_file: exists and is not a folder"),
    ("image_id 10**20", lambda d, b, w: _train(str(b / "data_big_image_id"), w), "vqajax train",
     'expected an integer "image_id" within 64 bits'),
    ("a bad sweep argument", lambda d, b, w: ["sweep", f"{ROOT}/experiments/sweeps/vqa_table2.py:bogus",
                                              f"--workdir={w}"], "vqajax sweep", "unknown config argument 'bogus'"),
    ("eval of a missing run", lambda d, b, w: ["eval", f"--workdir={w}"], "vqajax eval", "no such run"),
    # issue 22.6 / 22.7
    ("run.json edited to []", lambda d, b, w: ["eval", f"--workdir={b / 'run_list'}"], "vqajax eval",
     'run_list/run.json: not a vqajax run record (expected an object with a "config" object)'),
    ("run.json without config", lambda d, b, w: ["eval", f"--workdir={b / 'run_without_config'}"], "vqajax eval",
     "run_without_config/run.json: not a vqajax run record"),
    ("run.json's model null", lambda d, b, w: ["eval", f"--workdir={b / 'run_model_null'}"], "vqajax eval",
     'run_model_null/run.json: "config"."model": expected an object, got None (an edited run record?)'),
    ("run.json's encoders 5", lambda d, b, w: ["eval", f"--workdir={b / 'run_encoders_5'}"], "vqajax eval",
     'run_encoders_5/run.json: "encoders": expected a string, got 5 (an edited run record?)'),
    ("a user folder with its own run.json", lambda d, b, w: _train(d, str(b / "user_folder")), "vqajax train",
     "user_folder/run.json: not a vqajax run record"),
    ("data.dir of an unknown scheme", lambda d, b, w: _train("foo://bar", w), "vqajax train",
     "config.data.dir: expected a local path or a URL (gs://, s3://, ram://, file://), got 'foo://bar'"),
    ("score --results of an unknown scheme", lambda d, b, w: _score(d, "foo://x.json"), "vqajax score",
     "foo://x.json: unknown URL scheme 'foo'"),
    ("a truncated .npz of weights", lambda d, b, w: _features(b, "truncated.npz", str(b / "out.h5")),
     "vqajax features", "truncated.npz: not a readable .npz of weights (BadZipFile"),
    ("a text file as .pth weights", lambda d, b, w: _features(b, "text.pth", str(b / "out.h5")),
     "vqajax features", "text.pth: not a readable torch state dict"),
    ("a fifo as weights", lambda d, b, w: _features(b, "fifo.pth", str(b / "out.h5")),
     "vqajax features", "fifo.pth: not a regular file (a fifo, device or folder); expected a file"),
    ("features --log-every 0", lambda d, b, w: _features(b, "weights.npz", str(b / "out.h5")) + ["--log-every", "0"],
     "vqajax features", "--log-every: expected a positive integer, got 0"),
    ("features --out ram://", lambda d, b, w: _features(b, "weights.npz", "ram://store.h5"), "vqajax features",
     "ram://store.h5: stores are written on a local disk"),
    ("data synth --out ram://", lambda d, b, w: ["data", "synth", "--out", "ram://synth"], "vqajax data",
     "--out ram://synth: that file system ends with this process"),
    ("data synth --seed -1", lambda d, b, w: ["data", "synth", "--out", str(w), "--seed", "-1"], "vqajax data",
     "--seed: expected an integer from 0 to 4294967295, got -1"),
    ("report answers --top 0", lambda d, b, w: ["report", "answers", str(w), "--out", str(b / "r"), "--top", "0"],
     "vqajax report", "--top: expected a positive integer <= 2147483647, got 0"),
    ("report answers --top -1", lambda d, b, w: ["report", "answers", str(w), "--out", str(b / "r"), "--top", "-1"],
     "vqajax report", "--top: expected a positive integer <= 2147483647, got -1"),
    ("table4 of a missing run", lambda d, b, w: ["therapy", "table4", str(w), "--out", str(b / "t4")],
     "vqajax therapy", "w: no such run"),
    ("an empty --config=", lambda d, b, w: ["train", "--config=", f"--workdir={w}"], "vqajax train",
     "--config: expected FILE.py[:ARG], got an empty name"),
    ("a config file calling sys.exit(0)", lambda d, b, w: ["train", f"--config={b / 'exits.py'}", f"--workdir={w}"],
     "vqajax train", "exits.py: cannot load the config file (SystemExit: 0)"),
    ("a sweep file that raises", lambda d, b, w: ["sweep", str(b / "raises_sweep.py"), f"--workdir={w}"],
     "vqajax sweep", "raises_sweep.py (RuntimeError: no points today)"),
]


def _features(bad, weights, out):
  return ["features", "--images", str(bad / "images"), "--model", "vgg16", "--weights", str(bad / weights),
          "--layer", "fc7", "--out", out]


@pytest.mark.parametrize("name, argv, prog, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(name, argv, prog, expected, tiny_data, bad, tmp_path, capsys):
  del name
  workdir = tmp_path / "w"
  before = {"data": digests(tiny_data), "bad": digests(bad)}
  assert cli.main(argv(tiny_data, bad, str(workdir))) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err and err[-1].startswith(f"{prog}: error: ") and expected in err[-1], err[-3:]
  assert not any("Traceback" in line for line in err), err
  assert {"data": digests(tiny_data), "bad": digests(bad)} == before
  assert not os.path.exists(workdir)


THERAPY = f"{ROOT}/experiments/therapy/grounding_mask.py:runlocal"
POSITIVE = "expected a positive integer <= 2147483647, got"
# (config file, field=value, what the line says): every constrained field, a bad value.
CONFIG_CASES = [
    (CONFIG, "model.mlp_dims=abc", "config.model.mlp_dims: expected a tuple of integers >= 1, e.g. (512, 512), got ('abc',)"),
    (CONFIG, "model.mlp_dims=0", "config.model.mlp_dims: expected a tuple of integers >= 1, e.g. (512, 512), got (0,)"),
    (CONFIG, "model.mlp_dims=-5", "config.model.mlp_dims: expected a tuple of integers >= 1"),
    (CONFIG, "model.mlp_dims=(0,)", "config.model.mlp_dims: expected a tuple of integers >= 1"),
    (CONFIG, "data.max_question_len=0", f"config.data.max_question_len: {POSITIVE} 0"),
    (CONFIG, "data.max_question_len=-1", f"config.data.max_question_len: {POSITIVE} -1"),
    (CONFIG, "model.lstm_layers=0", f"config.model.lstm_layers: {POSITIVE} 0"),
    (CONFIG, "model.embed_dim=0", f"config.model.embed_dim: {POSITIVE} 0"),
    (CONFIG, "model.fused_dim=0", f"config.model.fused_dim: {POSITIVE} 0"),
    (CONFIG, "model.lstm_dim=-1", f"config.model.lstm_dim: {POSITIVE} -1"),
    (ATTENTION, "model.attention_dim=0", f"config.model.attention_dim: {POSITIVE} 0"),
    (ATTENTION, "model.glimpses=0", f"config.model.glimpses: {POSITIVE} 0"),
    (CONFIG, "model.glimpses=2", "the config has no field 'model.glimpses'"),  # config.model: its model's group only
    (CONFIG, "model.dtype=float8", "config.model.dtype: expected one of ('float32', 'bfloat16', 'float16'), got 'float8'"),
    (CONFIG, "model.question=gru", f"config.model.question: expected one of {vqa_models.QUESTION_ENCODERS}, got 'gru'"),
    (CONFIG, "model.fusion=add", "config.model.fusion: expected one of ('mul', 'concat'), got 'add'"),
    (CONFIG, "model.lstm_impl=cudnn", "config.model.lstm_impl: expected one of ('auto', 'chunked', 'scan'), got 'cudnn'"),
    (CONFIG, "model.targets=hard", "config.model.targets: expected one of ('answer', 'soft', 'bce'), got 'hard'"),
    (CONFIG, "model.dropout=2", "config.model.dropout: expected a number in [0, 1), got 2"),
    (CONFIG, "model.dropout=-1", "config.model.dropout: expected a number in [0, 1), got -1"),
    (ATTENTION, "model.attention_dropout=1", "config.model.attention_dropout: expected a number in [0, 1), got 1"),
    (CONFIG, "model.image_scale=0", "config.model.image_scale: expected a number > 0, got 0"),
    (CONFIG, "seed=-1", "config.seed: expected an integer from 0 to 4294967295, got -1"),
    (CONFIG, f"seed={2**70}", "config.seed: expected an integer from 0 to 4294967295, got 1180591620717411303424"),
    (CONFIG, f"num_train_steps={10**20}",
     "config.num_train_steps: expected an integer from 0 to 2147483647, got 100000000000000000000"),
    (CONFIG, "num_train_steps=-1", "config.num_train_steps: expected an integer from 0 to 2147483647, got -1"),
    (CONFIG, "num_epochs=-1", "config.num_epochs: expected a number in [0, 1e+06], got -1"),
    (CONFIG, "eval_batch_size=0", f"config.eval_batch_size: {POSITIVE} 0"),
    (CONFIG, "log_every_steps=0", f"config.log_every_steps: {POSITIVE} 0"),
    (CONFIG, "eval_every_steps=-2", f"config.eval_every_steps: {POSITIVE} -2"),
    (CONFIG, "keep_checkpoints=0", f"config.keep_checkpoints: {POSITIVE} 0"),
    (CONFIG, "checkpoint_every_steps=-1", "config.checkpoint_every_steps: expected an integer from 0 to 2147483647, got -1"),
    (CONFIG, "profile_steps=(5,2)", "config.profile_steps: expected () or a pair of steps (first, last), 1 <= first <= last, got (5, 2)"),
    (CONFIG, "optimizer.name=sgd", "config.optimizer.name: expected one of ('rmsprop', 'adam', 'adamw'), got 'sgd'"),
    (CONFIG, "optimizer.learning_rate=-1", "config.optimizer.learning_rate: expected a number > 0, got -1"),
    (CONFIG, "optimizer.eps=-1", "config.optimizer.eps: expected a number > 0, got -1"),
    (CONFIG, "optimizer.eps=0", "config.optimizer.eps: expected a number > 0, got 0"),  # had failed the run (NaN)
    (CONFIG, "optimizer.lr_decay_per_step=0", "config.optimizer.lr_decay_per_step: expected a number in (0, 1], got 0"),
    (CONFIG, "optimizer.rmsprop_decay=1", "config.optimizer.rmsprop_decay: expected a number in [0, 1), got 1"),
    (CONFIG, "optimizer.grad_clip=-1", "config.optimizer.grad_clip: expected a number >= 0, got -1"),
    (CONFIG, "data.format=bogus", "config.data.format: expected one of ('vqa', 'vizwiz'), got 'bogus'"),
    (CONFIG, "data.results_prefix=/home/u/z", 'config.data.results_prefix: expected "" or the start of a plain name '
     "(letters, digits, '.', '-', '_', '+'), got '/home/u/z'"),  # had written over /home/u/z..._results.json
    (CONFIG, "data.results_prefix=../x", 'config.data.results_prefix: expected "" or the start of a plain name'),
    (CONFIG, "data.source=web", "config.data.source: expected one of ('raw', 'tfds'), got 'web'"),
    (CONFIG, "data.dir=foo://bar", "config.data.dir: expected a local path or a URL (gs://, s3://, ram://, file://)"),
    (CONFIG, "data.features=foo://x.h5", "config.data.features: expected a local path or a URL"),
    (CONFIG, "data.feature_shape=(-1,)", "config.data.feature_shape: expected a tuple of integers >= 1"),
    (CONFIG, "data.features_on_device=maybe", "config.data.features_on_device: expected one of"),
    (CONFIG, "data.num_answers=0", f"config.data.num_answers: {POSITIVE} 0"),
    (CONFIG, "data.vocab_min_count=0", f"config.data.vocab_min_count: {POSITIVE} 0"),
    (CONFIG, "data.bow_words=0", f"config.data.bow_words: {POSITIVE} 0"),
    (CONFIG, "data.bow_lead_words=-1", "config.data.bow_lead_words: expected an integer from 0 to 2147483647, got -1"),
    (CONFIG, "data.caption_words=0", f"config.data.caption_words: {POSITIVE} 0"),
    (CONFIG, "name=../x", "config.name: expected a plain name (letters, digits, '.', '-', '_', '+'), got '../x'"),
    (THERAPY, "data.holdout=1", "config.data.holdout: expected a number in (0, 1), got 1"),
    (THERAPY, "data.max_answers=0", f"config.data.max_answers: {POSITIVE} 0"),
    (THERAPY, "data.max_answer_len=0", f"config.data.max_answer_len: {POSITIVE} 0"),
    (THERAPY, "model.cell_dim=0", f"config.model.cell_dim: {POSITIVE} 0"),
    (THERAPY, "model.dropout=1", "config.model.dropout: expected a number in [0, 1), got 1"),
    (f"{ROOT}/experiments/therapy/paligemma_zeroshot.py:runlocal", "num_train_steps=5",
     "config.num_train_steps: config.model.name 'paligemma' is zero-shot for config.task 'grounding_class' (nothing "
     "trains): expected 0 steps and 0 epochs, got 5 steps and 0.0 epochs"),
    (f"{ROOT}/experiments/therapy/paligemma_ground.py:runlocal", "num_epochs=1.5",
     "config.num_train_steps: config.model.name 'paligemma' is zero-shot for config.task 'grounding_mask'"),
]


@pytest.mark.parametrize("config, setting, expected", CONFIG_CASES, ids=[c[1] for c in CONFIG_CASES])
@pytest.mark.parametrize("print_config", [False, True], ids=["train", "print-config"])
def test_a_bad_config_field_is_refused_before_anything_is_written(config, setting, expected, print_config,
                                                                  tmp_path, capsys):
  workdir = tmp_path / "w"
  argv = ["train", f"--config={config}", f"--workdir={workdir}", f"--config.data.dir={tmp_path / 'data'}",
          f"--config.{setting}", *(["--print-config"] if print_config else [])]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"vqajax train: error: {err[-1].partition('error: ')[2]}"] and expected in err[-1], err
  assert not os.listdir(tmp_path)  # no run.json, no data written


def test_every_config_field_has_a_rule():
  """Each field of every experiment config (both papers, each argument) is declared with what it holds."""
  from vqajax.core import config as config_lib
  from vqajax.core import evals
  checked = 0
  for folder, args in (("vqa", ("", "cpu", "runlocal")), ("therapy", ("", "cpu", "runlocal", "real"))):
    for name in sorted(os.listdir(f"{ROOT}/experiments/{folder}")):
      if not name.endswith(".py") or name.startswith("_"):
        continue
      for arg in args:
        if arg == "real" and name.startswith(("vilt_", "clipseg_", "paligemma_")):  # they read pixels, which
          continue                                                                 # the released files lack
        config = config_lib.load_config(f"{ROOT}/experiments/{folder}/{name}:{arg}")
        task = cli.task_of(config)
        fields = {k for k in config_lib.leaves(config) if not k.startswith("evals.")}  # core/evals.py's rules
        rules = task.rules(config)  # its FIELDS and its model's
        assert fields <= set(rules), (name, arg, fields - set(rules))
        config_lib.check(config, rules)  # the shipped configs pass
        evals.check(config, task)
        checked += 1
  assert checked >= 11 * 3


def test_a_sweep_reports_its_failed_points_runs_the_others_and_exits_2(tiny_data, tmp_path, capsys):
  """Issue 22.6: a point with a bad config field and one whose data is missing fail; the
  baselines point still runs and is collected; no empty checkpoints/ is left."""
  data = {"data.dir": str(tiny_data), "data.synthetic": False}
  points = [("bad_config", "train", {**data, "model.dropout": 2.0}),
            ("bad_data", "train", {**data, "data.dir": str(tmp_path / "missing")}),
            ("base", "baselines", data)]
  sweep = tmp_path / "sweep.py"
  sweep.write_text(f"""
def get_sweep(arg):
  return {{"base": None, "points": [
      {{"name": n, "command": c, "baselines": ["prior"], "overrides": o, "config": "{CONFIG}"}}
      for n, c, o in {points!r}]}}
""")
  workdir = tmp_path / "w"
  assert cli.main(["sweep", str(sweep), f"--workdir={workdir}"]) == 2
  out, err = capsys.readouterr()
  assert "bad_config: failed: config.model.dropout: expected a number in [0, 1), got 2.0" in out
  assert "bad_data: failed: " in out and "| prior |" in out
  last = err.strip().splitlines()[-1]
  assert last.startswith("vqajax sweep: error: 2 of 3 points failed: point bad_config: config.model.dropout: ")
  assert "; point bad_data: " in last
  assert os.path.exists(workdir / "base" / "results" / "prior" / "metrics.json")
  assert os.path.exists(workdir / "table2.md")
  assert not os.path.exists(workdir / "bad_config") and not os.path.exists(workdir / "bad_data" / "checkpoints")


def test_file_urls_are_local_paths(tiny_data, tmp_path, capsys):
  """Issue 22.6: file:///x is read as the local file /x."""
  annotations = json.load(open(os.path.join(tiny_data, VAL_A)))["annotations"]
  results = tmp_path / "results.json"
  _write(results, [{"question_id": a["question_id"], "answer": "yes"} for a in annotations])
  assert cli.main(_score(tiny_data, f"file://{results}")) == 0
  assert cli.main(_score(tiny_data, str(results))) == 0
  local, url = capsys.readouterr().out.split("}\n{")
  assert json.loads(local + "}")["overall"] == json.loads("{" + url)["overall"] > 0


def test_a_lock_of_pid_0_is_stale(tmp_path):
  """Issue 22.7: kill(0, 0) signals this process group, so pid 0 looked alive forever."""
  from vqajax.core import run_record
  _write(tmp_path / "lock", {"host": socket.gethostname(), "pid": 0, "command": "vqajax train", "since": "then"})
  with run_record.WorkdirLock(str(tmp_path), "vqajax test"):
    assert json.load(open(tmp_path / "lock"))["pid"] == os.getpid()
  assert not os.path.exists(tmp_path / "lock")


def _one_line(capsys, prog):
  """The only line on stderr, which must be `prog`'s refusal (no usage block, no traceback)."""
  captured = capsys.readouterr()
  err = captured.err.splitlines()
  assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), captured.err
  return err[0]


PARSER_CASES = [  # (argv, prog, what the line says)
    (["train", "--config=x.py", "--workdir="], "vqajax train", "argument --workdir: expected a path, got an empty one"),
    (["submit", "--workdir=w", "q.json", "--data_dir="], "vqajax submit", "argument --data_dir: expected a path"),
    (["train", "--config=x.py", "--workdir=w", "--slurm.nodes=-1"], "vqajax train",
     "argument --slurm.nodes: expected a positive whole number, got '-1'"),
    *[(["sweep", "s.py", "--workdir=w", f"--slurm.poll={poll}"], "vqajax sweep",
       f"argument --slurm.poll: expected a number of seconds from 0.1 to 86400, got '{poll}'")
      for poll in ("inf", "1e300", "1e-300", "0", "nan")],  # inf had submitted, then died of an OverflowError
    (["train", "--config=x.py", "--workdir=w", "--launcher", "pbs"], "vqajax train",
     "argument --launcher: invalid choice: 'pbs' (choose from 'local', 'slurm')"),
    (["features", "--images=i", "--model=pixels", "--layer=pixels", "--out=o.h5", "--size", "big"], "vqajax features",
     "argument --size: expected an integer, got 'big'"),
    (["eval", "--workdir=w", "--step", "last"], "vqajax eval", "argument --step: expected an integer, got 'last'"),
    (["eval", "--workdir=w", "--step", "20", "--all"], "vqajax eval",
     "argument --all: not allowed with argument --step"),  # had evaluated every step
    (["ask", "--workdir=w", "--step=1", "--best"], "vqajax ask", "argument --best: not allowed with argument --step"),
    (["export", "--workdir=w"], "vqajax export", "the following arguments are required: --out"),
    (["data", "synth", "--seed", "x"], "vqajax data synth", "argument --seed: expected an integer, got 'x'"),
    (["therapy", "nope"], "vqajax therapy", "invalid choice: 'nope'"),
    (["features", "convert", "in.pth"], "vqajax features convert", "the following arguments are required: npz"),
    (["convert", "vizwiz"], "vqajax convert vizwiz", "the following arguments are required"),
    (["train", "--config=x.py", "--workdir=w", "--config.batch_size"], "vqajax train",
     "--config.batch_size: expected a value"),
]


@pytest.mark.parametrize("argv, prog, expected", PARSER_CASES, ids=[" ".join(c[0][:2]) for c in PARSER_CASES])
def test_a_flag_refused_is_one_line_without_the_usage_block(argv, prog, expected, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit) as done:
    cli.main(argv)
  assert done.value.code == 2 and expected in _one_line(capsys, prog)
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_every_verbs_parser_refuses_in_one_line(verb, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit) as done:
    cli.main([verb, "--no-such-flag"])
  assert done.value.code == 2
  _one_line(capsys, f"vqajax {verb}")


def test_every_parser_is_the_one_line_parser():
  """Every parser of the front door and the pipelines is `errors.ArgumentParser` (its
  sub-parsers follow it): a plain argparse parser would print its usage block."""
  plain = [os.path.relpath(path, ROOT) for folder in ("vqajax", "data_pipeline")
           for path in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True)
           if "argparse.ArgumentParser(" in open(path).read() and not path.endswith(os.path.join("core", "errors.py"))]
  assert plain == []


def test_a_malicious_pth_is_refused_in_one_line_and_never_run(tmp_path, monkeypatch, capsys):
  torch = pytest.importorskip("torch")
  marker = tmp_path / "ran"

  class Payload:
    def __reduce__(self):
      return (os.system, (f"touch {marker}",))

  torch.save({"features.0.weight": Payload()}, tmp_path / "evil.pth")
  before = digests(str(tmp_path))
  assert cli.main(["features", "convert", str(tmp_path / "evil.pth"), str(tmp_path / "out.npz")]) == 2
  line = _one_line(capsys, "vqajax features")
  assert "evil.pth: not a readable torch state dict: not a pickle of tensors only" in line
  assert "weights_only" not in line  # torch's advice to load it unsafely is not passed on
  assert digests(str(tmp_path)) == before and not marker.exists()


@pytest.mark.parametrize("flags, expected", [
    (["--size", "100000"], "--size 100000: only pixels takes a size, a number of pixels from 1 to 4096"),
    (["--batch", "100000000"], "--batch 100000000: the inputs of a batch of 384x384 images would take 219726.6 GiB, "
                               "more than the 2 GiB allowed: give at most 910"),  # 384 * 384 * 4 channels * 4 bytes
    (["--size", "4096", "--batch", "9"], "the inputs of a batch of 4096x4096 images would take 2.2 GiB"),
    (["--chunk", "100000"], "--chunk 100000: a chunk of 100000 rows of uint8 (384, 384, 4) would take 54.9 GiB of "
                            "memory, more than the 1 GiB allowed: give at most 1820"),  # 2**30 // (384 * 384 * 4)
], ids=["size", "batch", "size and batch", "chunk"])
def test_a_pixel_store_that_cannot_fit_is_refused_before_it_starts(flags, expected, bad, tmp_path, capsys):
  out = tmp_path / "pixels.h5"
  assert cli.main(["features", "--images", str(bad / "images"), "--model", "pixels", "--layer", "pixels",
                   "--out", str(out), *flags]) == 2
  assert expected in _one_line(capsys, "vqajax features")
  assert os.listdir(tmp_path) == []


def test_a_lone_surrogate_is_refused_naming_where_it_is(tiny_data, tmp_path):
  """A lone surrogate ("\\ud800" in JSON) is no character: the tokenizers and the terminal
  cannot take it, so every reader of text names it (the test file of `submit`, `ask`'s
  flags and questions file)."""
  questions = _json(os.path.join(tiny_data, "v2_OpenEnded_mscoco_test-dev2015_questions.json"))
  questions["questions"][2]["question"] = "what is \ud800?"
  qid = questions["questions"][2]["question_id"]
  _write(tmp_path / "test.json", questions)
  with pytest.raises(InputError, match=rf'test.json: questions\[2\] \(question_id={qid}\): "question": expected '
                                       r"text, got 'what is \\ud800\?' \(a lone surrogate is no character\)"):
    official_files.read_questions(str(tmp_path / "test.json"))
  _write(tmp_path / "ask.json", [{"image_id": 1, "question": "fine"}, {"image_id": 1, "question": "a\ud800"}])
  with pytest.raises(InputError, match=r'ask.json: records\[1\]: "question": expected text'):
    ask_cli.read_questions(str(tmp_path / "ask.json"))
  flags = ask_cli._parser("vqajax ask").parse_args(["--workdir=w", "--image-id=1", "--question=fine",
                                                     "--question=b\ud800"])
  with pytest.raises(InputError, match=r"^--question: expected text, got 'b\\ud800'"):
    ask_cli.asked(flags)


def test_a_sparse_2_gib_file_is_refused_before_it_is_read(tiny_data, tmp_path, capsys):
  zeros = tmp_path / "results.json"
  with open(zeros, "wb") as f:
    f.truncate(2 * 2**30)  # sparse: no disk, and no memory unless read
  assert cli.main(["score", "--questions", os.path.join(tiny_data, VAL_Q), "--annotations",
                   os.path.join(tiny_data, VAL_A), "--results", str(zeros)]) == 2
  assert f"results.json: 2147483648 bytes, more than the {2**30} expected" in _one_line(capsys, "vqajax score")
  assert official_files.MAX_INPUT_BYTES == 2**30


def test_bytes_that_are_no_parameters_are_one_line():
  """A bundle's parameters are verified by sha256 first, so these come from an edit that
  updated the checksum: random bytes (msgpack's ExtraData), a number, objects of strings."""
  from flax import serialization
  for blob, expected in [(np.random.default_rng(0).bytes(1000), "not Flax msgpack parameters (ExtraData)"),
                         (serialization.msgpack_serialize(5), "expected nested objects of arrays"),
                         (serialization.msgpack_serialize({"dense": {"kernel": "x"}}), "expected nested objects")]:
    with pytest.raises(InputError, match=rf"^B/flax_model.msgpack: {re.escape(expected)}"):
      bundle._params("B/flax_model.msgpack", blob)
  params = {"dense": {"kernel": np.ones((2, 3), np.float32)}}
  np.testing.assert_array_equal(bundle._params("B", serialization.msgpack_serialize(params))["dense"]["kernel"],
                                params["dense"]["kernel"])
