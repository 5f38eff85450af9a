"""The console scripts as a user runs them: bad input, kill -9 and SIGTERM."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests import devices

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"


def _train_cmd(data_dir, workdir, *flags, code="sys.exit(main(['train', *sys.argv[1:]]))"):
  """`vqajax train` in a subprocess (`code` runs it); questions cut to 8 words (one length
  bucket: one train and one eval step to compile)."""
  return [sys.executable, "-c", f"import sys; from vqajax.cli import main; {code}",
          f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={data_dir}",
          "--config.data.max_question_len=8", *flags]


@pytest.fixture
def data_copy(tiny_data, tmp_path):
  out = str(tmp_path / "data")
  shutil.copytree(tiny_data, out)
  return out


def _fails_cleanly(cmd, expected, workdir):
  proc = subprocess.run(cmd, env=devices.env(1), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("vqajax train: error: ") and expected in last, last
  assert not os.path.exists(os.path.join(workdir, "checkpoints")) or not os.listdir(
      os.path.join(workdir, "checkpoints"))


@pytest.mark.slow
def test_broken_json_is_one_error_line(data_copy, tmp_path):
  path = os.path.join(data_copy, "v2_mscoco_val2014_annotations.json")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(text[: len(text) // 2])
  _fails_cleanly(_train_cmd(data_copy, tmp_path / "w"),
                 "v2_mscoco_val2014_annotations.json: not valid JSON", tmp_path / "w")


@pytest.mark.slow
def test_a_bad_input_fails_before_tensorflow_is_imported(data_copy, tmp_path):
  """TensorFlow (seconds to import) comes with the first dataset: a broken file fails first."""
  path = os.path.join(data_copy, "v2_mscoco_train2014_annotations.json")
  with open(path, "w") as f:
    f.write("{")
  cmd = _train_cmd(data_copy, tmp_path / "w", code="status = main(['train', *sys.argv[1:]]); "
                   "print('tensorflow' in sys.modules); sys.exit(status)")
  done = subprocess.run(cmd, env=devices.env(1), capture_output=True, text=True, timeout=300)
  assert done.returncode == 2 and done.stdout == "False\n", done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1].startswith(f"vqajax train: error: {path}: not valid JSON")


@pytest.mark.slow
def test_missing_key_names_the_record(data_copy, tmp_path):
  path = os.path.join(data_copy, "v2_OpenEnded_mscoco_train2014_questions.json")
  with open(path) as f:
    data = json.load(f)
  del data["questions"][3]["question"]
  with open(path, "w") as f:
    json.dump(data, f)
  _fails_cleanly(_train_cmd(data_copy, tmp_path / "w"), "questions[3] (question_id=", tmp_path / "w")


@pytest.mark.slow
def test_wrong_feature_dimension(data_copy, tmp_path):
  _fails_cleanly(_train_cmd(data_copy, tmp_path / "w", "--config.data.feature_shape=(2048,)"),
                 "expects (2048,)", tmp_path / "w")


@pytest.mark.slow
@pytest.mark.parametrize("flag, expected", [
    ("--config.model.fusoin=concat", "the config has no field 'model.fusoin' (did you mean \"model.fusion\"?)"),
    ("--config.model.fusion=sum", "config.model.fusion: expected one of ('mul', 'concat'), got 'sum'"),
])
def test_config_mistakes_are_one_error_line(tiny_data, tmp_path, flag, expected):
  _fails_cleanly(_train_cmd(tiny_data, tmp_path / "w", flag), expected, tmp_path / "w")


@pytest.mark.slow
def test_unknown_image_id(data_copy, tmp_path):
  path = os.path.join(data_copy, "v2_OpenEnded_mscoco_val2014_questions.json")
  with open(path) as f:
    data = json.load(f)
  data["questions"][0]["image_id"] = 999999999
  with open(path, "w") as f:
    json.dump(data, f)
  ann_path = os.path.join(data_copy, "v2_mscoco_val2014_annotations.json")
  with open(ann_path) as f:
    anns = json.load(f)
  for a in anns["annotations"]:
    if a["question_id"] == data["questions"][0]["question_id"]:
      a["image_id"] = 999999999
  with open(ann_path, "w") as f:
    json.dump(anns, f)
  _fails_cleanly(_train_cmd(data_copy, tmp_path / "w"), "no features for image_id 999999999", tmp_path / "w")


def test_more_than_ten_answers_is_one_error_line(data_copy, tmp_path, capsys):
  """The official accuracy counts one answer per annotator (10): an eleventh is refused,
  naming the question, before anything is written (in process: the data is read first)."""
  from vqajax import cli
  path = os.path.join(data_copy, "v2_mscoco_train2014_annotations.json")
  with open(path) as f:
    data = json.load(f)
  record = data["annotations"][3]
  record["answers"].append({**record["answers"][0], "answer_id": 11})
  with open(path, "w") as f:
    json.dump(data, f)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={data_copy}",
                   "--print-config"]) == 2
  last = capsys.readouterr().err.splitlines()[-1]  # after the log's info lines
  assert last == (f"vqajax train: error: the annotation of question_id {record['question_id']}: has 11 answers, "
                  "expected 1 to 10 (one per annotator)")
  assert not os.path.exists(tmp_path / "w")


def _start_and_wait_for_checkpoint(cmd, workdir):
  proc = subprocess.Popen(cmd, env=devices.env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  ckpt_dir = os.path.join(workdir, "checkpoints")
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if os.path.isdir(ckpt_dir) and any(d.isdigit() for d in os.listdir(ckpt_dir)):
      return proc
    time.sleep(0.2)
  proc.kill()
  pytest.fail("no checkpoint appeared")


@pytest.mark.slow
def test_kill_9_then_rerun_resumes_from_the_last_checkpoint(tiny_data, tmp_path):
  workdir, cache = str(tmp_path / "w"), str(tmp_path / "xla")
  cmd = _train_cmd(tiny_data, workdir, f"--compilation_cache_dir={cache}", "--config.num_train_steps=3000",
                   "--config.eval_every_steps=10")
  proc = _start_and_wait_for_checkpoint(cmd, workdir)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert os.listdir(cache)  # the compiled steps, for the rerun to load
  saved = max(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  done = subprocess.run(cmd[:-2] + ["--config.num_train_steps=%d" % (saved + 10), "--config.eval_every_steps=10"],
                        env=devices.env(1), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  assert f"resumed from checkpoint at step {saved}" in done.stderr
  assert str(saved + 10) in os.listdir(os.path.join(workdir, "checkpoints"))


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tiny_data, tmp_path):
  workdir = str(tmp_path / "w")
  cmd = _train_cmd(tiny_data, workdir, "--config.num_train_steps=100000", "--config.eval_every_steps=10")
  proc = _start_and_wait_for_checkpoint(cmd, workdir)
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 0
  assert "SIGTERM: saved checkpoint at step" in out
  step = int(out.split("SIGTERM: saved checkpoint at step ")[1].split(";")[0])
  assert str(step) in os.listdir(os.path.join(workdir, "checkpoints"))


def test_the_libraries_notices_are_dropped_by_where_they_come_from():
  """TFDS's notice about its own use of `.dtype` (by the function that logs it) and orbax's
  warning that vqajax replaces its array handler (by the verbosity around that call) are not
  shown; a warning of anything else is, whatever its text."""
  import logging

  from tensorflow_datasets.core.features import feature

  from vqajax.core import checkpoint, runtime
  seen = []
  handler = logging.Handler()
  handler.emit = lambda record: seen.append(record.getMessage())
  handler.addFilter(runtime._Quiet(verbose=False))
  absl_logger = logging.getLogger("absl")
  absl_logger.addHandler(handler)
  try:
    feature.log_tf_warning("TensorInfo")
    checkpoint._whole_arrays_per_replica.cache_clear()
    checkpoint._whole_arrays_per_replica()
    absl_logger.warning("`TensorInfo.dtype` is deprecated. Please change your code to use NumPy")
  finally:
    absl_logger.removeHandler(handler)
  assert seen == ["`TensorInfo.dtype` is deprecated. Please change your code to use NumPy"]
