"""The benchmarks still run (small): each checks its own numbers against its reference
(identical scores, equal IoU-PQ, the same outputs as torch) and prints its ratios with the
targets. The device benchmarks run once, through `bench/device_check.sh --tiny` (the GPU
host's check at its small size); all run on one CPU device, as on a real CPU host (the
suite's 8 fake devices multiply what compiling costs)."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the benchmarks, each in a subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the test extra)")


@pytest.fixture(scope="module")
def device_check(one_device_env, tmp_path_factory):
  """{script: its section of the report} of `bench/device_check.sh --tiny`."""
  report = tmp_path_factory.mktemp("device_check") / "report.txt"
  done = subprocess.run(["bash", "bench/device_check.sh", "--tiny", "--out", str(report)], cwd=ROOT,
                        env=one_device_env, capture_output=True, text=True, timeout=4 * 1500)
  assert report.exists(), done.stderr[-3000:]  # its status counts the failed scripts: each test checks its own
  parts = re.split(r"^=== (\S+) .*===$", report.read_text(), flags=re.M)
  return dict(zip(parts[1::2], parts[2::2]))


def _section(device_check, script):
  out = device_check[script]
  assert re.search(r"^--- exit 0 after \d+ s$", out, re.M), out[-5000:]
  return out


def _run(env, script, *args):
  done = subprocess.run([sys.executable, os.path.join("bench", script), *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
  return done.stdout


def test_device_check_full_run_fits_in_eight_minutes():
  # each section runs under `timeout SECONDS`: their sum bounds the accelerator host's run
  text = open(os.path.join(ROOT, "bench", "device_check.sh")).read()
  full = text[text.index("\nelse  #"):text.index("\nfi\n")]
  seconds = [int(s) for s in re.findall(r"^  [A-Z]+=\((\d+) ", full, re.M)]
  sections = re.findall(r"^(?:\[.*\] \|\| )?section ", text, re.M)
  assert len(seconds) == len(sections) == 7
  assert sum(seconds) <= 8 * 60 - 15  # the report's first lines (jax's import) in the rest


def test_bench_score_agrees_with_the_official_loop(one_device_env, tmp_path):
  path = tmp_path / "records" / "bench_score.json"
  out = _run(one_device_env, "bench_score.py", "--questions", "3000", "--rounds", "1", "--json", str(path))
  assert "identical: overall" in out
  assert out.count("(target >= 10x)") == 1 and out.count("vs the reference with the GC on") == 1
  assert "median vs median (target >= 1000x)" in out
  # the record the performance page renders: the printed ratios, with the run's date, machine and command
  record = json.loads(path.read_text())
  assert record["bench"] == "bench_score" and record["command"].endswith(f"--json {path}")
  assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["date"])
  assert record["machine"]["cores"] == os.cpu_count() and record["machine"]["platform"] == "cpu"
  speedups = [float(x) for x in re.findall(r"end-to-end speedup +([\d.]+)x", out)]
  ratios = [r for r in record["rows"] if r["target"] == ">= 10x"]
  assert [round(r["value"], 1) for r in ratios] == speedups and len(speedups) == 1
  assert len(ratios[0]["rounds"]) == 1 and ratios[0]["rounds"][0] == ratios[0]["value"]  # each round's ratio
  assert isinstance(record["quiet"], bool) and set(record["load"]) == {"before", "after", "busy_before", "others",
                                                                        "limit"}
  assert out.splitlines()[0].startswith(("quiet so far: ", "NOT QUIET: ")) and record["matmul_peak_gflops"] > 0


def test_bench_iou_agrees_with_the_numpy_loop(device_check):
  out = _section(device_check, "bench_iou.py")
  assert out.count("(equal)") == 2 and "each side computes iou.group_sums" in out
  assert out.count("device vs numpy vectorised") == out.count("device vs numpy loop") == 2
  assert "(target >= 3x)" in out and "(target >= 1.5x)" in out and out.count("(reported)") == 2  # a CPU's targets
  assert "peak device memory: not reported on cpu" in out
  assert re.match(r"(quiet so far|NOT QUIET): the 1-minute load average is [\d.]+ and [\d.]+ of the", out.lstrip())
  assert re.search(r"^(quiet|NOT QUIET): other processes used [\d.]+ of \d+ cores", out, re.M)


@needs_torch
def test_bench_train_runs_against_torch(device_check):
  out = _section(device_check, "bench_train.py")
  for target in ("(target >= 75%)", "(target >= 2.0x)", "(target >= 1.5x)"):
    assert target in out
  assert "question LSTM fwd + bwd" in out
  assert "loss vqajax" in out and "(close)" in out and "intra_op_parallelism_threads=" in out
  assert "vs torch padded, compiled" in out and "torch padded, compiled " in out
  assert re.search(r"^lstm_impl scan vs chunked +[\d.]+x", out, re.M) and "vqajax f32, scan" in out
  assert "peak device memory       not reported on cpu" in out


def test_bench_pipeline_measures_both_feature_modes_and_peak_rss(device_check):
  out = _section(device_check, "bench_pipeline.py")
  host = re.findall(r"^(device-resident fc7|streamed grid \d+x\d+x512) +host +(\S+) examples/s with (\d+) "
                    r"readers?", out, re.M)
  readers = sorted({1, 2, os.cpu_count()})
  assert [(name.split()[0], int(k)) for name, _, k in host] == [
      (mode, k) for mode in ("device-resident", "streamed", "streamed") for k in readers]
  consumed = re.findall(r"consumes +(\S+) examples/s here", out)
  assert len(consumed) == 3
  ceilings = re.findall(r"ceiling: (one copy|the store's read) +(\S+) examples/s \((\S+) GB/s", out)
  assert [what for what, _, _ in ceilings] == ["one copy", "the store's read"] * 2  # 7x7, then 14x14
  rss = re.findall(r"([\d.]+) GiB", out.split("peak RSS while training")[1])
  figures = [float(v) for _, v, _ in host] + [float(v) for v in consumed] + [float(v) for v in rss]
  figures += [float(v) for _, rate, gbps in ceilings for v in (rate, gbps)]
  assert all(math.isfinite(v) and v > 0 for v in figures), figures
  assert out.count("(target >= 200k)") == len(readers) and out.count("(target >= 20k)") == 2 * len(readers)
  assert "(target >= 10x)" in out and "target <= 2 GiB" in out


@needs_torch
def test_bench_extract_runs_against_torch(device_check):
  out = _section(device_check, "bench_extract.py")
  assert "fc7 max abs difference" in out and "(close)" in out
  figures = re.findall(r"^(vqajax|torch) +(\S+) images/s", out, re.M)
  assert [name for name, _ in figures] == ["vqajax", "torch"]
  numbers = [float(v) for _, v in figures] + [float(v) for v in re.findall(
      r"^(?:vs torch|useful FLOP/s|whole extractor) +([\d.]+)", out, re.M)]
  numbers += [float(v) for v in re.search(r"first ETA ([\d.]+) s vs ([\d.]+) s taken", out).groups()]
  assert len(numbers) == 7 and all(math.isfinite(v) and v > 0 for v in numbers), numbers
  for target in ("(target >= 1.0x)", "(target >= 50%)", "(target 0.75-1.25x)"):
    assert target in out


def test_bench_fsdp_measures_each_fsdp(device_check):
  out = _section(device_check, "bench_fsdp.py")
  figures = re.findall(r"^fsdp (\d): state ([\d.]+) MiB/device; XLA: arguments ([\d.]+) MiB.*all-gather (yes|no)"
                       r".*; ([\d.]+) steps/s, loss ([\d.]+)", out, re.M)
  assert [int(f[0]) for f in figures] == [1, 2], out
  state = [float(f[1]) for f in figures]
  assert state[0] > state[1] and [f[3] for f in figures] == ["no", "yes"]
  assert all(abs(float(f[2]) - float(f[1])) < 1 for f in figures)  # XLA's arguments: the state and a small batch
  assert len({f[5] for f in figures}) == 1 and all(float(f[4]) > 0 for f in figures)  # one loss, whatever the mesh


def test_device_check_report_has_every_section(device_check):
  assert list(device_check) == ["bench_train.py", "bench_pipeline.py", "bench_iou.py", "bench_extract.py",
                                 "bench_fsdp.py"]


def test_bench_trained_measures_asking_a_bundle(one_device_env):
  out = _run(one_device_env, "bench_trained.py", "--scale", "0.001", "--rounds", "1", "--config-arg", "runlocal")
  asks = re.findall(r"^ask one question (from the bundle, compiling|from the bundle|from the workdir) +([\d.]+) s +"
                    r"([\d.]+) GiB peak RSS", out, re.M)
  assert [a[0] for a in asks] == ["from the bundle, compiling", "from the bundle", "from the workdir"]
  many = re.search(r"^ask 1,000 questions from a file, bundle: ([\d.]+) s \(target <= 10 s\)$", out, re.M)
  demo = re.search(r"^demo answer, store image ([\d.]+) ms, kept upload ([\d.]+) ms", out, re.M)
  figures = [float(v) for a in asks for v in a[1:]] + [float(many[1]), float(demo[1]), float(demo[2])]
  assert all(math.isfinite(v) and v > 0 for v in figures), out


def test_bench_scale_prints_where_the_time_to_the_first_step_goes(one_device_env, tmp_path):
  out = _run(one_device_env, "bench_scale.py", "--small", "--cache", str(tmp_path))
  header = re.search(r"^\| share \| train q \| val q \| (.*) \|$", out, re.M)[1].split(" | ")
  assert header[:2] == ["first step s", "CPU s"] and "compile + first step" in header and "peak GiB" in header
  row = re.search(r"^\| 0.002 \| 888 \| 429 \| (.*) \|$", out, re.M)  # 0.002 x 443,757 / 214,354 questions
  figures = dict(zip(header, map(float, row[1].split(" | "))))
  assert all(math.isfinite(v) and v >= 0 for v in figures.values()), out
  assert figures["first step s"] > 0 and figures["peak GiB"] > 0
  assert re.search(r"^\| target \| \| \| <= 30 \|", out, re.M)


@needs_torch
def test_bench_matmul_times_both_kernels_at_the_models_shapes(one_device_env):
  out = _run(one_device_env, "bench_matmul.py", "--rounds", "1", "--reps", "1")
  lines = re.findall(r"^(.+?) +\[(\d+), (\d+)\] x \[(\d+), (\d+)\]: XLA +(\d+), torch +(\d+) GFLOP/s; "
                     r"XLA vs torch ([\d.]+)x$", out, re.M)
  assert [line[0] for line in lines] == ["peak, 2048^3", "LSTM gates, 500 rows", "LSTM gates, 128 rows",
                                         "LSTM gates, 32 rows", "ViLT-B attention in, q k v", "ViLT-B MLP up",
                                         "ViLT-B MLP down"]
  # the paper's LSTM: 300-d word vectors and 512 units (4 gates); ViLT-B: 4 x 185 tokens, 768 wide
  assert [tuple(map(int, line[1:5])) for line in lines[1:]] == [
      (500, 812, 812, 2048), (128, 812, 812, 2048), (32, 812, 812, 2048), (740, 768, 768, 2304),
      (740, 768, 768, 3072), (740, 3072, 3072, 768)]
  for *_, ours, theirs, ratio in lines:  # the ratio is of the rates printed, each rounded to 1 GFLOP/s (and it to 0.01)
    ours, theirs = int(ours), int(theirs)
    assert (ours - 0.5) / (theirs + 0.5) - 0.005 <= float(ratio) <= (ours + 0.5) / max(theirs - 0.5, 1e-9) + 0.005, out


def test_thunk_shares_put_a_matmul_and_an_elementwise_step_apart(one_device_env):
  """bench/contest.thunk_shares (the profile bench_vilt prints) on two programs whose kind is known:
  a 1024^3 matmul, and exp over 16M floats."""
  code = """
import json, os, sys
sys.path.insert(0, "bench")
os.environ["XLA_FLAGS"] += " --xla_cpu_enable_xprof_traceme=true"
import jax, jax.numpy as jnp
import contest
a, x = jnp.ones((1024, 1024)), jnp.ones((1 << 24,))
mm, ex = jax.jit(lambda a: a @ a), jax.jit(jnp.exp)
mm(a).block_until_ready(), ex(x).block_until_ready()
print(json.dumps([contest.thunk_shares(lambda: mm(a).block_until_ready()),
                  contest.thunk_shares(lambda: ex(x).block_until_ready())]))
"""
  done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=one_device_env, capture_output=True, text=True,
                        timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  matmul, elementwise = json.loads(done.stdout.splitlines()[-1])
  kinds = ["matmuls", "moving data", "elementwise and reductions"]
  assert list(matmul) == list(elementwise) == kinds
  assert sum(matmul.values()) == pytest.approx(1) and sum(elementwise.values()) == pytest.approx(1)
  assert matmul["matmuls"] > 0.9 and elementwise["matmuls"] == 0 and elementwise["elementwise and reductions"] > 0.9
