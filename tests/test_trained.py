"""A trained run is a product: it answers without its training data, exports as a bundle
that answers the same anywhere, records its encoders (checked on resume and eval), and its
readers never disturb a training that is writing it."""

import collections
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import yaml

import vqajax
from experiments.vqa import bow_q_i
from tests import devices
from vqajax import cli, demo
from vqajax.core import checkpoint, train
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError

pytestmark = pytest.mark.slow  # every test reads or makes a trained run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = {k: 2 for k in ("num_train_steps", "eval_every_steps", "log_every_steps")}
TRAINING_FILES = ("v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json",
                  "v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json",
                  "MultipleChoice_mscoco_train2014_questions.json", "MultipleChoice_mscoco_val2014_questions.json")
TEST_DEV = "v2_OpenEnded_mscoco_test-dev2015_questions.json"


def _config(data_dir, **overrides):
  return config_lib.override(bow_q_i.get_config("runlocal"), {
      **STEPS, "data.dir": data_dir, "data.synthetic": False, **overrides})


@pytest.fixture(scope="module")
def run(tiny_data, tmp_path_factory):
  """BoW Q + I trained 2 steps on a copy of the tiny set (its files may be moved away)."""
  root = tmp_path_factory.mktemp("trained")
  data = str(root / "data")
  shutil.copytree(tiny_data, data)
  config = _config(data)
  workdir = str(root / "run")
  train.train_and_evaluate(cli.task_of(config), config, workdir, devices=jax.devices()[:1])
  with open(os.path.join(data, "v2_OpenEnded_mscoco_val2014_questions.json")) as f:
    questions = json.load(f)["questions"][:3]
  ask = ["--image-id", str(questions[0]["image_id"]), "--image-id", str(questions[1]["image_id"]),
         "--question", questions[0]["question"], "--question", "how many dogs are there?", "--top-k", "4"]
  return {"root": root, "data": data, "workdir": workdir, "ask": ask}


def _main(argv, capsys):
  status = cli.main(argv)
  out, err = capsys.readouterr()
  return status, out, err


def _asked(path, run, capsys, *extra):
  status, out, err = _main(["ask", "--workdir", path, *run["ask"], *extra], capsys)
  assert status == 0, err
  return out


def _files(folder):
  out = {}
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), "rb") as f:
      out[name] = f.read()
  return out


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def test_it_answers_without_its_training_data(run, capsys):
  before = _asked(run["workdir"], run, capsys)
  assert before.count("\n  1. ") == 4  # 2 images x 2 questions
  test_dev = os.path.join(run["data"], TEST_DEV)
  assert _main(["submit", test_dev, "--workdir", run["workdir"], "--out", str(run["root"] / "sub1")], capsys)[0] == 0
  away = run["root"] / "away"
  away.mkdir()
  for name in TRAINING_FILES:
    os.rename(os.path.join(run["data"], name), away / name)
  try:
    assert _asked(run["workdir"], run, capsys) == before
    assert _main(["submit", test_dev, "--workdir", run["workdir"], "--out", str(run["root"] / "sub2")], capsys)[0] == 0
    assert _files(run["root"] / "sub1") == _files(run["root"] / "sub2")
    # The whole command, as a user runs it: no TensorFlow on the inference path.
    probe = ("import sys; from vqajax.cli import main; status = main(['ask', '--workdir', sys.argv[1], *sys.argv[2:]]);"
             "assert 'tensorflow' not in sys.modules, 'imported tensorflow'; sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", probe, run["workdir"], *run["ask"]], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == before, done.stderr
  finally:
    for name in TRAINING_FILES:
      os.rename(away / name, os.path.join(run["data"], name))


def test_the_encoders_are_the_runs_own(run):
  workdir, data = run["workdir"], run["data"]
  with open(os.path.join(workdir, "run.json")) as f:
    record = json.load(f)
  with open(os.path.join(workdir, "encoders.json")) as f:
    tables = json.load(f)["tables"]
  assert record["encoders"] == _sha256(os.path.join(workdir, "encoders.json"))
  # The vocabulary and answer table, computed here from the training files.
  with open(os.path.join(data, TRAINING_FILES[0])) as f:
    questions = json.load(f)["questions"]
  with open(os.path.join(data, TRAINING_FILES[1])) as f:
    annotations = json.load(f)["annotations"]
  words = collections.Counter(w for q in questions for w in re.findall(r"\w+(?:'\w+)?", q["question"].lower()))
  config = _config(data)
  kept = [w for w, c in words.items() if c >= config.data.vocab_min_count]
  assert tables["vocab"] == sorted(kept, key=lambda w: (-words[w], w))
  answers = collections.Counter(a["multiple_choice_answer"] for a in annotations)
  assert tables["answers"] == sorted(answers, key=lambda a: (-answers[a], a))[:config.data.num_answers]
  assert tables["image_shape"] == [4096]


def test_other_encoders_are_refused_on_resume_and_eval(run, capsys):
  path = os.path.join(run["data"], TRAINING_FILES[0])
  with open(path, "rb") as f:
    original = f.read()
  with open(os.path.join(run["workdir"], "encoders.json")) as f:
    vocab = json.load(f)["tables"]["vocab"]
  word, n = vocab[-1], len(vocab)
  questions = json.loads(original)
  for q in questions["questions"]:  # one word renamed: the same sizes, another vocabulary
    q["question"] = re.sub(rf"\b{word}\b", "zyzzyva", q["question"])
  try:
    with open(path, "w") as f:
      json.dump(questions, f)
    config = _config(run["data"], num_train_steps=4)
    named = f"vocab: {n} -> {n} entries, first difference [{n - 1}] '{word}' -> 'zyzzyva')"
    with pytest.raises(InputError, match="other encoders than the run recorded in encoders.json .*" + re.escape(named)):
      train.train_and_evaluate(cli.task_of(config), config, run["workdir"], devices=jax.devices()[:1])
    status, _, err = _main(["eval", "--workdir", run["workdir"]], capsys)
    assert status == 2 and named in err.strip().splitlines()[-1] and "Traceback" not in err
  finally:
    with open(path, "wb") as f:
      f.write(original)


@pytest.mark.parametrize("verb", ["ask", "eval", "train"])
def test_a_run_json_of_another_format_is_one_line(verb, run, capsys):
  with open(os.path.join(run["workdir"], "run.json")) as f:
    record = json.load(f)
  assert record["format"] == 2
  for name, changed in (("none", {k: v for k, v in record.items() if k != "format"}), ("old", {**record, "format": 1})):
    other = str(run["root"] / f"{verb}-{name}")
    shutil.copytree(run["workdir"], other)
    with open(os.path.join(other, "run.json"), "w") as f:
      json.dump(changed, f)
    before = _tree(other)
    argv = {"ask": ["ask", "--workdir", other, *run["ask"]], "eval": ["eval", "--workdir", other],
            "train": ["train", f"--config={ROOT}/experiments/vqa/bow_q_i.py:runlocal", "--workdir", other,
                      f"--config.data.dir={run['data']}", "--config.data.synthetic=false"]}[verb]
    status, _, err = _main(argv, capsys)
    found = changed.get("format")
    assert status == 2 and err.strip().splitlines()[-1] == (
        f'vqajax {verb}: error: {other}/run.json: expected "format": 2, got {found!r} (a run recorded by another '
        "version of vqajax: train it again, or use that version)"), err[-2000:]
    assert _tree(other) == before


@pytest.mark.parametrize("verb", ["ask", "export"])
def test_a_run_json_without_its_encoders_is_one_line(verb, run, capsys):
  other = str(run["root"] / f"{verb}-no-encoders")
  shutil.copytree(run["workdir"], other)
  with open(os.path.join(other, "run.json")) as f:
    record = json.load(f)
  del record["encoders"]
  with open(os.path.join(other, "run.json"), "w") as f:
    json.dump(record, f)
  before = _tree(other)
  argv = {"ask": ["ask", "--workdir", other, *run["ask"]],
          "export": ["export", "--workdir", other, "--out", str(run["root"] / f"{verb}-bundle")]}[verb]
  status, _, err = _main(argv, capsys)
  assert status == 2 and err.strip().splitlines()[-1] == (
      f"vqajax {verb}: error: {other}/run.json: records no encoders, though the run has checkpoints (an edited "
      "file?)"), err[-2000:]
  assert _tree(other) == before and not os.path.exists(run["root"] / f"{verb}-bundle")


def _tree(folder):
  """{path: bytes} of every file under `folder`."""
  return {os.path.join(top, name): pathlib.Path(top, name).read_bytes()
          for top, _, names in os.walk(folder) for name in names}


def test_a_bundle_answers_as_its_workdir_anywhere(run, capsys, tmp_path):
  before = _asked(run["workdir"], run, capsys)
  copy = str(tmp_path / "copy")
  shutil.copytree(run["workdir"], copy)
  bundle = str(tmp_path / "bundle")
  status, out, err = _main(["export", "--workdir", copy, "--out", bundle], capsys)
  assert status == 0 and out.startswith(f"bundle of {copy} in {bundle}"), err
  status, _, err = _main(["export", "--workdir", copy, "--out", str(tmp_path / "b2"), "--with-weights"], capsys)
  assert status == 2 and f"{copy}: its extractor (colour_cells) has no weights file" in err
  assert not os.path.exists(tmp_path / "b2")
  shutil.rmtree(copy)  # the bundle stands alone
  moved = shutil.move(bundle, tmp_path / "elsewhere")
  assert _asked(str(moved), run, capsys, "--data_dir", run["data"]) == before  # it names no data folder
  opened = lambda path, *flags: demo.page_of(demo._parser("vqajax demo").parse_args(["--workdir", str(path), *flags]))
  store = [str(i) for i in opened(run["workdir"]).answerer.image_ids]  # the demo's picker offers the store's images
  assert store and [key for _, key in opened(moved, "--data_dir", run["data"]).image_choices()] == store
  assert opened(moved).image_choices() == []
  with pytest.raises(InputError, match="a workdir, which reads the data it recorded"):
    opened(run["workdir"], "--data_dir", run["data"])
  names = sorted(os.listdir(moved))
  assert names == ["README.md", "config.json", "encoders.json", "flax_model.msgpack", "vqajax.json"]
  with open(os.path.join(moved, "vqajax.json")) as f:
    record = json.load(f)
  assert record["files"] == {n: _sha256(os.path.join(moved, n)) for n in names if n != "vqajax.json"}
  assert record["step"] == 2 and record["task"] == "vqa" and "accuracy/yes/no" in record["metrics"]
  with open(os.path.join(moved, "README.md")) as f:
    card = f.read()
  metadata = yaml.safe_load(card.split("---\n")[1])  # the Hub reads the front matter as YAML
  assert metadata["library_name"] == "vqajax" and metadata["pipeline_tag"] == "visual-question-answering"
  (entry,) = metadata["model-index"]
  (result,) = entry["results"]
  assert result["task"] == {"type": "visual-question-answering"} and result["dataset"]["split"] == "val"
  assert {m["type"]: m["value"] for m in result["metrics"]} == {
      k: round(v, 4) for k, v in record["metrics"].items() if "/" not in k}
  assert "/" not in result["dataset"]["name"] and os.sep + "tmp" not in card  # no local path in the card
  assert f"| accuracy | {record['metrics']['accuracy']:.2f} |" in card
  assert "pip install -e ./vqajax" in card and "pip install vqajax" not in card  # it is on no package index
  workdir_bytes = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(run["workdir"]) for n in ns)
  assert sum(os.path.getsize(os.path.join(moved, n)) for n in names) < workdir_bytes / 2
  # submit takes it too (into a named folder: a bundle is not written into)
  test_dev = os.path.join(run["data"], TEST_DEV)
  status, _, err = _main(["submit", test_dev, "--workdir", str(moved)], capsys)
  assert status == 2 and "give --out FOLDER" in err
  status, _, err = _main(["submit", test_dev, "--workdir", str(moved), "--out", str(tmp_path / "s1")], capsys)
  assert status == 2 and "give the folder of its data with --data_dir" in err and not os.path.exists(tmp_path / "s1")
  assert _main(["submit", test_dev, "--workdir", str(moved), "--out", str(tmp_path / "s1"), "--data_dir", run["data"]],
               capsys)[0] == 0
  assert _main(["submit", test_dev, "--workdir", run["workdir"], "--out", str(tmp_path / "s2")], capsys)[0] == 0
  assert _files(tmp_path / "s1") == _files(tmp_path / "s2")
  # the Python API, from a bucket path
  import tensorflow as tf
  for name in names:
    tf.io.gfile.copy(os.path.join(moved, name), f"ram://bundle/{name}")
  questions = ["what color is the car?", "is there a dog?"]
  ids = [int(run["ask"][1]), int(run["ask"][3])]
  from_bucket = vqajax.load("ram://bundle", data_dir=run["data"]).answer(questions, image_ids=ids, k=3)
  assert from_bucket == vqajax.load(run["workdir"]).answer(questions, image_ids=ids, k=3)
  # a damaged copy is refused in one line
  with open(os.path.join(moved, "flax_model.msgpack"), "r+b") as f:
    f.seek(100)
    byte = f.read(1)
    f.seek(100)
    f.write(bytes([byte[0] ^ 1]))
  status, _, err = _main(["ask", "--workdir", str(moved), *run["ask"], "--data_dir", run["data"]], capsys)
  assert status == 2 and "flax_model.msgpack: sha256" in err and "Traceback" not in err


def test_readers_never_disturb_a_running_training(tiny_data, tmp_path, capsys):
  """Training saves (and deletes) a checkpoint at every step while ask, submit and export
  read the workdir: every reader gets an answer, the training goes on to a clean stop."""
  workdir = str(tmp_path / "run")
  command = [sys.executable, "-m", "vqajax", "train", "--config=experiments/vqa/bow_q_i.py:runlocal",
             f"--config.data.dir={tiny_data}", f"--workdir={workdir}", "--config.num_train_steps=100000",
             "--config.eval_every_steps=1", "--config.keep_checkpoints=1", "--config.log_every_steps=1000"]
  log = tmp_path / "train.err"  # a file: a pipe nobody reads would fill and stop the training
  trainer = subprocess.Popen(command, cwd=ROOT, env=devices.env(1), stderr=log.open("w"), text=True)
  try:
    deadline = time.monotonic() + 300
    # a step is complete (each replaces the one before: keep_checkpoints=1, saved in the background)
    while not checkpoint.complete_steps(os.path.join(workdir, "checkpoints")):
      assert trainer.poll() is None and time.monotonic() < deadline, "the training did not start"
      time.sleep(0.5)
    test_dev = os.path.join(tiny_data, TEST_DEV)
    for i in range(3):
      _, out, err = _main(["ask", "--workdir", workdir, "--image-id", "1594", "--question", "what is it?"], capsys)
      assert out.startswith("image_id 1594: what is it?\n  1. "), err
      status, _, err = _main(["submit", test_dev, "--workdir", workdir, "--out", str(tmp_path / f"s{i}")], capsys)
      assert status == 0, err
      status, _, err = _main(["export", "--workdir", workdir, "--out", str(tmp_path / f"b{i}")], capsys)
      assert status == 0, err
    assert trainer.poll() is None, log.read_text()[-3000:]
  finally:
    trainer.send_signal(signal.SIGTERM)
    trainer.wait(timeout=300)
  stderr = log.read_text()
  assert trainer.returncode == 0 and "SIGTERM: saved checkpoint" in stderr, stderr
  assert not os.path.exists(os.path.join(workdir, "lock"))
  assert np.all([s.isdigit() for s in os.listdir(os.path.join(workdir, "checkpoints"))])
