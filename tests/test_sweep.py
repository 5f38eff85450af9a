"""The Table II and Table IV sweeps end to end on the tiny set, and `vqajax report`.

The sweeps run as a user runs them, `python -m vqajax sweep` in a subprocess, on one CPU
device and with questions cut to 8 words (one length bucket: each point compiles one train
and one eval step instead of two of each; the vocabulary still counts every word).
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.reference import reference_accuracy
from vqajax import cli
from vqajax.core import text
from vqajax.vqa import humans, report_cli, reports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEPS = os.path.join(ROOT, "experiments", "sweeps")
ROWS = ("bow_q", "i", "bow_q_i", "lstm_q", "lstm_q_i", "deeper_lstm_q", "deeper_lstm_norm_i",
        "caption", "bow_q_c", "attention", "transformer_q_norm_i")
BASELINES = ("random", "prior", "q_type_prior", "nearest_neighbour")


def _sets(data_dir, steps=6):
  return ["--set", f"data.dir={data_dir}", "--set", f"num_train_steps={steps}",
          "--set", f"eval_every_steps={steps}", "--set", "log_every_steps=3", "--set", "data.max_question_len=8"]


def _sweep(argv, env):
  """`vqajax sweep ARGV` in a subprocess; its stdout."""
  done = subprocess.run([sys.executable, "-m", "vqajax", "sweep", *argv], env=env, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout


def _json(path):
  with open(path) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def table2_sweep(tiny_data, tmp_path_factory, one_device_env):
  workdir = str(tmp_path_factory.mktemp("table2"))
  argv = [f"{SWEEPS}/vqa_table2.py:runlocal", "--workdir", workdir, *_sets(tiny_data)]
  points = 1 + len(ROWS)
  progress = [line for line in _sweep(argv, one_device_env).splitlines() if line.startswith("[")]
  assert progress[0].startswith(f"[1/{points}] baselines: running")  # each point's progress, the ETA
  assert progress[-1].startswith(f"[{points}/{points}] {ROWS[-1]}: done") and progress[-1].endswith("ETA 0:00:00")
  return workdir, argv


@pytest.mark.slow
def test_table2_has_every_row_scored_officially(table2_sweep, tiny_data):
  workdir, _ = table2_sweep
  rows = _json(os.path.join(workdir, "table2.json"))
  assert [r["run"] for r in rows] == [*BASELINES, *ROWS]
  annotations = _json(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json"))["annotations"]
  for row in rows:
    point = "baselines" if row["run"] in BASELINES else row["run"]
    results_dir = reports.find_results(os.path.join(workdir, point))[row["run"]]
    for task, short in (("OpenEnded", "OE"), ("MultipleChoice", "MC")):
      results = _json(reports.official_file(results_dir, task, "results"))
      official, _ = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
      assert row[f"{short} All"] == official["overall"]
      assert row[f"{short} Number"] == official["perAnswerType"]["number"]
  with open(os.path.join(workdir, "table2.csv")) as f:
    assert len(list(csv.reader(f))) == 1 + len(rows)
  assert open(os.path.join(workdir, "table2.md")).read().count("\n") == 2 + len(rows)


@pytest.mark.slow
def test_rerunning_a_sweep_skips_finished_points(table2_sweep, capsys):
  workdir, argv = table2_sweep
  before = os.path.getmtime(os.path.join(workdir, "bow_q", "run.json"))
  assert cli.main(["sweep", *argv]) == 0
  out = capsys.readouterr().out
  assert out.count("finished, skipped") == 1 + len(ROWS) and "running" not in out
  assert os.path.getmtime(os.path.join(workdir, "bow_q", "run.json")) == before


def test_print_commands_lists_the_unfinished_points(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path)
  assert cli.main(["sweep", f"{SWEEPS}/vqa_ablations.py:cpu", "--workdir", workdir, "--print-commands",
                     "--set", f"data.dir={tiny_data}"]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 9 and all(line.startswith("vqajax train --config=") for line in lines)
  assert f"--workdir={workdir}/k500" in lines[3] and "--config.data.num_answers=500" in lines[3]
  assert lines[7].endswith(f"--config.data.confident_only=True --config.data.dir={tiny_data}")
  assert lines[-1].endswith(f"--config.model.targets=soft --config.data.dir={tiny_data}")
  assert not os.listdir(workdir)  # nothing ran


@pytest.mark.slow
def test_ablation_sweep_gives_table4_with_deltas_and_vocabulary_sizes(tiny_data, tmp_path, one_device_env):
  workdir = str(tmp_path)
  _sweep([f"{SWEEPS}/vqa_ablations.py:runlocal", "--workdir", workdir, *_sets(tiny_data, 4)], one_device_env)
  rows = {r["point"]: r for r in _json(os.path.join(workdir, "table4.json"))}
  assert list(rows) == ["base", "no_image_norm", "concat_fusion", "k500", "k2000", "vocab_min5",
                        "vocab_min11", "confident_only", "soft_targets"]
  for row in rows.values():
    assert row["Δ OE All"] == pytest.approx(row["OE All"] - rows["base"]["OE All"])
  questions = _json(os.path.join(tiny_data, "v2_OpenEnded_mscoco_train2014_questions.json"))["questions"]
  counts = {}
  for q in questions:
    for w in text.tokenize(q["question"]):
      counts[w] = counts.get(w, 0) + 1
  for point, at_least in (("base", 1), ("vocab_min5", 5), ("vocab_min11", 11)):
    assert rows[point]["vocab"] == 2 + sum(c >= at_least for c in counts.values())
  answers = {a["multiple_choice_answer"] for a in _json(
      os.path.join(tiny_data, "v2_mscoco_train2014_annotations.json"))["annotations"]}
  assert rows["k500"]["K"] == min(500, len(answers)) and rows["base"]["K"] == min(100, len(answers))
  confident = _json(os.path.join(workdir, "confident_only", "run.json"))["data"]
  base = _json(os.path.join(workdir, "base", "run.json"))["data"]
  assert confident["train_questions"] < base["train_questions"]
  assert confident["val_questions"] == base["val_questions"]  # the test set is never filtered


@pytest.mark.slow
def test_report_table2_evaluates_a_run_without_results(table2_sweep, tmp_path):
  workdir, _ = table2_sweep
  run = str(tmp_path / "lstm_q")
  shutil.copytree(os.path.join(workdir, "lstm_q"), run)
  shutil.rmtree(os.path.join(run, "results"))
  out = str(tmp_path / "report")
  assert report_cli.main(["table2", f"{workdir}/baselines", f"LSTM={run}", "--out", out]) == 0
  rows = {r["run"]: r for r in _json(os.path.join(out, "table2.json"))}
  assert list(rows) == [*sorted(BASELINES), "LSTM"]  # a workdir of baselines: alphabetical
  expected = _json(os.path.join(workdir, "table2.json"))
  assert rows["LSTM"]["OE All"] == next(r for r in expected if r["run"] == "lstm_q")["OE All"]


@pytest.mark.slow
def test_report_question_types_answers_and_humans(table2_sweep, tiny_data, tmp_path):
  workdir, _ = table2_sweep
  out = str(tmp_path)
  runs = [f"{workdir}/deeper_lstm_norm_i", f"{workdir}/baselines"]
  assert report_cli.main(["question-types", *runs, "--out", out]) == 0  # annotations from run.json
  rows = _json(os.path.join(out, "table3.json"))
  annotations = _json(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json"))["annotations"]
  types = sorted({a["question_type"] for a in annotations})
  assert [r["question type"] for r in rows] == types
  assert sum(r["share %"] for r in rows) == pytest.approx(100)
  first = next(r for r in rows if r["question type"] == types[0])
  assert first["share %"] == pytest.approx(
      100 * sum(a["question_type"] == types[0] for a in annotations) / len(annotations))
  results = _json(reports.official_file(reports.find_results(runs[0])["deeper_lstm_norm_i"],
                                        "OpenEnded", "results"))
  official, _ = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
  assert first["deeper_lstm_norm_i"] == official["perQuestionType"][types[0]]

  assert report_cli.main(["answers", runs[0], "--out", out, "--top", "10"]) == 0
  import matplotlib.image
  image = matplotlib.image.imread(os.path.join(out, "deeper_lstm_norm_i_fig9_correct_given_answer.png"))
  assert image.ndim == 3 and image.shape[0] > 100
  with open(os.path.join(out, "deeper_lstm_norm_i_fig10_answer_given_correct.csv")) as f:
    assert len(list(csv.reader(f))) <= 11

  assert report_cli.main(["humans", "--annotations",
                          os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json"), "--out", out]) == 0
  human, = _json(os.path.join(out, "humans.json"))
  assert human["input"] == "Question + Image" and 0 < human["All"] <= 100
  yes_no = [a for a in annotations if a["answer_type"] == "yes/no"]
  assert human["Yes/No"] == pytest.approx(
      sum(humans.question_agreement(a) for a in yes_no) / len(yes_no) * 100, abs=0.005)


def test_report_errors_are_one_line(tmp_path, capsys):
  assert report_cli.main(["table2", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
  err = capsys.readouterr().err
  assert err.startswith("vqajax report: error: ") and "no official results" in err and err.count("\n") == 1


@pytest.mark.slow
def test_report_of_damaged_official_files_is_one_line(table2_sweep, tmp_path, capsys):
  run = shutil.copytree(os.path.join(table2_sweep[0], "lstm_q"), tmp_path / "lstm_q")
  results_dir = reports.find_results(str(run))["lstm_q"]
  accuracy = reports.official_file(results_dir, "OpenEnded", "accuracy")
  official = reports.read_accuracy(accuracy)
  text, overall = json.dumps(official), f'"overall": {official["overall"]}'
  infinite = {**official, "perAnswerType": {**official["perAnswerType"], "yes/no": "Infinity"}}
  for damaged in ("[]", '{"overall": "high", "perAnswerType": 5}', text.replace(overall, '"overall": NaN'),
                  text.replace(overall, '"overall": 150'), json.dumps(infinite).replace('"Infinity"', "Infinity"),
                  json.dumps({**official, "perQuestionType": {"what color": -5}})):
    with open(accuracy, "w") as f:
      f.write(damaged)
    assert report_cli.main(["table2", str(run), "--out", str(tmp_path / "o")]) == 2, damaged
    assert capsys.readouterr().err == (f'vqajax report: error: {accuracy}: expected the official accuracy object '
                                       '({"overall": 0-100, "perAnswerType": {type: 0-100}, "perQuestionType": '
                                       '{type: 0-100}, ...})\n')
    assert not os.path.exists(tmp_path / "o")
  results = reports.official_file(results_dir, "OpenEnded", "results")
  with open(results, "w") as f:
    json.dump([{"question_id": "x", "answer": 3}], f)
  assert report_cli.main(["answers", str(run), "--out", str(tmp_path / "o")]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"vqajax report: error: {results}: results[0]") and err.count("\n") == 1, err
  assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("argv, message", [
    (["--set", "model.fusoin=concat"], "point base: cannot set config.model.fusoin='concat'"),
    (["--set", "nodots"], "--set 'nodots': expected key=value"),
    (["--points", "base,nope"], "--points: ['nope'] not in"),
    (["--set", "data.dir=WORKDIR/.."], "lies in"),  # the sweep's workdir inside a point's data: refused first
])
def test_sweep_errors_are_one_line(tmp_path, capsys, argv, message):
  argv = [a.replace("WORKDIR", str(tmp_path)) for a in argv]
  assert cli.main(["sweep", f"{SWEEPS}/vqa_ablations.py:runlocal", "--workdir", str(tmp_path), *argv]) == 2
  err = capsys.readouterr().err
  assert err.startswith("vqajax sweep: error: ") and message in err and err.count("\n") == 1
  assert not os.listdir(tmp_path)


def test_a_sweep_named_by_a_folder_is_one_line(tmp_path, capsys):
  assert cli.main(["sweep", str(tmp_path), "--workdir", str(tmp_path / "w")]) == 2
  assert capsys.readouterr().err == (f"vqajax sweep: error: {tmp_path}: a folder; a sweep file is a Python file "
                                     "(FILE.py)\n")
  assert not os.path.exists(tmp_path / "w")


def test_a_sweep_of_no_points_is_one_line(tmp_path, capsys):
  sweep_file = tmp_path / "s.py"
  sweep_file.write_text("def get_sweep(arg):\n  return {'points': []}\n")
  assert cli.main(["sweep", str(sweep_file), "--workdir", str(tmp_path / "w")]) == 2
  assert capsys.readouterr().err.startswith(f"vqajax sweep: error: {sweep_file}: expected get_sweep(arg) returning "
                                            "{'points': [{'name': str")
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize("point, message", [
    ({"overrides": [1, 2]}, "overrides must be a dict of config fields, e.g. {'optimizer.learning_rate': 0.01}"),
    ({"overrides": "abc"}, "overrides must be a dict of config fields, e.g. {'optimizer.learning_rate': 0.01}"),
    ({"command": "baselines", "baselines": 5}, "baselines must be a list of names, e.g. ['prior', 'random']"),
    ({"command": "eval"}, "command must be 'train' or 'baselines'"),
    ({"slurm": 2}, "slurm must be a dict of --slurm.* requests, e.g. {'nodes': 2}"),
    ({"overides": {"seed": 1}}, "unknown key 'overides' (expected name, config, overrides, command, baselines, "
     "slurm)"),  # a typo had been ignored: the point ran unchanged
])
def test_a_sweep_files_bad_point_is_one_line(tmp_path, capsys, point, message):
  sweep_file = tmp_path / "s.py"
  sweep_file.write_text(f"def get_sweep(arg):\n  return {{'points': [dict(name='a', config='c.py', **{point!r})]}}\n")
  assert cli.main(["sweep", str(sweep_file), "--workdir", str(tmp_path / "w")]) == 2
  assert capsys.readouterr().err == f"vqajax sweep: error: {sweep_file}: point a: {message}\n"
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize("sweep, message", [
    ("{'points': [dict(name='jobs.json', config='c.py')]}",
     "point name 'jobs.json': the sweep's own file in its folder; name the point otherwise"),
    ("{'points': [dict(name='table2.md', config='c.py')]}",
     "point name 'table2.md': the sweep's own file in its folder; name the point otherwise"),
    ("{'points': [dict(name='a', config='c.py')], 'bse': 'a'}",
     "get_sweep: unknown key 'bse' (expected points, base)"),
])
def test_a_point_named_as_the_sweeps_own_file_or_a_misspelt_key_is_refused(tmp_path, capsys, sweep, message):
  """A point folder `jobs.json` had taken the job record's place (a Slurm sweep submitted, then failed), one
  named `table2.md` trained and then failed every collection; a misspelt key had been ignored."""
  sweep_file = tmp_path / "s.py"
  sweep_file.write_text(f"def get_sweep(arg):\n  return {sweep}\n")
  assert cli.main(["sweep", str(sweep_file), "--workdir", str(tmp_path / "w")]) == 2
  assert capsys.readouterr().err == f"vqajax sweep: error: {sweep_file}: {message}\n"
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize("jobs", ['{"points": {"a": [5]}}', '{"points": {"a": ["../../etc/passwd"]}}',
                                  '{"points": []}'])
def test_a_damaged_job_record_is_one_line(tmp_path, capsys, jobs):
  sweep_file, workdir = tmp_path / "s.py", tmp_path / "w"
  sweep_file.write_text("def get_sweep(arg):\n  return {'points': [dict(name='a', config='c.py')]}\n")
  workdir.mkdir()
  (workdir / "jobs.json").write_text(jobs)
  assert cli.main(["sweep", str(sweep_file), "--workdir", str(workdir), "--status"]) == 2  # [5] had been a TypeError
  assert capsys.readouterr().err == (f"vqajax sweep: error: {workdir}/jobs.json: expected {{'points': {{name: [job id, "
                                     "...]}} (written by vqajax sweep)\n")
