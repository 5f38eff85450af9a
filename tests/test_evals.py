"""Evaluations as a list (`config.evals`, core/evals.py) and the best checkpoint by a named
metric: two evaluations in one run, their metrics and results; the best step under a min
and a max rule read back by hand; checkpoints of runs from before `config.evals`; the
config's refusals (one line, nothing written); an evaluator type added by a class and a
registry entry (`evals.TYPES`), here a test-only one."""

import json
import os
import re

import jax
import numpy as np
import pytest

from bench.reference import reference_accuracy
from experiments.vqa import deeper_lstm_norm_i
from vqajax import cli
from vqajax.core import checkpoint, evals, train, trained
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.vqa import task as vqa_task

VAL_QUESTIONS, VAL_ANNOTATIONS = "v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json"


def _json(path):
  with open(path) as f:
    return json.load(f)


def _config(data_dir, evaluations=None, **changes):
  config = deeper_lstm_norm_i.get_config("runlocal")
  if evaluations is not None:
    with config.unlocked():
      config.evals = evaluations
  return config_lib.override(config, {"data.dir": data_dir, "data.max_question_len": 8, **changes})


def _subset(tiny_data, out_dir, n=24):
  """The first `n` val questions and their annotations, as new files in `out_dir`."""
  questions, annotations = _json(os.path.join(tiny_data, VAL_QUESTIONS)), _json(os.path.join(tiny_data, VAL_ANNOTATIONS))
  kept = {q["question_id"] for q in questions["questions"][:n]}
  questions["questions"] = questions["questions"][:n]
  annotations["annotations"] = [a for a in annotations["annotations"] if a["question_id"] in kept]
  paths = [os.path.join(out_dir, f"subset_{name}") for name in (VAL_QUESTIONS, VAL_ANNOTATIONS)]
  for path, content in zip(paths, (questions, annotations)):
    with open(path, "w") as f:
      json.dump(content, f)
  return paths, annotations["annotations"]


@pytest.mark.slow
def test_two_evaluations_train_write_both_and_the_best_follows_the_named_min_metric(tiny_data, tmp_path):
  (questions, annotations_path), annotations = _subset(tiny_data, str(tmp_path))
  evaluations = evals.default()
  evaluations.subset = evals.new(results="every", val_questions=questions, val_annotations=annotations_path)
  config = _config(tiny_data, evaluations, num_train_steps=4, eval_every_steps=2, log_every_steps=2,
                   keep_checkpoints=1, best_metric="subset/accuracy", best_mode="min")
  workdir = str(tmp_path / "run")
  last = train.train_and_evaluate(cli.task_of(config), config, workdir, devices=jax.devices()[:1])
  assert set(last) == {"val", "subset"}
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  by_step = {r["step"]: r for r in rows if "val/accuracy" in r or "subset/accuracy" in r}
  assert sorted(by_step) == [2, 4] and all("val/accuracy" in r and "subset/accuracy" in r for r in by_step.values())
  names = {k.partition("/")[2] for r in by_step.values() for k in r if k.startswith(("val/", "subset/"))}
  assert {"accuracy", "accuracy/yes/no", "accuracy/other"} <= names  # what config.best_metric may name:
  assert all(re.fullmatch(vqa_task.METRICS, n) for n in names) and not re.fullmatch(vqa_task.METRICS, "accuracy/x")
  # val writes its results at the end only, where runs always had them; subset at every evaluation
  assert sorted(os.listdir(os.path.join(workdir, "results"))) == ["step_4", "subset"]
  assert sorted(os.listdir(os.path.join(workdir, "results", "subset"))) == ["step_2", "step_4"]
  name = "v2_OpenEnded_mscoco_val2014_deeper_lstm_norm_i_results.json"
  for step in (2, 4):
    results = _json(os.path.join(workdir, "results", "subset", f"step_{step}", name))
    assert [r["question_id"] for r in results] == [a["question_id"] for a in annotations]
    official, _ = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
    assert by_step[step]["subset/accuracy"] == pytest.approx(official["overall"], abs=0.01)
  assert last["subset"]["accuracy"] == by_step[4]["subset/accuracy"]
  full = _json(os.path.join(workdir, "results", "step_4", name))
  assert len(full) == len(_json(os.path.join(tiny_data, VAL_ANNOTATIONS))["annotations"]) > len(annotations)
  # the best by the lowest subset accuracy (ties: the latest), read by hand from metrics.jsonl
  lowest = min(r["subset/accuracy"] for r in by_step.values())
  expected = max(s for s, r in by_step.items() if r["subset/accuracy"] == lowest)
  assert checkpoint.complete_steps(os.path.join(workdir, "checkpoints")) == sorted({expected, 4})
  assert trained.read(workdir, cli.tasks(), best=True).step == expected


def _save(directory, rule, steps_and_metrics):
  ckpt = checkpoint.Checkpointer(directory, 1, *rule)
  for step, metrics in steps_and_metrics:
    ckpt.save(step, {"w": np.full(2, step, np.float32)}, {"input_step": step}, metrics)
  ckpt.close()


def test_the_kept_and_chosen_best_follow_the_rule_min_or_max(tmp_path):
  values = [(1, 5.0), (2, 1.0), (3, 9.0), (4, 3.0)]  # by hand: min at 2, max at 3
  for mode, best in (("min", 2), ("max", 3)):
    directory = str(tmp_path / mode)
    _save(directory, ("val/loss", mode), [(s, {"val/loss": v, "val/other": -v}) for s, v in values])
    assert checkpoint.complete_steps(directory) == sorted({best, 4})  # the last one and the best
    assert trained.chosen_step(directory, "run", None, ("val/loss", mode)) == best


def _refused(tmp_path, capsys, body: str, *flags) -> str:
  """The error line `vqajax train` prints for a config file of `body` (over the runlocal
  deeper LSTM Q + norm I), with nothing written."""
  path = tmp_path / "two_evals.py"
  path.write_text("from experiments.vqa import deeper_lstm_norm_i\nfrom vqajax.core import evals\n\n"
                  "def get_config(arg):\n  config = deeper_lstm_norm_i.get_config('runlocal')\n"
                  f"  with config.unlocked():\n{body}  return config\n")
  workdir = tmp_path / "run"
  assert cli.main(["train", f"--config={path}", f"--workdir={workdir}", *flags]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("vqajax train: error: ") and not any("Traceback" in e for e in err), err
  assert not workdir.exists()
  return err[-1]


def test_bad_evaluations_are_refused_in_one_line_naming_the_field(tiny_data, tmp_path, capsys):
  data = [f"--config.data.dir={tiny_data}", "--config.data.synthetic=False"]
  line = _refused(tmp_path, capsys, "    config.evals.val.every = 3\n", *data)
  assert "config.evals.val has no field 'every'" in line
  line = _refused(tmp_path, capsys, "    config.evals.other = evals.new(val_qestions='x.json')\n", *data)
  assert "config.evals.other.data has no field 'val_qestions'" in line
  line = _refused(tmp_path, capsys, "    config.evals.other = evals.new(results='sometimes')\n", *data)
  assert "config.evals.other.results: expected one of ('last', 'every'), got 'sometimes'" in line
  line = _refused(tmp_path, capsys, "    pass\n", "--config.best_metric=val/accurracy", *data)
  assert "config.best_metric 'val/accurracy': expected EVAL/METRIC with EVAL one of ['val']" in line
  line = _refused(tmp_path, capsys, "    pass\n", "--config.best_metric=vizwiz/accuracy", *data)
  assert "config.best_metric 'vizwiz/accuracy'" in line
  assert "config.best_mode: expected one of ('max', 'min')" in _refused(
      tmp_path, capsys, "    pass\n", "--config.best_mode=lowest", *data)
  line = _refused(tmp_path, capsys, "    config.evals.other = evals.new(val_questions='gone.json')\n", *data)
  assert f"config.evals.other.data.val_questions: {os.path.join(tiny_data, 'gone.json')}: file not found" in line
  unknown = "config.evals.other.type 'mean' is not an evaluator type, one of ['task']"
  body = "    config.evals.other = evals.new(type='mean')\n"
  assert unknown in _refused(tmp_path, capsys, body, *data)
  assert unknown in _refused(tmp_path, capsys, body, "--print-config", *data)
  line = _refused(tmp_path, capsys, "    pass\n", "--config.evals.val.type=mean", *data)
  assert "config.evals.val.type 'mean' is not an evaluator type, one of ['task']" in line


class _Examples:
  """A test-only evaluator type: the number of examples of its split, and their question ids
  in a file of its results folder."""

  def __init__(self, task, config, data, model, mesh, features, spec):
    del task, config, model, mesh, features
    self.spec, self.ids = spec, [int(i) for i in data.val["question_id"]]

  def run(self, params, step, workdir=None):
    del params
    if workdir is not None:
      os.makedirs(self.spec.results_dir(workdir, step))
      with open(os.path.join(self.spec.results_dir(workdir, step), "ids.json"), "w") as f:
        json.dump(self.ids, f)
    return {"examples": float(len(self.ids))}

  @staticmethod
  def metrics(task):
    return "examples"

  @staticmethod
  def table(task, name, metrics):
    return f"{name}: {metrics['examples']:g} examples"


def test_an_evaluator_type_is_a_class_and_a_registry_entry(tiny_data, tmp_path, monkeypatch):
  monkeypatch.setitem(evals.TYPES, "examples", _Examples)
  (questions, annotations_path), annotations = _subset(tiny_data, str(tmp_path))
  evaluations = evals.default()
  evaluations.subset = evals.new(type="examples", val_questions=questions, val_annotations=annotations_path)
  config = cli.check_config(_config(tiny_data, evaluations, best_metric="subset/examples"))
  exp = Experiment.build(cli.task_of(config), config, jax.devices()[:1])
  subset, val = evals.evaluators(exp)  # in the order of their names; val the task's
  assert isinstance(subset, _Examples) and subset.spec.type == "examples" and val.spec.type == evals.TASK
  workdir = str(tmp_path / "run")
  assert evals.run_all([subset], None, 3, workdir) == {"subset": {"examples": len(annotations)}}
  assert _json(os.path.join(workdir, "results", "subset", "step_3", "ids.json")) == [
      a["question_id"] for a in annotations]
  with pytest.raises(InputError, match=r"config.best_metric 'subset/accuracy'"):
    cli.check_config(config_lib.override(config, {"best_metric": "subset/accuracy"}))  # not this type's metric
