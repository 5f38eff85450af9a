"""The run verbs end to end through `vqajax VERB`: eval --step / --all, the best checkpoint
kept beside the last, the official `_evalQA.json`, baselines, bfloat16 and VizWiz-VQA."""

import collections
import glob
import json
import os
import shutil

import numpy as np
import pytest

from bench.reference import reference_accuracy
from vqajax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"
VAL_A = "v2_mscoco_val2014_annotations.json"
TRAIN_A = "v2_mscoco_train2014_annotations.json"


def _json(path):
  with open(path) as f:
    return json.load(f)


def _train(data_dir, workdir, *flags):
  return ["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={data_dir}", *flags]


@pytest.mark.slow
def test_best_checkpoint_eval_step_all_and_eval_qa(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "w")
  assert cli.main(_train(tiny_data, workdir, "--config.num_train_steps=8", "--config.eval_every_steps=2",
                         "--config.log_every_steps=2", "--config.keep_checkpoints=1",
                         "--config.optimizer.learning_rate=0.03")) == 0
  evals = {r["step"]: r["val/accuracy"] for r in map(json.loads, open(os.path.join(workdir, "metrics.jsonl")))
           if "val/accuracy" in r}
  assert sorted(evals) == [2, 4, 6, 8]
  kept = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  assert len(kept) == 2 and kept[-1] == 8  # the last one (keep_checkpoints=1) and the best by val accuracy:
  assert evals[kept[0]] == max(evals.values()) > evals[8]
  capsys.readouterr()

  assert cli.main(["eval", f"--workdir={workdir}", f"--step={kept[0]}"]) == 0
  assert f"step {kept[0]}: results in" in capsys.readouterr().out
  assert cli.main(["eval", f"--workdir={workdir}", "--all"]) == 0
  out = capsys.readouterr().out
  assert all(f"step {s}: results in" in out for s in kept)
  assert cli.main(["eval", f"--workdir={workdir}", "--step=3"]) == 2  # not saved
  assert "no checkpoint at step 3" in capsys.readouterr().err

  results_dir = os.path.join(workdir, "results", "step_8")
  [results] = glob.glob(os.path.join(results_dir, "v2_OpenEnded_mscoco_val2014_*_results.json"))
  [eval_qa] = glob.glob(os.path.join(results_dir, "v2_OpenEnded_mscoco_val2014_*_evalQA.json"))
  [accuracy] = glob.glob(os.path.join(results_dir, "v2_OpenEnded_mscoco_val2014_*_accuracy.json"))
  expected_accuracy, expected_per_question = reference_accuracy(
      _json(os.path.join(tiny_data, VAL_A))["annotations"], {r["question_id"]: r["answer"] for r in _json(results)})
  assert {int(k): v for k, v in _json(eval_qa).items()} == expected_per_question
  assert _json(accuracy) == expected_accuracy
  assert np.isclose(_json(accuracy)["overall"], evals[8], atol=0.01)  # the jitted metric agrees


def test_baselines_verb_writes_official_results(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "b")
  assert cli.main(["baselines", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   "--baselines=prior,random"]) == 0
  assert "| prior | open-ended |" in capsys.readouterr().out
  train = _json(os.path.join(tiny_data, TRAIN_A))["annotations"]
  most_common = collections.Counter(a["multiple_choice_answer"] for a in train).most_common(1)[0][0]
  [prior] = glob.glob(os.path.join(workdir, "results", "prior", "v2_OpenEnded_*_prior_results.json"))
  assert {r["answer"] for r in _json(prior)} == {most_common}
  val_ids = {a["question_id"] for a in _json(os.path.join(tiny_data, VAL_A))["annotations"]}
  for name in ("prior", "random"):
    [mc] = glob.glob(os.path.join(workdir, "results", name, f"MultipleChoice_*_{name}_results.json"))
    assert {r["question_id"] for r in _json(mc)} == val_ids
  vectors = tmp_path / "vectors.txt"
  vectors.write_text("zzzz 1 0\nqqqq 0 1\n")  # no answer's word: said, not silent
  assert cli.main(["baselines", f"--config={CONFIG}", f"--workdir={tmp_path / 'wv'}", f"--config.data.dir={tiny_data}",
                   "--baselines=prior", f"--word_vectors={vectors}"]) == 0
  assert f"{vectors}: 0 of " in capsys.readouterr().err
  assert cli.main(["baselines", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   "--baselines=oracle"]) == 2
  assert "--baselines 'oracle': expected some of" in capsys.readouterr().err


@pytest.mark.slow
def test_bfloat16_trains(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "bf16")
  assert cli.main(_train(tiny_data, workdir, "--config.num_train_steps=4", "--config.eval_every_steps=4",
                         "--config.log_every_steps=2", "--config.model.dtype=bfloat16")) == 0
  losses = [r["train/loss"] for r in map(json.loads, open(os.path.join(workdir, "metrics.jsonl")))
            if "train/loss" in r]
  assert len(losses) == 2 and all(np.isfinite(losses))
  assert "| open-ended |" in capsys.readouterr().out


@pytest.mark.slow
def test_vizwiz_trains_end_to_end(tiny_data, tiny_vizwiz, tmp_path, capsys):
  workdir = str(tmp_path / "vizwiz")
  assert cli.main(_train(tiny_data, workdir, "--config.num_train_steps=4", "--config.eval_every_steps=4",
                         "--config.log_every_steps=2", "--config.data.format=vizwiz",
                         f"--config.data.train_questions={tiny_vizwiz / 'train.json'}",
                         f"--config.data.val_questions={tiny_vizwiz / 'val.json'}")) == 0
  capsys.readouterr()
  [results] = glob.glob(os.path.join(workdir, "results", "step_4", "*OpenEnded*_results.json"))
  assert len(_json(results)) == len(_json(tiny_vizwiz / "val.json"))  # every question once, no MC
  assert not glob.glob(os.path.join(workdir, "results", "step_4", "MultipleChoice*"))


@pytest.mark.slow
def test_a_single_training_question_trains(tiny_data, tmp_path, capsys):
  data = tmp_path / "one"
  shutil.copytree(tiny_data, data)
  for name, key in (("v2_OpenEnded_mscoco_train2014_questions.json", "questions"), (TRAIN_A, "annotations"),
                    ("MultipleChoice_mscoco_train2014_questions.json", "questions")):
    records = _json(data / name)
    records[key] = records[key][:1]
    (data / name).write_text(json.dumps(records))
  assert cli.main(_train(str(data), str(tmp_path / "w"), "--config.num_train_steps=2",
                         "--config.eval_every_steps=2")) == 0
  assert "| open-ended |" in capsys.readouterr().out
