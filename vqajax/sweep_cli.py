"""vqajax sweep: run the points of a sweep file and collect them into tables.

  vqajax sweep FILE.py[:ARG] --workdir DIR [--set key=value ...] [--points a,b]
               [--print-commands]

The sweep file's points (`vqa/sweep.py`) run one after another in this process, each in
DIR/<name>, as `vqajax train` / `vqajax baselines` run them (the front door's
`train_config` / `baselines_config`); a point whose final results exist is skipped, so
re-running resumes the sweep. `--print-commands` prints one `vqajax train` / `vqajax
baselines` command per unfinished point instead (for a cluster or pod queue); re-run
without it to collect. Finished points go into DIR/table2.* and, with a base point,
DIR/table4.*. `--set` overrides apply to every point; `--points` keeps only the named
ones. A point whose config is bad (each field is checked first) or whose run fails on bad
input is reported as failed and the others go on; the sweep then exits 2 naming the
failed points.
"""

from __future__ import annotations

import argparse
import datetime
import time
from typing import Sequence

from vqajax import cli
from vqajax.core import files
from vqajax.core.errors import InputError, RunFailed, exit_status
from vqajax.vqa import sweep


def _run_point(point: sweep.Point, config, workdir: str) -> None:
  if point.command == "baselines":
    cli.baselines_config(config, sweep.point_dir(workdir, point), point.baselines)
  else:
    cli.train_config(config, sweep.point_dir(workdir, point))


def run(args) -> int:
  """Runs (or prints) the unfinished points, then collects the tables."""
  points, base = sweep.load_sweep(args.sweep)
  points = sweep.keep(points, args.points)
  sets = sweep.parse_sets(args.set)
  configs, failed = {}, {}
  for p in points:  # a bad point is reported and left out; the others run
    try:
      configs[p.name] = cli.check_config(sweep.point_config(p, sets))
    except InputError as e:
      failed[p.name] = _failed(p, e)
  files.protect(*{c.data.dir for c in configs.values() if c.data.dir})  # before any point runs
  files.check_output(args.workdir, folder=True)
  finished = {p.name for p in points if p.name in configs and sweep.is_finished(p, configs[p.name], args.workdir)}
  todo, done, start = len(configs) - len(finished), 0, time.monotonic()
  for point in points:
    if point.name in failed:
      continue
    if point.name in finished:
      print(f"{point.name}: finished, skipped")
    elif args.print_commands:
      print(sweep.command_line(point, args.workdir, sets))
    else:
      print(f"[{done + 1}/{todo}] {point.name}: running  ({sweep.command_line(point, args.workdir, sets)})",
            flush=True)
      try:
        _run_point(point, configs[point.name], args.workdir)
      except (InputError, RunFailed) as e:  # a bad or a diverged point; the others go on
        failed[point.name] = _failed(point, e)
        todo -= 1
        continue
      if not sweep.is_finished(point, configs[point.name], args.workdir):  # e.g. SIGTERM
        print(f"{point.name}: stopped before its final step; re-run to resume the sweep")
        return 1
      finished.add(point.name)
      done += 1
      spent = time.monotonic() - start
      eta = datetime.timedelta(seconds=round(spent / done * (todo - done)))
      print(f"[{done}/{todo}] {point.name}: done; sweep {datetime.timedelta(seconds=round(spent))} so far, "
            f"ETA {eta}", flush=True)
  if not args.print_commands and finished:
    print(sweep.collect(points, base, args.workdir, finished))
  if failed:
    raise InputError(f"{len(failed)} of {len(points)} points failed: {'; '.join(failed.values())}")
  return 0


def _failed(point: sweep.Point, error: InputError | RunFailed) -> str:
  print(f"{point.name}: failed: {error}", flush=True)
  return f"point {point.name}: {error}"


def main(argv: Sequence[str] | None = None, prog: str = "vqajax sweep") -> int:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("sweep", help="sweep file, FILE.py[:ARG]")
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="one subdirectory per point, tables here")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="config override for every point (repeatable)")
  parser.add_argument("--points", help="comma-separated names: run and collect only these")
  parser.add_argument("--print-commands", action="store_true",
                      help="print a launch command per unfinished point instead of running it")
  args = parser.parse_args(argv)
  return exit_status(prog, lambda: run(args))
