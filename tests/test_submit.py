"""`vqajax submit` end to end on the tiny synthetic sets: a train+val run, its test-dev /
test / v1 multiple-choice results files read back (official names, the zips, every test
question once, answers from the answer table, the same answers as the eval path), the
synthetic test splits themselves, the AnswerTherapy test files of both challenges, and
bad input (one line, exit 2, nothing written)."""

import collections
import glob
import json
import os
import re
import shutil
import zipfile

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from tests.digests import digests
from vqajax import cli
from vqajax.features.store import FeatureStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"
ALG = "deeper_lstm_norm_i"
FILES = {split: (f"v2_OpenEnded_mscoco_{split}2014_questions.json", f"v2_mscoco_{split}2014_annotations.json")
         for split in ("train", "val")}
TEST_DEV = "v2_OpenEnded_mscoco_test-dev2015_questions.json"
TEST = "v2_OpenEnded_mscoco_test2015_questions.json"


def _json(path):
  with open(path) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def run(tiny_data, tmp_path_factory):
  """A deeper LSTM Q + norm I run trained on train+val (4 steps; checkpoints 2 and 4)."""
  workdir = str(tmp_path_factory.mktemp("submit") / "run")
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   "--config.num_train_steps=4", "--config.eval_every_steps=2", "--config.log_every_steps=2",
                   "--config.optimizer.learning_rate=0.03",
                   f"--config.data.train_questions={FILES['train'][0]},{FILES['val'][0]}",
                   f"--config.data.train_annotations={FILES['train'][1]},{FILES['val'][1]}"]) == 0
  return workdir


def _answer_table(tiny_data, k=100):
  """The top-k most common answers of train+val (ties alphabetically), as the paper's table."""
  counts = collections.Counter(a["multiple_choice_answer"] for split in ("train", "val")
                               for a in _json(os.path.join(tiny_data, FILES[split][1]))["annotations"])
  return sorted(counts, key=lambda a: (-counts[a], a))[:k]


def _submit(*args):
  return cli.main(["submit", *map(str, args)])


@pytest.mark.slow
def test_train_val_run_records_both_files_and_trains_on_both(run, tiny_data):
  record = _json(os.path.join(run, "run.json"))
  assert record["config"]["data"]["train_questions"] == f"{FILES['train'][0]},{FILES['val'][0]}"
  table = set(_answer_table(tiny_data))
  annotations = [a for split in ("train", "val") for a in _json(os.path.join(tiny_data, FILES[split][1]))["annotations"]]
  assert len(annotations) == 540
  assert record["data"]["train_questions"] == sum(a["multiple_choice_answer"] in table for a in annotations)
  # the identity check knows the list: the same run with train alone is another run
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={run}", f"--config.data.dir={tiny_data}"]) == 2


def test_the_synthetic_test_splits_are_official_and_have_features(tiny_data):
  test_dev, test = _json(os.path.join(tiny_data, TEST_DEV)), _json(os.path.join(tiny_data, TEST))
  assert (test_dev["data_subtype"], test["data_subtype"]) == ("test-dev2015", "test2015")
  assert test["task_type"] == "Open-Ended" and test["data_type"] == "mscoco"
  dev_ids = [q["question_id"] for q in test_dev["questions"]]
  test_ids = [q["question_id"] for q in test["questions"]]
  assert len(test_ids) == 120 and len(dev_ids) == 30 and set(dev_ids) < set(test_ids)
  images = {q["image_id"] for q in test["questions"]}
  seen = {q["image_id"] for split in ("train", "val")
          for q in _json(os.path.join(tiny_data, FILES[split][0]))["questions"]}
  assert not images & seen  # images of their own
  assert {q["image_id"] for q in test_dev["questions"]} < images  # test-dev: all questions of some images
  assert all(not set(q) - {"image_id", "question", "question_id"} for q in test["questions"])  # no answers
  for subtype, expected in (("test-dev2015", test_dev), ("test2015", test)):
    v1 = _json(os.path.join(tiny_data, f"OpenEnded_mscoco_{subtype}_questions.json"))
    assert v1["questions"] == expected["questions"]
    mc = _json(os.path.join(tiny_data, f"MultipleChoice_mscoco_{subtype}_questions.json"))
    assert mc["task_type"] == "Multiple-Choice"
    assert [q["question_id"] for q in mc["questions"]] == [q["question_id"] for q in expected["questions"]]
    assert all(len(set(q["multiple_choices"])) == 18 for q in mc["questions"])
  for store in ("fc7.h5", "conv5_grid.npy"):
    ids = set(FeatureStore(os.path.join(tiny_data, "features", store)).image_ids.tolist())
    assert images <= ids and seen <= ids


@pytest.mark.slow
def test_test_dev_results_have_official_names_and_every_question_once(run, tiny_data, capsys):
  assert _submit(os.path.join(tiny_data, TEST_DEV), "--workdir", run) == 0
  name = f"v2_OpenEnded_mscoco_test-dev2015_{ALG}_results"
  out = os.path.join(run, "submissions", "test-dev2015")
  assert sorted(os.listdir(out)) == [f"{name}.json", f"{name}.zip"]
  assert "step 4 of" in capsys.readouterr().out
  results = _json(os.path.join(out, f"{name}.json"))
  questions = _json(os.path.join(tiny_data, TEST_DEV))["questions"]
  assert [r["question_id"] for r in results] == [q["question_id"] for q in questions]
  assert all(set(r) == {"question_id", "answer"} for r in results)
  assert {r["answer"] for r in results} <= set(_answer_table(tiny_data))
  with zipfile.ZipFile(os.path.join(out, f"{name}.zip")) as archive:
    assert archive.namelist() == [f"{name}.json"]
    with open(os.path.join(out, f"{name}.json"), "rb") as f:
      assert archive.read(f"{name}.json") == f.read()


@pytest.mark.slow
def test_submit_answers_are_the_eval_answers(run, tiny_data, capsys):
  """The val questions through `submit` at a step give that step's eval results (the same
  jitted path), and --best / --step pick the checkpoints eval names."""
  val_questions = os.path.join(tiny_data, FILES["val"][0])
  out = os.path.join(run, "mine")
  assert _submit(val_questions, "--workdir", run, "--step", 4, "--out", out) == 0
  [evaluated] = glob.glob(os.path.join(run, "results", "step_4", "v2_OpenEnded_*_results.json"))  # the final eval
  assert _json(os.path.join(out, f"v2_OpenEnded_mscoco_val2014_{ALG}_results.json")) == _json(evaluated)
  assert _submit(val_questions, "--workdir", run, "--step", 2, "--out", out) == 0
  assert "step 2 of" in capsys.readouterr().out
  evals = {r["step"]: r["val/accuracy"] for r in map(json.loads, open(os.path.join(run, "metrics.jsonl")))
           if "val/accuracy" in r}
  capsys.readouterr()
  assert _submit(val_questions, "--workdir", run, "--best", "--out", os.path.join(run, "best")) == 0
  best = int(re.search(r"step (\d+) of", capsys.readouterr().out)[1])
  assert evals[best] == max(evals.values())


@pytest.mark.slow
def test_v1_multiple_choice_test_gives_both_tasks_zipped(run, tiny_data):
  path = os.path.join(tiny_data, "MultipleChoice_mscoco_test2015_questions.json")
  out = os.path.join(run, "v1")
  assert _submit(path, "--workdir", run, "--out", out) == 0
  names = [f"vqa_{task}_mscoco_test2015_{ALG}_results" for task in ("OpenEnded", "MultipleChoice")]
  assert sorted(os.listdir(out)) == sorted(f"{n}.{ext}" for n in names for ext in ("json", "zip"))
  questions = _json(path)["questions"]
  oe, mc = (_json(os.path.join(out, f"{n}.json")) for n in names)
  for results in (oe, mc):
    assert [r["question_id"] for r in results] == [q["question_id"] for q in questions]
  assert {r["answer"] for r in oe} <= set(_answer_table(tiny_data))
  assert all(r["answer"] in q["multiple_choices"] for r, q in zip(mc, questions))
  for n in names:
    with zipfile.ZipFile(os.path.join(out, f"{n}.zip")) as archive:
      assert archive.namelist() == [f"{n}.json"]


@pytest.mark.slow
def test_vizwiz_test_results_name_each_image(run, tiny_data, tiny_vizwiz):
  """A VizWiz test.json (questions only) gives VizWiz's list of {image, answer}."""
  out = os.path.join(run, "vizwiz")
  assert _submit(tiny_vizwiz / "test.json", "--workdir", run, "--out", out) == 0
  assert os.listdir(out) == [f"VizWiz_test_{ALG}_results.json"]  # the server takes the JSON itself
  results, records = _json(os.path.join(out, f"VizWiz_test_{ALG}_results.json")), _json(tiny_vizwiz / "test.json")
  assert [r["image"] for r in results] == [r["image"] for r in records]
  assert all(set(r) == {"image", "answer"} for r in results)
  assert {r["answer"] for r in results} <= set(_answer_table(tiny_data))


@pytest.mark.slow
def test_bad_input_is_one_line_and_writes_nothing(run, tiny_data, tiny_therapy, tmp_path, capsys):
  before, run_before = digests(tiny_data), digests(run)
  test_dev = os.path.join(tiny_data, TEST_DEV)
  no_features = tmp_path / "v2_OpenEnded_mscoco_test-dev2015_questions.json"
  content = _json(test_dev)
  content["questions"][3]["image_id"] = 999_999_999
  no_features.write_text(json.dumps(content))
  empty_run = tmp_path / "empty"
  empty_run.mkdir()
  for name in ("run.json", "encoders.json"):  # a run as training starts it, before its first checkpoint
    shutil.copy(os.path.join(run, name), empty_run)
  bogus = tmp_path / "v2_OpenEnded_mscoco_bogus2099_questions.json"
  bogus.write_text(json.dumps({**content, "data_subtype": "bogus2099"}))
  multiple_choice = _json(os.path.join(tiny_data, "MultipleChoice_mscoco_test2015_questions.json"))
  mixed = {}  # a multiple-choice file with one question's choices missing or null, the first or another
  for i, choices in ((5, None), (0, "missing")):
    questions = [dict(q) for q in multiple_choice["questions"]]
    questions[i]["multiple_choices"] = choices
    if choices == "missing":
      del questions[i]["multiple_choices"]
    mixed[i] = tmp_path / f"mixed{i}" / "MultipleChoice_mscoco_test2015_questions.json"
    mixed[i].parent.mkdir()
    mixed[i].write_text(json.dumps({**multiple_choice, "questions": questions}))
  ids = [q["question_id"] for q in multiple_choice["questions"]]
  cases = [
      ((mixed[5], "--workdir", run), f'question_id {ids[5]} has no "multiple_choices" where question_id {ids[0]} '
                                     "has them: a multiple-choice file gives every question its choices"),
      ((mixed[0], "--workdir", run), f'question_id {ids[0]} has no "multiple_choices" where question_id {ids[1]}'),
      ((bogus, "--workdir", run), "\"data_subtype\" 'bogus2099': expected a split of the evaluation server"),
      ((os.path.join(tiny_therapy, "VQA_test.json"), "--workdir", run),
       'a VQA-AnswerTherapy file (records with "image_id" and answers), while this run is a vqa run on vqa data'),
      ((no_features, "--workdir", run), "image_id 999999999"),
      ((test_dev, "--workdir", empty_run), "no checkpoint (train the run first)"),
      ((test_dev, "--workdir", tmp_path / "nowhere"), "no such run"),
      ((test_dev, "--workdir", run, "--step", 3), "no checkpoint at step 3"),
      ((test_dev, "--workdir", run, "--out", tiny_data), "an input of this command"),
      ((test_dev, "--workdir", run, "--out", os.path.join(tiny_data, "features")), "an input of this command"),
      ((test_dev, "--workdir", run, "--out", test_dev), "an input of this command"),
  ]
  for args, message in cases:
    capsys.readouterr()
    assert _submit(*args) == 2, args
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
  assert digests(tiny_data) == before and digests(run) == run_before  # no submissions/bogus2099 either
  assert sorted(os.listdir(empty_run)) == ["encoders.json", "run.json"]
  assert all(os.listdir(m.parent) == [m.name] for m in mixed.values())


THERAPY = f"{ROOT}/experiments/therapy"


@pytest.mark.slow
@pytest.mark.parametrize("task", ["grounding_class", "grounding_mask"])
def test_answer_therapy_test_files_in_the_released_format(tiny_therapy, tmp_path, task, capsys):
  workdir = str(tmp_path / task)
  steps = [f"--config.{k}=2" for k in ("num_train_steps", "eval_every_steps", "log_every_steps")]
  assert cli.main(["train", f"--config={THERAPY}/{task}.py:runlocal", f"--workdir={workdir}",
                   f"--config.data.dir={tiny_therapy}", *steps]) == 0
  unlabelled = tmp_path / "VizWiz_test.json"  # a test file without labels or groundings
  released = _json(os.path.join(tiny_therapy, "VizWiz_test.json"))
  unlabelled.write_text(json.dumps([{k: v for k, v in r.items() if k not in ("binary_label", "grounding_labels")}
                                    for r in released]))
  val = os.path.join(tiny_therapy, "VQA_val.json")
  test = os.path.join(tiny_therapy, "VQA_test.json") if task == "grounding_class" else unlabelled
  for path, out in ((test, None), (val, tmp_path / "val")):
    assert _submit(path, "--workdir", workdir, *(("--out", out) if out else ())) == 0
    stem = os.path.splitext(os.path.basename(path))[0]
    results = _json(os.path.join(out or os.path.join(workdir, "submissions", stem), f"{stem}_{task}_results.json"))
    records = _json(path)
    assert len(results) == len(records)
    for result, record in zip(results, records):  # every question once, in file order, its released fields
      kept = {k: v for k, v in record.items() if k not in ("binary_label", "grounding_labels")}
      prediction = {k: v for k, v in result.items() if k not in kept}
      assert {k: result[k] for k in kept} == kept
      if task == "grounding_class":
        assert prediction["binary_label"] in ("single", "multiple") and 0 <= prediction["p_multiple"] <= 1
        assert (prediction["binary_label"] == "multiple") == (prediction["p_multiple"] > 0.5)
      else:
        assert set(prediction) == {"grounding_masks"} and len(prediction["grounding_masks"]) == len(record["answers"])
        for rle in prediction["grounding_masks"]:
          mask = coco_mask.decode({"size": rle["size"], "counts": rle["counts"].encode()})
          assert mask.shape == (record["height"], record["width"])
  capsys.readouterr()
  # the val file through submit gives the val results of the eval path
  evaluated = os.path.join(workdir, "results", "step_2")
  mine = _json(tmp_path / "val" / f"VQA_val_{task}_results.json")
  if task == "grounding_class":
    expected = [r["predicted"] for r in _json(os.path.join(evaluated, "predictions.json")) if r["source"] == "VQAv2"]
    assert [r["binary_label"] for r in mine] == expected
  else:
    expected = [r["mask"] for r in _json(os.path.join(evaluated, "results.json")) if r["source"] == "VQAv2"]
    assert [m for r in mine for m in r["grounding_masks"]] == expected
    assert np.mean([coco_mask.area({**m, "counts": m["counts"].encode()}) > 0 for m in expected]) > 0
