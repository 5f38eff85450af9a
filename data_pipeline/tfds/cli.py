"""Builds a TFDS dataset from official files in a manual directory (nothing downloaded).

  vqajax tfds build NAME/CONFIG --manual_dir DIR --data_dir DIR [--features STORE]

NAME/CONFIG: vqa/v2, vqa/v1, vizwiz_vqa/default, answer_therapy/default. `--features`
joins each example's row of a FeatureStore (.h5 / .npy) by image id, as the config
`CONFIG+<store stem>`. Prints the prepared directory (what `config.data.tfds_dir` names).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Sequence

from vqajax.core import files
from vqajax.core.errors import ArgumentParser, exit_status


def build(name: str, manual_dir: str, data_dir: str, features: str = "") -> str:
  """Prepares dataset `name` ("builder/config") into data_dir; returns its directory."""
  from data_pipeline.tfds import base, builders  # TensorFlow and TFDS: seconds to import, not for --help
  builder_name, _, config_name = name.partition("/")
  builder = builders.make(builder_name, config_name, data_dir, features)
  target = os.path.abspath(str(builder.data_dir))
  files.check_output(target, folder=True)  # data_dir outside the manual files may still name a folder in them
  created, new = not os.path.exists(target), target  # new: the outermost folder this build creates
  while not os.path.exists(os.path.dirname(new)) and os.path.dirname(new) != new:
    new = os.path.dirname(new)
  try:
    builder.download_and_prepare(download_config=base.download_config(manual_dir))
  except BaseException:
    if created:  # nothing was prepared: no folder of ours is left behind
      shutil.rmtree(new, ignore_errors=True)
    raise
  return target


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  commands = parser.add_subparsers(dest="command", required=True)
  b = commands.add_parser("build", help="prepare a dataset from the official files in --manual_dir",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  b.add_argument("name", help="builder/config, one of NAME/CONFIG above")
  b.add_argument("--manual_dir", type=files.path_arg, required=True, help="the official files, unchanged")
  b.add_argument("--data_dir", type=files.path_arg, required=True, help="where TFDS datasets are prepared")
  b.add_argument("--features", default="", help="a FeatureStore to join by image id (optional)")
  return parser


def main(argv: Sequence[str] | None = None, prog: str = "vqajax tfds") -> int:
  args = _parser(prog).parse_args(argv)

  def run() -> None:
    files.protect(args.manual_dir, args.features)
    files.check_output(args.data_dir, folder=True)
    start = time.time()
    path = build(args.name, args.manual_dir, args.data_dir, args.features)
    print(f"prepared {path} in {time.time() - start:.1f} s")

  return exit_status(prog, run)
