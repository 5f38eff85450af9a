"""The paths a user types: relative workdirs for every reader, empty outputs, folders that
are not runs, and outputs inside a run or a bundle."""

import json
import os
import shutil

import pytest

import vqajax
from tests.digests import digests
from vqajax import cli, demo
from vqajax.vqa.ask import Answerer

TEST_DEV = "v2_OpenEnded_mscoco_test-dev2015_questions.json"


def _last_error(capsys, prog):
  err = capsys.readouterr().err.strip().splitlines()
  assert err and err[-1].startswith(prog) and ": error: " in err[-1], err  # prog: the verb, or its sub-verb too
  assert not any("Traceback" in line for line in err), err
  return err[-1]


def _image_id(workdir):
  with open(os.path.join(workdir, "run.json")) as f:
    data_dir = json.load(f)["config"]["data"]["dir"]
  with open(os.path.join(data_dir, TEST_DEV)) as f:
    return json.load(f)["questions"][0]["image_id"]


@pytest.mark.slow
def test_a_relative_workdir_serves_every_reader(tiny_lstm_run, tiny_data, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  shutil.copytree(tiny_lstm_run[0], "workdirs/run")
  image = str(_image_id("workdirs/run"))
  assert cli.main(["export", "--workdir=workdirs/run", "--out=bundle"]) == 0
  assert os.path.isfile("bundle/config.json")
  assert cli.main(["ask", "--workdir=workdirs/run", "--image-id", image, "--question", "what color is it?"]) == 0
  assert cli.main(["ask", "--workdir=bundle", "--image-id", image, "--question", "what color is it?"]) == 0
  assert cli.main(["submit", "--workdir=workdirs/run", os.path.join(tiny_data, TEST_DEV)]) == 0
  assert os.listdir("workdirs/run/submissions/test-dev2015")
  capsys.readouterr()
  answers = vqajax.load("workdirs/run").answer(["what color is it?"], image_ids=[int(image)], k=3)
  assert answers == vqajax.load(os.path.abspath("workdirs/run")).answer(["what color is it?"], image_ids=[int(image)], k=3)
  assert demo.build(demo.Page(Answerer.from_workdir("workdirs/run"))) is not None  # the demo's start, unserved


OUTPUT_FLAGS = [
    ["export", "--workdir=RUN", "--out="],
    ["submit", "--workdir=RUN", "--out=", "QUESTIONS"],
    ["ask", "--workdir=RUN", "--out=", "--image-id=1", "--question=what?"],
    ["train", "--config=experiments/vqa/bow_q.py:runlocal", "--workdir="],
    ["eval", "--workdir="],
    ["baselines", "--config=experiments/vqa/bow_q.py:runlocal", "--workdir="],
    ["sweep", "experiments/sweeps/vqa_table2.py:runlocal", "--workdir="],
    ["score", "--questions=Q", "--annotations=A", "--results=R", "--out="],
    ["score", "--questions=Q", "--annotations=A", "--results=R", "--per-question="],
    ["report", "table2", "RUN", "--out="],
    ["therapy", "table4", "RUN", "--out="],
    ["therapy", "analyze", "F", "--out="],
    ["therapy", "construct", "F", "--out="],
    ["data", "synth", "--out="],
    ["features", "--images=I", "--model=colour_cells", "--out="],
    ["convert", "vizwiz", "F", "--out="],
    ["tfds", "build", "vqa_v2", "--manual_dir=M", "--data_dir="],
    ["demo", "--workdir="],
]


@pytest.mark.parametrize("argv", OUTPUT_FLAGS, ids=lambda argv: " ".join(argv[:2]))
def test_an_empty_path_is_refused_not_taken_as_the_current_folder(argv, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  for name in ("README.md", "config.json", "encoders.json", "table2.md"):
    (tmp_path / name).write_text("the user's\n")
  before = digests(str(tmp_path))
  with pytest.raises(SystemExit) as done:
    cli.main(argv)
  assert done.value.code == 2
  assert "expected a path, got an empty one" in _last_error(capsys, f"vqajax {argv[0]}")
  assert digests(str(tmp_path)) == before


@pytest.mark.slow
def test_train_never_writes_into_a_folder_that_is_not_a_run(tiny_lstm_run, tiny_data, tmp_path, capsys):
  bundle = str(tmp_path / "bundle")
  assert cli.main(["export", f"--workdir={tiny_lstm_run[0]}", f"--out={bundle}"]) == 0
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "encoders.json").write_text("{}")
  (mine / "metrics.jsonl").write_text('{"mine": 1}\n')
  for folder in (bundle, str(mine)):
    before = digests(folder)
    assert cli.main(["train", "--config=experiments/vqa/bow_q.py:runlocal", f"--workdir={folder}",
                     f"--config.data.dir={tiny_data}", "--config.num_train_steps=1"]) == 2
    assert "holds files but no run.json, so it is not a vqajax run" in _last_error(capsys, "vqajax train")
    assert digests(folder) == before


@pytest.mark.slow
def test_outputs_never_go_into_a_run_or_a_bundle(tiny_lstm_run, tiny_data, tmp_path, capsys):
  run, bundle = tiny_lstm_run[0], str(tmp_path / "bundle")
  assert cli.main(["export", f"--workdir={run}", f"--out={bundle}"]) == 0
  questions = os.path.join(tiny_data, TEST_DEV)
  for workdir, out in ((run, f"{run}/checkpoints"), (run, f"{run}/results/mine"), (bundle, f"{bundle}/sub")):
    before = digests(workdir)
    assert cli.main(["submit", f"--workdir={workdir}", f"--out={out}", questions]) == 2
    assert "an input of this command" in _last_error(capsys, "vqajax submit")
    assert digests(workdir) == before


@pytest.mark.slow
def test_a_file_url_workdir_is_the_local_disk(tiny_data, tmp_path, capsys):
  workdir = tmp_path / "run"
  assert cli.main(["train", "--config=experiments/vqa/bow_q.py:runlocal", f"--workdir=file://{workdir}",
                   f"--config.data.dir={tiny_data}", "--config.num_train_steps=2", "--config.eval_every_steps=2"]) == 0
  assert os.listdir(workdir / "checkpoints") == ["2"]
