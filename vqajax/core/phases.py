"""Seconds spent in the named phases of a command (reading, joining, encoding, ...): the
train command logs them once its first step is done (`bench/bench_scale.py` reads the line)."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

_SECONDS: dict[str, float] = {}


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
  """Adds the seconds of the `with` block to phase `name`."""
  start = time.perf_counter()
  try:
    yield
  finally:
    _SECONDS[name] = _SECONDS.get(name, 0.0) + time.perf_counter() - start


def summary() -> str:
  """'name 1.23 s, ...' in the order the phases first ran, then forgotten (a process that
  trains twice, as the tests do, reports each run's own)."""
  line = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in _SECONDS.items())
  _SECONDS.clear()
  return line
