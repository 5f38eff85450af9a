"""What every benchmark script shares: whether the machine was quiet, and the JSON record that
`--json PATH` writes (its figures with the date, the machine, the load and the command), which
the documentation's performance page renders so that it types no number.

    {"bench": "bench_iou", "command": "python bench/bench_iou.py --rounds 3", "date": "...Z",
     "machine": {...}, "load": {"before": 0.3, "after": 1.9, "busy_before": 0.02, "others": 0.05, "limit": 0.5},
     "quiet": true, "matmul_peak_gflops": 450.0, "seconds": 63.0,
     "rows": [{"what": ..., "value": 1.7, "unit": "x", "target": ">= 3x", "rounds": [1.6, 1.7, 1.8]}]}

A row's `target` is "" where the script states none; `rounds` (where the script measures in
rounds) holds each round's figure, a ratio being that round's ratio of contenders timed seconds
apart, and `value` their median.

Quiet: a loaded machine flatters some contenders and not others (PyTorch's OpenMP threads lose
far more to a busy box than XLA's), so a script calls `begin` before measuring and `write` at
the end. Both read the 1-minute load average (`before`, `after`) and `/proc/stat`: the cores
busy during a 1 s sample while the script waits (`busy_before`), and the cores other processes
used during the run (`others`: all busy time less this process's and its waited children's).
The machine is quiet when the load average before, or else the sample, and the others' use
during the run are each at most a quarter of the cores. The load average alone cannot judge:
it trails a minute behind and counts the threads of the script itself (after) and of the
script run just before it (so `record_all.sh` would wait ~80 s between scripts); the sample
and the others' share see only the other processes, now. A loaded run says so on its first
line and its record holds `"quiet": false`; `--json` into bench/records/ (what the site shows)
refuses it, one line and exit status 2, at once when the machine is busy before measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time

RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")
_start: dict = {}  # `begin`'s readings


def add_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--json", metavar="PATH", default="",
                      help="also write the figures, the date, the machine, the load and the command as JSON to PATH "
                           "(into bench/records/ only from a quiet machine)")


def count(text: str) -> int:
  """argparse type of `--rounds`, `--steps`, `--batch` and other counts: a positive integer (else
  argparse's one line, exit 2)."""
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
  return value


def amount(text: str) -> float:
  """argparse type of `--scale`, `--store-gb` and the like: a positive finite number (else argparse's
  one line, exit 2)."""
  value = float(text)
  if not 0 < value < float("inf"):
    raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
  return value


def row(what: str, value: float, unit: str, target: str = "", rounds=None) -> dict:
  """A figure; `rounds`: each round's (then `value` is their median, as the script printed)."""
  out = {"what": what, "value": float(value), "unit": unit, "target": target}
  if rounds is not None:
    out["rounds"] = [float(v) for v in rounds]
  return out


def limit() -> float:
  """The load a quiet machine stays under: a quarter of the cores."""
  return os.cpu_count() / 4


def begin(path: str, sample: float = 1.0) -> None:
  """Reads the load before measuring and prints it as the script's first line; refuses (exit 2)
  a record into bench/records/ at once when the machine is busy."""
  load, busy = os.getloadavg()[0], _busy_seconds()
  time.sleep(sample)
  busy = (_busy_seconds() - busy) / sample
  _start.update(load=load, busy_before=busy, busy=_busy_seconds(), own=_own_seconds(), wall=time.monotonic())
  said = (f"the 1-minute load average is {load:.2f} and {busy:.2f} of the {os.cpu_count()} cores were busy in a "
          f"{sample:g} s sample (a quiet machine: at most {limit():g})")
  if min(load, busy) > limit():
    if _into_records(path):
      _refuse(path, said)
    print(f"NOT QUIET: {said}; the figures below are not to be trusted", flush=True)
  else:
    print(f"quiet so far: {said}", flush=True)


def write(path: str, bench: str, rows: list[dict], peak: float | None = None) -> dict:
  """Prints the load during the run and whether it was quiet; writes `rows` of `bench` as JSON at
  `path` (nothing when `path` is ""), refused (exit 2) into bench/records/ when not quiet.
  `peak`: the f32 matmul FLOP/s the script measured (else measured here, once)."""
  seconds = time.monotonic() - _start["wall"]
  others = max(0.0, (_busy_seconds() - _start["busy"]) - (_own_seconds() - _start["own"])) / seconds
  load = {"before": round(_start["load"], 2), "after": round(os.getloadavg()[0], 2),
          "busy_before": round(_start["busy_before"], 2), "others": round(others, 2), "limit": limit()}
  quiet = min(load["before"], load["busy_before"]) <= limit() and others <= limit()
  peak = matmul_peak() if peak is None else peak
  print(f"{'quiet' if quiet else 'NOT QUIET'}: other processes used {others:.2f} of {os.cpu_count()} cores during "
        f"the {seconds:.0f} s (a quiet machine: at most {limit():g}); 1-minute load average {load['before']:.2f} "
        f"before, {load['after']:.2f} after (this run's threads included); f32 matmul peak {peak / 1e9:.0f} GFLOP/s",
        flush=True)
  record = {"bench": bench, "command": shlex.join(["python", *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(), "load": load, "quiet": quiet, "matmul_peak_gflops": round(peak / 1e9, 1),
            "seconds": round(seconds, 1), "rows": rows}
  if not path:
    return record
  if not quiet and _into_records(path):
    _refuse(path, f"other processes used {others:.2f} cores during the run")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  partial = f"{path}.partial"
  with open(partial, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  os.replace(partial, path)
  return record


def _refuse(path: str, why: str) -> None:
  print(f"{sys.argv[0]}: error: --json {path}: bench/records/ takes only a quiet machine's figures (load at most "
        f"{limit():g} on {os.cpu_count()} cores); {why}", file=sys.stderr)
  raise SystemExit(2)


def _into_records(path: str) -> bool:
  return bool(path) and os.path.dirname(os.path.realpath(path)) == os.path.realpath(RECORDS)


def _busy_seconds() -> float:
  """CPU seconds all processes have used since boot (`/proc/stat`: user, nice, system, irq,
  softirq and steal time; not idle, not waiting for I/O)."""
  with open("/proc/stat", encoding="ascii") as f:
    ticks = [int(v) for v in f.readline().split()[1:9]]
  return (sum(ticks[:3]) + sum(ticks[5:8])) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
  """CPU seconds of this process and of its children it has waited for."""
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system


def matmul_peak(n=2048, reps=5) -> float:
  """The best f32 FLOP/s of an n^3 matmul, jitted."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  a = jnp.asarray(np.random.default_rng(0).random((n, n), np.float32))
  mm = jax.jit(lambda a: a @ a)
  mm(a).block_until_ready()
  best = float("inf")
  for _ in range(reps):
    start = time.perf_counter()
    mm(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def machine() -> dict:
  """What the figures depend on: the CPU, its cores, the accelerator JAX runs on."""
  import jax  # every benchmark has imported it already
  device = jax.devices()[0]
  return {"cpu": _cpu_name(), "cores": os.cpu_count(), "platform": device.platform, "device": device.device_kind,
          "devices": jax.device_count(), "python": platform.python_version(), "jax": jax.__version__}


def _cpu_name() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()
