"""The embedded synthetic VQA-AnswerTherapy dataset, in the released file format.

`generate(out_dir, seed, scale)` writes, deterministically (same seed and scale give
byte-identical files) and atomically (MANIFEST.json last, so a directory with a
manifest is complete):

  VQA_{train,val,test}.json, VizWiz_{train,val,test}.json
      JSON lists of {answer_type, answers, binary_label (single / multiple),
      grounding_labels (one polygon of {x, y} pixels per answer), height, image_id,
      question, question_id (VQA-sourced only), width}; splits 70 / 10 / 20
  {train2014,val2014,test2015}/COCO_<subtype>_<id>.jpg, {train,val,test}/VizWiz_<split>_<n>.jpg
      the pictures (`draw`), named as COCO's and VizWiz's files
  features/therapy_grid.npy (+ .image_ids.npy, .settings.json, .image_paths.json)
      [N, 14, 14, 32] float16 grid features of the pictures (`colour_cells` layer `grid14`),
      one row per image, keyed by `feature_key(image_id)`
  MANIFEST.json   scale, seed, grid shape, counts (samples and multiple per file,
                  families), files

One image per question. VQA-sourced images are the VQA synthetic world's
(`synthetic_world.sample_image`: COCO-like id and size, scene, secondary objects as
distractors); VizWiz-sourced ones are close-ups of a household item at phone-camera
sizes. The questions, answers and the things they are grounded on come from the
families of `synthetic_therapy_questions` (examples there); `binary_label` is single
exactly when all answers are grounded on one thing (identical polygons).

Grid features (14 x 14, like VGG conv5 at 448 px or ViT-B/16 patch tokens at 224 px;
`masks.to_grid` cells) are made from the pictures by the `colour_cells` extractor
(`features/models.py`), through the code `vqajax ask` computes an upload's features with:
each thing's polygon is drawn in stripes of colours that name its label, colour and text,
so a thing's mask can be read back from the cells and an answer ("red", "sofa",
"campbells") points at the cells whose colours it names.
"""

from __future__ import annotations

import dataclasses
import os
import random

import numpy as np

from vqajax.answertherapy.files import VIZWIZ, VQA
from vqajax.core.errors import InputError
from vqajax.core.files import write_json_atomic
from vqajax.features.keys import feature_key
from vqajax.synthetic import folder, pictures
from vqajax.synthetic.answertherapy import questions as TQ
from vqajax.synthetic.answertherapy.draw import picture
from vqajax.synthetic.vqa import world as W

GRID = 14
CHANNELS = 32
FORMAT = "vqajax-synthetic-therapy/2"  # 2: pictures, features made from them
MANIFEST = "MANIFEST.json"
SPLITS = ("train", "val", "test")
SPLIT_SHARES = (0.7, 0.1, 0.2)
FILE_PREFIX = {VQA: "VQA", VIZWIZ: "VizWiz"}
FILES = {**{f"{p}_{s}": f"{p}_{s}.json" for p in FILE_PREFIX.values() for s in SPLITS},
         "grid_features": "features/therapy_grid.npy", "grid_image_ids": "features/therapy_grid.image_ids.npy"}
# (width, height) of VizWiz-like photos, a quarter of the sizes of the released train file (weighted
# as there): the pictures stay quick to write and to read
VIZWIZ_SIZES = {(306, 408): 9, (242, 324): 7, (90, 120): 2, (120, 160): 1, (484, 648): 1}
SCALES = {"tiny": (170, 230), "small": (700, 900), "medium": (2150, 2850)}  # (VQA, VizWiz) questions
COCO_SUBTYPES = {"train": "train2014", "val": "val2014", "test": "test2015"}  # folders of the VQA-sourced pictures

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


def picture_path(item: Item) -> str:
  """Where the picture of `item` lies in the dataset's folder (COCO's and VizWiz's names)."""
  if item.source == VIZWIZ:
    return os.path.join(item.split, item.image_id)
  subtype = COCO_SUBTYPES[item.split]
  return os.path.join(subtype, f"COCO_{subtype}_{int(item.image_id):012d}.jpg")


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
  files = [os.path.join(out_dir, picture_path(it)) for it in items]
  pictures.write(picture, items, files)
  pictures.extract_stores(files, keys, {"grid14": paths["grid_features"]})
  families = {f: sum(it.family == f for it in items) for f in TQ.FAMILIES}
  write_json_atomic(manifest_path, {
      "format": FORMAT, "scale": scale, "seed": seed,
      "grid": {"size": GRID, "channels": CHANNELS, "dtype": "float16",
               "keys": "vqajax.features.keys.feature_key(image_id)"},
      "counts": counts, "families": families, "files": dict(FILES)})
  paths["manifest"] = manifest_path
  return paths
