"""vqajax sweep: run the points of a sweep file and collect them into tables.

  vqajax sweep FILE.py[:ARG] --workdir DIR [--set key=value ...] [--points a,b]
               [--print-commands]

A sweep file defines `get_sweep(arg) -> {"points": [...], "base": NAME or None}`; each
point is {"name", "config": "file.py[:arg]" (relative to the sweep file), "overrides":
{"a.b": value}, "command": "train" (default) or "baselines" (with "baselines": [...])}.
Points run one after another in this process, each in DIR/<name>; a point whose final
results exist is skipped, so re-running resumes the sweep. `--print-commands` prints one
`vqajax train` / `vqajax baselines` command per unfinished point instead (for a cluster
or pod queue); re-run without it to collect. Finished points go into DIR/table2.* (the
paper's Table II shape) and, with a base point, DIR/table4.* (differences to the base).
`--set` overrides apply to every point; `--points` keeps only the named ones. A point whose
config is bad (each field is checked first) or whose run fails on bad input is reported as
failed and the others go on; the sweep then exits 2 naming the failed points.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import os
import shlex
import time
from typing import Any, Callable, Mapping, Sequence

from vqajax.core import config as config_lib
from vqajax.core import files, fs, official_files, run_record, tables
from vqajax.core.errors import InputError, RunFailed, exit_status
from vqajax.vqa import reports

# {'train': fn(config, workdir), 'baselines': fn(config, workdir, names), 'check': fn(config)}:
# given by the front door, which checks each point's config and prepares its data as for
# `vqajax train` / `vqajax baselines`.
Commands = Mapping[str, Callable[..., Any]]


@dataclasses.dataclass
class Point:
  name: str
  config: str                       # file.py[:arg], as found from the sweep file
  overrides: dict[str, Any]
  command: str = "train"
  baselines: tuple[str, ...] = ()


def load_sweep(spec: str) -> tuple[list[Point], str | None]:
  """The points and the base point name of `file.py[:arg]`."""
  path, _, arg = spec.partition(":")
  module = config_lib.load_module(path, "sweep")
  get_sweep = getattr(module, "get_sweep", None)
  sweep = config_lib.run_user_code(lambda: get_sweep(arg), spec) if callable(get_sweep) else None
  if not (isinstance(sweep, dict) and isinstance(sweep.get("points"), list) and all(
      isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("config"), str)
      for p in sweep["points"])):
    raise InputError(f"{path}: expected get_sweep(arg) returning {{'points': [{{'name': str, 'config': "
                     "'file.py[:arg]', ...}], 'base': name or None}")
  here = os.path.dirname(path)  # relative stays relative (to the current folder)
  points = []
  for p in sweep["points"]:
    config_path, _, config_arg = p["config"].partition(":")
    if p.get("command", "train") not in ("train", "baselines"):
      raise InputError(f"{path}: point {p['name']}: command must be 'train' or 'baselines'")
    points.append(Point(p["name"], f"{os.path.normpath(os.path.join(here, config_path))}:{config_arg}",
                        dict(p.get("overrides", {})), p.get("command", "train"),
                        tuple(p.get("baselines", ()))))
  names = [files.check_name(p.name, f"{path}: point name") for p in points]
  if len(set(names)) != len(names):
    raise InputError(f"{path}: point names repeat: {names}")
  base = sweep.get("base")
  if base is not None and base not in names:
    raise InputError(f"{path}: base point '{base}' is not one of {names}")
  return points, base


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


def point_config(point: Point, sets: dict[str, Any], check: Callable[[Any], Any]):
  config = config_lib.load_config(point.config)
  config.name = point.name  # a row is named as its point (its results files too)
  for key, value in {**point.overrides, **sets}.items():
    try:
      config_lib.override(config, {key: value})
    except (KeyError, AttributeError, TypeError) as e:
      raise InputError(f"cannot set config.{key}={value!r} ({str(e)[:200]})") from None
  return check(config)


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


def command_line(point: Point, workdir: str, sets: dict[str, Any]) -> str:
  path, _, arg = point.config.partition(":")
  argv = ["vqajax", point.command, f"--config={path}" + (f":{arg}" if arg else ""),
          f"--workdir={point_dir(workdir, point)}", f"--config.name={point.name}"]
  argv += [f"--config.{k}={v}" for k, v in {**point.overrides, **sets}.items()]
  if point.command == "baselines":
    argv.append(f"--baselines={','.join(point.baselines)}")
  return shlex.join(argv)


def run_point(point: Point, config, workdir: str, commands: Commands) -> None:
  if point.command == "baselines":
    commands["baselines"](config, point_dir(workdir, point), point.baselines)
  else:
    commands["train"](config, point_dir(workdir, point))


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
  text = tables.write_table(workdir, "table2", *reports.table_ii(runs))
  if base is not None and base in finished:
    ablations = {p.name: runs[p.name] for p in points if p.name in finished and p.command == "train"}
    text += "\n" + tables.write_table(workdir, "table4", *reports.table_iv(ablations, info, base))
  return text


def run(args, commands: Commands) -> int:
  """Runs (or prints) the unfinished points, then collects the tables."""
  points, base = load_sweep(args.sweep)
  if args.points:
    keep = args.points.split(",")
    unknown = set(keep) - {p.name for p in points}
    if unknown:
      raise InputError(f"--points: {sorted(unknown)} not in {[p.name for p in points]}")
    points = [p for p in points if p.name in keep]
  sets = parse_sets(args.set)
  configs, failed = {}, {}
  for p in points:  # a bad point is reported and left out; the others run
    try:
      configs[p.name] = point_config(p, sets, commands["check"])
    except InputError as e:
      failed[p.name] = _failed(p, e)
  files.protect(*{c.data.dir for c in configs.values() if c.data.dir})  # before any point runs
  files.check_output(args.workdir, folder=True)
  finished = {p.name for p in points if p.name in configs and is_finished(p, configs[p.name], args.workdir)}
  todo, done, start = len(configs) - len(finished), 0, time.monotonic()
  for point in points:
    if point.name in failed:
      continue
    if point.name in finished:
      print(f"{point.name}: finished, skipped")
    elif args.print_commands:
      print(command_line(point, args.workdir, sets))
    else:
      print(f"[{done + 1}/{todo}] {point.name}: running  ({command_line(point, args.workdir, sets)})", flush=True)
      try:
        run_point(point, configs[point.name], args.workdir, commands)
      except (InputError, RunFailed) as e:  # a bad or a diverged point; the others go on
        failed[point.name] = _failed(point, e)
        todo -= 1
        continue
      if not is_finished(point, configs[point.name], args.workdir):  # e.g. SIGTERM
        print(f"{point.name}: stopped before its final step; re-run to resume the sweep")
        return 1
      finished.add(point.name)
      done += 1
      spent = time.monotonic() - start
      eta = datetime.timedelta(seconds=round(spent / done * (todo - done)))
      print(f"[{done}/{todo}] {point.name}: done; sweep {datetime.timedelta(seconds=round(spent))} so far, "
            f"ETA {eta}", flush=True)
  if not args.print_commands and finished:
    print(collect(points, base, args.workdir, finished))
  if failed:
    raise InputError(f"{len(failed)} of {len(points)} points failed: {'; '.join(failed.values())}")
  return 0


def _failed(point: Point, error: InputError | RunFailed) -> str:
  print(f"{point.name}: failed: {error}", flush=True)
  return f"point {point.name}: {error}"


def main(argv: Sequence[str] | None = None, prog: str = "vqajax sweep", commands=None) -> int:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("sweep", help="sweep file, FILE.py[:ARG]")
  parser.add_argument("--workdir", required=True, help="one subdirectory per point, tables here")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="config override for every point (repeatable)")
  parser.add_argument("--points", help="comma-separated names: run and collect only these")
  parser.add_argument("--print-commands", action="store_true",
                      help="print a launch command per unfinished point instead of running it")
  args = parser.parse_args(argv)
  return exit_status(prog, lambda: run(args, commands))
