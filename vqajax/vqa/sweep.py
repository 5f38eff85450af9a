"""The sweep files behind `vqajax sweep` (`sweep_cli.py` runs them and prints): their points,
each point's config and folder, whether it is finished, its launch command, and the tables
of the finished points.

A sweep file defines `get_sweep(arg) -> {"points": [...], "base": NAME or None}`; each
point is {"name", "config": "file.py[:arg]" (relative to the sweep file), "overrides":
{"a.b": value}, "command": "train" (default) or "baselines" (with "baselines": [...]),
"slurm": {"nodes": 4, ...} (optional: this point's `--slurm.*` requests, e.g. a point that
needs several nodes)}.
A point runs in DIR/<name>; finished points go into DIR/table2.* (the paper's Table II
shape) and, with a base point, DIR/table4.* (differences to the base).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shlex
from typing import Any, Sequence

from vqajax.core import config as config_lib
from vqajax.core import files, fs, official_files, run_record, tables
from vqajax.core.errors import InputError
from vqajax.vqa import reports

JOBS_FILE = "jobs.json"  # in the sweep's folder: {"points": {name: [job key, ...]}}, the last one current
# What a sweep writes into its folder beside its points' folders (the job record, the tables): no
# point takes those names.
OWN_FILES = frozenset({JOBS_FILE} | {f"{table}.{kind}" for table in ("table2", "table4", "grounding")
                                     for kind in ("md", "csv", "json")})


@dataclasses.dataclass
class Point:
  name: str
  config: str                       # file.py[:arg], as found from the sweep file
  overrides: dict[str, Any]
  command: str = "train"
  baselines: tuple[str, ...] = ()
  slurm: dict[str, Any] = dataclasses.field(default_factory=dict)  # its own `--slurm.*` requests


def load_sweep(spec: str) -> tuple[list[Point], str | None]:
  """The points and the base point name of `file.py[:arg]`."""
  path, arg = config_lib.split_spec(spec)
  module = config_lib.load_module(path, "sweep")
  get_sweep = getattr(module, "get_sweep", None)
  sweep = config_lib.run_user_code(lambda: get_sweep(arg), spec) if callable(get_sweep) else None
  if not (isinstance(sweep, dict) and isinstance(sweep.get("points"), list) and sweep["points"] and all(
      isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("config"), str)
      for p in sweep["points"])):
    raise InputError(f"{path}: expected get_sweep(arg) returning {{'points': [{{'name': str, 'config': "
                     "'file.py[:arg]', ...}], 'base': name or None}")
  here = os.path.dirname(path)  # relative stays relative (to the current folder)
  _known_keys(f"{path}: get_sweep", sweep, ("points", "base"))
  points = []
  for p in sweep["points"]:
    _known_keys(f"{path}: point {p['name']}", p, ("name", "config", "overrides", "command", "baselines", "slurm"))
    config_path, config_arg = config_lib.split_spec(p["config"])
    command, slurm = p.get("command", "train"), p.get("slurm", {})
    overrides, baselines = p.get("overrides", {}), p.get("baselines", ())
    if command not in ("train", "baselines"):
      raise InputError(f"{path}: point {p['name']}: command must be 'train' or 'baselines'")
    if not isinstance(slurm, dict):
      raise InputError(f"{path}: point {p['name']}: slurm must be a dict of --slurm.* requests, e.g. {{'nodes': 2}}")
    if not (isinstance(overrides, dict) and all(isinstance(k, str) for k in overrides)):
      raise InputError(f"{path}: point {p['name']}: overrides must be a dict of config fields, e.g. "
                       "{'optimizer.learning_rate': 0.01}")
    if not (isinstance(baselines, (list, tuple)) and all(isinstance(b, str) for b in baselines)):
      raise InputError(f"{path}: point {p['name']}: baselines must be a list of names, e.g. ['prior', 'random']")
    points.append(Point(p["name"], f"{os.path.normpath(os.path.join(here, config_path))}:{config_arg}",
                        dict(overrides), command, tuple(baselines), dict(slurm)))
  names = [files.check_name(p.name, f"{path}: point name") for p in points]
  taken = sorted(OWN_FILES.intersection(names))
  if taken:
    raise InputError(f"{path}: point name {taken[0]!r}: the sweep's own file in its folder; name the point otherwise")
  if len(set(names)) != len(names):
    raise InputError(f"{path}: point names repeat: {names}")
  base = sweep.get("base")
  if base is not None and base not in names:
    raise InputError(f"{path}: base point '{base}' is not one of {names}")
  return points, base


def _known_keys(where: str, entry: dict, known: tuple[str, ...]) -> None:
  """InputError naming a key of `entry` not in `known` (a typo would be ignored: a point run unchanged)."""
  unknown = sorted(set(entry) - set(known), key=str)
  if unknown:
    raise InputError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(known)})")


def parse_sets(sets: Sequence[str]) -> dict[str, Any]:
  """["a.b=value", ...] -> {"a.b": value}; values are Python literals or else strings."""
  out = {}
  for item in sets:
    key, eq, text = item.partition("=")
    if not eq or not key:
      raise InputError(f"--set {item!r}: expected key=value")
    try:
      out[key] = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      out[key] = text
  return out


def keep(points: list[Point], names: str | None) -> list[Point]:
  """The points named in `names` (comma-separated; None: all), in the sweep's order."""
  if not names:
    return points
  wanted = names.split(",")
  unknown = set(wanted) - {p.name for p in points}
  if unknown:
    raise InputError(f"--points: {sorted(unknown)} not in {[p.name for p in points]}")
  return [p for p in points if p.name in wanted]


def point_config(point: Point, sets: dict[str, Any]):
  """The point's config with its overrides and `sets` (its fields not checked yet)."""
  config = config_lib.load_config(point.config)
  config.name = point.name  # a row is named as its point (its results files too)
  for key, value in {**point.overrides, **sets}.items():
    try:
      config_lib.override(config, {key: value})
    except (KeyError, AttributeError, TypeError) as e:
      raise InputError(f"cannot set config.{key}={value!r} ({str(e)[:200]})") from None
  return config


def point_dir(workdir: str, point: Point) -> str:
  return os.path.join(workdir, point.name)


def is_finished(point: Point, config, workdir: str) -> bool:
  """Training: its final checkpoint and results are written (run.json says so); baselines:
  every baseline's results (written all or nothing, metrics.json with them)."""
  if point.command == "train":
    record = run_record.read_record(point_dir(workdir, point)) or {"config": {}}
    if config.get("num_epochs", 0) > 0:  # its steps were resolved from the data
      return "finished_step" in record and record["config"].get("num_epochs") == config.num_epochs
    return record.get("finished_step") == config.num_train_steps
  results = os.path.join(point_dir(workdir, point), "results")
  return all(fs.exists(os.path.join(results, d, "metrics.json")) for d in point.baselines)


def progress(point: Point, workdir: str, metric: str, mode: str) -> tuple[int | None, float | None]:
  """A training point's last logged step and its best `metric` so far ("max" | "min" `mode`),
  from its metrics.jsonl (None, None before it logs; a line being written is skipped)."""
  path = os.path.join(point_dir(workdir, point), "metrics.jsonl")
  if point.command != "train" or not fs.exists(path):
    return None, None
  step, values = None, []
  with fs.open_file(path, "rb") as f:
    for line in f:
      try:
        row = json.loads(line)
      except ValueError:
        continue
      if isinstance(row, dict) and isinstance(row.get("step"), int):
        step = max(step or 0, row["step"])
        if isinstance(row.get(metric), (int, float)):
          values.append(row[metric])
  return step, ((max if mode == "max" else min)(values) if values else None)


def command_argv(point: Point, workdir: str, sets: dict[str, Any]) -> list[str]:
  """The point's `vqajax` arguments (after the program): what runs it anywhere."""
  path, arg = config_lib.split_spec(point.config)
  argv = [point.command, f"--config={path}" + (f":{arg}" if arg else ""),
          f"--workdir={point_dir(workdir, point)}", f"--config.name={point.name}"]
  argv += [f"--config.{k}={v}" for k, v in {**point.overrides, **sets}.items()]
  if point.command == "baselines":
    argv.append(f"--baselines={','.join(point.baselines)}")
  return argv


def command_line(point: Point, workdir: str, sets: dict[str, Any]) -> str:
  return shlex.join(["vqajax", *command_argv(point, workdir, sets)])


def collect(points: Sequence[Point], base: str | None, workdir: str, finished: set[str]) -> str:
  """Writes DIR/table2.* (and DIR/table4.* with a base) from the finished points."""
  runs, info = {}, {}
  for point in points:
    if point.name not in finished:
      continue
    found = reports.find_results(point_dir(workdir, point))
    if point.command == "baselines":
      runs.update({name: reports.read_scores(found[name]) for name in point.baselines})
    else:
      runs[point.name] = reports.read_scores(found[point.name])
    if point.command == "train":
      info[point.name] = official_files.load_json(os.path.join(point_dir(workdir, point), run_record.RUN_FILE))["data"]
  made = {"table2": reports.table_ii(runs)}
  if base is not None and base in finished:
    ablations = {p.name: runs[p.name] for p in points if p.name in finished and p.command == "train"}
    made["table4"] = reports.table_iv(ablations, info, base)
  return "\n".join(tables.write_tables(workdir, made).values())
