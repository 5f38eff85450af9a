"""Every command over a folder of bad inputs: exit status 2, one line on stderr naming the
file / record / field and what was expected, no traceback, every input byte-identical."""

import json
import os
import shutil

import h5py
import numpy as np
import pytest

from tests.digests import digests
from vqajax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"
STEPS = ["--config.num_train_steps=2", "--config.eval_every_steps=2", "--config.log_every_steps=1"]
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
  return root


def _train(tiny_data, workdir, *flags):
  return ["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}", *STEPS, *flags]


def _score(tiny_data, results):
  return ["score", "--questions", os.path.join(tiny_data, VAL_Q), "--annotations", os.path.join(tiny_data, VAL_A),
          "--results", results, "--no-cache"]


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
    ("float image ids in a store", lambda d, b, w: _train(d, w, f"--config.data.features={b / 'float_ids.h5'}"),
     "vqajax train", "float_ids.h5: image ids are float64, expected integers"),
    ("batch_size 0", lambda d, b, w: _train(d, w, "--config.batch_size=0"), "vqajax train",
     "config.batch_size: expected a positive integer, got 0"),
    ("batch_size -8", lambda d, b, w: _train(d, w, "--config.batch_size=-8"), "vqajax train",
     "config.batch_size: expected a positive integer, got -8"),
    ("batch not divisible by the devices", lambda d, b, w: _train(d, w, "--config.batch_size=7"), "vqajax train",
     "config.batch_size 7 does not split over 8 devices"),
    ("workdir that is a file", lambda d, b, w: _train(d, str(b / "a_file")), "vqajax train",
     "a_file: exists and is not a folder"),
    ("image_id 10**20", lambda d, b, w: _train(str(b / "data_big_image_id"), w), "vqajax train",
     'expected an integer "image_id" within 64 bits'),
    ("a bad sweep argument", lambda d, b, w: ["sweep", f"{ROOT}/experiments/sweeps/vqa_table2.py:bogus",
                                              f"--workdir={w}"], "vqajax sweep", "unknown config argument 'bogus'"),
    ("eval of a missing run", lambda d, b, w: ["eval", f"--workdir={w}"], "vqajax eval", "no such run"),
]


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
  assert not os.path.exists(workdir / "checkpoints")
