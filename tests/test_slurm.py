"""`--launcher slurm` against a real one-node Slurm cluster (tests/slurm_cluster.py), started
once for this module (pytest-xdist keeps a module on one worker) and stopped at its end.

A 3-point ablation sweep runs on the cluster beside a broken point (a feature store that
does not exist: the job fails) and a point cancelled with `scancel`; `--status` during
the run, the failures reported, `--retry-failed`, and the table equal, byte for byte, to
the local launcher's for the same points. A 2-task training through `srun` (each task
calls `jax.distributed.initialize()`) equals a 1-process run with all the devices. Bad
requests are one line, exit 2, and submit nothing. A training requeued by `scontrol
requeue` (as a preemption does) saves on SIGTERM and resumes from that step. Skipped only where the cluster's
programs are missing (`.ci/run` installs them; in CI a missing one fails).
"""

import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from experiments.sweeps import vqa_ablations
from tests import devices, slurm_cluster
from tests.test_train import _losses
from vqajax import cli, launch
from vqajax.core import tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABLATIONS = os.path.join(ROOT, "experiments", "sweeps", "vqa_ablations.py")
CONFIG = os.path.join(ROOT, "experiments", "vqa", "deeper_lstm_norm_i.py")
POINTS = ("base", "no_image_norm", "k500")
# A name holding a newline, substitutions, quotes, # and \\; run by a shell, it would touch $MARKS-1 .. -3.
HOSTILE = "x\n$(touch $MARKS-1)`touch $MARKS-2`; touch $MARKS-3 # '\"\\ \t"


@pytest.fixture(scope="module")
def cluster():
  missing = slurm_cluster.missing()
  if missing or os.geteuid() != 0:
    why = f"no {', '.join(missing)}" if missing else "not root"
    if os.environ.get("CI") == "true":
      pytest.fail(f"a Slurm cluster cannot start here ({why}): .ci/run installs {slurm_cluster.PACKAGES}")
    pytest.skip(f"a Slurm cluster cannot start here ({why}; apt-get install {slurm_cluster.PACKAGES})")
  folder = tempfile.mkdtemp(prefix="vqajax-slurm-")
  running = slurm_cluster.Cluster(folder).start()
  yield running
  running.stop()
  shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def on_cluster(cluster, monkeypatch):
  """This process' Slurm clients (in-process commands) find the cluster."""
  monkeypatch.setenv("SLURM_CONF", cluster.conf)
  return cluster


def _sets(data_dir):
  return ["--set", f"data.dir={data_dir}", "--set", "num_train_steps=4", "--set", "eval_every_steps=4",
          "--set", "log_every_steps=2", "--set", "data.max_question_len=8"]


def _vqajax(argv, env, check=True):
  """`vqajax ARGV` in a subprocess; a job that stalls (XLA's CPU collectives on a loaded machine) fails
  the test after 10 minutes instead of holding the suite, and is cancelled: a stalled job keeps the
  one node, and the next tests' jobs would wait behind it."""
  try:
    done = subprocess.run([sys.executable, "-m", "vqajax", *argv], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
  except subprocess.TimeoutExpired:
    subprocess.run(["scancel", "--user", getpass.getuser()], env=env, check=False)
    raise
  assert not check or done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return done


def _sweep_file(folder):
  """The ablations' POINTS and a broken one (its feature store does not exist)."""
  points = [{"name": name, "config": f"{CONFIG}:runlocal", "overrides": vqa_ablations.ABLATIONS[name]}
            for name in POINTS]
  points.append({"name": "broken", "config": f"{CONFIG}:runlocal", "overrides": {"data.features": "missing.h5"}})
  path = os.path.join(folder, "sweep.py")
  with open(path, "w") as f:
    f.write(f"def get_sweep(arg=''):\n  return {{'base': 'base', 'points': {points!r}}}\n")
  return path


def _status(sweep_file, workdir, data_dir, capsys):
  assert cli.main(["sweep", sweep_file, "--workdir", workdir, "--status", *_sets(data_dir)]) == 0
  lines = capsys.readouterr().out.strip().splitlines()[2:]
  return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


@pytest.mark.slow
def test_sweep_on_slurm_reports_failures_retries_and_gives_the_local_table(on_cluster, tiny_data, tmp_path,
                                                                           one_device_env, capsys):
  env = {**one_device_env, "SLURM_CONF": on_cluster.conf}
  local, remote = str(tmp_path / "local"), str(tmp_path / "slurm")
  _vqajax(["sweep", ABLATIONS + ":runlocal", "--points", ",".join(POINTS), "--workdir", local, *_sets(tiny_data)],
          one_device_env)
  sweep_file = _sweep_file(str(tmp_path))
  argv = ["sweep", sweep_file, "--workdir", remote, *_sets(tiny_data), "--launcher", "slurm", "--slurm.poll", "0.3"]
  submitter = subprocess.Popen([sys.executable, "-m", "vqajax", *argv], env=env, cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  jobs_file = os.path.join(remote, "jobs.json")
  deadline = time.monotonic() + 120
  while not os.path.exists(jobs_file):
    assert time.monotonic() < deadline and submitter.poll() is None, submitter.communicate()
    time.sleep(0.1)
  with open(jobs_file) as f:
    jobs = {name: keys[-1] for name, keys in json.load(f)["points"].items()}
  assert list(jobs) == [*POINTS, "broken"] and len({key.split("_")[0] for key in jobs.values()}) == 1  # one array
  subprocess.run(["scancel", jobs["k500"]], env=env, check=True)  # queued behind the two the CPUs run
  while (status := _status(sweep_file, remote, tiny_data, capsys))["k500"][0] != "failed (cancelled)":
    assert time.monotonic() < deadline, status
    time.sleep(0.2)
  assert status["base"][:2] in (["pending", jobs["base"]], ["running", jobs["base"]])
  assert cli.main([*argv, "--slurm.detach"]) == 3  # a second submitter: the cancelled point failed
  out = capsys.readouterr().out
  for name in ("base", "no_image_norm"):  # waited for (or done by now), not submitted again
    assert f"{name}: finished, skipped" in out or any(
        f"{name}: {state} as job {jobs[name]}, not submitted again" in out for state in launch.ACTIVE)
  assert "submitted as job" not in out and f"k500: failed: job {jobs['k500']} CANCELLED" in out
  with open(jobs_file) as f:
    assert {name: keys[-1] for name, keys in json.load(f)["points"].items()} == jobs
  out, err = submitter.communicate(timeout=300)
  assert submitter.returncode == 3, out + err
  assert f"k500: failed: job {jobs['k500']} CANCELLED" in out
  assert f"broken: failed: job {jobs['broken']} FAILED (exit status 2)" in out
  assert "  | vqajax train: error: config.data.features missing.h5: feature store not found" in out  # its log
  assert err.strip().splitlines()[-1].startswith("vqajax sweep: failed: 2 of 4 points failed: point k500: job ")
  status = _status(sweep_file, remote, tiny_data, capsys)
  assert status["base"] == ["finished", jobs["base"], "4", "val/accuracy " + status["base"][3].split()[-1]]

  again = _vqajax([*argv, "--points", ",".join(POINTS), "--retry-failed"], env).stdout
  assert "base: finished, skipped" in again and "no_image_norm: finished, skipped" in again
  assert "k500: submitted as job" in again and "[1/1] k500: done" in again
  with open(jobs_file) as f:
    assert len(json.load(f)["points"]["k500"]) == 2
  for name in ("table2", "table4"):
    for kind in ("json", "csv", "md"):
      with open(os.path.join(remote, f"{name}.{kind}"), "rb") as a, open(os.path.join(local, f"{name}.{kind}"), "rb") as b:
        assert a.read() == b.read(), f"{name}.{kind}"


@pytest.mark.slow
def test_two_tasks_through_srun_train_like_one_process(on_cluster, tiny_lstm_run, tiny_data, tmp_path):
  one = tiny_lstm_run[0]  # 1 process x 8 devices: 4 steps, evaluated at 2 and 4
  two = str(tmp_path / "two")
  env = {**devices.env(1), "SLURM_CONF": on_cluster.conf}  # one device a task: tests/test_multihost.py
  done = _vqajax(["train", f"--config={CONFIG}:runlocal", f"--workdir={two}", f"--config.data.dir={tiny_data}",
                  "--config.num_train_steps=4", "--config.eval_every_steps=2", "--config.log_every_steps=1",
                  "--launcher", "slurm", "--slurm.tasks_per_node", "2", "--slurm.poll", "0.3"], env)
  key = done.stdout.split()[1].rstrip(":")
  assert done.stdout.startswith(f"job {key}: vqajax train on 2 task(s); log: {two}/launch/slurm-{key}.log")
  with open(os.path.join(two, "launch", f"slurm-{key}.log")) as f:
    log = f.read()
  assert "process 0 of 2, 1 local / 2 global devices" in log and "process 1 of 2, 1 local / 2 global devices" in log
  assert len(_losses(two)) == 4
  np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-5)
  with open(os.path.join(two, "metrics.jsonl")) as f2, open(os.path.join(one, "metrics.jsonl")) as f1:
    val = lambda f: [r for r in map(json.loads, f) if "val/accuracy" in r]
    two_val, one_val = val(f2), val(f1)
  assert [r["step"] for r in two_val] == [r["step"] for r in one_val] == [2, 4]
  for a, b in zip(two_val, one_val):
    np.testing.assert_allclose([a[k] for k in sorted(b)], [b[k] for k in sorted(b)], rtol=1e-5)


@pytest.mark.slow
def test_a_requeued_training_resumes_from_its_checkpoint(on_cluster, tiny_data, tmp_path, one_device_env):
  env = {**one_device_env, "SLURM_CONF": on_cluster.conf}
  workdir = str(tmp_path / "run")
  done = _vqajax(["train", f"--config={CONFIG}:runlocal", f"--workdir={workdir}", f"--config.data.dir={tiny_data}",
                  "--config.num_train_steps=1000000", "--config.eval_every_steps=1000000",
                  "--config.log_every_steps=20", "--config.data.max_question_len=8", "--launcher=slurm",
                  "--slurm.detach"], env)
  key = done.stdout.split()[1].rstrip(":")
  log = os.path.join(workdir, "launch", f"slurm-{key}.log")

  def read():
    if not os.path.exists(log):
      return ""
    with open(log) as f:
      return f.read()

  deadline = time.monotonic() + 240
  while read().count("step ") < 3:  # a few steps trained
    assert time.monotonic() < deadline, read()[-3000:]
    time.sleep(0.2)
  subprocess.run(["scontrol", "requeue", key], env=env, check=True)  # what a preemption with requeue does
  while "(restart 1)" not in read():
    subprocess.run(["scontrol", "update", f"JobId={key}", "StartTime=now"], env=env, capture_output=True)  # no delay
    assert time.monotonic() < deadline, read()[-3000:]
    time.sleep(0.5)
  while "resumed from checkpoint" not in read():
    assert time.monotonic() < deadline, read()[-3000:]
    time.sleep(0.2)
  subprocess.run(["scancel", key], env=env, check=True)
  while key in on_cluster.jobs():  # gone before the next test looks at the queue
    assert time.monotonic() < deadline
    time.sleep(0.2)
  text = read()
  saved = int(text.split("SIGTERM: saved checkpoint at step ")[1].split(";")[0])
  assert f"resumed from checkpoint at step {saved} (input position {saved})" in text and saved > 0
  assert text.index("(restart 0)") < text.index("SIGTERM: saved") < text.index("(restart 1)")


@pytest.mark.slow
def test_a_job_from_hostile_folders_runs_nothing_else(on_cluster, tiny_data, tmp_path, one_device_env):
  """A training submitted from a folder, into a workdir, whose names hold a newline, `$(...)`,
  backquotes, quotes and `#` runs on the cluster as given, and nothing else runs."""
  cwd = tmp_path / f"cwd{HOSTILE}"
  cwd.mkdir()
  workdir = cwd / f"run{HOSTILE}"
  done = subprocess.run([sys.executable, "-m", "vqajax", "train", f"--config={CONFIG}:runlocal", f"--workdir={workdir.name}",
                         f"--config.data.dir={tiny_data}", "--config.num_train_steps=2", "--config.eval_every_steps=2",
                         "--launcher=slurm", "--slurm.time=5:00", "--slurm.poll=0.3"],
                        env={**one_device_env, "SLURM_CONF": on_cluster.conf, "PYTHONPATH": ROOT,
                             "MARKS": str(tmp_path / "MARK")}, cwd=cwd,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  with open(workdir / "run.json") as f:
    assert json.load(f)["finished_step"] == 2
  assert list(tmp_path.glob("MARK*")) == []


@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--slurm.partition", "nope"], "--slurm.partition nope: no such partition (the cluster has: debug)"),
    (["--slurm.nodes", "5"], "the cluster can never run this request (--nodes=5 --ntasks-per-node=1): "
                             "allocation failure: Requested node configuration is not available"),
    (["--slurm.time", "forever"], "slurm.time 'forever': expected a time limit: MM, MM:SS, HH:MM:SS, D-HH, "),
    (["--slurm.mem", "999999999G"], "the cluster can never run this request (--nodes=1 --ntasks-per-node=1 "
                                    "--mem=999999999G): "),
    (["--slurm.gpus_per_node", "1"], "Invalid generic resource (gres) specification"),
], ids=["partition", "nodes", "time", "mem", "gpus"])
@pytest.mark.parametrize("verb", ["sweep", "train"])
def test_bad_requests_are_one_line_and_submit_nothing(on_cluster, tiny_data, tmp_path, capsys, flags, message, verb):
  workdir = str(tmp_path / "w")
  argv = (["sweep", f"{ABLATIONS}:runlocal", "--workdir", workdir, *_sets(tiny_data)] if verb == "sweep" else
          ["train", f"--config={CONFIG}:runlocal", f"--workdir={workdir}", f"--config.data.dir={tiny_data}"])
  queued = on_cluster.jobs()
  assert cli.main([*argv, "--launcher", "slurm", *flags]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"vqajax {verb}: error: ") and message in err and err.count("\n") == 1, err
  assert not os.path.exists(workdir) and on_cluster.jobs() == queued


@pytest.mark.slow
@pytest.mark.parametrize("point_request, message", [
    ({"nodes": 5}, "Requested node configuration is not available"),
    ({"nodez": 2}, "point k500: slurm request 'nodez': expected one of"),
    ({"nodes": "2"}, "point k500: slurm request nodes='2': expected a positive int"),
], ids=["impossible", "unknown", "not_an_int"])
def test_a_point_s_own_request_is_checked_before_anything_is_submitted(on_cluster, tiny_data, tmp_path, capsys,
                                                                        point_request, message):
  sweep_file = tmp_path / "sweep.py"
  points = [{"name": name, "config": f"{CONFIG}:runlocal"} for name in POINTS]
  points[2]["slurm"] = point_request
  sweep_file.write_text(f"def get_sweep(arg=''):\n  return {{'base': 'base', 'points': {points!r}}}\n")
  workdir, queued = str(tmp_path / "w"), on_cluster.jobs()
  assert cli.main(["sweep", str(sweep_file), "--workdir", workdir, *_sets(tiny_data), "--launcher", "slurm"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("vqajax sweep: error: ") and message in err and err.count("\n") == 1, err
  assert not os.path.exists(workdir) and on_cluster.jobs() == queued


def test_no_slurm_here_is_one_line(tiny_data, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch on it
  workdir = str(tmp_path / "w")
  assert cli.main(["sweep", f"{ABLATIONS}:runlocal", "--workdir", workdir, *_sets(tiny_data), "--launcher", "slurm"]) == 2
  err = capsys.readouterr().err
  assert err == "vqajax sweep: error: --launcher slurm: no Slurm on this machine (sbatch / squeue not found on PATH)\n"
  assert not os.path.exists(workdir)


@pytest.mark.parametrize("verb", ["sweep", "train"])
def test_slurm_requests_without_the_slurm_launcher_are_refused(verb, tiny_data, tmp_path, capsys):
  workdir = str(tmp_path / "w")
  argv = (["sweep", f"{ABLATIONS}:runlocal", "--workdir", workdir, *_sets(tiny_data)] if verb == "sweep" else
          ["train", f"--config={CONFIG}:runlocal", f"--workdir={workdir}", f"--config.data.dir={tiny_data}"])
  assert cli.main([*argv, "--slurm.nodes=2", "--slurm.detach"]) == 2
  assert capsys.readouterr().err == f"vqajax {verb}: error: --slurm.nodes, --slurm.detach: given without --launcher slurm\n"
  assert not os.path.exists(workdir)




@pytest.mark.parametrize("field", ["partition", "mem", "time", "account", "qos", "constraint"])
@pytest.mark.parametrize("value", ["1\ntouch MARK", "1\x00", "1 --wrap=x", "$(touch MARK)", "1'", "1#", "1\\"])
def test_a_request_that_is_no_slurm_value_is_one_line(field, value, tiny_data, tmp_path, capsys):
  """Every free-text request is checked against sbatch's syntax before anything happens."""
  workdir = str(tmp_path / "w")
  argv = ["train", f"--config={CONFIG}:runlocal", f"--workdir={workdir}", "--launcher", "slurm"]
  assert cli.main([*argv, f"--slurm.{field}={value}"]) == 2
  assert capsys.readouterr().err == f"vqajax train: error: slurm.{field} {value!r}: expected {launch._SYNTAX[field][1]}\n"
  with pytest.raises(launch.InputError, match=f"^slurm.{field} "):
    launch.Resources(**{field: value})  # a sweep point's own request goes through the same check
  assert not os.path.exists(workdir)


@pytest.mark.parametrize("field, value", [("time", "10"), ("time", "4:00:00"), ("time", "2-12:30"), ("time", "UNLIMITED"),
                                          ("mem", "64G"), ("mem", "500"), ("partition", "gpu,cpu-long"),
                                          ("account", "proj_1.x"), ("constraint", "[rack1|rack2]&v100*2")])
def test_slurm_s_own_syntax_passes(field, value):
  assert f"--{field}={value}" in launch.Resources(**{field: value}).sbatch_options()


def test_the_batch_script_keeps_hostile_folders_and_values_one_word(tmp_path, monkeypatch):
  """A job whose folder, working folder and argv hold newlines, `$(...)`, backquotes, quotes, `#`
  and backslashes: no line of the script (run by bash, srun stubbed) executes any of it, and
  srun receives every value as one argument, unchanged; every request is an sbatch argument."""
  cwd = tmp_path / f"cwd{HOSTILE}"
  folders = [tmp_path / f"run{HOSTILE}{i}" for i in range(2)]
  for folder in (cwd, *folders):
    (folder / "launch").mkdir(parents=True)
  monkeypatch.chdir(cwd)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "srun").write_text('#!/bin/bash\nprintf "%s\\0" "$@" >"$SRUN_ARGS"\n')
  (bin_dir / "srun").chmod(0o755)
  steps = [launch.Step(str(folder), ("train", f"--workdir={folder}", f"--config.data.dir={HOSTILE}")) for folder in folders]
  slurm = launch.Slurm(launch.Resources(nodes=1, time="10:00", mem="1G"))
  for array in (False, True):
    job = slurm.job(steps if array else steps[:1], f"vqajax-sweep-{HOSTILE}", array)
    assert job.options == [f"--job-name=vqajax-sweep-{HOSTILE}", "--nodes=1", "--ntasks-per-node=1", "--mem=1G",
                           "--time=10:00", "--requeue", "--output=/dev/null", f"--chdir={cwd}", "--export=ALL",
                           *(["--array=0-1"] if array else [])]
    assert "#SBATCH" not in job.script
    for i, folder in enumerate(folders if array else folders[:1]):
      record = tmp_path / f"srun-{array}-{i}"
      env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SRUN_ARGS": str(record), "SLURM_JOB_ID": "7",
             "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": str(i), "SLURM_JOB_NODELIST": "n",
             "MARKS": str(tmp_path / "MARK")}
      done = subprocess.run(["bash", "-c", job.script], env=env, cwd=cwd, capture_output=True, text=True)
      assert done.returncode == 0, done.stderr
      assert record.read_bytes().split(b"\0")[:-1] == [
          os.fsencode(a) for a in ["--kill-on-bad-exit=1", sys.executable, "-m", "vqajax", *steps[i].argv]]
      key = f"7_{i}" if array else "7"
      assert (folder / "launch" / f"slurm-{key}.exit").read_text() == "0\n"
  assert list(tmp_path.glob("MARK*")) == []


def test_status_of_a_sweep_never_run(tiny_data, tmp_path, capsys):
  assert cli.main(["sweep", f"{ABLATIONS}:runlocal", "--workdir", str(tmp_path), "--status", *_sets(tiny_data)]) == 0
  out = capsys.readouterr().out
  assert out == tables.markdown(["point", "state", "job", "step", "best"], [
      {"point": name, "state": "not started"} for name in (
          "base", "no_image_norm", "concat_fusion", "k500", "k2000", "vocab_min5", "vocab_min11", "confident_only",
          "soft_targets")]) + "\n"
  assert not os.listdir(tmp_path)
