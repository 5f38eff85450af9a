"""What every benchmark script writes with `--json PATH`: its figures with the date, the machine
and the command, so the documentation's performance page renders them and types no number.

    {"bench": "bench_iou", "command": "python bench/bench_iou.py --rounds 3", "date": "...Z",
     "machine": {...}, "rows": [{"what": ..., "value": 1.7, "unit": "x", "target": ">= 20x"}]}

A row's `target` is "" where the script states none (a figure printed beside the others).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys


def add_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--json", metavar="PATH", default="",
                      help="also write the figures, the date, the machine and the command as JSON to PATH")


def row(what: str, value: float, unit: str, target: str = "") -> dict:
  return {"what": what, "value": float(value), "unit": unit, "target": target}


def machine() -> dict:
  """What the figures depend on: the CPU, its cores, the load, the accelerator JAX runs on."""
  import jax  # every benchmark has imported it already
  device = jax.devices()[0]
  return {"cpu": _cpu_name(), "cores": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
          "platform": device.platform, "device": device.device_kind, "devices": jax.device_count(),
          "python": platform.python_version(), "jax": jax.__version__}


def _cpu_name() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def write(path: str, bench: str, rows: list[dict]) -> None:
  """`rows` of `bench` as JSON at `path` (nothing when `path` is "")."""
  if not path:
    return
  record = {"bench": bench, "command": shlex.join(["python", *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(), "rows": rows}
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
