"""The XLA flags of the suite's processes: n fake CPU devices, and LLVM's lowest optimisation
level unless a test asks for optimised code: XLA's own passes make the same programs, and
compiling them (most of the suite's CPU) costs ~25% less; code that runs hundreds of steps
(`test_learning.py`) is ~2x slower that way."""

import os

_FLAGS = os.environ.get("XLA_FLAGS", "")


def flags(devices: int, optimised: bool = False) -> str:
  level = "" if optimised else " --xla_backend_optimization_level=0"
  return f"{_FLAGS}{level} --xla_force_host_platform_device_count={devices}".strip()


def env(devices: int, optimised: bool = False) -> dict:
  """The environment for a subprocess on `devices` CPU devices (the session's otherwise)."""
  return {**os.environ, "XLA_FLAGS": flags(devices, optimised)}
