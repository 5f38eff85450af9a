"""The benchmarks still run (small): each checks its own numbers against its reference
(identical scores, equal IoU-PQ) and prints its ratios with the targets."""

import importlib.util
import os
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
