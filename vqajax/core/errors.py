"""What goes wrong that is not a bug, by kind (recognised by type, never by message):

  InputError   bad input: the message names the file, the record or the config field and
               what was expected; one line `PROG: error: ...`, exit status 2
  RunFailed    a run that cannot go on although its input was fine (it diverged, a saved
               checkpoint was damaged); one line `PROG: failed: ...`, exit status 3

Anything else is a bug and keeps its traceback (a missing file too, unless the code that
opens a file the user named reports it as an InputError).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

INPUT_ERROR, RUN_FAILED, INTERRUPTED = 2, 3, 130  # exit statuses


class InputError(ValueError):
  """Bad input: the message names the file, the record and what was expected."""


class RunFailed(RuntimeError):
  """A run that cannot go on: the message says what happened and what to try."""


class ArgumentParser(argparse.ArgumentParser):
  """argparse whose refusal is one line `PROG: error: ...` naming the flag and what it
  expects, exit status 2, without the usage block (`--help` shows it). Every verb's parser
  is one, and so are their sub-parsers (argparse makes them of their parent's class)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.register("type", int, _integer)  # `type=int` flags say what they expect
    self.register("type", float, _number)

  def error(self, message: str):
    self.exit(INPUT_ERROR, f"{self.prog}: error: {one_line(message)}\n")


def one_line(message) -> str:
  """`message` with its line breaks written as \\n: a value the user gave (a name, a path) that
  holds a newline cannot split the error line."""
  return str(message).replace("\r", "\\r").replace("\n", "\\n")


def _integer(text: str) -> int:
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _number(text: str) -> float:
  try:
    return float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def exit_status(prog: str, run: Callable[[], int | None]) -> int:
  """Runs a command's `run()`; the kinds above become one line on stderr and their status."""
  try:
    return run() or 0
  except InputError as e:
    print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
    return INPUT_ERROR
  except RunFailed as e:
    print(f"{prog}: failed: {one_line(e)}", file=sys.stderr)
    return RUN_FAILED
  except KeyboardInterrupt:
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED
