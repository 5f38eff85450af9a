"""vqajax sweep: run the points of a sweep file and collect them into tables.

  vqajax sweep FILE.py[:ARG] --workdir DIR [--set key=value ...] [--points a,b]
               [--print-commands | --status] [--launcher slurm --slurm.FLAG ... [--retry-failed]]

The sweep file's points (`vqa/sweep.py`) run in DIR/<name>, as `vqajax train` / `vqajax
baselines` run them; a point whose final results exist is skipped, so re-running resumes
the sweep. With the local launcher (the default) they run one after another in this
process (the front door's `train_config` / `baselines_config`). With `--launcher slurm`
the unfinished points are submitted as a job array (`launch.py`: each point one array
task, on `--slurm.nodes` x `--slurm.tasks_per_node` tasks; a point whose sweep entry has
its own "slurm" requests goes into an array of its own), their job ids recorded in
DIR/jobs.json; a re-run submits none twice: it waits for the points still queued or
running, reports those whose job ended unfinished (failed, cancelled, timed out) with
their log's last lines, and resubmits them with `--retry-failed` (a training resumes from
its checkpoints; Slurm requeues a preempted job itself). `--status` prints every point's
state, step and best metric and changes nothing. `--print-commands` prints one `vqajax
train` / `vqajax baselines` command per unfinished point instead (for a pod or any queue);
re-run without it to collect. Finished points go into DIR/table2.* and, with a base
point, DIR/table4.*; finished AnswerTherapy mask points into DIR/grounding.* (`vqajax therapy
grounding`). `--set` overrides apply to every point; `--points` keeps only the
named ones. A point whose config is bad (each field is checked first) or whose run fails
on bad input is reported as failed and the others go on; the sweep then exits 2 naming the
failed points (3 when only cluster jobs failed).
"""

from __future__ import annotations

import datetime
import os
import re
import time
from typing import Sequence

from vqajax import commands, launch
from vqajax.core import files, fs, official_files, tables
from vqajax.core.errors import ArgumentParser, InputError, RunFailed, exit_status
from vqajax.vqa import sweep


def _run_point(point: sweep.Point, config, workdir: str) -> None:
  if point.command == "baselines":
    commands.baselines_config(config, sweep.point_dir(workdir, point), point.baselines)
  else:
    commands.train_config(config, sweep.point_dir(workdir, point))


def run(args) -> int:
  """Runs (or prints) the unfinished points, then collects the tables."""
  launch.check_chosen(args)
  points, base = sweep.load_sweep(args.sweep)
  points = sweep.keep(points, args.points)
  sets = sweep.parse_sets(args.set)
  configs, failed = {}, {}
  for p in points:  # a bad point is reported and left out; the others run
    try:
      configs[p.name] = commands.check_config(sweep.point_config(p, sets))
    except InputError as e:
      failed[p.name] = _failed(p, e)
  files.protect(*{c.data.dir for c in configs.values() if c.data.dir})  # before any point runs
  files.check_output(args.workdir, folder=True)
  if args.status:
    print(_status(points, configs, args.workdir))
    return 0
  if args.launcher == "slurm" and not args.print_commands:
    return _on_slurm(args, points, base, sets, configs, failed)
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
    print(_collect(points, base, args.workdir, finished, configs))
  if failed:
    raise InputError(f"{len(failed)} of {len(points)} points failed: {'; '.join(failed.values())}")
  return 0


def _collect(points, base: str | None, workdir: str, finished: set[str], configs: dict) -> str:
  """The tables of the finished points: the grounding table of the AnswerTherapy mask points
  (`answertherapy/report.GROUNDING`), Tables II / IV of the others (`vqa/sweep.collect`)."""
  from vqajax.answertherapy import report
  tasks = commands.tasks()
  masks = [p for p in points if p.name in finished and hasattr(tasks[configs[p.name].task], report.GROUNDING.attribute)]
  others = finished - {p.name for p in masks}
  text = sweep.collect(points, base, workdir, others) if others else ""
  if masks:
    text += report.write([sweep.point_dir(workdir, p) for p in masks], workdir, tasks, report.GROUNDING)
  return text


def _jobs(workdir: str) -> dict[str, list[str]]:
  path = os.path.join(workdir, sweep.JOBS_FILE)
  record = official_files.load_json(path) if fs.exists(path) else {"points": {}}
  points = record.get("points") if isinstance(record, dict) else None
  if not (isinstance(points, dict) and all(isinstance(v, list) and v and all(
      isinstance(key, str) and re.fullmatch(r"\d+(_\d+)?", key) for key in v) for v in points.values())):
    raise InputError(f"{path}: expected {{'points': {{name: [job id, ...]}}}} (written by vqajax sweep)")
  return points


def _job_states(workdir: str, points: Sequence[sweep.Point]) -> dict[str, tuple[str, str]]:
  """{point: (its current job, the job's Slurm state)} of the points that have a job."""
  by_name = {p.name: p for p in points}
  jobs = {name: keys[-1] for name, keys in _jobs(workdir).items() if name in by_name}
  if not jobs:
    return {}
  folders = {key: sweep.point_dir(workdir, by_name[name]) for name, key in jobs.items()}
  states = launch.Slurm(launch.Resources()).states(folders)
  return {name: (key, states[key]) for name, key in jobs.items()}


def _on_slurm(args, points, base, sets, configs, failed) -> int:
  """Submits the unfinished points not queued (and, with --retry-failed, those whose job
  ended unfinished) as job arrays (one per request: a point may carry its own), waits for
  every queued point, then collects."""
  if fs.is_url(args.workdir):
    raise InputError(f"--workdir {args.workdir}: --launcher slurm needs a folder the nodes share (the jobs' logs "
                     "go there), not a URL")
  requests = {}
  for point in points:
    try:
      requests[point.name] = launch.resources(args, **point.slurm)
    except InputError as e:
      raise InputError(f"{args.sweep}: point {point.name}: {e}") from None
  for request in dict.fromkeys(requests.values()):
    launch.Slurm(request).check()
  workdir = os.path.abspath(args.workdir)
  states = _job_states(workdir, points)
  jobs = {name: state[0] for name, state in states.items()}
  finished, todo, waiting = set(), [], []
  for point in points:
    if point.name not in configs:
      continue
    key, state = states.get(point.name, (None, None))
    if sweep.is_finished(point, configs[point.name], workdir):
      print(f"{point.name}: finished, skipped")
      finished.add(point.name)
    elif state in launch.ACTIVE:
      print(f"{point.name}: {state} as job {key}, not submitted again")
      waiting.append(point)
    elif state is not None and not args.retry_failed:
      failed[point.name] = _job_failed(point, key, state, workdir)
    else:
      todo.append(point)
  groups = {}  # one job array per request
  for point in todo:
    groups.setdefault(requests[point.name], []).append(point)
  name = f"vqajax-sweep-{os.path.basename(workdir.rstrip('/'))}"
  planned = [(launch.Slurm(request), group, _steps(group, workdir, args.workdir, sets))
             for request, group in groups.items()]
  for slurm, _, steps in planned:  # every request tested before any is submitted
    slurm.test(slurm.job(steps, name, array=True))
  for slurm, group, steps in planned:
    keys = slurm.submit(steps, name, array=True)
    record = _jobs(workdir)
    for point, key in zip(group, keys):
      record.setdefault(point.name, []).append(key)
      jobs[point.name] = key
      print(f"{point.name}: submitted as job {key}; log: {launch.log_path(sweep.point_dir(workdir, point), key)}")
    files.write_json_atomic(os.path.join(workdir, sweep.JOBS_FILE), {"points": record}, make_dirs=True)
  waiting += todo
  names = {} if args.detach else {jobs[p.name]: p for p in waiting}
  if args.detach and waiting:
    print(f"{len(waiting)} points queued or running: `--status` shows them, a re-run waits for them and collects")
  done = []

  def changed(key: str, state: str) -> None:
    point = names[key]
    if state in launch.ACTIVE:
      print(f"{point.name}: {state} (job {key})", flush=True)
    elif sweep.is_finished(point, configs[point.name], workdir):
      finished.add(point.name)
      done.append(point.name)
      print(f"[{len(done)}/{len(waiting)}] {point.name}: done (job {key})", flush=True)
    else:
      failed[point.name] = _job_failed(point, key, state, workdir)

  if names:
    try:
      folders = {key: sweep.point_dir(workdir, p) for key, p in names.items()}
      launch.Slurm(launch.Resources(), args.poll).wait(folders, changed)
    except KeyboardInterrupt:
      print("the jobs go on running; re-run this command to wait for them and collect", flush=True)
      raise
  if finished:
    print(_collect(points, base, args.workdir, finished, configs))
  if failed:
    message = f"{len(failed)} of {len(points)} points failed: {'; '.join(failed.values())}"
    if any(p not in configs for p in failed):
      raise InputError(message)
    raise RunFailed(message + " (`--retry-failed` resubmits them)")
  return 0


def _steps(points: Sequence[sweep.Point], workdir: str, given: str, sets: dict) -> list[launch.Step]:
  """The points' jobs: their folders in `workdir`, their commands with the workdir as `given`."""
  return [launch.Step(sweep.point_dir(workdir, p), tuple(sweep.command_argv(p, given, sets)),
                      parallel=p.command == "train") for p in points]


def _job_failed(point: sweep.Point, key: str, state: str, workdir: str) -> str:
  folder = sweep.point_dir(workdir, point)
  code = launch.exit_code(folder, key)
  what = f"job {key} {state}" + ("" if code is None else f" (exit status {code})")
  if state == "COMPLETED":
    what = f"job {key} ended before the point's final step"
  log = launch.log_path(folder, key)
  print(f"{point.name}: failed: {what}; log: {log}", flush=True)
  last = launch.tail(log)
  if last:
    print("\n".join(f"  | {line}" for line in last.splitlines()), flush=True)
  return f"point {point.name}: {what}"


def _status(points: Sequence[sweep.Point], configs: dict, workdir: str) -> str:
  """A table of every point: state, job, last step, best metric."""
  jobs = _job_states(workdir, points) if fs.exists(os.path.join(workdir, sweep.JOBS_FILE)) else {}
  rows = []
  for point in points:
    key, state = jobs.get(point.name, ("", ""))
    config = configs.get(point.name)
    row = {"point": point.name, "job": key or None, "step": None, "best": None}
    if config is None:
      row["state"] = "bad config"
    elif sweep.is_finished(point, config, workdir):
      row["state"] = "finished"
    elif state in launch.ACTIVE:
      row["state"] = state.lower()
    elif state:
      row["state"] = f"failed ({state.lower()})"
    else:
      started = fs.exists(os.path.join(sweep.point_dir(workdir, point), "run.json"))
      row["state"] = "stopped" if started else "not started"
    if config is not None and point.command == "train":
      metric, mode = config.best_metric, config.best_mode
      step, best = sweep.progress(point, workdir, metric, mode)
      row.update(step=step, best=None if best is None else f"{metric} {best:.2f}")
    rows.append(row)
  return tables.markdown(["point", "state", "job", "step", "best"], rows)


def _failed(point: sweep.Point, error: InputError | RunFailed) -> str:
  print(f"{point.name}: failed: {error}", flush=True)
  return f"point {point.name}: {error}"


def main(argv: Sequence[str] | None = None, prog: str = "vqajax sweep") -> int:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("sweep", help="sweep file, FILE.py[:ARG]")
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="one subdirectory per point, tables here")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="config override for every point (repeatable)")
  parser.add_argument("--points", help="comma-separated names: run and collect only these")
  parser.add_argument("--print-commands", action="store_true",
                      help="print a launch command per unfinished point instead of running it")
  parser.add_argument("--status", action="store_true",
                      help="print every point's state, step and best metric; run nothing")
  parser.add_argument("--retry-failed", action="store_true",
                      help="--launcher slurm: resubmit the points whose job ended unfinished")
  launch.add_flags(parser)
  args = parser.parse_args(argv)
  return exit_status(prog, lambda: run(args))
