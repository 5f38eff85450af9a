"""The XLA flags of the suite's processes: n fake CPU devices; each program's machine code made
as one LLVM module (`xla_cpu_parallel_codegen_split_count=1`: by default XLA splits it to
compile the parts on several threads, each part with an LLVM target machine to set up, and the
suite's workers already fill the cores: a compile took 25-30% more CPU, 2026-12-07); and cheap
compiling unless a test asks for optimised code: LLVM's lowest optimisation level and XLA's
older fused-kernel emitters (`xla_cpu_use_fusion_emitters=false`). XLA's own passes make the
same programs (a 4-step run's losses and accuracy are equal to the last digit); compiling them,
most of the suite's CPU, costs about half (a 4-step run: 26 -> 14 s of CPU); code that runs
hundreds of steps (`test_learning.py`) is ~2x slower that way: it asks for `optimised`, LLVM's
level 1 (its sweep 74 -> 67 s, 120 -> 108 s of CPU against the default level 2, the same
table). Also the test sessions' compilation cache folders (tests/conftest.py makes one per
session)."""

import glob
import os
import shutil

_FLAGS = f"--xla_cpu_parallel_codegen_split_count=1 {os.environ.get('XLA_FLAGS', '')}"  # a later flag wins
_CHEAP_COMPILING = " --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
_OPTIMISED = " --xla_backend_optimization_level=1"
CACHE_PREFIX = "vqajax-test-xla-cache-"  # then the session's PID


def flags(devices: int, optimised: bool = False) -> str:
  level = _OPTIMISED if optimised else _CHEAP_COMPILING
  return f"{_FLAGS}{level} --xla_force_host_platform_device_count={devices}".strip()


def env(devices: int, optimised: bool = False) -> dict:
  """The environment for a subprocess on `devices` CPU devices (the session's otherwise)."""
  return {**os.environ, "XLA_FLAGS": flags(devices, optimised)}


def remove_orphaned_caches(folder: str) -> None:
  """The cache folders in `folder` of test sessions that ended without their exit handler
  (kill -9): those whose PID is gone."""
  for path in glob.glob(os.path.join(folder, CACHE_PREFIX + "*")):
    pid = os.path.basename(path)[len(CACHE_PREFIX):].split("-")[0]
    try:
      os.kill(int(pid), 0)
    except ProcessLookupError:
      shutil.rmtree(path, ignore_errors=True)
    except (ValueError, PermissionError):  # not ours to judge: another naming, another user's process
      pass
