"""What goes wrong that is not a bug, by kind (recognised by type, never by message):

  InputError   bad input: the message names the file, the record or the config field and
               what was expected; one line `PROG: error: ...`, exit status 2
  RunFailed    a run that cannot go on although its input was fine (it diverged, a saved
               checkpoint was damaged); one line `PROG: failed: ...`, exit status 3

Anything else is a bug and keeps its traceback (a missing file too, unless the code that
opens a file the user named reports it as an InputError).
"""

from __future__ import annotations

import sys
from typing import Callable

INPUT_ERROR, RUN_FAILED, INTERRUPTED = 2, 3, 130  # exit statuses


class InputError(ValueError):
  """Bad input: the message names the file, the record and what was expected."""


class RunFailed(RuntimeError):
  """A run that cannot go on: the message says what happened and what to try."""


def exit_status(prog: str, run: Callable[[], int | None]) -> int:
  """Runs a command's `run()`; the kinds above become one line on stderr and their status."""
  try:
    return run() or 0
  except InputError as e:
    print(f"{prog}: error: {e}", file=sys.stderr)
    return INPUT_ERROR
  except RunFailed as e:
    print(f"{prog}: failed: {e}", file=sys.stderr)
    return RUN_FAILED
  except KeyboardInterrupt:
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED
