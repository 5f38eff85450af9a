"""Errors that are the user's input, not a bug: reported as one line, exit status 2."""

from __future__ import annotations

import sys
from typing import Callable


class InputError(ValueError):
  """Bad input: the message names the file, the record and what was expected."""


def exit_status(prog: str, run: Callable[[], int | None]) -> int:
  """Runs a command's `run()`; bad input becomes one line `PROG: error: ...` on stderr
  and status 2."""
  from vqajax.core import files  # pylint: disable=g-import-not-at-top  # (files imports this module)
  try:
    return run() or 0
  except (InputError, FileNotFoundError) as e:
    print(f"{prog}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"{prog}: interrupted", file=sys.stderr)
    return 130
  finally:
    files.unprotect_all()  # the inputs were this command's only
