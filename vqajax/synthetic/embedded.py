"""The embedded synthetic datasets a config asks for (`config.data.synthetic`).

The front door calls `prepare(config)` before a run: `data.dir` "" means the dataset's
own cache folder (`~/.cache/vqajax/synthetic-v3/<scale>-seed<seed>`, `synthetic_therapy-v2/`
for the AnswerTherapy tasks). A folder holding a complete embedded dataset of the right
kind (its MANIFEST.json) is used as it is; a folder that does not exist yet (or is empty)
gets the dataset written into it, as a visible step; any other folder is refused, so a
config pointing at real files never generates over them. Loaders never generate.

A zero-shot CLIPSeg row's `config.model.init_from` at its small sizes, `RANDOM_CLIPSEG`, is a tiny
CLIPSeg checkpoint of random weights (`synthetic/clipseg.py`), written there on first use.

A ViLT row's `config.data.features` `features/pixelsN.npy` (`PIXEL_STORE`) is the `pixels`
store of the dataset's pictures at N px: made on first use beside its other stores, from
the pictures they record.
"""

from __future__ import annotations

import json
import os
import re

from absl import logging

from vqajax.core.errors import InputError
from vqajax.synthetic import clipseg, folder, pictures
from vqajax.synthetic.answertherapy import write as therapy_write
from vqajax.synthetic.vqa import write as vqa_write

CACHE = os.path.join("~", ".cache", "vqajax")
# the cache folders, named by their format (a cache of another format is left as it is)
_KINDS = {"vqa": (vqa_write, "synthetic-v3")}
_THERAPY = (therapy_write, "synthetic_therapy-v2")
PIXEL_STORE = re.compile(r"features/pixels(\d+)\.npy")
_PICTURES = {"vqa": "features/fc7.h5"}  # the store recording the pictures (else the therapy grid)
RANDOM_CLIPSEG = os.path.join(os.path.expanduser(CACHE), "clipseg-random-v1")  # a random checkpoint, made on first use


def _manifest_format(data_dir: str) -> str | None:
  try:
    with open(os.path.join(data_dir, "MANIFEST.json"), encoding="utf-8") as f:
      return json.load(f).get("format")
  except (OSError, ValueError, AttributeError):
    return None


def holds_dataset(data_dir: str) -> bool:
  """Whether `data_dir` holds an embedded synthetic dataset (its MANIFEST.json, of any format)."""
  return _manifest_format(data_dir) is not None


def resolve(config) -> None:
  """An empty `data.dir` of an embedded-data config set to its dataset's cache folder (nothing written)."""
  data = config.data
  if data.synthetic and not data.dir:
    data.dir = os.path.join(os.path.expanduser(CACHE), _KINDS.get(config.task, _THERAPY)[1],
                            f"{data.synthetic_scale}-seed{config.seed}")


def prepare(config) -> None:
  """Resolves and, where needed, writes the embedded dataset of `config` (logged)."""
  data = config.data
  _random_checkpoint(config)
  if not data.synthetic:
    if not data.dir:
      raise InputError("config.data.dir: empty; name the folder of the official files "
                       "(or set config.data.synthetic=True for the embedded dataset)")
    return
  module = _KINDS.get(config.task, _THERAPY)[0]
  resolve(config)
  found = _manifest_format(data.dir)
  if found == module.FORMAT:
    logging.info("embedded synthetic dataset: %s", data.dir)
    _pixels(config)
    return
  if found is not None:
    raise InputError(f"config.data.dir {data.dir}: holds a {found} dataset, config.task "
                     f"'{config.task}' reads {module.FORMAT}")
  if os.path.lexists(data.dir) and not (os.path.isdir(data.dir) and not os.listdir(data.dir)):
    raise InputError(f"config.data.dir {data.dir}: holds files but no embedded synthetic dataset "
                     "(MANIFEST.json); set config.data.synthetic=False to read them as the "
                     "official files")
  logging.info("writing the embedded synthetic dataset (scale %s, seed %d) to %s",
               data.synthetic_scale, config.seed, data.dir)
  module.generate(data.dir, seed=config.seed, scale=data.synthetic_scale)
  _pixels(config)


def _pixels(config) -> None:
  """The pixel store a ViLT row names (`PIXEL_STORE`), made if missing."""
  match = PIXEL_STORE.fullmatch(config.data.get("features", ""))
  out = match and os.path.join(config.data.dir, match[0])
  if not match or os.path.exists(out):
    return
  logging.info("writing the embedded pictures' pixel store (%s px) to %s", match[1], out)
  source = os.path.join(config.data.dir, _PICTURES.get(config.task, "features/therapy_grid.npy"))
  pictures.pixel_store(source, out, int(match[1]))


def _random_checkpoint(config) -> None:
  """The random CLIPSeg checkpoint a config starts from (`RANDOM_CLIPSEG`), written if missing; one
  that another process wrote meanwhile (the same seed: the same files) is taken as it is."""
  if config.model.get("init_from") != RANDOM_CLIPSEG or os.path.exists(RANDOM_CLIPSEG):
    return
  logging.info("writing a random CLIPSeg checkpoint (no download; its masks are random weights') to %s",
               RANDOM_CLIPSEG)
  try:
    folder.write_new(RANDOM_CLIPSEG, clipseg.write)
  except InputError:
    if not os.path.isdir(RANDOM_CLIPSEG):
      raise
