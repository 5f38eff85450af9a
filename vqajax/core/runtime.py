"""Process setup, called once by every entry point (nothing happens at import time).

`init()` quiets the libraries' notices: TFDS's warnings about its own use of a deprecated field
and about the configs joined with a feature store, and orbax's per-checkpoint INFO lines (shown
with `--verbosity=debug`). vqajax uses TensorFlow (TFDS, bucket paths) through `tensorflow()`,
which keeps it off the accelerators (they belong to JAX) and sets its quiet environment first.
Training on the feature stores and the commands that need none of it (ask, submit, demo,
export) never load it.
"""

from __future__ import annotations

import functools
import gc
import logging
import os

# the functions that log them: TFDS 4.9 warns, on every build / read, of its own use of `.dtype`
# (features.feature), and of a config not among its builder's own (dataset_builder), as every
# config with a feature store joined is (`vqajax tfds build --features`)
_KNOWN_NOTICES = ("log_tf_warning", "_create_builder_config")
# jax: "Unable to initialize backend 'tpu'".
_NOISY_LIBRARIES = ("orbax", "etils", "tensorflow_datasets", "jax")


class _Quiet(logging.Filter):
  """Drops the known notices and, unless `verbose`, the INFO lines of the noisy libraries."""

  def __init__(self, verbose: bool):
    super().__init__()
    self.verbose = verbose

  def filter(self, record: logging.LogRecord) -> bool:
    if record.funcName in _KNOWN_NOTICES:
      return False
    if self.verbose or record.levelno > logging.INFO:
      return True
    return not any(f"{os.sep}{name}{os.sep}" in record.pathname for name in _NOISY_LIBRARIES)


def _quiet_tensorflow_environment() -> None:
  """Set before TensorFlow is imported (by `tensorflow()`)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # also silences its start-up notice


@functools.cache
def tensorflow():
  """The `tensorflow` module, set up on first use: no accelerators, no start-up notices,
  no TFDS progress bars."""
  _quiet_tensorflow_environment()
  import tensorflow as tf
  tf.config.set_visible_devices([], "GPU")
  import tensorflow_datasets as tfds
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
    import jax
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(directory))


def freeze_imported() -> None:
  """After one collection, moves every object that exists now (the libraries' modules, the
  config: they live to the process's end) out of the cyclic collector's sight, whose later
  passes then skip those millions of objects (a short `vqajax train`: 8-19% less CPU).
  Called by the verbs once their libraries are imported."""
  gc.collect()
  gc.freeze()


def init(verbose: bool = False) -> None:
  """Quiets the libraries (idempotent); TensorFlow, if a command loads it, starts without Keras."""
  _quiet_tensorflow_environment()
  # TensorFlow imports Keras 3 at its own import (~1.5 s of CPU, with pandas and IPython where
  # installed) unless told to use legacy Keras (tf_keras), whose import it skips when absent; no
  # command uses Keras. Only the commands' processes: a library user's tf.keras stays as it was.
  os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
  from absl import logging as absl_logging
  handler = absl_logging.get_absl_handler()  # every library's records pass through it
  for f in [f for f in handler.filters if isinstance(f, _Quiet)]:
    handler.removeFilter(f)
  handler.addFilter(_Quiet(verbose))
