"""Using a trained model at VQA v2's real size: whole `vqajax ask` processes and the demo's answers.

  python bench/bench_trained.py [--scale 1.0] [--rounds 3]

Generates official-format files at VQA v2's counts (`vqa_v2_files.py`, times `--scale`),
makes a deeper LSTM Q + norm I run on them (its initial state as the checkpoint: what
answering reads), exports it as a bundle, then measures, each against its target:

  ask of one question by store id from the bundle, whole process: wall s, peak RSS
      (target <= 5 s, <= 1.5 GiB), the first one compiling (cold) and then with its
      programs in the compilation cache (warm: the median), and the same from the workdir
  1,000 questions from a file, whole process (target <= 10 s)
  the demo's answer to a store image, and to an upload whose features it kept (both the
      `Answerer.answer` of one question in the server process; target <= 1 s each)

Medians of `--rounds`. Each child's peak RSS is `wait4`'s ru_maxrss, which Linux carries
over from the parent through fork + exec: the files and the run are made in children of
their own, so this process stays small and the figure is the child's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import record

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(argv: list[str]) -> tuple[float, float]:
  """(wall seconds, peak RSS GiB) of one whole `python -m vqajax ...` process."""
  start = time.perf_counter()
  process = subprocess.Popen([sys.executable, "-m", "vqajax", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
  _, status, usage = os.wait4(process.pid, 0)
  wall = time.perf_counter() - start
  if os.waitstatus_to_exitcode(status) != 0:
    raise RuntimeError(f"vqajax {' '.join(argv)} failed: {process.stderr.read().decode()[-2000:]}")
  return wall, usage.ru_maxrss / 2**20  # KiB -> GiB


def make_run(data: str, workdir: str, config_arg: str) -> None:
  """A deeper LSTM Q + norm I run (`config_arg`) on `data` whose checkpoint is its initial state."""
  import jax

  from experiments.vqa import deeper_lstm_norm_i
  from vqajax.core import checkpoint, run_record
  from vqajax.core import config as config_lib
  from vqajax.core.experiment import Experiment
  from vqajax.vqa import task
  config = config_lib.override(deeper_lstm_norm_i.get_config(config_arg), {
      "data.dir": data, "data.synthetic": False, "data.val_mc_questions": ""})
  exp = Experiment.build(task, config, jax.devices()[:1])
  saver = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
  saver.save(0, exp.initial_state(), {"input_step": 0, "seed": config.seed})
  saver.close()
  digest = run_record.record_encoders(workdir, config.task, exp.data.encoders.tables())
  run_record.write_run_file(workdir, config, task.sizes(exp.data), digest)


def demo_answers(bundle: str, data: str, image_id: int, rounds: int) -> tuple[float, float]:
  """Median seconds of the demo's per-Ask work on a store image and on kept upload features."""
  import numpy as np

  import vqajax
  answerer = vqajax.load(bundle, data_dir=data)
  features = answerer._run.store.read(answerer._run.store.rows([image_id]))
  timed = {"store": lambda: answerer.answer(["what is in the picture?"], image_ids=[image_id]),
           "upload": lambda: answerer.answer(["what is in the picture?"], features=np.asarray(features))}
  out = {}
  for name, fn in timed.items():
    fn()  # the server's first answer compiles
    times = []
    for _ in range(max(rounds, 5)):
      start = time.perf_counter()
      fn()
      times.append(time.perf_counter() - start)
    out[name] = statistics.median(times)
  return out["store"], out["upload"]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--scale", type=record.amount, default=1.0, help="share of VQA v2's counts (default: 1)")
  parser.add_argument("--rounds", type=record.count, default=3)
  parser.add_argument("--config-arg", default="", help="deeper_lstm_norm_i's argument ('': the paper's sizes)")
  record.add_flag(parser)
  parser.add_argument("--make-run", nargs=2, metavar=("DATA", "WORKDIR"), help=argparse.SUPPRESS)  # a child's job
  args = parser.parse_args()
  if args.make_run:
    make_run(*args.make_run, args.config_arg)
    return
  record.begin(args.json)
  tmp = tempfile.mkdtemp(prefix="bench_trained-")
  try:
    data, workdir, bundle = (os.path.join(tmp, n) for n in ("data", "run", "bundle"))
    here = os.path.dirname(os.path.abspath(__file__))
    for what, command in (("files", [os.path.join(here, "vqa_v2_files.py"), data, f"--scale={args.scale}"]),
                          ("run", [__file__, "--make-run", data, workdir, f"--config-arg={args.config_arg}"])):
      start = time.perf_counter()
      done = subprocess.run([sys.executable, *command], capture_output=True, text=True, check=False)
      if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
      print(f"{what} made in {time.perf_counter() - start:.1f} s ({args.scale:g} x VQA v2's counts) {done.stdout.strip()}")
    export = child(["export", f"--workdir={workdir}", f"--out={bundle}"])
    size = sum(os.path.getsize(os.path.join(bundle, n)) for n in os.listdir(bundle))
    print(f"export: {export[0]:.1f} s, bundle {size / 2**20:.1f} MiB")
    with open(os.path.join(data, "v2_OpenEnded_mscoco_val2014_questions.json")) as f:
      questions = json.load(f)["questions"]
    image_id = questions[0]["image_id"]
    # a compilation cache of this run's own: the first ask compiles (cold), later ones load it (warm)
    one = ["--image-id", str(image_id), "--question", "what color is the bus?",
           f"--compilation_cache_dir={os.path.join(tmp, 'xla')}"]
    from_bundle = [f"--workdir={bundle}", f"--data_dir={data}"]  # a bundle names no data folder outside ~
    cold = child(["ask", *from_bundle, *one])
    rows = {"cold": (*cold, [cold[0]])}
    for name, where in (("bundle", from_bundle), ("workdir", [f"--workdir={workdir}"])):
      runs = [child(["ask", *where, *one]) for _ in range(args.rounds)]
      rows[name] = (statistics.median(w for w, _ in runs), max(r for _, r in runs), [w for w, _ in runs])
    for name, label in (("cold", "from the bundle, compiling"), ("bundle", "from the bundle"),
                        ("workdir", "from the workdir")):
      wall, peak, _ = rows[name]
      print(f"ask one question {label:26} {wall:6.2f} s  {peak:5.2f} GiB peak RSS  (target <= 5 s, <= 1.5 GiB)")
    path = os.path.join(tmp, "questions.jsonl")
    with open(path, "w") as f:
      for q in questions[:1000]:
        f.write(json.dumps({"image_id": q["image_id"], "question": q["question"]}) + "\n")
    manys = [child(["ask", *from_bundle, f"--questions={path}", one[-1]])[0] for _ in range(args.rounds)]
    many = statistics.median(manys)
    print(f"ask 1,000 questions from a file, bundle: {many:.2f} s (target <= 10 s)")
    store, upload = demo_answers(bundle, data, image_id, args.rounds)
    print(f"demo answer, store image {store * 1000:.1f} ms, kept upload {upload * 1000:.1f} ms (target <= 1 s each)")
    at = f"{args.scale:g} x VQA v2's counts"
    record.write(args.json, "bench_trained", [
      *(row for name, label in (("cold", "from the bundle, compiling"), ("bundle", "from the bundle"),
                                ("workdir", "from the workdir"))
        for row in (record.row(f"`vqajax ask`, one question by store id, {label}, {at}", rows[name][0], "s", "<= 5 s",
                               rows[name][2]),
                    record.row(f"`vqajax ask`, one question, {label}: peak RSS", rows[name][1], "GiB", "<= 1.5 GiB"))),
      record.row(f"`vqajax ask`, 1,000 questions from a file, from the bundle, {at}", many, "s", "<= 10 s", manys),
      record.row("the demo's answer to a store image", store * 1000, "ms", "<= 1000 ms"),
      record.row("the demo's answer to an upload whose features it kept", upload * 1000, "ms", "<= 1000 ms"),
    ])
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
  main()
