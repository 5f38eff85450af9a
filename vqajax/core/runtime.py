"""Process setup, called once by every entry point (nothing happens at import time).

`init()` quiets the libraries' notices: TFDS's deprecation notes, orbax's per-checkpoint
INFO lines (shown with `--verbosity=debug`), and the leftovers of an orbax restore that
failed (a damaged checkpoint, already reported in one line by the command): its other
failed reads, which asyncio reports when the garbage collector reaches them, and the
storage threads that finish after its event loop closed. vqajax uses TensorFlow (tf.data,
TFDS, bucket paths) through `tensorflow()`, which keeps it off the accelerators (they belong
to JAX); clu's summary writer also imports it during training, so `init()` sets its quiet
environment first. Commands that need none of it (ask, submit, demo, export) never load it.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import traceback

_QUIET = ("is deprecated. Please change your code to use NumPy",  # TFDS 4.9, every build / read
          "Type handler registry type")  # orbax, once: vqajax's array handler on CPU (core/checkpoint.py)
# jax: "Unable to initialize backend 'tpu'"; clu: its progress notes (train logs its own line).
_NOISY_LIBRARIES = ("orbax", "etils", "tensorflow_datasets", "jax", "clu")
_UNRETRIEVED = ("Task exception was never retrieved", "Future exception was never retrieved")  # asyncio's
_ORBAX_MARKS = (f"{os.sep}orbax{os.sep}", "tensorstore_spec")  # its code, or a read error of its storage


def _exception_text(record: logging.LogRecord) -> str:
  return "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""


class _Quiet(logging.Filter):
  """Drops the known notices, the unretrieved reads of a failed orbax restore and, unless
  `verbose`, the INFO lines of the noisy libraries."""

  def __init__(self, verbose: bool):
    super().__init__()
    self.verbose = verbose

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    if any(text in message for text in _QUIET):
      return False
    if message.startswith(_UNRETRIEVED):
      text = message + _exception_text(record)
      if any(mark in text for mark in _ORBAX_MARKS):
        return False
    if self.verbose or record.levelno > logging.INFO:
      return True
    return not any(f"{os.sep}{name}{os.sep}" in record.pathname for name in _NOISY_LIBRARIES)


def _quiet_tensorflow_environment() -> None:
  """Set before TensorFlow is imported (by `tensorflow()`, or by clu's summary writer)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # also silences its start-up notice


@functools.cache
def tensorflow():
  """The `tensorflow` module, set up on first use: no accelerators, no start-up notices,
  no TFDS progress bars."""
  _quiet_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.set_visible_devices([], "GPU")
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.display_progress_bar(False)
  return tf


def add_compilation_cache_flag(parser) -> None:
  """`--compilation_cache_dir` of every verb that compiles (train, eval, submit, ask, demo)."""
  parser.add_argument("--compilation_cache_dir",
                      default=os.environ.get("JAX_COMPILATION_CACHE_DIR", "~/.cache/vqajax/xla"),
                      help="persistent XLA compilation cache; '' disables it (default: %(default)s)")


def use_compilation_cache(directory: str) -> None:
  """Compiled programs are stored in and loaded from `directory` ("" : not at all), so a
  second run of a command loads what the first compiled."""
  if directory:
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(directory))


def init(verbose: bool = False) -> None:
  """Quiets the libraries (idempotent)."""
  _quiet_tensorflow_environment()
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  handler = absl_logging.get_absl_handler()  # every library's records pass through it
  for f in [f for f in handler.filters if isinstance(f, _Quiet)]:
    handler.removeFilter(f)
  handler.addFilter(_Quiet(verbose))
  if not isinstance(sys.unraisablehook, _LateCallbacksIgnored):
    sys.unraisablehook = _LateCallbacksIgnored(sys.unraisablehook)


class _LateCallbacksIgnored:
  """An unraisable-exception hook that drops asyncio's "Event loop is closed" raised by a
  storage thread completing a read of a restore that already failed (orbax closes its loop
  on the first error); every other unraisable exception goes to `previous`."""

  def __init__(self, previous):
    self.previous = previous

  def __call__(self, unraisable) -> None:
    frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
    if not (isinstance(unraisable.exc_value, RuntimeError) and str(unraisable.exc_value) == "Event loop is closed"
            and any(f.name == "call_soon_threadsafe" for f in frames)):
      self.previous(unraisable)
