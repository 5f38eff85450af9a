"""Launchers: where a run or a sweep point executes, chosen by name (`--launcher`).

  local   this process (the default)
  slurm   a Slurm cluster, through `sbatch` / `squeue` / `sacct`: one batch job per run,
          one job array per sweep submission (an array task per point); each job runs the
          command `vqajax` would run here as one `srun` step over every task of its
          allocation (`--distributed`: each task calls `jax.distributed.initialize()`,
          which finds its place from Slurm's environment)

A job runs this process' Python (`sys.executable`) in this folder, with this environment
(`--export=ALL`) and this vqajax first on `PYTHONPATH`, so it imports the code that
submitted it. Its output goes to `RUN/launch/slurm-KEY.log` (appended when Slurm requeues
it: a requeued training resumes from its checkpoints), its exit status to
`RUN/launch/slurm-KEY.exit`; KEY is the job id (`ARRAY_INDEX` in an array), so a state is
known after the controller forgot the job, on a cluster without accounting too (one that
left no exit record was cancelled or killed). A request
is checked by `sbatch --test-only` before anything is submitted.

No value reaches shell text: the requests, the job name and the folder the job starts in are
`sbatch` arguments (each checked against the syntax Slurm accepts, so a newline or a quote in
one is refused in one line), and the batch script holds only shell-quoted words
(`shlex.quote`): a folder or a flag value holding a newline, `$(...)` or quotes stays one word.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Callable, Sequence

from vqajax.core.errors import InputError
from vqajax.core.run_record import LAUNCH_DIR

LAUNCHERS = ("local", "slurm")
# A job in one of these states may still run (a requeued one is pending again).
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT"})
_VALUE_FLAGS = {"--launcher": "launcher", "--slurm.partition": "partition", "--slurm.nodes": "nodes",
                "--slurm.tasks_per_node": "tasks_per_node", "--slurm.gpus_per_node": "gpus_per_node",
                "--slurm.cpus_per_task": "cpus_per_task", "--slurm.mem": "mem", "--slurm.time": "time",
                "--slurm.account": "account", "--slurm.qos": "qos", "--slurm.constraint": "constraint",
                "--slurm.poll": "poll"}
_SWITCHES = ("--slurm.detach",)
_NAME = r"[A-Za-z0-9_.-]+"
# What sbatch accepts for each free-text request (its man page); nothing else is passed on.
_SYNTAX = {
    "partition": (re.compile(rf"{_NAME}(,{_NAME})*"), "partition names (letters, digits, _ . -), comma-separated"),
    "account": (re.compile(_NAME), "an account name (letters, digits, _ . -)"),
    "qos": (re.compile(rf"{_NAME}(,{_NAME})*"), "QOS names (letters, digits, _ . -), comma-separated"),
    "constraint": (re.compile(r"[A-Za-z0-9_.\-&|,*\[\]()]+"),
                   "node features joined by & | , * [ ] ( ) (letters, digits, _ . -)"),
    "mem": (re.compile(r"[0-9]+[KMGTkmgt]?"), "a memory size: a whole number with an optional unit K, M, G or T"),
    "time": (re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|(?i:infinite|unlimited)"),
             "a time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"),
}


@dataclasses.dataclass(frozen=True)
class Resources:
  """What each job asks for (None: the cluster's default)."""
  partition: str | None = None
  nodes: int = 1
  tasks_per_node: int = 1
  gpus_per_node: int | None = None
  cpus_per_task: int | None = None
  mem: str | None = None
  time: str | None = None
  account: str | None = None
  qos: str | None = None
  constraint: str | None = None

  def __post_init__(self):
    for field, (pattern, expected) in _SYNTAX.items():
      value = getattr(self, field)
      if value is not None and not (isinstance(value, str) and pattern.fullmatch(value)):
        raise InputError(f"slurm.{field} {value!r}: expected {expected}")

  def sbatch_options(self) -> list[str]:
    options = [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}"]
    for field in ("partition", "gpus_per_node", "cpus_per_task", "mem", "time", "account", "qos", "constraint"):
      value = getattr(self, field)
      if value is not None:
        options.append(f"--{field.replace('_', '-')}={value}")
    return options

  @property
  def tasks(self) -> int:
    return self.nodes * self.tasks_per_node


@dataclasses.dataclass(frozen=True)
class Step:
  """One command to run: `vqajax ARGV` for the run in `folder`; `parallel`: on every task
  of the job, with `--distributed` when there are several (else on one task)."""
  folder: str
  argv: tuple[str, ...]
  parallel: bool = True


@dataclasses.dataclass(frozen=True)
class Job:
  """What `sbatch` is given: its arguments, and the batch script on its standard input."""
  options: list[str]
  script: str


def _positive(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
  return value


def _seconds(text: str) -> float:
  """A polling interval: from a tenth of a second (a tighter loop only loads squeue) to a day."""
  try:
    value = float(text)
  except ValueError:
    value = -1
  if not 0.1 <= value <= 86400:
    raise argparse.ArgumentTypeError(f"expected a number of seconds from 0.1 to 86400, got {text!r}")
  return value


def add_flags(parser: argparse.ArgumentParser) -> None:
  """`--launcher` and the `--slurm.*` requests (the same for train, eval and sweep)."""
  group = parser.add_argument_group("launcher", "where the work runs (default: this process)")
  group.add_argument("--launcher", choices=LAUNCHERS, default="local", help="local (default) or slurm")
  group.add_argument("--slurm.partition", dest="partition", help="the partition (default: the cluster's)")
  group.add_argument("--slurm.nodes", dest="nodes", type=_positive, default=1, help="nodes per job (default: 1)")
  group.add_argument("--slurm.tasks_per_node", dest="tasks_per_node", type=_positive, default=1,
                     help="processes per node, e.g. one per GPU (default: 1, which uses every local device)")
  group.add_argument("--slurm.gpus_per_node", dest="gpus_per_node", type=_positive, help="GPUs per node")
  group.add_argument("--slurm.cpus_per_task", dest="cpus_per_task", type=_positive, help="CPUs per task")
  group.add_argument("--slurm.mem", dest="mem", help="memory per node, as sbatch --mem (e.g. 64G)")
  group.add_argument("--slurm.time", dest="time", help="time limit per job, as sbatch --time (e.g. 4:00:00)")
  group.add_argument("--slurm.account", dest="account", help="the account to charge")
  group.add_argument("--slurm.qos", dest="qos", help="the quality of service")
  group.add_argument("--slurm.constraint", dest="constraint", help="node features, as sbatch --constraint")
  group.add_argument("--slurm.poll", dest="poll", type=_seconds, default=10.0,
                     help="seconds between looks at the queue while waiting (default: %(default)s)")
  group.add_argument("--slurm.detach", dest="detach", action="store_true",
                     help="submit and return without waiting (a sweep: re-run it to collect)")


def check_chosen(args) -> None:
  """InputError for `--slurm.*` requests given without `--launcher slurm` (they would do nothing)."""
  if args.launcher == "slurm":
    return
  defaults = {**dataclasses.asdict(Resources()), "poll": 10.0, "detach": False}
  given = [f"--slurm.{name}" for name, value in defaults.items() if getattr(args, name) != value]
  if given:
    raise InputError(f"{', '.join(given)}: given without --launcher slurm")


def resources(args, **changes) -> Resources:
  """The `--slurm.*` request of `args`, with `changes` (a sweep point's own: checked here)."""
  fields = {f.name: f for f in dataclasses.fields(Resources)}
  for name, value in changes.items():
    if name not in fields:
      raise InputError(f"slurm request {name!r}: expected one of {sorted(fields)}")
    whole = name in ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task")
    if not (isinstance(value, int) and not isinstance(value, bool) and value > 0 if whole else isinstance(value, str)):
      raise InputError(f"slurm request {name}={value!r}: expected " + ("a positive int" if whole else "a str"))
  return Resources(**{**{name: getattr(args, name) for name in fields}, **changes})


def without_flags(argv: Sequence[str]) -> list[str]:
  """`argv` without `--launcher` and the `--slurm.*` flags (what a job runs)."""
  out, i = [], 0
  while i < len(argv):
    name = argv[i].split("=", 1)[0]
    if name in _VALUE_FLAGS:
      i += 1 if "=" in argv[i] else 2
    elif name in _SWITCHES:
      i += 1
    else:
      out.append(argv[i])
      i += 1
  return out


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
  return subprocess.run(argv, input=stdin, capture_output=True, text=True)


def _last_line(text: str) -> str:
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  return lines[-1].removeprefix("sbatch: error: ") if lines else "(no message)"


def log_path(folder: str, key: str) -> str:
  return os.path.join(folder, LAUNCH_DIR, f"slurm-{key}.log")


def _exit_path(folder: str, key: str) -> str:
  return os.path.join(folder, LAUNCH_DIR, f"slurm-{key}.exit")


def exit_code(folder: str, key: str) -> int | None:
  """The exit status the job `key` recorded for the run in `folder`, if it ended by itself."""
  path = _exit_path(folder, key)
  try:
    with open(path) as f:
      return int(f.read().strip())
  except (OSError, ValueError):
    return None


def tail(path: str, lines: int = 15) -> str:
  """The last lines of a job's log ('' without one)."""
  try:
    with open(path, errors="replace") as f:
      text = f.read()
  except OSError:
    return ""
  return "\n".join(text.splitlines()[-lines:])


class Slurm:
  """Submits steps as batch jobs and reads their states."""

  def __init__(self, request: Resources, poll: float = 10.0):
    self.request = request
    self.poll = poll

  def check(self) -> None:
    """InputError unless Slurm answers here and knows the partition (before anything is submitted)."""
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
      raise InputError("--launcher slurm: no Slurm on this machine (sbatch / squeue not found on PATH)")
    done = _run(["sinfo", "-h", "-o", "%R"])
    if done.returncode:
      raise InputError(f"--launcher slurm: the cluster does not answer (sinfo: {_last_line(done.stderr)})")
    partitions = sorted(set(done.stdout.split()))
    if self.request.partition is not None and self.request.partition not in partitions:
      raise InputError(f"--slurm.partition {self.request.partition}: no such partition (the cluster has: "
                       f"{', '.join(partitions)})")

  def job(self, steps: Sequence[Step], name: str, array: bool) -> Job:
    """The batch job running `steps` (one per array task when `array`)."""
    options = [f"--job-name={name}", *self.request.sbatch_options(), "--requeue", "--output=/dev/null",
               f"--chdir={os.getcwd()}", "--export=ALL", *([f"--array=0-{len(steps) - 1}"] if array else [])]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this vqajax, imported first
    lines = ["#!/bin/bash", f"export PYTHONPATH={shlex.quote(root)}${{PYTHONPATH:+:$PYTHONPATH}}"]
    commands = [(shlex.quote(s.folder), self._command(s)) for s in steps]
    if array:
      lines.append('key="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"')
      lines.append('case "$SLURM_ARRAY_TASK_ID" in')
      lines += [f"  {i}) folder={folder}; command=({command});;" for i, (folder, command) in enumerate(commands)]
      lines.append("esac")
    else:
      lines += ['key="$SLURM_JOB_ID"', f"folder={commands[0][0]}", f"command=({commands[0][1]})"]
    lines += [f'exec >>"$folder/{LAUNCH_DIR}/slurm-$key.log" 2>&1',
              'echo "$(date -Is) job $key (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: ${command[*]}"',
              '"${command[@]}"', "status=$?", f'echo "$status" >"$folder/{LAUNCH_DIR}/slurm-$key.exit"',
              'exit "$status"']
    return Job(options, "\n".join(lines) + "\n")

  def _command(self, step: Step) -> str:
    srun = ["srun", "--kill-on-bad-exit=1"]
    argv = [sys.executable, "-m", "vqajax", *step.argv]
    if not step.parallel:
      srun += ["--nodes=1", "--ntasks=1"]
    elif self.request.tasks > 1:
      argv.append("--distributed")
    return shlex.join(srun + argv)

  def test(self, job: Job) -> None:
    """InputError unless the cluster could run `job` (`sbatch --test-only`: nothing is submitted)."""
    tested = _run(["sbatch", "--test-only", *job.options], job.script)
    if tested.returncode:
      raise InputError(f"--slurm.*: the cluster can never run this request ({' '.join(self.request.sbatch_options())}):"
                       f" {_last_line(tested.stderr)}")

  def submit(self, steps: Sequence[Step], name: str, array: bool = False) -> list[str]:
    """Submits `steps` (their folders get `launch/`) once tested; their job keys, in order."""
    job = self.job(steps, name, array)
    self.test(job)
    for step in steps:
      os.makedirs(os.path.join(step.folder, LAUNCH_DIR), exist_ok=True)
    done = _run(["sbatch", "--parsable", *job.options], job.script)
    if done.returncode:
      raise InputError(f"sbatch refused the job: {_last_line(done.stderr)}")
    job = done.stdout.strip().split(";")[0]
    return [f"{job}_{i}" for i in range(len(steps))] if array else [job]

  def states(self, jobs: dict[str, str]) -> dict[str, str]:
    """{key: Slurm state} of `jobs` ({key: run folder}): the controller's, else accounting's,
    else the job's exit record (COMPLETED / FAILED), else CANCELLED: a job that left the
    queue without recording its exit was cancelled or killed (a cancelled pending array
    task leaves no trace in the controller)."""
    found = {}
    done = _run(["squeue", "--me", "--states=all", "--array", "--noheader", "--format=%i|%T"])
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
      key, _, state = line.partition("|")
      if key in jobs:
        found[key] = state
    rest = [key for key in jobs if key not in found]
    if rest:
      done = _run(["sacct", "--noheader", "--allocations", "--parsable2", "--format=JobID,State",
                   f"--jobs={','.join(rest)}"])
      for line in done.stdout.splitlines() if done.returncode == 0 else []:
        key, _, state = line.partition("|")
        if key in jobs and state:
          found[key] = state.split()[0]  # "CANCELLED by 0"
    for key in jobs:
      if key not in found:
        code = exit_code(jobs[key], key)
        found[key] = "CANCELLED" if code is None else "COMPLETED" if code == 0 else "FAILED"
    return found

  def wait(self, jobs: dict[str, str], changed: Callable[[str, str], None]) -> dict[str, str]:
    """Polls until no job of `jobs` is active; `changed(key, state)` on each new state."""
    seen = {}
    while True:
      states = self.states(jobs)
      for key, state in states.items():
        if seen.get(key) != state:
          changed(key, state)
      seen = states
      if not any(state in ACTIVE for state in states.values()):
        return states
      time.sleep(self.poll)
