"""A real one-node Slurm cluster on this machine, for the tests (tests/test_slurm.py).

`Cluster(folder).start()` runs munged, slurmctld and slurmd as children of this process,
every file (key, config, state, spool, logs, sockets) in `folder`, on free ports, with a
random first job id (JAX's Slurm coordinator port is 61440 + job id % 4096, so two
sessions' jobs rarely meet); `stop()` cancels every job, waits for the queue to empty and
ends the daemons by PID (TERM, then KILL). Clients find it through `env()` (`SLURM_CONF`).
No accounting: final job states come from the controller's memory (`MinJobAge`) and the
launcher's own exit records. Needs root (the daemons run as root here) and the Debian
packages `slurmctld slurmd slurm-client munge` (`.ci/run` installs them).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
PACKAGES = "slurmctld slurmd slurm-client munge"


def missing() -> list[str]:
  """The programs of a cluster this machine lacks (munged and the daemons live in sbin)."""
  path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
  return [p for p in PROGRAMS if shutil.which(p, path=path) is None]


def _free_ports(n: int) -> list[int]:
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _sbin(name: str) -> str:
  return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


class Cluster:
  """One slurmctld + one slurmd (this host, every CPU) + munged, all in `folder`."""

  def __init__(self, folder: str):
    self.folder = folder
    self.conf = os.path.join(folder, "slurm.conf")
    self.socket = os.path.join(folder, "munge", "munge.socket")
    self.partition = "debug"
    self._daemons: list[subprocess.Popen] = []

  def env(self) -> dict:
    return {**os.environ, "SLURM_CONF": self.conf}

  def _write_conf(self) -> None:
    host = socket.gethostname()
    ctld_port, d_port = _free_ports(2)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    settings = {
        "ClusterName": "vqajaxtest", "SlurmctldHost": host, "SlurmUser": "root", "SlurmdUser": "root",
        "SlurmctldPort": ctld_port, "SlurmdPort": d_port, "CommunicationParameters": "NoInAddrAny",
        "AuthType": "auth/munge", "AuthInfo": f"socket={self.socket}", "CredType": "cred/munge",
        "StateSaveLocation": f"{self.folder}/state", "SlurmdSpoolDir": f"{self.folder}/spool",
        "SlurmctldPidFile": f"{self.folder}/slurmctld.pid", "SlurmdPidFile": f"{self.folder}/slurmd.pid",
        "SlurmctldLogFile": f"{self.folder}/slurmctld.log", "SlurmdLogFile": f"{self.folder}/slurmd.log",
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core", "ReturnToService": 2, "MpiDefault": "none",
        "AccountingStorageType": "accounting_storage/none", "JobAcctGatherType": "jobacct_gather/none",
        "SchedulerParameters": "sched_interval=1", "MinJobAge": 3600, "KillWait": 5,
        "FirstJobId": random.randrange(1000, 60000), "SlurmdTimeout": 30, "InactiveLimit": 0,
    }
    lines = [f"{k}={v}" for k, v in settings.items()]
    lines += [f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory} State=UNKNOWN",
              f"PartitionName={self.partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP"]
    with open(self.conf, "w") as f:
      f.write("\n".join(lines) + "\n")

  def _spawn(self, argv: list[str], name: str) -> None:
    log = open(os.path.join(self.folder, f"{name}.out"), "w")
    self._daemons.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                          start_new_session=True))
    log.close()

  def start(self, timeout: float = 60) -> "Cluster":
    for sub in ("munge", "state", "spool"):
      os.makedirs(os.path.join(self.folder, sub), mode=0o700, exist_ok=True)
    key = os.path.join(self.folder, "munge", "munge.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
      f.write(os.urandom(1024))
    self._write_conf()
    munge = os.path.join(self.folder, "munge")
    self._spawn([_sbin("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={self.socket}",
                 f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                 f"--seed-file={munge}/munged.seed"], "munged")
    self._wait(lambda: os.path.exists(self.socket), timeout, "munged's socket")
    self._spawn([_sbin("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
    self._spawn([_sbin("slurmd"), "-D", "-f", self.conf], "slurmd")
    self._wait(self._idle, timeout, "an idle node")
    return self

  def _idle(self) -> bool:
    for daemon in self._daemons:
      if daemon.poll() is not None:
        raise RuntimeError(f"{daemon.args[0]} exited with {daemon.returncode}: see {self.folder}")
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env(), capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "idle"

  def _wait(self, ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
      if time.monotonic() > deadline:
        self.stop()
        raise RuntimeError(f"no {what} after {timeout} s: see {self.folder}")
      time.sleep(0.2)

  def jobs(self) -> list[str]:
    """The ids of the jobs in the queue (pending or running)."""
    done = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], env=self.env(), capture_output=True, text=True)
    return done.stdout.split()

  def stop(self, timeout: float = 30) -> None:
    if self._daemons and all(d.poll() is None for d in self._daemons):
      subprocess.run(["scancel", "--full", "--user", "root"], env=self.env(), capture_output=True)
      deadline = time.monotonic() + timeout
      while self.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    for daemon in reversed(self._daemons):  # slurmd, slurmctld, munged
      if daemon.poll() is None:
        daemon.terminate()
        try:
          daemon.wait(5)
        except subprocess.TimeoutExpired:
          daemon.kill()
          daemon.wait()
    self._daemons = []
