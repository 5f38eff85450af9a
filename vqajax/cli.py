"""Entry points: `vqajax-train` and `vqajax-eval`.

  vqajax-train --config=experiments/vqa/deeper_lstm_norm_i.py[:runlocal] --workdir=DIR [--config.x=y]
  vqajax-eval  --config=... --workdir=DIR [--step=N | --all]
  vqajax-baselines --config=... --workdir=DIR [--baselines=prior,...] [--word_vectors=FILE]

On several hosts pass --coordinator_address / --num_processes / --process_id (or set
--distributed on TPU pods and clusters that jax.distributed detects by itself).
"""

from __future__ import annotations

import os
import re
import sys
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # pylint: disable=g-import-not-at-top
from absl import app, flags, logging  # pylint: disable=g-import-not-at-top
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "experiments/<file>.py[:arg]", lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
flags.DEFINE_integer("step", None, "vqajax-eval: the checkpoint step to evaluate (default: latest).")
flags.DEFINE_bool("all", False, "vqajax-eval: evaluate every saved checkpoint.")
flags.DEFINE_list("baselines", ["random", "prior", "q_type_prior", "nearest_neighbour"],
                  "vqajax-baselines: which non-neural baselines to run.")
flags.DEFINE_string("word_vectors", None, "vqajax-baselines: word2vec/GloVe text file for MC.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (auto-detected cluster).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 for multi-host runs.")
flags.DEFINE_integer("num_processes", None, "Number of processes in a multi-host run.")
flags.DEFINE_integer("process_id", None, "This process' index in a multi-host run.")
flags.DEFINE_string("compilation_cache_dir", os.environ.get("JAX_COMPILATION_CACHE_DIR", "~/.cache/vqajax/xla"),
                    "Persistent XLA compilation cache: a restarted run (preemption, resume, eval) loads "
                    "its compiled steps instead of compiling them again; '' disables it.")
flags.mark_flags_as_required(["config", "workdir"])


def _initialise():
  if FLAGS.compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(FLAGS.compilation_cache_dir))
  if FLAGS.coordinator_address:
    # CPU processes (tests, CPU clusters) exchange collectives over gloo; no effect elsewhere.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  elif FLAGS.distributed:
    jax.distributed.initialize()
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def _train(argv):
  del argv
  from vqajax.core import train  # pylint: disable=g-import-not-at-top
  _initialise()
  metrics = train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  if jax.process_index() == 0 and metrics:
    from vqajax.core import task as tasks  # pylint: disable=g-import-not-at-top
    print(tasks.get(FLAGS.config.task).table(FLAGS.config.name, metrics))


def _eval(argv):
  del argv
  from vqajax.core import evaluate  # pylint: disable=g-import-not-at-top
  _initialise()
  evaluate.evaluate_checkpoints(FLAGS.config, FLAGS.workdir, step=FLAGS.step, every=FLAGS.all)


def _baselines(argv):
  del argv
  from vqajax.vqa import baselines  # pylint: disable=g-import-not-at-top
  baselines.run_and_write(FLAGS.config, FLAGS.workdir, FLAGS.baselines, FLAGS.word_vectors)


def _run(main):
  """Runs `main` under absl; bad input becomes one line on stderr and exit status 2."""
  from vqajax.core.errors import InputError  # pylint: disable=g-import-not-at-top

  def guarded(argv):
    try:
      main(argv)
    except (InputError, FileNotFoundError) as e:
      sys.stderr.write(f"error: {e}\n")
      sys.exit(2)

  try:
    app.run(guarded)
  except AttributeError as e:  # a --config.<field> that the locked config does not have
    frames = traceback.extract_tb(e.__traceback__)
    if not frames or "ml_collections" not in frames[-1].filename:
      raise
    field = re.search(r"'(\w+)", str(e))
    hint = re.search(r'Did you mean "(\w+)"', str(e))
    sys.stderr.write(f"error: the config has no field '{field.group(1) if field else e}'"
                     + (f' (did you mean "{hint.group(1)}"?)' if hint else "") + "\n")
    sys.exit(2)


def train_entry():
  _run(_train)


def eval_entry():
  _run(_eval)


def baselines_entry():
  _run(_baselines)
