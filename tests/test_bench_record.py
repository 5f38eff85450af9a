"""`bench/record.py`: a benchmark says on its first line whether the machine is quiet, its record
holds the load and `quiet`, and bench/records/ takes only a quiet machine's records. The load
average and `/proc/stat`'s busy seconds are stood in for (a test cannot choose the machine's load)."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def record(monkeypatch, tmp_path):
  """bench/record.py with the load average, /proc/stat and this process's CPU time stood in for,
  and its records folder a temp one; `record.machine_state(load, others)` sets the load average and
  the cores other processes keep busy, as seconds pass."""
  spec = importlib.util.spec_from_file_location("bench_record", os.path.join(ROOT, "bench", "record.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  clock = {"t": 0.0, "busy": 0.0, "load": 0.0, "others": 0.0}

  def sleep(seconds):
    clock["t"] += seconds
    clock["busy"] += clock["others"] * seconds

  monkeypatch.setattr(module.time, "sleep", sleep)
  monkeypatch.setattr(module.time, "monotonic", lambda: clock["t"])
  monkeypatch.setattr(module.os, "getloadavg", lambda: (clock["load"], 0.0, 0.0))
  monkeypatch.setattr(module.os, "cpu_count", lambda: 4)  # a quiet machine: load at most 1
  monkeypatch.setattr(module, "_busy_seconds", lambda: clock["busy"])
  monkeypatch.setattr(module, "_own_seconds", lambda: 0.0)
  monkeypatch.setattr(module, "RECORDS", str(tmp_path / "records"))
  module.machine_state = lambda load, others: clock.update(load=load, others=others)
  module.run = sleep  # the benchmark measuring for a while
  return module


def test_a_quiet_run_is_recorded_with_its_load_and_rounds(record, tmp_path, capsys):
  record.machine_state(load=0.4, others=0.1)
  path = tmp_path / "records" / "bench_x.json"
  record.begin(str(path))
  record.run(60)
  written = record.write(str(path), "bench_x", [record.row("a vs b", 2.0, "x", ">= 1.5x", [1.9, 2.0, 2.2])], peak=4e11)
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("quiet so far: the 1-minute load average is 0.40 and 0.10 of the 4 cores were busy")
  assert lines[-1].startswith("quiet: other processes used 0.10 of 4 cores during the 60 s")
  saved = json.loads(path.read_text())
  assert saved == written and saved["quiet"] is True and saved["matmul_peak_gflops"] == 400.0
  assert saved["load"] == {"before": 0.4, "after": 0.4, "busy_before": 0.1, "others": 0.1, "limit": 1.0}
  assert saved["rows"] == [{"what": "a vs b", "value": 2.0, "unit": "x", "target": ">= 1.5x", "rounds": [1.9, 2.0, 2.2]}]
  assert not os.path.exists(f"{path}.partial")


def test_a_loaded_machine_says_so_first_and_its_record_is_not_quiet(record, tmp_path, capsys):
  record.machine_state(load=3.0, others=2.5)
  path = tmp_path / "elsewhere.json"  # outside bench/records/: allowed, marked
  record.begin(str(path))
  record.run(10)
  record.write(str(path), "bench_x", [], peak=1e9)
  assert capsys.readouterr().out.splitlines()[0].startswith("NOT QUIET: the 1-minute load average is 3.00 and 2.50")
  saved = json.loads(path.read_text())
  assert saved["quiet"] is False and saved["load"]["others"] == 2.5


def test_the_records_folder_refuses_a_busy_machine_before_measuring(record, tmp_path, capsys):
  record.machine_state(load=3.0, others=2.0)
  with pytest.raises(SystemExit) as exit_:
    record.begin(str(tmp_path / "records" / "bench_x.json"))
  err = capsys.readouterr()
  assert exit_.value.code == 2 and err.out == "" and len(err.err.splitlines()) == 1
  assert "bench/records/ takes only a quiet machine's figures" in err.err


def test_a_lagging_load_average_alone_does_not_refuse(record, tmp_path, capsys):
  """The previous script's threads still in the 1-minute average, the cores idle now: quiet."""
  record.machine_state(load=1.8, others=0.0)
  path = tmp_path / "records" / "bench_x.json"
  record.begin(str(path))
  record.run(30)
  assert record.write(str(path), "bench_x", [], peak=1e9)["quiet"] is True


def test_the_records_folder_refuses_a_machine_that_got_busy_and_keeps_the_old_record(record, tmp_path, capsys):
  path = tmp_path / "records" / "bench_x.json"
  path.parent.mkdir()
  path.write_text("the old record\n")
  record.machine_state(load=0.2, others=0.0)
  record.begin(str(path))
  record.machine_state(load=0.2, others=1.5)
  record.run(20)
  with pytest.raises(SystemExit) as exit_:
    record.write(str(path), "bench_x", [], peak=1e9)
  assert exit_.value.code == 2 and "other processes used 1.50 cores during the run" in capsys.readouterr().err
  assert path.read_text() == "the old record\n"


def test_the_performance_page_shows_each_records_load_rounds_and_staleness(record, tmp_path, monkeypatch):
  spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
  hooks = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(hooks)
  folder = tmp_path / "shown"  # the page's records (not the script's refusing bench/records/)
  folder.mkdir()
  for name, load, others in (("bench_a", 0.3, 0.2), ("bench_b", 3.0, 2.5)):
    record.machine_state(load=load, others=others)
    record.begin("")
    record.run(10)
    record.write(str(folder / f"{name}.json"), name, [record.row("a vs b", 2.0, "x", ">= 3x", [1.5, 2.0, 2.25])],
                 peak=1e9)
  monkeypatch.setattr(hooks, "RECORDS", str(folder))
  quiet, loaded = hooks.benchmarks().split("### bench_b")
  assert "1-minute load average 0.3 before, 0.2 cores busy just before, other processes using 0.2 during it" in quiet
  assert "| a vs b | 2x | >= 3x **missed** | 1.5, 2, 2.25 |" in quiet and "| what | measured | target | rounds |" in quiet
  assert "Not quiet" not in quiet
  assert "1-minute load average 3.0 before, 2.5 cores busy just before" in loaded
  assert "**Not quiet: stale until re-recorded.**" in loaded and "| what | measured under load (stale) |" in loaded


def test_rounds_steps_and_reps_are_positive_counts(record):
  assert record.count("3") == 3
  for text in ("0", "-2"):
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a positive integer, got {int(text)}"):
      record.count(text)


def test_scales_and_sizes_are_positive_finite_numbers(record):
  assert record.amount("0.05") == 0.05 and record.amount("8") == 8.0
  for text in ("0", "-1", "inf", "nan"):
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a positive number, got {text}$"):
      record.amount(text)


@pytest.mark.parametrize("argv, flag, expected", [
    (["bench_score.py", "--rounds", "0"], "--rounds", "a positive integer, got 0"),
    (["bench_pipeline.py", "--store-gb", "-1"], "--store-gb", "a positive number, got -1"),
    (["bench_trained.py", "--scale", "inf"], "--scale", "a positive number, got inf"),
    (["vqa_v2_files.py", "out", "--scale", "0"], "--scale", "a positive number, got 0"),
])
def test_a_bench_refuses_a_count_or_size_below_one_before_it_starts(argv, flag, expected, tmp_path):
  done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", *argv[:1]), *argv[1:]], cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == 2 and not done.stdout and not os.listdir(tmp_path)
  assert done.stderr.splitlines()[-1] == f"{argv[0]}: error: argument {flag}: expected {expected}"
