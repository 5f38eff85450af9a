"""Process setup, called once by every entry point (nothing happens at import time).

`init()` keeps TensorFlow (tf.data, TFDS) off the accelerators, which belong to JAX, and
quiets the libraries' notices: TensorFlow's C++ start-up lines, TFDS's progress bars and
its deprecation notes, orbax's per-checkpoint INFO lines (shown with `--verbosity=debug`).
"""

from __future__ import annotations

import logging
import os

_QUIET = ("is deprecated. Please change your code to use NumPy",)  # TFDS 4.9, every build / read
# jax: "Unable to initialize backend 'tpu'"; clu: its progress notes (train logs its own line).
_NOISY_LIBRARIES = ("orbax", "etils", "tensorflow_datasets", "jax", "clu")


class _Quiet(logging.Filter):
  """Drops the known notices and, unless `verbose`, the INFO lines of the noisy libraries."""

  def __init__(self, verbose: bool):
    super().__init__()
    self.verbose = verbose

  def filter(self, record: logging.LogRecord) -> bool:
    if any(text in record.getMessage() for text in _QUIET):
      return False
    if self.verbose or record.levelno > logging.INFO:
      return True
    return not any(f"{os.sep}{name}{os.sep}" in record.pathname for name in _NOISY_LIBRARIES)


def init(verbose: bool = False) -> None:
  """Hides the accelerators from TensorFlow and quiets the libraries (idempotent)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # also silences its start-up notice
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tf.config.set_visible_devices([], "GPU")
  tfds.display_progress_bar(False)
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  handler = absl_logging.get_absl_handler()  # every library's records pass through it
  for f in [f for f in handler.filters if isinstance(f, _Quiet)]:
    handler.removeFilter(f)
  handler.addFilter(_Quiet(verbose))
