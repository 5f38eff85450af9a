"""`vqajax VERB` as a user runs it: help, the resolved config, the recorded config, and a
user's files never written over (inputs, special files, names taken from inputs)."""

import glob
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from tests import devices
from tests.digests import digests
from vqajax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = f"{ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal"
STEPS = ["--config.num_train_steps=2", "--config.eval_every_steps=2", "--config.log_every_steps=1"]


def _error_line(capsys, prog):
  err = capsys.readouterr().err.strip().splitlines()
  assert err and err[-1].startswith(f"{prog}: error: "), err
  assert not any("Traceback" in line for line in err), err
  return err[-1]


@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_every_verb_has_its_own_help(verb, capsys):
  with pytest.raises(SystemExit) as done:
    cli.main([verb, "--help"])
  assert done.value.code == 0
  out = capsys.readouterr().out
  assert out.startswith(f"usage: vqajax {verb}") and "--help" in out


def test_the_front_door_lists_the_verbs_and_refuses_others(capsys):
  assert cli.main(["--help"]) == 0
  out = capsys.readouterr().out
  assert all(f"  {verb} " in out for verb in cli.VERBS)
  assert cli.main(["trian"]) == 2
  assert "unknown verb 'trian'" in capsys.readouterr().err


def test_a_value_with_a_newline_keeps_the_refusal_on_one_line(capsys):
  # argparse's own message (unrecognized arguments are joined as given) and an InputError's
  with pytest.raises(SystemExit) as done:
    cli.main(["tfds", "build", "vqa/v2", "--manual_dir", "m", "--data_dir", "d", "x\ny"])
  assert done.value.code == 2
  assert capsys.readouterr().err.endswith("unrecognized arguments: x\\ny\n")
  assert cli.main(["tfds", "build", "vqa/v2\rx\ny", "--manual_dir", "m", "--data_dir", "out"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "no config 'v2\\rx\\ny'" in err, err



@pytest.mark.parametrize("verb, commands", [("therapy", ("analyze", "table4", "grounding")),
                                            ("report", ("table2", "question-types", "answers", "humans")),
                                            ("data", ("synth", "therapy", "therapy-raw"))])
def test_a_verb_with_commands_names_the_command_it_refuses(verb, commands, capsys):
  for argv, expected in (([verb, "bogus"], "argument COMMAND: invalid choice: 'bogus' (choose from "),
                         ([verb], "the following arguments are required: COMMAND")):
    with pytest.raises(SystemExit) as done:
      cli.main(argv)
    assert done.value.code == 2
    line = _error_line(capsys, f"vqajax {verb}")
    assert line.startswith(f"vqajax {verb}: error: {expected}"), line
    if argv[1:]:  # every command offered, quoted or not as the Python version's argparse writes them
      assert [c.strip("'") for c in line[line.index("(choose from ") + 13:-1].split(", ")] == list(commands)


def test_print_config_shows_every_field_and_the_data_sizes(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "w")
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   "--config.model.mlp_dims=7", "--print-config"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert "model.mlp_dims = (7,)" in lines and "optimizer.name = 'adam'" in lines  # a scalar -> a 1-tuple
  with open(os.path.join(tiny_data, "v2_mscoco_train2014_annotations.json")) as f:
    train_questions = len(json.load(f)["annotations"])
  sizes = dict(line.split(": ") for line in lines if line.startswith("data.") and ": " in line)
  assert 0 < int(sizes["data.train_questions"]) <= train_questions and int(sizes["data.num_answers"]) > 1
  assert not os.path.exists(workdir)  # nothing written


def test_a_config_file_with_a_colon_in_its_name_is_read(tmp_path):
  from vqajax.core import config as config_lib
  colon = tmp_path / "a:b.py"  # had been read as `a` with the argument `b.py`: "config file not found"
  colon.write_text(open(f"{ROOT}/experiments/vqa/bow_q.py").read())
  assert config_lib.split_spec(f"{colon}:runlocal") == (str(colon), "runlocal")
  assert config_lib.split_spec("x.py:a:b") == ("x.py", "a:b") and config_lib.split_spec("a:b") == ("a", "b")
  assert [config_lib.load_config(spec).num_train_steps for spec in (str(colon), f"{colon}:runlocal")] == [6000, 40]


def test_bad_config_values_are_one_line_naming_the_field(tiny_data, tmp_path, capsys):
  argv = ["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={tiny_data}"]
  assert cli.main([*argv, "--config.batch_size=many"]) == 2
  assert "config.batch_size: expected an integer, got 'many'" in _error_line(capsys, "vqajax train")
  assert cli.main([*argv, "--config.data.synthetic=maybe"]) == 2
  assert "config.data.synthetic: expected true or false" in _error_line(capsys, "vqajax train")
  assert cli.main(["train", f"--config={tmp_path}/nope.py", f"--workdir={tmp_path / 'w'}"]) == 2
  assert "nope.py: config file not found" in _error_line(capsys, "vqajax train")
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.slow
def test_eval_uses_the_runs_recorded_config(tiny_lstm_run, tiny_lstm_run_copy, tmp_path, capsys):
  trained = tiny_lstm_run[1]
  assert cli.main(["eval", f"--workdir={tiny_lstm_run_copy}"]) == 0  # no --config, no overrides
  evaluated = capsys.readouterr().out
  row = lambda text: next(line for line in text.splitlines() if "open-ended" in line).split("|")[3:]
  assert row(evaluated) == row(trained)
  assert cli.main(["eval", f"--workdir={tmp_path / 'none'}"]) == 2  # read-only: creates nothing
  assert "no such run" in _error_line(capsys, "vqajax eval") and not os.path.exists(tmp_path / "none")


@pytest.mark.slow
def test_real_files_without_a_manifest_are_never_generated_over(tiny_data, tmp_path, capsys):
  """Issue 13.1: a data.dir of the user's files (no MANIFEST.json) with the default
  data.synthetic=True is refused, and every file is byte-identical afterwards."""
  real = str(tmp_path / "R")
  shutil.copytree(tiny_data, real)
  os.remove(os.path.join(real, "MANIFEST.json"))
  before = digests(real)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={real}",
                   *STEPS]) == 2
  line = _error_line(capsys, "vqajax train")
  assert "holds files but no embedded synthetic dataset" in line and "config.data.synthetic=False" in line
  assert digests(real) == before and not os.path.exists(tmp_path / "w")
  # read as the official files they are, they train (and are still untouched)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={real}",
                   "--config.data.synthetic=False", *STEPS]) == 0
  assert digests(real) == before


@pytest.mark.slow
def test_a_store_written_in_the_current_folder_is_found(tiny_data, tmp_path, capsys, monkeypatch):
  """README's extraction (`--out features/...` in the current folder) then its training
  (`--config.data.features=features/...` beside `--config.data.dir=/data/VQA`) work as
  typed; the run records the store's absolute path; a store in neither place says where
  it looked."""
  real = str(tmp_path / "VQA")
  shutil.copytree(tiny_data, real, ignore=shutil.ignore_patterns("features"))
  here = tmp_path / "here"
  shutil.copytree(os.path.join(tiny_data, "features"), here / "features")
  monkeypatch.chdir(here)
  train = ["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={real}",
           "--config.data.synthetic=False", *STEPS]
  assert cli.main(train + ["--config.data.features=features/fc7.h5"]) == 0
  with open(tmp_path / "w" / "run.json") as f:
    assert json.load(f)["config"]["data"]["features"] == str(here / "features" / "fc7.h5")
  assert cli.main(train + ["--config.data.features=features/gone.h5"]) == 2
  assert _error_line(capsys, "vqajax train") == (
      f"vqajax train: error: config.data.features features/gone.h5: feature store not found: a relative path is "
      f"looked for in config.data.dir ({real}/features/gone.h5), then in the current folder "
      f"({here}/features/gone.h5)")


@pytest.mark.slow
def test_the_embedded_dataset_goes_into_a_new_folder_only(tmp_path, capsys):
  fresh = str(tmp_path / "fresh")
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={fresh}",
                   *STEPS]) == 0
  assert os.path.exists(os.path.join(fresh, "MANIFEST.json"))
  assert f"writing the embedded synthetic dataset (scale tiny, seed 0) to {fresh}" in capsys.readouterr().err
  assert cli.main(["data", "synth", "--out", fresh]) == 2  # never into a folder holding files
  assert "not an empty folder" in _error_line(capsys, "vqajax data")


def test_a_workdir_inside_the_data_is_refused(tiny_data, tmp_path, capsys):
  data = str(tmp_path / "d")
  shutil.copytree(tiny_data, data)
  before = digests(data)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={data}/run", f"--config.data.dir={data}", *STEPS]) == 2
  assert "an input of this command" in _error_line(capsys, "vqajax train")
  assert digests(data) == before


def test_a_folder_output_that_is_a_link_to_nothing_is_refused(tiny_data, tmp_path, capsys):
  link = tmp_path / "run"
  os.symlink(tmp_path / "elsewhere" / "planted", link)
  for argv, verb in ((["train", f"--config={CONFIG}", f"--workdir={link}", f"--config.data.dir={tiny_data}", *STEPS],
                      "vqajax train"), (["data", "synth", "--out", str(link)], "vqajax data")):
    assert cli.main(argv) == 2  # train had died of a FileExistsError traceback
    expected = f"run: a link to nothing ({tmp_path}/elsewhere/planted); make the folder it names"
    assert expected in _error_line(capsys, verb)
  assert os.listdir(tmp_path) == ["run"] and os.path.islink(link)


def test_a_compilation_cache_in_the_data_or_over_a_file_is_refused(tiny_data, tmp_path, capsys):
  import jax
  data = str(tmp_path / "d")
  shutil.copytree(tiny_data, data)
  (tmp_path / "a_file").write_text("mine")
  before, cache = digests(tmp_path), jax.config.jax_compilation_cache_dir  # the session's, set back below
  try:
    for where, error in ((f"{data}/xla", f"{data}/xla: lies in {data}, an input of this command"),
                         (str(tmp_path / "a_file"), "a_file: exists and is not a folder")):
      assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path}/run", f"--config.data.dir={data}",
                       f"--compilation_cache_dir={where}", *STEPS]) == 2
      assert error in _error_line(capsys, "vqajax train")  # had written the compiled programs there
  finally:
    jax.config.update("jax_compilation_cache_dir", cache)
  assert digests(tmp_path) == before and not os.path.exists(tmp_path / "run")


def _score_args(tiny_data, results):
  return ["score", "--questions", os.path.join(tiny_data, "v2_OpenEnded_mscoco_val2014_questions.json"),
          "--annotations", os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json"), "--results", results]


@pytest.fixture
def results_file(tiny_data, tmp_path):
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  path = str(tmp_path / "results.json")
  with open(path, "w") as f:
    json.dump([{"question_id": a["question_id"], "answer": "yes"} for a in annotations], f)
  return path


def test_score_never_writes_over_its_inputs(tiny_data, tmp_path, results_file, capsys):
  """Issue 13.2: an output that is an input (also through a symlink) is refused before
  anything runs, and the input is byte-identical."""
  args = _score_args(tiny_data, results_file)
  annotations = args[4]
  before = digests(tiny_data)
  link = str(tmp_path / "link.json")
  os.symlink(annotations, link)
  for flag, target in (("--out", annotations), ("--per-question", results_file), ("--out", link)):
    with open(results_file, "rb") as f:
      results_before = f.read()
    assert cli.main([*args, flag, target]) == 2
    assert "is an input of this command" in _error_line(capsys, "vqajax score")
    with open(results_file, "rb") as f:
      assert f.read() == results_before
  assert digests(tiny_data) == before and os.path.islink(link)
  assert cli.main([*args, "--out", str(tmp_path / "a.json"), "--per-question", str(tmp_path / "a.json")]) == 2
  assert "are one file" in _error_line(capsys, "vqajax score")


def test_score_replaces_only_what_it_wrote_and_refuses_special_files(tiny_data, tmp_path, results_file, capsys):
  """Issue 22.2: an existing output is replaced only when it is a plain file of its own:
  a symlink (its target is someone else's, also when that does not exist yet) and a
  hard-linked file are refused, unchanged."""
  args = _score_args(tiny_data, results_file)
  target, link, hard = tmp_path / "target.json", tmp_path / "out.json", tmp_path / "hard.json"
  dangling = tmp_path / "dangling.json"
  target.write_text("old")
  os.symlink(target, link)
  os.link(target, hard)
  os.symlink(tmp_path / "elsewhere" / "planted.json", dangling)
  os.mkdir(tmp_path / "elsewhere")
  for out, what in ((link, "is a link"), (hard, "is a file with other hard links"), (dangling, "is a link")):
    assert cli.main([*args, "--out", str(out)]) == 2
    assert what in _error_line(capsys, "vqajax score")
  assert os.path.islink(link) and target.read_text() == "old" and not os.listdir(tmp_path / "elsewhere")
  mine = tmp_path / "mine.json"
  for _ in range(2):  # written, then replaced by the rerun
    assert cli.main([*args, "--out", str(mine)]) == 0
    assert "overall" in json.loads(mine.read_text())
  capsys.readouterr()
  fifo = str(tmp_path / "fifo")
  os.mkfifo(fifo)
  assert cli.main([*args, "--out", fifo]) == 2
  assert "is not a regular file" in _error_line(capsys, "vqajax score")
  assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a fifo, never renamed over


def test_names_from_input_files_are_checked_before_training(tiny_data, tmp_path, capsys):
  """Issue 13.3: a data_subtype that is not a plain name fails at load, before any step."""
  data = str(tmp_path / "d")
  shutil.copytree(tiny_data, data)
  path = os.path.join(data, "v2_OpenEnded_mscoco_val2014_questions.json")
  with open(path) as f:
    questions = json.load(f)
  questions["data_subtype"] = "val/2014"
  with open(path, "w") as f:
    json.dump(questions, f)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={data}",
                   *STEPS]) == 2
  assert "\"data_subtype\" 'val/2014': expected a plain name" in _error_line(capsys, "vqajax train")
  assert not os.path.exists(tmp_path / "w" / "checkpoints")


def test_report_run_names_cannot_leave_the_output_folder(tmp_path, capsys):
  run = tmp_path / "run"
  run.mkdir()
  out = tmp_path / "out" / "D"
  assert cli.main(["report", "answers", f"../x={run}", "--out", str(out)]) == 2
  line = _error_line(capsys, "vqajax report")
  assert "run name '../x': expected a plain name" in line
  assert not os.path.exists(tmp_path / "out" / "x_fig9_correct_given_answer.png")


def test_a_rerun_with_another_seed_is_refused_before_it_writes_an_embedded_dataset(tmp_path, monkeypatch, capsys):
  """The seed names the embedded dataset's folder: the refusal comes before that dataset is written."""
  from experiments.vqa import deeper_lstm_norm_i
  from vqajax.core import run_record
  from vqajax.synthetic import embedded
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  config = deeper_lstm_norm_i.get_config("runlocal")
  embedded.resolve(config)  # as the first run recorded it
  workdir = str(tmp_path / "w")
  run_record.write_run_file(workdir, config, {"train_questions": 1})
  before = open(os.path.join(workdir, "run.json")).read()
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", "--config.seed=3"]) == 2
  cache = tmp_path / "home" / ".cache" / "vqajax" / "synthetic-v3"
  assert f"holds a run with other settings (data.dir '{cache / 'tiny-seed0'}' -> '{cache / 'tiny-seed3'}'; " \
      "seed 0 -> 3)" in _error_line(capsys, "vqajax train")
  assert not os.path.exists(tmp_path / "home") and open(os.path.join(workdir, "run.json")).read() == before


@pytest.mark.slow
def test_a_workdir_is_one_run(tiny_data, tmp_path, capsys):
  """Issue 13.5-7: another run's settings are refused with the fields that differ; a
  finished run says so; a second process on the workdir is refused; a stale lock (a dead
  process) is taken over; run.json marks the run finished only after its final step."""
  workdir = str(tmp_path / "w")
  argv = ["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}", *STEPS]
  assert cli.main(argv) == 0
  capsys.readouterr()
  with open(os.path.join(workdir, "run.json")) as f:
    record = json.load(f)
  assert record["finished_step"] == 2
  assert cli.main([*argv, "--config.seed=1", "--config.batch_size=16"]) == 2
  line = _error_line(capsys, "vqajax train")
  assert "holds a run with other settings (batch_size 32 -> 16; seed 0 -> 1)" in line
  with open(os.path.join(workdir, "run.json")) as f:
    assert json.load(f) == record  # not rewritten
  assert cli.main([*argv, "--config.seed=1", "--allow-changed-run", "--verbosity=warning"]) == 0  # deliberate
  assert "already finished" not in capsys.readouterr().err  # (an INFO line: hidden at warning)
  assert cli.main(argv) == 0
  assert "already finished at step 2" in capsys.readouterr().err
  assert cli.main(["eval", f"--workdir={workdir}", f"--config={ROOT}/experiments/vqa/bow_q.py:runlocal",
                   f"--config.data.dir={tiny_data}"]) == 2  # another model's config
  assert "holds a run with other settings (model." in _error_line(capsys, "vqajax eval")
  lock = os.path.join(workdir, "lock")
  with open(lock, "w") as f:
    json.dump({"host": os.uname().nodename, "pid": os.getpid(), "command": "vqajax train", "since": "now"}, f)
  assert cli.main(argv) == 2  # a live holder (this very process)
  assert f"in use by another run (vqajax train, pid {os.getpid()}" in _error_line(capsys, "vqajax train")
  with open(lock, "w") as f:
    json.dump({"host": os.uname().nodename, "pid": 2**22 + 12345, "command": "vqajax train"}, f)
  assert cli.main([*argv[:-3], "--config.num_train_steps=4", "--config.eval_every_steps=2"]) == 0  # stale: taken
  assert not os.path.exists(lock)
  with open(os.path.join(workdir, "run.json")) as f:
    assert json.load(f)["finished_step"] == 4  # a longer budget continues the same run


@pytest.mark.slow
def test_a_budget_in_epochs_becomes_steps(tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "w")
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   "--config.num_epochs=0.5", "--config.eval_every_steps=1000", "--config.batch_size=64"]) == 0
  with open(os.path.join(workdir, "run.json")) as f:
    record = json.load(f)
  train_questions = record["data"]["train_questions"]
  assert record["finished_step"] == record["config"]["num_train_steps"] == -(-train_questions // 128)
  assert f"0.5 epochs of {train_questions} train examples" in capsys.readouterr().err


@pytest.mark.slow
def test_a_full_disk_while_saving_is_one_line_and_not_finished(tiny_data, tmp_path, capsys, monkeypatch):
  import orbax.checkpoint as ocp

  def full(*args, **kwargs):
    raise ValueError("RESOURCE_EXHAUSTED: Failed to write 6402048 bytes to file 19: No space left on device")
  monkeypatch.setattr(ocp.CheckpointManager, "save", full)
  workdir = str(tmp_path / "w")
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                   *STEPS]) == 3  # the input was fine: the run cannot go on
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("vqajax train: failed: ") and not any("Traceback" in line for line in err), err
  assert "cannot save the checkpoint of step 2 (RESOURCE_EXHAUSTED" in err[-1] and "rerun to resume" in err[-1]
  with open(os.path.join(workdir, "run.json")) as f:
    assert "finished_step" not in json.load(f)  # results were written, the checkpoint was not
  assert not os.path.exists(os.path.join(workdir, "lock"))


@pytest.mark.slow
def test_a_really_full_disk_is_one_line_before_orbax_writes(tiny_data, tmp_path):
  """A workdir on a 600 KiB tmpfs (root only): the state does not fit, so the run fails with
  one line (exit 3) before orbax starts a write, and nothing of orbax's threads is printed."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], capture_output=True).returncode:
    pytest.skip("mounting a small tmpfs needs root")
  try:
    done = subprocess.run([sys.executable, "-m", "vqajax", "train", f"--config={CONFIG}", f"--workdir={disk / 'w'}",
                           f"--config.data.dir={tiny_data}", *STEPS], capture_output=True, text=True, cwd=ROOT,
                          env=devices.env(1))
    left = sorted(os.listdir(disk / "w" / "checkpoints"))
  finally:
    subprocess.run(["umount", str(disk)], check=True)
  err = done.stderr.strip().splitlines()
  assert done.returncode == 3 and err[-1].startswith("vqajax train: failed: "), done.stderr[-3000:]
  assert "cannot save the checkpoint of step 2 (it takes up to" in err[-1] and "MiB free" in err[-1]
  assert not [line for line in err if "Traceback" in line or line.startswith("E1")] and left == [], done.stderr[-3000:]


@pytest.mark.slow
def test_eval_without_checkpoints_is_one_line_and_creates_nothing(tiny_lstm_run, tmp_path, capsys):
  workdir = tmp_path / "run"
  workdir.mkdir()
  for name in ("run.json", "encoders.json"):
    shutil.copy(os.path.join(tiny_lstm_run[0], name), workdir / name)
  assert cli.main(["eval", f"--workdir={workdir}"]) == 2
  assert "no checkpoints to evaluate" in _error_line(capsys, "vqajax eval")
  assert sorted(os.listdir(workdir)) == ["encoders.json", "run.json"]  # no checkpoints/ left by orbax


@pytest.mark.slow
def test_eval_all_skips_a_damaged_checkpoint_and_names_it(tiny_lstm_run_copy):
  """In a process of its own, as a user runs it: orbax's other failed reads of the damaged
  step (reported by asyncio when collected) and its storage threads finishing after the
  failed restore (unraisable "Event loop is closed") print nothing."""
  workdir = tiny_lstm_run_copy
  for path in glob.glob(f"{workdir}/checkpoints/2/state/**/d/*", recursive=True):
    with open(path, "r+b") as f:  # a half-copied checkpoint
      f.truncate(os.path.getsize(path) // 2)
  done = subprocess.run([sys.executable, "-m", "vqajax", "eval", f"--workdir={workdir}", "--all"],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "step 4: results in" in done.stdout and "step 2: results in" not in done.stdout
  assert "checkpoint at step 2 cannot be restored, skipped" in done.stderr, done.stderr[-3000:]
  assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr[-3000:]


def test_ctrl_c_is_one_line_and_exit_130(tiny_data, tmp_path, capsys, monkeypatch):
  from vqajax.core import train

  def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(train, "train_and_evaluate", interrupted)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={tiny_data}"]) == 130
  assert capsys.readouterr().err.strip().splitlines()[-1] == "vqajax train: interrupted"


@pytest.mark.slow
def test_a_damaged_store_chunk_mid_run_is_one_line(tiny_data, tmp_path, capsys):
  import h5py
  import numpy as np
  with h5py.File(os.path.join(tiny_data, "features", "fc7.h5"), "r") as f:
    features, ids = f["features"][...], f["image_ids"][...]
  store = str(tmp_path / "chunked.h5")
  with h5py.File(store, "w") as f:  # one row per compressed chunk, then one chunk damaged
    f.create_dataset("features", data=features, chunks=(1,) + features.shape[1:], compression="gzip")
    f["image_ids"] = ids
  with h5py.File(store, "r") as f:
    offset, size = f["features"].id.get_chunk_info(len(ids) // 2).byte_offset, 64
  with open(store, "r+b") as f:
    f.seek(offset)
    f.write(np.random.default_rng(0).integers(0, 255, size, np.uint8).tobytes())
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={tmp_path / 'w'}", f"--config.data.dir={tiny_data}",
                   f"--config.data.features={store}", "--config.num_train_steps=20"]) == 2
  line = _error_line(capsys, "vqajax train")
  assert f"{store}: rows " in line and "cannot be read" in line


@pytest.mark.slow
def test_links_planted_in_a_workdir_never_reach_the_data(tiny_data, tmp_path, capsys):
  data = str(tmp_path / "d")
  shutil.copytree(tiny_data, data)
  before = digests(data)
  argv = ["train", f"--config={CONFIG}", f"--config.data.dir={data}", *STEPS]
  base = tmp_path / "base"
  assert cli.main([*argv, f"--workdir={base}"]) == 0  # a run: its run.json and encoders.json
  for name, target in (("metrics.jsonl", os.path.join(data, "v2_mscoco_val2014_annotations.json")),
                       ("checkpoints", os.path.join(data, "features")), ("results", data)):
    workdir = tmp_path / f"w_{name}"
    workdir.mkdir()
    for record in ("run.json", "encoders.json"):
      shutil.copy(base / record, workdir / record)
    os.symlink(target, workdir / name)
    assert cli.main([*argv, f"--workdir={workdir}"]) == 2
    assert "an input of this command" in _error_line(capsys, "vqajax train")
  assert digests(data) == before


def test_names_and_files_of_the_user_are_checked(tiny_data, tmp_path, capsys):
  argv = ["train", f"--config={CONFIG}", f"--config.data.dir={tiny_data}", *STEPS]
  assert cli.main([*argv, f"--workdir={tmp_path / 'w'}", "--config.name=../../escaped"]) == 2
  line = _error_line(capsys, "vqajax train")
  assert "config.name: expected a plain name (letters, digits, '.', '-', '_', '+'), got '../../escaped'" in line
  bad = tmp_path / "bad.py"
  bad.write_text("x = 1\n")
  assert cli.main(["train", f"--config={bad}", f"--workdir={tmp_path / 'w'}"]) == 2
  assert "expected a function get_config(arg)" in _error_line(capsys, "vqajax train")
  assert cli.main(["sweep", str(bad), f"--workdir={tmp_path / 's'}"]) == 2
  assert "expected get_sweep(arg) returning" in _error_line(capsys, "vqajax sweep")
  assert cli.main(["baselines", f"--config={CONFIG}", f"--config.data.dir={tiny_data}", f"--workdir={tmp_path / 'b'}",
                   "--baselines=bogus"]) == 2
  assert "--baselines 'bogus': expected some of" in _error_line(capsys, "vqajax baselines")
  assert not os.path.exists(tmp_path / "b" / "run.json")
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.slow
def test_an_unreadable_lock_is_taken_over(tiny_data, tmp_path, capsys):
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "lock").write_text("null")  # not a lock this code writes (it writes them whole)
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={tiny_data}", *STEPS]) == 0
  assert not os.path.exists(workdir / "lock")


def test_therapy_analyze_writes_beside_its_inputs_never_over_them(tiny_therapy, tmp_path, capsys):
  """Issue 22.2: a new folder beside the input files is the common habit: written; the inputs never."""
  files_dir = tmp_path / "t"
  shutil.copytree(tiny_therapy, files_dir)
  before = digests(files_dir)
  val = str(files_dir / "VQA_val.json")
  assert cli.main(["therapy", "analyze", val, "--out", val]) == 2
  assert "is an input of this command" in _error_line(capsys, "vqajax therapy")
  out = tmp_path / "o"  # one of its tables (of seven, the fifth) would be an input: no table is written
  out.mkdir()
  shutil.copy(val, out / "table1.json")
  before_out = digests(out)
  assert cli.main(["therapy", "analyze", str(out / "table1.json"), "--out", str(out)]) == 2
  assert "table1.json: is an input of this command" in _error_line(capsys, "vqajax therapy")
  assert digests(out) == before_out and os.listdir(out) == ["table1.json"]
  assert cli.main(["therapy", "analyze", val, "--out", str(files_dir / "analysis")]) == 0
  assert os.listdir(files_dir / "analysis")
  assert {k: v for k, v in digests(files_dir).items() if not k.startswith("analysis")} == before


def _vqa_run(workdir, data_dir):
  """A VQA workdir as training leaves it (run.json naming its data, results/step_4 with the
  official accuracy files)."""
  from vqajax.core import config as config_lib
  from vqajax.core import run_record
  config = config_lib.override(config_lib.load_config(CONFIG), {"data.dir": str(data_dir)})
  run_record.write_run_file(str(workdir), config, {"val_questions": 0})
  results = workdir / "results" / "step_4"
  os.makedirs(results)
  with open(os.path.join(data_dir, "v2_mscoco_val2014_annotations.json")) as f:
    types = sorted({a["question_type"] for a in json.load(f)["annotations"]})
  accuracy = {"overall": 50.0, "perAnswerType": {"yes/no": 60.0, "number": 40.0, "other": 45.0},
              "perQuestionType": dict.fromkeys(types, 50.0)}
  (results / "v2_OpenEnded_mscoco_val2014_run_accuracy.json").write_text(json.dumps(accuracy))
  return workdir


def _therapy_run(workdir, data_dir):
  """A grounding_class workdir as training leaves it (run.json naming its data, metrics.json)."""
  from experiments.therapy import grounding_class
  from vqajax.core import config as config_lib
  from vqajax.core import run_record
  config = config_lib.override(grounding_class.get_config("runlocal"), {"data.dir": str(data_dir)})
  run_record.write_run_file(str(workdir), config, {"val_questions": 0})
  os.makedirs(workdir / "results" / "step_5")
  metrics = {"step": 5, "recall/single": 75.0, "always_single/recall/single": 100.0}
  (workdir / "results" / "step_5" / "metrics.json").write_text(json.dumps(metrics))
  return workdir


@pytest.mark.parametrize("verb", ["report table2", "report question-types", "therapy table4"])
def test_readers_of_runs_write_neither_into_a_run_nor_into_its_data(verb, tiny_data, tiny_therapy, tmp_path, capsys):
  """Issue 22.2: a report reads its runs' workdirs and data folders as folders: an output
  inside one is refused (nothing written), a path elsewhere is written."""
  data = tmp_path / "data"
  shutil.copytree(tiny_therapy if verb.startswith("therapy") else tiny_data, data)
  run = (_therapy_run if verb.startswith("therapy") else _vqa_run)(tmp_path / "run", data)
  before = {"data": digests(data), "run": digests(run)}
  for out in (data, data / "rep", run / "results" / "step_4", run / "tables"):
    assert cli.main([*verb.split(), str(run), "--out", str(out)]) == 2
    assert "an input of this command" in _error_line(capsys, f"vqajax {verb.split()[0]}")
  assert {"data": digests(data), "run": digests(run)} == before
  assert cli.main([*verb.split(), str(run), "--out", str(tmp_path / "rep")]) == 0
  assert os.listdir(tmp_path / "rep")


def test_report_humans_writes_beside_its_annotations_never_over_them(tiny_data, tmp_path, capsys):
  """An annotations file is an input, not its folder: a new folder beside it is written
  (it had been refused as lying in an input); the file itself is refused, unchanged."""
  annotations = tmp_path / "annotations.json"
  shutil.copy(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json"), annotations)
  before = annotations.read_bytes()
  assert cli.main(["report", "humans", "--annotations", str(annotations), "--out", str(annotations)]) == 2
  assert "is an input of this command" in _error_line(capsys, "vqajax report")
  assert cli.main(["report", "humans", "--annotations", str(annotations), "--out", str(tmp_path / "humans")]) == 0
  assert os.listdir(tmp_path / "humans") and annotations.read_bytes() == before


@pytest.mark.parametrize("verb", ["features", "tfds", "therapy construct"])
def test_the_output_rule_for_the_preparing_verbs(verb, tiny_data, tmp_path, capsys):
  """Issue 22.2: an output inside a folder the command reads (images, the official files) or
  over an input file is refused before any work, nothing written."""
  data = tmp_path / "data"
  shutil.copytree(tiny_data, data)
  annotations = str(data / "v2_mscoco_val2014_annotations.json")
  argv = {"features": ["features", "--images", str(data / "features"), "--model", "vgg16", "--weights",
                       str(tmp_path / "none.npz"), "--layer", "fc7", "--out", str(data / "features" / "new.h5")],
          "tfds": ["tfds", "build", "vqa/v2", "--manual_dir", str(data), "--data_dir", str(data / "tfds")],
          "therapy construct": ["therapy", "construct", "--groundings", annotations, "--out", annotations]}[verb]
  before = digests(data)
  assert cli.main(argv) == 2
  assert "an input of this command" in _error_line(capsys, f"vqajax {verb}")
  assert digests(data) == before


@pytest.mark.parametrize("config, override, expected", [
    ("transformer_q_norm_i", "model.transformer.heads=3", "heads: expected a divisor of config.model.transformer.width (32)"),
    ("transformer_q_norm_i", "model.transformer.width=2147483647", "width: expected a positive integer <= 8192"),
    ("transformer_q_norm_i", "model.transformer.width=1000000", "width: expected a positive integer <= 8192"),
    ("transformer_q_norm_i", "model.transformer.positions=1", "positions: expected at least config.data.max_question_len"),
    ("transformer_q_norm_i", "model.transformer.layers=100000", "layers: expected a positive integer <= 64"),
    ("bow_q", "model.question=transformer", "expected a config.model.transformer group"),
])
def test_the_transformer_rules_hold_for_print_config_too(config, override, expected, tiny_data, tmp_path, capsys):
  assert cli.main(["train", f"--config={ROOT}/experiments/vqa/{config}.py:runlocal", f"--workdir={tmp_path / 'w'}",
                   f"--config.data.dir={tiny_data}", f"--config.{override}", "--print-config"]) == 2
  assert expected in _error_line(capsys, "vqajax train") and not os.path.exists(tmp_path / "w")
