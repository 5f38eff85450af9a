"""A workdir is one run: `run.json` records its config and data sizes for every later command."""

from __future__ import annotations

import os

import ml_collections

from vqajax.core.files import write_json_atomic
from vqajax.core.official_files import load_json

RUN_FILE = "run.json"


def write_run_file(workdir: str, config, sizes: dict) -> None:
  """workdir/run.json: the config of a run and the sizes of its data (its task's `sizes`)."""
  write_json_atomic(os.path.join(workdir, RUN_FILE), {"config": config.to_dict(), "data": sizes},
                    make_dirs=True)


def read_config(workdir: str) -> ml_collections.ConfigDict | None:
  """The locked config recorded in `workdir`/run.json, or None without one."""
  path = os.path.join(workdir, RUN_FILE)
  if not os.path.exists(path):
    return None
  config = ml_collections.ConfigDict(load_json(path)["config"])
  config.lock()
  return config
