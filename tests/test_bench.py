"""The benchmarks still run (small): each checks its own numbers against its reference
(identical scores, equal IoU-PQ) and prints its ratios with the targets."""

import importlib.util
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args):
  done = subprocess.run([sys.executable, os.path.join("bench", script), *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
  return done.stdout


def test_bench_score_agrees_with_the_official_loop():
  out = _run("bench_score.py", "--questions", "3000", "--rounds", "1")
  assert "identical: overall" in out
  assert out.count("(target >= 10x)") == 3 and out.count("vs the reference with the GC on") == 3
  assert "median vs median (target >= 1000x)" in out


def test_bench_iou_agrees_with_the_numpy_loop():
  out = _run("bench_iou.py", "--rounds", "1", "--scale", "0.05")
  assert out.count("(equal)") == 2 and "each side computes iou.group_sums" in out
  assert out.count("device vs numpy vectorised") == out.count("device vs numpy loop") == 2
  assert out.count("(target >= 20x)") == 4


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the bench extra (torch)")
def test_bench_train_runs_against_torch():
  out = _run("bench_train.py", "--batch", "32", "--rounds", "1", "--steps", "1", "--vocab", "200",
             "--answers", "20")
  for target in ("(target >= 60%)", "(target >= 2.0x)", "(target >= 1.2x)"):
    assert target in out
  assert "question LSTM fwd + bwd" in out
  assert "loss vqajax" in out and "(close)" in out and "intra_op_parallelism_threads=" in out
  assert "vs torch padded, compiled" in out and "torch padded, compiled " in out


def test_bench_pipeline_measures_both_feature_modes_and_peak_rss():
  out = _run("bench_pipeline.py", "--rows", "3000", "--grid-rows", "300", "--min-batches", "4", "--batch", "256", "--store-gb", "0.03",
             "--train-steps", "1", "--grid-steps", "1", "--config-arg", "runlocal")
  host = re.findall(r"^(device-resident fc7|streamed grid \d+x\d+x512) +host +(\S+) examples/s with (\d+) "
                    r"readers?", out, re.M)
  readers = sorted({1, 2, os.cpu_count()})
  assert [(name.split()[0], int(k)) for name, _, k in host] == [
      (mode, k) for mode in ("device-resident", "streamed", "streamed") for k in readers]
  consumed = re.findall(r"consumes +(\S+) examples/s here", out)
  assert len(consumed) == 3
  rss = re.findall(r"([\d.]+) GiB", out.split("peak RSS while training")[1])
  figures = [float(v) for _, v, _ in host] + [float(v) for v in consumed] + [float(v) for v in rss]
  assert all(math.isfinite(v) and v > 0 for v in figures), figures
  assert out.count("(target >= 200k)") == len(readers) and out.count("(target >= 20k)") == 2 * len(readers)
  assert "(target >= 10x)" in out and "target <= 2 GiB" in out


def test_bench_trained_measures_asking_a_bundle():
  out = _run("bench_trained.py", "--scale", "0.001", "--rounds", "1", "--config-arg", "runlocal")
  asks = re.findall(r"^ask one question (from the bundle|from the workdir|rebuilding from the data \(before\)) +"
                    r"([\d.]+) s +([\d.]+) GiB peak RSS +([\d.]+)x faster", out, re.M)
  assert [a[0] for a in asks] == ["from the bundle", "from the workdir", "rebuilding from the data (before)"]
  many = re.search(r"^ask 1,000 questions from a file, bundle: ([\d.]+) s \(target <= 10 s\)$", out, re.M)
  demo = re.search(r"^demo answer, store image ([\d.]+) ms, kept upload ([\d.]+) ms", out, re.M)
  figures = [float(v) for a in asks for v in a[1:]] + [float(many[1]), float(demo[1]), float(demo[2])]
  assert all(math.isfinite(v) and v > 0 for v in figures), out
