"""The embedded synthetic VQA dataset, written in the official file formats.

`generate(out_dir, seed, scale)` writes, deterministically (same seed and scale give
byte-identical files) and atomically (each file via a temp file and `os.replace`;
`MANIFEST.json` last, so a directory with a manifest is complete):

  v2_OpenEnded_mscoco_{train,val}2014_questions.json   VQA v2 open-ended questions
  v2_mscoco_{train,val}2014_annotations.json           VQA v2 annotations, 10 answers each
  MultipleChoice_mscoco_{train,val}2014_questions.json VQA v1 multiple choice, 18 choices
  v2_OpenEnded_mscoco_{test-dev,test}2015_questions.json  questions-only test splits (test-dev
                                                       a quarter of test's images, as the real ones)
  {OpenEnded,MultipleChoice}_mscoco_{test-dev,test}2015_questions.json  the same as VQA v1 files
  captions_{train,val}2014.json                        COCO captions, 5 per image
  {train,val}2014/COCO_{train,val}2014_<id>.jpg,       the pictures (`draw`), as COCO's files are named
  test2015/COCO_test2015_<id>.jpg
  features/fc7.h5                                      [N, 4096] float16, train+val+test images
  features/conv5_grid.npy (+ .image_ids.npy)           [N, 7, 7, 64] float16
  features/grid_layout.json                            object boxes in grid cells per image
  MANIFEST.json                                        scale, seed, counts, files

The images, questions and answers come from `synthetic_world`, `synthetic_questions`
and `synthetic_annotators`; the two feature stores are made from the pictures by the
`colour_cells` extractor (`features/models.py`: layers `global` and `grid7`), through the
code `vqajax ask` computes an upload's features with, and record its settings and each
row's picture (relative to the store), so a run on them answers about new pictures too;
`sample(seed, scale)` returns them in memory (with each question's true answer) for
tests and oracles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from collections import Counter

import numpy as np

from vqajax.core.errors import InputError
from vqajax.core.files import write_json_atomic
from vqajax.synthetic import folder, pictures
from vqajax.synthetic.vqa import annotators as SA
from vqajax.synthetic.vqa import questions as SQ
from vqajax.synthetic.vqa import world as W
from vqajax.synthetic.vqa.draw import picture


@dataclasses.dataclass(frozen=True)
class Scale:
  train_images: int
  val_images: int
  test_images: int
  questions_per_image: int = 3


SCALES = {
    "tiny": Scale(120, 60, 40),             # ~360 train questions: unit tests
    "small": Scale(1000, 500, 300),         # ~3k: CPU smoke runs
    "medium": Scale(10000, 5000, 3000),     # ~30k
    "large": Scale(34000, 12000, 8000),     # ~100k: benchmarks
}
SPLITS = ("train", "val")
TEST_SUBTYPES = ("test-dev2015", "test2015")  # the questions-only splits (images of `test`)
MANIFEST = "MANIFEST.json"
FORMAT = "vqajax-synthetic/3"  # 2: the test splits; 3: pictures, features made from them

FILES = {
    "train_questions": "v2_OpenEnded_mscoco_train2014_questions.json",
    "val_questions": "v2_OpenEnded_mscoco_val2014_questions.json",
    "train_annotations": "v2_mscoco_train2014_annotations.json",
    "val_annotations": "v2_mscoco_val2014_annotations.json",
    "train_mc_questions": "MultipleChoice_mscoco_train2014_questions.json",
    "val_mc_questions": "MultipleChoice_mscoco_val2014_questions.json",
    **{f"{subtype}_{version}{task}": f"{prefix}{task}_mscoco_{subtype}_questions.json"
       for subtype in TEST_SUBTYPES
       for version, prefix, task in (("v2_", "v2_", "OpenEnded"), ("v1_", "", "OpenEnded"),
                                     ("v1_", "", "MultipleChoice"))},
    "train_captions": "captions_train2014.json",
    "val_captions": "captions_val2014.json",
    "features": "features/fc7.h5",
    "grid_features": "features/conv5_grid.npy",
    "grid_image_ids": "features/conv5_grid.image_ids.npy",
    "grid_layout": "features/grid_layout.json",
}
_LICENSE = {"url": "http://creativecommons.org/licenses/by/4.0/",
            "name": "Creative Commons Attribution 4.0 International License"}


@dataclasses.dataclass
class World:
  seed: int
  scale: str
  images: dict[str, list[W.Image]]        # train, val, test
  questions: dict[str, list[SA.Question]]
  test_dev: set[int]                      # the image ids of test-dev


def _random(seed: int, purpose: str) -> random.Random:
  return random.Random(f"vqajax-synthetic/{seed}/{purpose}")


def sample(seed: int = 0, scale: str = "tiny") -> World:
  """Images (latent attributes) and questions (with annotations) of the dataset."""
  if scale not in SCALES:
    raise InputError(f"config.data.synthetic_scale: unknown synthetic scale {scale!r}; expected one of {sorted(SCALES)}")
  sc = SCALES[scale]
  n = sc.train_images + sc.val_images
  ids = np.random.default_rng([seed, 0]).choice(581_929, size=n, replace=False) + 1
  split_ids = {"train": sorted(ids[:sc.train_images].tolist()), "val": sorted(ids[sc.train_images:].tolist())}
  r_img, r_q = _random(seed, "images"), _random(seed, "questions")
  images, questions = {}, {}
  for split in SPLITS:
    images[split] = [W.sample_image(r_img, i, split) for i in split_ids[split]]
    questions[split] = _questions(images[split], r_q, sc)
  # test: images of their own streams, so train and val stay as they were without it
  taken = set(ids.tolist())
  candidates = np.random.default_rng([seed, 3]).choice(581_929, size=n + sc.test_images, replace=False) + 1
  test_ids = sorted([i for i in candidates.tolist() if i not in taken][:sc.test_images])
  r_img, r_q = _random(seed, "test-images"), _random(seed, "test-questions")
  images["test"] = [W.sample_image(r_img, i, "test") for i in test_ids]
  questions["test"] = _questions(images["test"], r_q, sc)
  test_dev = set(_random(seed, "test-dev").sample(test_ids, len(test_ids) // 4))
  return World(seed, scale, images, questions, test_dev)


def _questions(images: list[W.Image], r: random.Random, sc: Scale) -> list[SA.Question]:
  return [SA.make_question(img, k, name, spec, r) for img in images
          for k, (name, spec) in enumerate(SQ.ask(img, r, sc.questions_per_image))]


def test_questions(world: World, subtype: str) -> list[SA.Question]:
  """The questions of test split `subtype` (test-dev2015: those of the test-dev images)."""
  return [q for q in world.questions["test"] if subtype == "test2015" or q.image_id in world.test_dev]


# --- file contents -----------------------------------------------------------------

# The release a file's `info` names, as the real files do: VQA v2's (`v2_*`), VQA v1's (the files
# without the prefix) and COCO 2014's captions: (url, version, year, date_created).
_RELEASES = {"vqa2": ("http://visualqa.org", "2.0", 2017, "2017-04-26 17:00:00"),
             "vqa1": ("http://visualqa.org", "1.0", 2015, "2015-10-02 00:00:00"),
             "coco": ("http://mscoco.org", "1.0", 2014, "2015-01-27 09:11:52.357475")}


def _info(world: World, what: str, release: str) -> dict:
  url, version, year, date = _RELEASES[release]
  return {"description": f"vqajax synthetic {what} (seed {world.seed}, scale {world.scale}); "
                         "not real data, for tests and CPU runs",
          "url": url, "version": version, "year": year,
          "contributor": "vqajax synthetic generator", "date_created": date}


def _questions_json(world, questions, subtype: str, release: str, mc_choices=None) -> dict:
  qs = []
  for q in questions:
    entry = {"image_id": q.image_id, "question": q.question}
    if mc_choices is not None:
      entry["multiple_choices"] = mc_choices[q.question_id]
    entry["question_id"] = q.question_id
    qs.append(entry)
  return {"info": _info(world, "questions", release),
          "task_type": "Open-Ended" if mc_choices is None else "Multiple-Choice",
          "data_type": "mscoco", "license": _LICENSE, "data_subtype": subtype, "questions": qs}


def _annotations_json(world, split) -> dict:
  anns = [{"question_type": q.question_type, "multiple_choice_answer": q.multiple_choice_answer,
           "answers": q.answers, "image_id": q.image_id, "answer_type": q.answer_type,
           "question_id": q.question_id} for q in world.questions[split]]
  return {"info": _info(world, "annotations", "vqa2"), "license": _LICENSE, "data_subtype": f"{split}2014",
          "annotations": anns}


def multiple_choices(world: World) -> dict[int, list[str]]:
  """18 unique choices per question, as in VQA v1: the correct answer, 3 plausible
  answers (drawn from the question type's answer prior, as people answering without the
  image would), the 10 most popular answers, random dataset answers to fill; shuffled."""
  train_mc = [q.multiple_choice_answer for q in world.questions["train"]]
  popular = [a for a, _ in sorted(Counter(train_mc).items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
  prior: dict[str, Counter] = {}
  for q in world.questions["train"]:
    prior.setdefault(q.question_type, Counter())[q.multiple_choice_answer] += 1
  prior_tables = {t: W.Table(sorted(c.items())) for t, c in prior.items()}
  fallback = W.Table(sorted(Counter(train_mc).items()))
  pool = sorted(set(train_mc) | set(W.COLOURS) | set(W.CATEGORY_NAMES) | {str(i) for i in range(21)}
                | set(W.SPORTS) | set(W.ROOMS) | {"yes", "no"})
  out = {}
  for splits, purpose in ((SPLITS, "multiple-choice"), (("test",), "multiple-choice/test")):
    r = _random(world.seed, purpose)
    for q in (q for split in splits for q in world.questions[split]):
      choices = [q.multiple_choice_answer]
      seen = {q.multiple_choice_answer}
      table = prior_tables.get(q.question_type, fallback)
      for _ in range(12):  # plausible: 3 "blind" answers from the type's prior
        if len(choices) == 4:
          break
        a = W.weighted(r, table)
        if a not in seen:
          seen.add(a)
          choices.append(a)
      for a in popular:
        if a not in seen:
          seen.add(a)
          choices.append(a)
      while len(choices) < 18:
        a = pool[r.randrange(len(pool))]
        if a not in seen:
          seen.add(a)
          choices.append(a)
      r.shuffle(choices)
      out[q.question_id] = choices
  return out


_SCENE_PHRASES = {
    "kitchen": ("in a kitchen", "on a kitchen counter"), "living room": ("in a living room", "in a cozy living room"),
    "bedroom": ("in a bedroom", "on a bed"), "bathroom": ("in a bathroom", "in a small bathroom"),
    "office": ("on a desk", "in an office"), "restaurant": ("on a table", "at a restaurant"),
    "street": ("on a city street", "on the street", "on a road"), "city": ("in the city", "in a busy city"),
    "parking lot": ("in a parking lot",), "train station": ("at a train station", "on the tracks"),
    "airport": ("at an airport", "on the runway", "on a tarmac"), "park": ("in a park", "on the grass"),
    "field": ("in a grassy field", "in a field", "on the grass"), "beach": ("on the beach", "on a sandy beach"),
    "ocean": ("in the ocean", "on the water", "on a wave"), "harbor": ("in a harbor", "at the dock"),
    "zoo": ("at the zoo", "in an enclosure"), "forest": ("in the woods", "in a forest"),
    "snow": ("on a snowy slope", "down a snow covered hill", "on a mountain"),
    "tennis court": ("on a tennis court", "on a court"), "baseball field": ("on a baseball field", "at a game"),
    "skate park": ("at a skate park", "on a ramp"),
}
_CAPTION_SYNONYMS = {"couch": "sofa", "tv": "television", "bicycle": "bike", "airplane": "plane",
                     "refrigerator": "fridge", "dog": "puppy", "cat": "kitty", "motorcycle": "motorbike",
                     "donut": "doughnut", "boat": "ship", "laptop": "computer", "tennis racket": "racquet"}
_NUMBER_WORDS = ("no", "one", "two", "three", "four")


def _caption(img: W.Image, r: random.Random) -> str:
  name = img.name
  if name in _CAPTION_SYNONYMS and r.random() < 0.3:
    name = _CAPTION_SYNONYMS[name]
  colour = img.colour + " " if r.random() < 0.5 else ""
  place = r.choice(_SCENE_PHRASES[img.scene])
  if img.count == 1:
    things = SA.article(colour + name)
  elif img.count <= 4 and r.random() < 0.7:
    things = f"{_NUMBER_WORDS[img.count]} {colour}{W.PLURAL.get(name, name + 's')}"
  else:
    things = f"{r.choice(('a group of', 'several', 'many', 'some'))} {colour}{W.PLURAL.get(name, name + 's')}"
  options = [f"{things} {place}", f"{r.choice(('a picture of', 'an image of', 'a photo of', 'a close up of'))} "
             f"{things}"]
  if img.animal_activity:
    options.append(f"{things} {img.animal_activity} {place}")
  if img.person is not None:
    options += [f"a {img.person} {img.person_activity} {place}"] * 2
    if img.holding not in (None, "nothing"):
      options.append(f"a {img.person} holding {SA.article(img.holding)}")
  if img.secondaries:
    sec = list(img.secondaries)[r.randrange(len(img.secondaries))]
    options.append(f"there {'is' if img.count == 1 else 'are'} {things} next to {SA.article(sec)}")
  if img.night:
    options.append(f"{things} {place} at night")
  elif img.weather in ("sunny", "cloudy"):
    options.append(f"{things} {place} on a {img.weather} day")
  text = options[r.randrange(len(options))]
  if r.random() < 0.03:  # a typo
    i = r.randrange(max(1, len(text) - 1))
    text = text[:i] + text[i + 1:i + 2] + text[i:i + 1] + text[i + 2:]
  if r.random() < 0.8:
    text = text[0].upper() + text[1:]
  return text + ("." if r.random() < 0.6 else "") + (" " if r.random() < 0.02 else "")


def _captions_json(world, split, first_id: int) -> dict:
  r = _random(world.seed, f"captions/{split}")
  images, anns, next_id = [], [], first_id
  for img in world.images[split]:
    images.append({"license": 1, "file_name": f"COCO_{split}2014_{img.image_id:012d}.jpg", "coco_url": "",
                   "height": img.height, "width": img.width, "date_captured": "2013-11-14 16:28:13",
                   "flickr_url": "", "id": img.image_id})
    for _ in range(5):
      anns.append({"image_id": img.image_id, "id": next_id, "caption": _caption(img, r)})
      next_id += 1
  return {"info": _info(world, "captions", "coco"), "images": images,
          "licenses": [{"url": _LICENSE["url"], "id": 1, "name": _LICENSE["name"]}], "annotations": anns}


# --- writing -----------------------------------------------------------------------

def answer_type_shares(questions) -> dict[str, float]:
  counts = Counter(q.answer_type for q in questions)
  return {t: round(counts[t] / max(1, len(questions)), 4) for t in ("yes/no", "number", "other")}


def _write_json(path: str, obj) -> None:
  write_json_atomic(path, obj, make_dirs=True)


def generate(out_dir: str, seed: int = 0, scale: str = "tiny") -> dict[str, str]:
  """Writes the dataset under `out_dir`; returns {role: path} including 'manifest'.
  Only into a new or empty folder (`synthetic/folder.py`)."""
  return folder.write_new(out_dir, lambda tmp: _write(tmp, seed, scale))


def picture_path(img: W.Image) -> str:
  """Where the picture of `img` lies in the dataset's folder (COCO's folder and file names)."""
  subtype = "test2015" if img.split == "test" else f"{img.split}2014"
  return os.path.join(subtype, f"COCO_{subtype}_{img.image_id:012d}.jpg")


def _write(out_dir: str, seed: int, scale: str) -> dict[str, str]:
  world = sample(seed, scale)
  paths = {role: os.path.join(out_dir, rel) for role, rel in FILES.items()}
  os.makedirs(os.path.join(out_dir, "features"), exist_ok=True)
  manifest_path = os.path.join(out_dir, MANIFEST)
  choices = multiple_choices(world)
  caption_id = 1
  for split in SPLITS:
    _write_json(paths[f"{split}_questions"],
                _questions_json(world, world.questions[split], f"{split}2014", "vqa2"))
    _write_json(paths[f"{split}_annotations"], _annotations_json(world, split))
    _write_json(paths[f"{split}_mc_questions"],
                _questions_json(world, world.questions[split], f"{split}2014", "vqa1", choices))
    _write_json(paths[f"{split}_captions"], _captions_json(world, split, caption_id))
    caption_id += 5 * len(world.images[split])
  for subtype in TEST_SUBTYPES:
    questions = test_questions(world, subtype)
    _write_json(paths[f"{subtype}_v2_OpenEnded"], _questions_json(world, questions, subtype, "vqa2"))
    _write_json(paths[f"{subtype}_v1_OpenEnded"], _questions_json(world, questions, subtype, "vqa1"))
    _write_json(paths[f"{subtype}_v1_MultipleChoice"],
                _questions_json(world, questions, subtype, "vqa1", choices))
  images = world.images["train"] + world.images["val"] + world.images["test"]
  ids = np.array([img.image_id for img in images], np.int64)
  files = [os.path.join(out_dir, picture_path(img)) for img in images]
  pictures.write(lambda img: picture(img, seed), images, files)
  pictures.extract_stores(files, ids, {"global": paths["features"], "grid7": paths["grid_features"]})
  _write_json(paths["grid_layout"], {
      "grid_size": W.GRID, "box_format": "[label, x0, y0, x1, y1] in grid cells, x1 and y1 exclusive",
      "images": {str(img.image_id): [list(b) for b in img.boxes] for img in images}})
  counts = {f"{split}_{what}": len(getattr(world, what)[split]) for split in SPLITS + ("test",)
            for what in ("images", "questions")}
  counts["test-dev_questions"] = len(test_questions(world, "test-dev2015"))
  counts["feature_rows"] = len(images)
  _write_json(manifest_path, {
      "format": FORMAT, "scale": scale, "seed": seed, "counts": counts,
      "answer_type_shares": {split: answer_type_shares(world.questions[split]) for split in SPLITS},
      "files": dict(FILES)})
  paths["manifest"] = manifest_path
  return paths


def read_manifest(out_dir: str) -> dict | None:
  """The manifest of a complete dataset under `out_dir`, or None if there is none."""
  path = os.path.join(out_dir, MANIFEST)
  try:
    with open(path) as f:
      manifest = json.load(f)
  except (OSError, ValueError):
    return None
  if manifest.get("format") != FORMAT:
    return None
  if not all(os.path.exists(os.path.join(out_dir, rel)) for rel in manifest.get("files", {}).values()):
    return None
  return manifest
