"""What the verbs share below the front door (`cli.py`, `ask_cli.py`, `sweep_cli.py`): the task
registry, the config checks, the data a config asks for, training and the baselines on a
resolved config, and the checkpoint flags. Imports stay inside the functions, so `vqajax --help`
loads none of the machinery.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, NamedTuple, Sequence

from vqajax.core import files


class TaskEntry(NamedTuple):
  module: Any      # the task (`core/task.py`'s contract)
  answering: Any   # what answers with one of its trained runs (`from_workdir`); None where none does


def registry() -> dict[str, TaskEntry]:
  """`config.task` -> its entry: the one list of tasks, which every verb and `vqajax.load` use
  (it sits above the core and both papers)."""
  from vqajax.answertherapy import grounding_class, grounding_mask
  from vqajax.answertherapy.ask import Grounder
  from vqajax.vqa import task as vqa_task
  from vqajax.vqa.ask import Answerer
  return {"vqa": TaskEntry(vqa_task, Answerer), "grounding_class": TaskEntry(grounding_class, None),
          "grounding_mask": TaskEntry(grounding_mask, Grounder)}


def tasks(answering: bool = False) -> dict:
  """{`config.task`: its task module} of the registry (`answering`: of the tasks whose runs answer)."""
  return {name: entry.module for name, entry in registry().items() if entry.answering or not answering}


def task_of(config):
  from vqajax.core.errors import InputError
  known = tasks()
  if config.task not in known:
    raise InputError(f"config.task '{config.task}' is not one of {sorted(known)}")
  return known[config.task]


def check_config(config):
  """`config` if each field holds what its task's configs declare (before anything is written)."""
  from vqajax.core import evals
  evals.check_config(config, task_of(config))
  return config


def prepare_data(config) -> None:
  """The embedded dataset the config asks for, written first if absent (a visible step)."""
  from vqajax.core import fs
  from vqajax.core.config import file_names
  from vqajax.synthetic import embedded
  embedded.prepare(config)
  _resolve_features(config.data)
  settings = [*config.data.values(),
              *(v for e in (config.get("evals") or {}).values() for v in e.get("data", {}).values())]
  given = [name for value in settings if isinstance(value, (str, tuple, list))
           for name in file_names(value) if fs.isabs(name)]
  files.protect(config.data.dir, *given)  # no output goes into the data or over its files
  import jax
  if jax.config.jax_compilation_cache_dir:  # --compilation_cache_dir: an output too
    files.check_output(jax.config.jax_compilation_cache_dir, folder=True)


def add_data_dir_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--data_dir", type=files.path_arg,
                      help="a bundle's data folder on this machine (its feature store); a workdir reads its own")


def prepare_run_data(config, path: str, data_dir: str | None) -> str | None:
  """`prepare_data` for a trained run's config where it names data (a bundle may name none);
  a bundle's data folder as resolved here (None for a workdir, which records its own).
  `data_dir`: the folder `--data_dir` gave, which is only read (never given the embedded set)."""
  from vqajax.core import bundle
  from vqajax.core.errors import InputError
  from vqajax.synthetic import embedded
  if data_dir and config.data.get("synthetic") and not embedded.holds_dataset(data_dir):
    raise InputError(f"--data_dir {data_dir}: holds no embedded synthetic dataset (MANIFEST.json), which this "
                     "bundle's run was trained on: name the folder that holds it, or leave --data_dir out to read "
                     "the embedded set's own cache folder (written there if missing)")
  if config.data.get("synthetic") or config.data.dir:
    prepare_data(config)
  return (config.data.dir or None) if bundle.is_bundle(path) else None


def _resolve_features(data) -> None:
  """A relative `data.features` names a store in `data.dir` (as the configs' defaults do), else
  one in the current folder (where `vqajax features --out features/x.h5` wrote it), then made
  absolute, so the run records where it is; neither is an error saying where it looked."""
  from vqajax.core import fs
  from vqajax.core.errors import InputError
  name = data.get("features") or ""
  if not name or fs.isabs(name) or fs.exists(os.path.join(data.dir, name)):
    return
  here = os.path.abspath(name)
  if not os.path.exists(here):
    raise InputError(f"config.data.features {name}: feature store not found: a relative path is looked for in "
                     f"config.data.dir ({os.path.join(data.dir, name)}), then in the current folder ({here})")
  data.features = here


def check_workdir(workdir: str) -> None:
  """InputError unless `workdir` may take a run's outputs (new, empty or a run; not an input)."""
  from vqajax.core import run_record
  files.check_output(workdir, folder=True)
  run_record.check_workdir(workdir)


def train_config(config, workdir: str, allow_changed_run: bool = False) -> dict:
  """`vqajax train` on a resolved config: its data, then training; returns the last metrics. A
  rerun with other settings is refused before the data is prepared (a changed seed would write a
  whole embedded dataset first), and again with the data's sizes when training starts."""
  from vqajax.core import run_record, train
  from vqajax.synthetic import embedded
  if not allow_changed_run:
    embedded.resolve(config)
    run_record.check_same_run(workdir, config, None, train.CHANGED_RUN)
  prepare_data(config)
  check_workdir(workdir)
  return train.train_and_evaluate(task_of(config), config, workdir, allow_changed_run=allow_changed_run)


def baselines_config(config, workdir: str, names: Sequence[str], word_vectors: str | None = None):
  from vqajax.vqa import baselines
  prepare_data(config)
  check_workdir(workdir)
  return baselines.run_and_write(config, workdir, names, word_vectors)


def add_checkpoint_flags(parser: argparse.ArgumentParser) -> None:
  """`--step N | --best` of the verbs that use one checkpoint of a trained run."""
  which = parser.add_mutually_exclusive_group()
  which.add_argument("--step", type=int, help="the checkpoint step (default: the latest)")
  which.add_argument("--best", action="store_true", help="the kept checkpoint with the best config.best_metric")
