"""The embedded synthetic VQA-AnswerTherapy dataset, in the released file format.

`generate(out_dir, seed, scale)` writes, deterministically (same seed and scale give
byte-identical files) and atomically (MANIFEST.json last, so a directory with a
manifest is complete):

  VQA_{train,val,test}.json, VizWiz_{train,val,test}.json
      JSON lists of {answer_type, answers, binary_label (single / multiple),
      grounding_labels (one polygon of {x, y} pixels per answer), height, image_id,
      question, question_id (VQA-sourced only), width}; splits 70 / 10 / 20
  features/therapy_grid.npy (+ .image_ids.npy)
      [N, 14, 14, 32] float16 grid features, one row per image, keyed by
      `feature_key(image_id)`
  MANIFEST.json   scale, seed, grid shape, counts (samples and multiple per file,
                  families), files

One image per question. VQA-sourced images are the VQA synthetic world's
(`synthetic_world.sample_image`: COCO-like id and size, scene, secondary objects as
distractors); VizWiz-sourced ones are close-ups of a household item at phone-camera
sizes. The questions, answers and the things they are grounded on come from the
families of `synthetic_therapy_questions` (examples there); `binary_label` is single
exactly when all answers are grounded on one thing (identical polygons).

Grid features (14 x 14, like VGG conv5 at 448 px or ViT-B/16 patch tokens at 224 px;
`masks.to_grid` cells): cell (i, j) holds, for every thing in the image (grounded or
not), the fraction of the cell its polygon covers times the thing's vector (label +
colour + text embeddings), over the scene's vector, plus per-image and per-cell
Gaussian noise, then ReLU. So a thing's mask can be read back from the cells and an
answer ("red", "sofa", "campbells") points at the cells whose vector it names.
"""

from __future__ import annotations

import dataclasses
import os
import random
import zlib

import numpy as np

from vqajax.answertherapy import masks
from vqajax.answertherapy.files import VIZWIZ, VQA
from vqajax.core.errors import InputError
from vqajax.core.files import write_json_atomic
from vqajax.features.keys import feature_key
from vqajax.features.store import write_store
from vqajax.synthetic import folder
from vqajax.synthetic.answertherapy import questions as TQ
from vqajax.synthetic.vqa import world as W

GRID = 14
CHANNELS = 32
FORMAT = "vqajax-synthetic-therapy/1"
MANIFEST = "MANIFEST.json"
SPLITS = ("train", "val", "test")
SPLIT_SHARES = (0.7, 0.1, 0.2)
FILE_PREFIX = {VQA: "VQA", VIZWIZ: "VizWiz"}
FILES = {**{f"{p}_{s}": f"{p}_{s}.json" for p in FILE_PREFIX.values() for s in SPLITS},
         "grid_features": "features/therapy_grid.npy", "grid_image_ids": "features/therapy_grid.image_ids.npy"}
# (width, height) of VizWiz-like photos, with weights like the released train file's.
VIZWIZ_SIZES = {(1224, 1632): 9, (968, 1296): 7, (360, 480): 2, (480, 640): 1, (1936, 2592): 1}
SCALES = {"tiny": (170, 230), "small": (700, 900), "medium": (2150, 2850)}  # (VQA, VizWiz) questions
# Norms of the parts of the grid features, per channel.
VECTOR_SCALES = {"label": 1.0, "colour": 0.8, "text": 1.0, "scene": 0.5}
IMAGE_NOISE, CELL_NOISE = 0.3, 0.4
_RASTER = 8 * GRID  # polygons are rasterised at 112 x 112 for the features


@dataclasses.dataclass(frozen=True, eq=False)
class Item:
  """One visual question: answers[j] is grounded on things[grounds[j]]."""
  family: str
  source: str  # therapy_files.VQA | VIZWIZ
  split: str
  image_id: str
  question_id: str | None
  question: str
  answers: tuple[str, ...]
  grounds: tuple[int, ...]
  things: tuple[TQ.Thing, ...]
  scene: str
  width: int
  height: int
  answer_type: str

  @property
  def label(self) -> str:
    return "single" if len(set(self.grounds)) == 1 else "multiple"


def _split_names(n: int) -> list[str]:
  counts = [round(n * share) for share in SPLIT_SHARES[:-1]]
  return [s for s, c in zip(SPLITS, counts + [n - sum(counts)]) for _ in range(c)]


def _distractors(r: random.Random, d: TQ.Draft, labels: list[str]) -> tuple[TQ.Thing, ...]:
  """Things no question family asks about, each apart from every other thing."""
  taken, out = [t.box for t in d.things], []
  shown = {t.label for t in d.things}
  for name in labels:
    asked = name in shown or name in W.CATEGORY_INDEX or name in TQ.TABLE_ITEMS or name in d.answers
    box = None if asked else TQ.free_box(r, taken, (0.08, 0.2), (0.08, 0.2))
    if box is not None:
      taken.append(box)
      out.append(TQ.Thing(name, box, TQ.polygon(r, box)))
  return tuple(out)


def _item(d: TQ.Draft, r: random.Random, source: str, split: str, image_id: str, question_id: str | None,
          scene: str, size: tuple[int, int], distractors: list[str]) -> Item:
  order = list(range(len(d.answers)))
  r.shuffle(order)
  return Item(family=d.family, source=source, split=split, image_id=image_id, question_id=question_id,
              question=d.question, answers=tuple(d.answers[j] for j in order),
              grounds=tuple(d.grounds[j] for j in order), things=d.things + _distractors(r, d, distractors),
              scene=scene, width=size[0], height=size[1], answer_type=d.answer_type)


def sample(seed: int = 0, scale: str = "tiny") -> list[Item]:
  """The dataset's visual questions (VQA-sourced, then VizWiz-sourced; splits in order)."""
  if scale not in SCALES:
    raise InputError(f"config.data.synthetic_scale: unknown synthetic therapy scale {scale!r}; expected one of {sorted(SCALES)}")
  n_vqa, n_vizwiz = SCALES[scale]
  r_world, r = (random.Random(f"vqajax-synthetic-therapy/{seed}/{what}") for what in ("images", "questions"))
  rng = np.random.default_rng([seed, 10])
  coco_ids = rng.choice(581_929, size=n_vqa, replace=False) + 1
  vizwiz_numbers = rng.choice(40_000, size=n_vizwiz, replace=False)
  items = []
  for image_id, split in zip(coco_ids.tolist(), _split_names(n_vqa)):
    img = W.sample_image(r_world, image_id, split)
    items.append(_item(TQ.draft(r, VQA), r, VQA, split, str(image_id), f"{image_id}{r.randrange(1000):03d}",
                       img.scene, (img.width, img.height), list(img.secondaries)[:3]))
  for number, split in zip(vizwiz_numbers.tolist(), _split_names(n_vizwiz)):
    size = W.weighted(r_world, VIZWIZ_SIZES)
    scene = r_world.choice(W.ROOMS)
    distractors = ["hand"] if r_world.random() < 0.4 else []
    items.append(_item(TQ.draft(r, VIZWIZ), r, VIZWIZ, split, f"VizWiz_{split}_{number:08d}.jpg", None,
                       scene, size, distractors))
  return items


# --- grid features ---------------------------------------------------------------------

def cell_fractions(polygon: np.ndarray) -> np.ndarray:
  """[GRID, GRID] share of each cell that a unit-coordinate polygon covers (at 112 px)."""
  return masks.to_grid(masks.polygon_mask(polygon * _RASTER, _RASTER, _RASTER), GRID)


class _Vectors:
  """Fixed random vectors per (kind, word), from the seed and a hash of the word."""

  def __init__(self, seed: int):
    self.seed, self.cache = seed, {}

  def __call__(self, kind: str, word: str | None) -> np.ndarray | float:
    if word is None:
      return 0.0
    key = (kind, word)
    if key not in self.cache:
      rng = np.random.default_rng([self.seed, 11, list(VECTOR_SCALES).index(kind), zlib.crc32(word.encode())])
      self.cache[key] = VECTOR_SCALES[kind] * rng.standard_normal(CHANNELS)
    return self.cache[key]


def grid_features(items: list[Item], seed: int) -> np.ndarray:
  """[N, GRID, GRID, CHANNELS] float16 (module docstring)."""
  vectors = _Vectors(seed)
  rng = np.random.default_rng([seed, 12])
  out = np.empty((len(items), GRID, GRID, CHANNELS), np.float16)
  for n, item in enumerate(items):
    cells = np.zeros((GRID, GRID, CHANNELS))
    cells += vectors("scene", item.scene) + IMAGE_NOISE * rng.standard_normal(CHANNELS)
    for t in item.things:
      vector = vectors("label", t.label) + vectors("colour", t.colour) + vectors("text", t.text)
      cells += cell_fractions(t.polygon)[..., None] * vector
    cells += CELL_NOISE * rng.standard_normal(cells.shape)
    out[n] = np.maximum(cells, 0.0)
  return out


# --- files --------------------------------------------------------------------------------

def record(item: Item) -> dict:
  """The released-format record of an item (keys in the released files' order)."""
  polygons = [[{"x": round(float(x) * item.width, 2), "y": round(float(y) * item.height, 2)}
               for x, y in item.things[g].polygon] for g in item.grounds]
  out = {"answer_type": item.answer_type, "answers": list(item.answers), "binary_label": item.label,
         "grounding_labels": polygons, "height": item.height, "image_id": item.image_id,
         "question": item.question}
  if item.question_id is not None:
    out["question_id"] = item.question_id
  out["width"] = item.width
  return out


def generate(out_dir: str, seed: int = 0, scale: str = "tiny") -> dict[str, str]:
  """Writes the dataset under `out_dir`; returns {role: path} including 'manifest'.
  Only into a new or empty folder (`synthetic/folder.py`)."""
  return folder.write_new(out_dir, lambda tmp: _write(tmp, seed, scale))


def _write(out_dir: str, seed: int, scale: str) -> dict[str, str]:
  items = sample(seed, scale)
  paths = {role: os.path.join(out_dir, rel) for role, rel in FILES.items()}
  manifest_path = os.path.join(out_dir, MANIFEST)
  counts = {}
  for source, prefix in FILE_PREFIX.items():
    for split in SPLITS:
      part = [it for it in items if it.source == source and it.split == split]
      write_json_atomic(paths[f"{prefix}_{split}"], [record(it) for it in part], make_dirs=True)
      counts[f"{prefix}_{split}"] = {"samples": len(part), "multiple": sum(it.label == "multiple" for it in part)}
  keys = np.array([feature_key(it.image_id) for it in items], np.int64)
  write_store(paths["grid_features"], keys, grid_features(items, seed))
  families = {f: sum(it.family == f for it in items) for f in TQ.FAMILIES}
  write_json_atomic(manifest_path, {
      "format": FORMAT, "scale": scale, "seed": seed,
      "grid": {"size": GRID, "channels": CHANNELS, "dtype": "float16",
               "keys": "vqajax.features.keys.feature_key(image_id)"},
      "counts": counts, "families": families, "files": dict(FILES)})
  paths["manifest"] = manifest_path
  return paths
