"""Training at VQA v2's real size: the time from the command to the first step, and where it goes.

  python bench/bench_scale.py [--cache DIR] [--fractions 0.125,0.25,0.5,1] [--config-arg cpu] [--small]

For each fraction of VQA v2's counts (`vqa_v2_files.py`: 443,757 / 214,354 questions,
82,783 / 40,504 images, a ~15k-word vocabulary, a float16 fc7 store), generates the
official-format files once into `--cache` (kept between runs; generating is not timed),
then runs one whole `vqajax train` process (deeper LSTM Q + norm I, `--config-arg`, a
few steps, the full val evaluation with its results files at the last one) and reports,
each against its target:

  first step   seconds from the command to the end of the first training step (target
               <= 30 s, compilation included; "CPU s": the process's CPU time by then, all
               threads, less inflated by the machine's load), split into the phases the
               train command logs (`vqajax/core/phases.py`: reading, joining, encoding, vocabulary, device
               transfer, model init, first batch, compile + first step; "other" is the rest:
               imports, config, the workdir)
  peak RSS     the train process's peak (target <= 3 GiB): `wait4`'s ru_maxrss of a child
               started from this small process (Linux carries ru_maxrss over fork + exec,
               so the data are made in children of their own: the figure is the train's)
  eval / train the full val evaluation's examples/s (its compile included, the results files
               not) over the training step's examples/s after compiling (target >= 0.5): the
               median of the steps' own rates (every step logs one), which a stall of a step
               or two (a new length bucket compiling) does not move

`--small` is a tiny share with the toy model ("runlocal"), in seconds (tests/test_bench.py).
The cost should grow linearly with the counts: compare the rows.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import record  # noqa: E402
import vqa_v2_files  # noqa: E402

TARGETS = {"first step s": 30.0, "peak GiB": 3.0, "eval/train": 0.5}
PHASES = ("reading", "joining", "encoding", "vocabulary", "device transfer", "model init", "first batch",
          "compile + first step")


def data_dir(cache: str, scale: float) -> str:
  """The generated files of `scale` under `cache`, made once (in a child, untimed)."""
  path = os.path.join(cache, f"vqa_v2-x{scale:g}")
  if not os.path.isdir(path):
    os.makedirs(cache, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=".partial-", dir=cache)
    os.rmdir(partial)  # the generator makes it
    start = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(HERE, "vqa_v2_files.py"), partial, f"--scale={scale}"], check=True)
    os.rename(partial, path)
    print(f"generated {path} in {time.perf_counter() - start:.0f} s (not timed below)", flush=True)
  return path


def train(data: str, workdir: str, config_arg: str, steps: int) -> dict:
  """One `vqajax train` process on `data`: its logged phases, rates and peak RSS."""
  argv = [sys.executable, "-m", "vqajax", "train", f"--config=experiments/vqa/deeper_lstm_norm_i.py:{config_arg}",
          f"--workdir={workdir}", "--verbosity=info", "--compilation_cache_dir=", "--config.data.synthetic=False", f"--config.data.dir={data}",
          "--config.data.val_mc_questions=", f"--config.num_train_steps={steps}",
          "--config.log_every_steps=1", f"--config.eval_every_steps={steps}"]
  launched = time.time()
  process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  log = process.stderr.read()
  _, status, usage = os.wait4(process.pid, 0)
  if os.waitstatus_to_exitcode(status) != 0:
    raise RuntimeError(f"vqajax train failed:\n{log[-3000:]}")
  first = re.search(r"first step done at ([\d.]+) \(epoch s\), ([\d.]+) s of CPU .*; startup: (.*)", log)
  phases = {name: float(s) for name, s in re.findall(r"([a-z][a-z +]*) ([\d.]+) s", first.group(3))}
  out = {"first step s": float(first.group(1)) - launched, "CPU s": float(first.group(2)),
         "peak GiB": usage.ru_maxrss / 2**20, **phases}
  out["other"] = out["first step s"] - sum(phases.values())
  rates = re.findall(r"step (\d+)/\d+: loss [-\d.na]+, ([\d.]+) steps/s", log)
  out["train steps/s"] = statistics.median(float(rate) for step, rate in rates if int(step) > 1)
  out["eval s"] = float(re.search(r"val evaluation in ([\d.]+) s", log).group(1)) - float(
      re.search(r"val results files in ([\d.]+) s", log).group(1))
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vqajax-bench-scale"),
                      help="where the generated files are kept between runs (default: %(default)s)")
  parser.add_argument("--fractions", default="0.125,0.25,0.5,1", help="shares of VQA v2's counts")
  parser.add_argument("--config-arg", default="cpu", help="deeper_lstm_norm_i's argument ('': the paper's sizes)")
  parser.add_argument("--steps", type=record.count, default=21, help="training steps per run (default: %(default)s)")
  parser.add_argument("--small", action="store_true", help="a tiny share and the toy model: seconds")
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)
  if args.small:
    args.fractions, args.config_arg, args.steps = "0.002", "runlocal", 3
  batch = {"": 500, "cpu": 128, "runlocal": 32}[args.config_arg]
  print(f"deeper_lstm_norm_i:{args.config_arg}, batch {batch}, {args.steps} steps", flush=True)
  rows = []
  for fraction in map(float, args.fractions.split(",")):
    data = data_dir(args.cache, fraction)
    workdir = tempfile.mkdtemp(prefix="bench_scale-")
    try:
      row = train(data, workdir, args.config_arg, args.steps)
    finally:
      shutil.rmtree(workdir, ignore_errors=True)
    counts = {split: max(10, round(c["questions"] * fraction)) for split, c in (("train", vqa_v2_files.TRAIN),
                                                                                  ("val", vqa_v2_files.VAL))}
    row.update(fraction=fraction, **counts)
    row["eval/train"] = (counts["val"] / row["eval s"]) / (row["train steps/s"] * batch)
    rows.append(row)
    print(f"{fraction:g} x: first step {row['first step s']:.1f} s, peak {row['peak GiB']:.2f} GiB", flush=True)
  columns = ["first step s", "CPU s", *PHASES, "other", "peak GiB", "train ex/s", "eval ex/s", "eval/train"]
  header = ["share", "train q", "val q", *columns]
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for row in rows:
    row["train ex/s"], row["eval ex/s"] = row["train steps/s"] * batch, row["val"] / row["eval s"]
    print(f"| {row['fraction']:g} | {row['train']:,} | {row['val']:,} | "
          + " | ".join(f"{row.get(c, 0.0):.{0 if c.endswith('ex/s') else 2}f}" for c in columns) + " |")
  record.write(args.json, "bench_scale", [
    row for r in rows for at in [f"`vqajax train` at {r['fraction']:g} x VQA v2 ({r['train']:,} / {r['val']:,} questions)"]
    for row in (
      record.row(f"{at}: seconds to the end of the first step", r["first step s"], "s",
                 f"<= {TARGETS['first step s']:g} s"),
      record.row(f"{at}: peak RSS", r["peak GiB"], "GiB", f"<= {TARGETS['peak GiB']:g} GiB"),
      record.row(f"{at}: evaluation vs training examples/s", r["eval/train"], "x", f">= {TARGETS['eval/train']:g}x"))])
  print("| target | | | " + " | ".join(
      ("<= " if c != "eval/train" else ">= ") + f"{TARGETS[c]:g}" if c in TARGETS else "" for c in columns) + " |")


if __name__ == "__main__":
  main()
