"""The paths a user types: relative workdirs for every reader, empty outputs, folders that
are not runs, and outputs inside a run or a bundle."""

import hashlib
import json
import os
import pathlib
import random
import shutil

import pytest

import vqajax
from tests.digests import digests
from vqajax import cli, demo, export
from vqajax.core import bundle as bundle_lib
from vqajax.core import files as files_lib
from vqajax.core.errors import InputError
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
  assert cli.main(["ask", "--workdir=workdirs/run", "--best", "--image-id", image, "--question", "what color is it?"]) == 0
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


def _edited_bundle(source, folder, name, edit):
  """A copy of the bundle `source` whose file `name` is `edit(value)` (JSON), with every
  checksum in vqajax.json made to match, as a careful editor would."""
  shutil.copytree(source, folder)
  with open(os.path.join(folder, name)) as f:
    value = edit(json.load(f))
  with open(os.path.join(folder, name), "w") as f:
    json.dump(value, f)
  if name != "vqajax.json":
    with open(os.path.join(folder, "vqajax.json")) as f:
      record = json.load(f)
    with open(os.path.join(folder, name), "rb") as f:
      record["files"][name] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(folder, "vqajax.json"), "w") as f:
      json.dump(record, f)
  return folder


def _set(path, value):
  def edit(tree):
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
      node = node[key]
    if value is None:
      del node[leaf]
    else:
      node[leaf] = value
    return tree
  return edit


EDITS = {
    "mlp_dims changed": ("config.json", _set("model.mlp_dims", [7]), "parameters do not fit the model"),
    "dropout 5": ("config.json", _set("model.dropout", 5), "config.model.dropout"),
    "unknown question encoder": ("config.json", _set("model.question", "bogus"), "config.model.question"),
    "config a list": ("config.json", lambda tree: [tree], "expected the config object"),
    "no task": ("config.json", _set("task", None), "expected the config object"),
    "no files": ("vqajax.json", _set("files", None), 'expected "files" to be a dict'),
    "no step": ("vqajax.json", _set("step", None), 'expected "step" to be a int'),
    "no encoders": ("vqajax.json", _set("encoders", None), 'expected "encoders" to be a str'),
    "weights outside": ("vqajax.json", _set("extractor", {"weights": "../../../x.npz"}), "extractor weights"),
    "a file outside": ("vqajax.json", lambda r: {**r, "files": {**r["files"], "../x": "0" * 64}},
                       "expected a path inside the bundle"),
}


@pytest.fixture(scope="module")
def bundle(tiny_lstm_run, tmp_path_factory):
  """(a bundle of the tiny run, an image id of its store)."""
  out = str(tmp_path_factory.mktemp("bundle") / "b")
  assert cli.main(["export", f"--workdir={tiny_lstm_run[0]}", f"--out={out}"]) == 0
  return out, _image_id(tiny_lstm_run[0])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EDITS))
def test_a_bundle_edited_with_matching_checksums_is_one_line(case, bundle, tmp_path, capsys):
  name, edit, expected = EDITS[case]
  edited = _edited_bundle(bundle[0], str(tmp_path / "edited"), name, edit)
  argv = ["ask", f"--workdir={edited}", "--image-id", str(bundle[1]), "--question", "what?"]
  assert cli.main(argv) == 2
  assert expected in _last_error(capsys, "vqajax ask")


@pytest.mark.slow
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_bundle_file_that_is_no_regular_file_is_refused_unread(special, bundle, tmp_path, capsys):
  edited = str(tmp_path / "edited")
  shutil.copytree(bundle[0], edited)
  params = os.path.join(edited, "flax_model.msgpack")
  os.remove(params)
  if special == "fifo":
    os.mkfifo(params)
  else:
    os.symlink(special, params)
  assert cli.main(["submit", f"--workdir={edited}", f"--out={tmp_path / 'out'}", "QUESTIONS_UNUSED"]) == 2
  assert "flax_model.msgpack: not a regular file" in _last_error(capsys, "vqajax submit")


def test_score_refuses_a_fifo_for_results(tiny_data, tmp_path, capsys):
  fifo = str(tmp_path / "results.json")
  os.mkfifo(fifo)
  assert cli.main(["score", f"--questions={tiny_data}/v2_OpenEnded_mscoco_val2014_questions.json",
                   f"--annotations={tiny_data}/v2_mscoco_val2014_annotations.json", f"--results={fifo}"]) == 2
  assert "results.json: not a regular file" in _last_error(capsys, "vqajax score")


def test_a_bundle_appears_whole_and_once(tmp_path, monkeypatch):
  out = str(tmp_path / "out")
  bundle_lib._write_folder(out, {"a.json": b"1", "sub/b.bin": b"2"})
  with pytest.raises(InputError, match="another command may have written it meanwhile"):  # the second of two
    bundle_lib._write_folder(out, {"a.json": b"other"})
  assert digests(out) == digests_of({"a.json": b"1", "sub/b.bin": b"2"}) and os.listdir(tmp_path) == ["out"]
  empty = tmp_path / "empty"
  empty.mkdir()
  bundle_lib._write_folder(str(empty), {"a.json": b"1"})  # an empty folder named as --out is filled
  assert os.listdir(empty) == ["a.json"]

  def full_disk(path, write, fsync):
    raise InputError(f"{path}: cannot write: No space left on device")

  monkeypatch.setattr(files_lib, "_write_temp", full_disk)
  with pytest.raises(InputError, match="No space left"):
    bundle_lib._write_folder(str(tmp_path / "full"), {"a.json": b"1"})
  assert sorted(os.listdir(tmp_path)) == ["empty", "out"]  # nothing half-written, no empty folder


def digests_of(blobs):
  return {name: hashlib.sha256(blob).hexdigest() for name, blob in blobs.items()}


def test_a_bundle_config_names_no_path_of_this_machine(monkeypatch):
  monkeypatch.setenv("HOME", "/home/ada")
  config = {"task": "vqa", "data": {"dir": "/data/VQA", "features": "/data/VQA/features/fc7.h5",
                                    "val_questions": "/scratch/q1.json,/scratch/q2.json", "train_questions": "t.json",
                                    "tfds_dir": "/home/ada/tfds", "extra": ["/home/ada/x/a.json", "gs://b/c.json"]},
            "model": {"name": "vilt", "init_from": "/models/vilt-b32"}}
  assert export.portable(config) == {
      "task": "vqa", "data": {"dir": "", "features": "features/fc7.h5", "val_questions": "q1.json,q2.json",
                              "train_questions": "t.json", "tfds_dir": "~/tfds", "extra": ["~/x/a.json", "gs://b/c.json"]},
      "model": {"name": "vilt", "init_from": ""}}
  assert export.portable({"data": {"dir": "/home/ada/.cache/vqajax/s", "features": "/home/ada/.cache/vqajax/s/f.h5"}}
                         ) == {"data": {"dir": "~/.cache/vqajax/s", "features": "f.h5"}}


@pytest.mark.slow
def test_a_bundle_reads_its_data_from_the_home_folder_or_data_dir(tiny_lstm_run, tiny_data, tmp_path, monkeypatch,
                                                                  capsys):
  image, question = str(_image_id(tiny_lstm_run[0])), "what color is it?"
  ask = ["ask", "--image-id", image, "--question", question, "--json"]
  assert cli.main([*ask, f"--workdir={tiny_lstm_run[0]}"]) == 0
  expected = json.loads(capsys.readouterr().out)
  out = tmp_path / "bundle"
  assert cli.main(["export", f"--workdir={tiny_lstm_run[0]}", f"--out={out}"]) == 0
  for name in os.listdir(out):
    blob = (out / name).read_bytes()
    assert not [p for p in (tiny_data, tiny_lstm_run[0], os.path.expanduser("~"), str(tmp_path)) if p.encode() in blob]
  assert json.loads((out / "config.json").read_text())["data"]["dir"] == ""
  real = _edited_bundle(out, str(tmp_path / "real"), "config.json", _set("data.synthetic", False))  # not embedded
  assert cli.main([*ask, f"--workdir={real}"]) == 2
  assert "give the folder of its data with --data_dir" in _last_error(capsys, "vqajax ask")
  assert cli.main([*ask, f"--workdir={real}", f"--data_dir={tiny_data}"]) == 0
  assert json.loads(capsys.readouterr().out) == expected
  assert cli.main(["ask", f"--workdir={real}", "--image", os.path.join(tiny_data, "val2014"), "--question", question]
                  ) == 0  # image files need no data folder
  assert cli.main([*ask, f"--workdir={tiny_lstm_run[0]}", f"--data_dir={tiny_data}"]) == 2
  assert "a workdir, which reads the data it recorded" in _last_error(capsys, "vqajax ask")
  empty, missing = tmp_path / "empty", tmp_path / "typo"  # a folder to read: never made, never written into
  empty.mkdir()
  assert cli.main([*ask, f"--workdir={out}", f"--data_dir={empty}"]) == 2
  assert "empty: holds no embedded synthetic dataset (MANIFEST.json), which this bundle's run was trained on" in \
      _last_error(capsys, "vqajax ask") and not os.listdir(empty)
  assert cli.main([*ask, f"--workdir={real}", f"--data_dir={missing}"]) == 2
  assert "typo: no such folder" in _last_error(capsys, "vqajax ask") and not os.path.exists(missing)
  assert cli.main([*ask, f"--workdir={out}", f"--data_dir={tiny_data}"]) == 0
  assert json.loads(capsys.readouterr().out) == expected
  monkeypatch.setenv("HOME", os.path.dirname(tiny_data))  # the data under the home folder: recorded as ~/...
  home_bundle = tmp_path / "home_bundle"
  assert cli.main(["export", f"--workdir={tiny_lstm_run[0]}", f"--out={home_bundle}"]) == 0
  assert json.loads((home_bundle / "config.json").read_text())["data"]["dir"] == "~/" + os.path.basename(tiny_data)
  capsys.readouterr()
  assert cli.main([*ask, f"--workdir={home_bundle}"]) == 0
  assert json.loads(capsys.readouterr().out) == expected


def _only_error(capsys, prog):
  """The one line on stderr: `prog`'s refusal."""
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
  return err[0]


@pytest.mark.slow
def test_load_takes_path_objects_and_refuses_a_step_with_best(tiny_lstm_run, bundle, tiny_data):
  run, image = tiny_lstm_run[0], _image_id(tiny_lstm_run[0])
  asked = lambda answerer: answerer.answer(["what color is it?"], image_ids=[image], k=3)
  expected = asked(vqajax.load(run))
  assert asked(vqajax.load(pathlib.Path(run))) == expected
  assert asked(vqajax.load(pathlib.Path(bundle[0]), data_dir=pathlib.Path(tiny_data))) == expected
  with pytest.raises(InputError, match=r"run: step 4 and best: give one of them \(--step N or --best\)$"):
    vqajax.load(pathlib.Path(run), step=4, best=True)


@pytest.mark.slow
def test_ask_and_submit_refuse_a_lone_surrogate_and_a_huge_file_in_one_line(tiny_lstm_run, tiny_data, tmp_path,
                                                                            capsys):
  run, out = tiny_lstm_run[0], tmp_path / "out"
  before = digests(run)
  assert cli.main(["ask", f"--workdir={run}", "--image-id", str(_image_id(run)), "--question", "what is \ud800?"]) == 2
  assert _only_error(capsys, "vqajax ask").endswith(
      "--question: expected text, got 'what is \\ud800?' (a lone surrogate is no character)")
  with open(os.path.join(tiny_data, TEST_DEV)) as f:
    questions = json.load(f)
  questions["questions"][0]["question"] = "\ud800"
  (tmp_path / "q").mkdir()
  (tmp_path / "q" / TEST_DEV).write_text(json.dumps(questions))  # "\ud800" escaped in the file
  assert cli.main(["submit", f"--workdir={run}", f"--out={out}", str(tmp_path / "q" / TEST_DEV)]) == 2
  qid = questions["questions"][0]["question_id"]
  assert f'questions[0] (question_id={qid}): "question": expected text' in _only_error(capsys, "vqajax submit")
  with open(tmp_path / TEST_DEV, "wb") as f:
    f.truncate(2 * 2**30)  # sparse zeros
  assert cli.main(["submit", f"--workdir={run}", f"--out={out}", str(tmp_path / TEST_DEV)]) == 2
  assert f"{TEST_DEV}: 2147483648 bytes, more than the" in _only_error(capsys, "vqajax submit")
  assert digests(run) == before and not out.exists()


@pytest.mark.slow
def test_random_bytes_with_their_checksum_as_a_bundles_parameters(bundle, tmp_path, capsys):
  edited = tmp_path / "edited"
  shutil.copytree(bundle[0], edited)
  blob = random.Random(0).randbytes(4096)
  (edited / "flax_model.msgpack").write_bytes(blob)
  record = json.loads((edited / "vqajax.json").read_text())
  record["files"]["flax_model.msgpack"] = hashlib.sha256(blob).hexdigest()
  (edited / "vqajax.json").write_text(json.dumps(record))
  assert cli.main(["ask", f"--workdir={edited}", "--image-id", str(bundle[1]), "--question", "what?"]) == 2
  assert "flax_model.msgpack: not Flax msgpack parameters (" in _only_error(capsys, "vqajax ask")
