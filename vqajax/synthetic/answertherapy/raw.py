"""A small seeded raw input for the AnswerTherapy construction that hits every step.

  vqajax data therapy-raw --out DIR [--seed S]

writes an official VQA v2 questions / annotations pair (10 answers per question),
VizWiz-VQA `train.json` and `val.json` and `groundings.json` (format: `construct`). Each
question follows one of `SCENARIOS` (fixed names and counts: 59 VQAv2 and 9 VizWiz
questions); the seed draws the image sizes, regions, words, shuffles and ids only, so the
construction removes the same number of items at every step for every seed.

Answers: each valid answer is given by `valid[j]` annotators, plus `singles` answers of
one annotator each and the `unusable` ones. Regions (integer rectangles, >= 24 pixels a
side unless contained): annotator 1 draws the answer's region, annotator 2 the same
grown by one pixel on a random side (they agree: IoU >= 0.92), except for the answers in
`disagree`, where annotator 2's is shifted by half its width (IoU about 1/3, at most
1/2 where the image clips it). The kept
groundings of a question stand in `relation`: equal (one region), disjoint (strips with
a 4-pixel gap), contained (an inner box 3 pixels inside the outer one, at most half its
side), intersected (two s x s boxes offset by (s/2, s/3): IoU about 0.2), or mixed
(contained + disjoint, equal + intersected).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Sequence

import numpy as np

from vqajax.answertherapy.files import VIZWIZ, VQA
from vqajax.core.files import write_atomic_many
from vqajax.core.text import most_common_answer
from vqajax.vqa.question_types import question_type

PLAIN = ("What is in the picture?", "What is the man holding?", "What is on the table?",
         "What is this?", "What color is the car?", "What is the woman wearing?",
         "What kind of food is this?", "Where is the dog?")
AND_LONG = ("What is between the table and the chair?", "What color are the cup and plate?",
            "What are the man and the woman holding?")  # > 5 words with "and": dropped
AND_SHORT = ("What is black and white?", "Who is here and why?")  # 5 words: kept
SEVERAL = ("What is this? What color is it?", "What brand is this, what does it say?")
WORDS = ("apple", "banana", "bench", "bike", "blue", "book", "bottle", "bowl", "box", "bus",
         "cake", "car", "cat", "chair", "clock", "cow", "cup", "dog", "door", "green", "hat",
         "horse", "kite", "lamp", "laptop", "phone", "pizza", "plate", "red", "shirt", "sign",
         "sink", "sofa", "table", "tie", "train", "tree", "truck", "vase", "white")
P2, P3 = (4, 3), (4, 2, 2)  # annotators per valid answer


@dataclasses.dataclass(frozen=True)
class Scenario:
  name: str
  count: int
  valid: tuple[int, ...]  # annotators per valid answer
  relation: str  # of the kept groundings (module docstring)
  singles: int = 0
  unusable: tuple[str, ...] = ()
  texts: tuple[str, ...] = PLAIN
  source: str = VQA
  split: str = "train"  # VizWiz
  grounded: bool = True
  several: bool = False
  disagree: tuple[int, ...] = ()  # answers whose annotators disagree
  repeat: bool = False  # each question is followed by a repeat (same image, re-spaced lower-case text)


SCENARIOS = (
    Scenario("equal2", 6, P2, "equal", singles=3),
    Scenario("equal3", 3, P3, "equal", singles=2),
    Scenario("disjoint2", 5, P2, "disjoint", singles=3),
    Scenario("disjoint3", 2, P3, "disjoint", singles=2),
    Scenario("contained", 5, P2, "contained", singles=3),
    Scenario("intersected", 5, P2, "intersected", singles=3),
    Scenario("contained+disjoint", 2, P3, "contained+disjoint", singles=2),
    Scenario("equal+intersected", 2, P3, "equal+intersected", singles=2),
    Scenario("unusable", 2, (3, 3), "disjoint", unusable=("unanswerable",) * 2 + ("unsuitable",) * 2),
    Scenario("mostly unanswerable", 2, (3,), "equal", singles=2, unusable=("unanswerable",) * 5),
    Scenario("one valid", 3, (8,), "equal", singles=2),
    Scenario("and long", 3, P2, "equal", singles=3, texts=AND_LONG),
    Scenario("and short", 2, P2, "disjoint", singles=3, texts=AND_SHORT),
    Scenario("repeated", 3, P2, "intersected", singles=3, repeat=True),
    Scenario("several questions", 3, P2, "equal", singles=3, texts=SEVERAL, several=True),
    Scenario("not grounded", 2, P2, "disjoint", singles=3, grounded=False),
    Scenario("disagreement to one", 3, P2, "equal", singles=3, disagree=(1,)),
    Scenario("disagreement", 3, P3, "disjoint", singles=2, disagree=(2,)),
    Scenario("vizwiz equal", 2, P2, "equal", unusable=("unanswerable",) * 3, source=VIZWIZ),
    Scenario("vizwiz contained", 2, P2, "contained", unusable=("unanswerable",) * 3, source=VIZWIZ),
    Scenario("vizwiz intersected", 2, P2, "intersected", unusable=("unanswerable",) * 3,
             source=VIZWIZ, split="val"),
    Scenario("vizwiz unanswerable", 2, (2,), "equal", unusable=("unanswerable",) * 6 + ("unsuitable",) * 2,
             source=VIZWIZ),
    Scenario("vizwiz several", 1, P2, "equal", unusable=("unanswerable",) * 3, texts=SEVERAL,
             source=VIZWIZ, split="val", several=True),
)


def _box(rng: np.random.Generator, area: Sequence[int], low: int, high: int | None = None) -> tuple:
  """A random integer rectangle (x0, y0, x1, y1) inside `area`, sides in [low, high]."""
  x0, y0, x1, y1 = area
  w = int(rng.integers(low, (x1 - x0 if high is None else min(high, x1 - x0)) + 1))
  h = int(rng.integers(low, (y1 - y0 if high is None else min(high, y1 - y0)) + 1))
  x, y = int(rng.integers(x0, x1 - w + 1)), int(rng.integers(y0, y1 - h + 1))
  return x, y, x + w, y + h


def _contained(rng: np.random.Generator, area: Sequence[int]) -> list[tuple]:
  outer = _box(rng, area, 48)
  side = min(outer[2] - outer[0], outer[3] - outer[1]) // 2 - 3
  return [outer, _box(rng, (outer[0] + 3, outer[1] + 3, outer[2] - 3, outer[3] - 3), 12, side)]


def _intersected(rng: np.random.Generator, area: Sequence[int]) -> list[tuple]:
  s = int(rng.integers(30, 37))
  x = int(rng.integers(area[0], area[2] - s - s // 2 + 1))
  y = int(rng.integers(area[1], area[3] - s - s // 3 + 1))
  return [(x, y, x + s, y + s), (x + s // 2, y + s // 3, x + s + s // 2, y + s + s // 3)]


def _disjoint(rng: np.random.Generator, area: Sequence[int], k: int) -> list[tuple]:
  x0, y0, x1, y1 = area
  edges = np.linspace(x0, x1, k + 1).astype(int)
  return [_box(rng, (edges[j] + 2, y0 + 2, edges[j + 1] - 2, y1 - 2), 24) for j in range(k)]


def regions(rng: np.random.Generator, relation: str, k: int, width: int, height: int) -> list[tuple]:
  """The k answers' regions (x0, y0, x1, y1) in a width x height (>= 96 a side) image."""
  full = (0, 0, width, height)
  left, right = (0, 0, width * 3 // 5, height), (width * 3 // 5 + 4, 0, width, height)
  if relation == "equal":
    return [_box(rng, full, 24)] * k
  if relation == "disjoint":
    return _disjoint(rng, full, k)
  if relation == "contained":
    return _contained(rng, full)
  if relation == "intersected":
    return _intersected(rng, full)
  if relation == "contained+disjoint":
    return _contained(rng, left) + [_box(rng, right, 24)]
  if relation == "equal+intersected":
    a, b = _intersected(rng, full)
    return [a, a, b]
  raise ValueError(f"unknown relation {relation!r}")


def _polygon(box: Sequence[int]) -> list[dict]:
  x0, y0, x1, y1 = box
  return [{"x": x, "y": y} for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]


def _annotators(rng: np.random.Generator, box: tuple, agree: bool) -> list[list[dict]]:
  """Annotator 1's box and annotator 2's: grown by a pixel on one side, or shifted."""
  x0, y0, x1, y1 = box
  if agree:
    side = int(rng.integers(4))
    second = (x0 - (side == 0), y0 - (side == 1), x1 + (side == 2), y1 + (side == 3))
  else:
    dx = (x1 - x0) // 2
    second = (x0 + dx, y0, x1 + dx, y1)
  return [_polygon(box), _polygon(second)]


def _question(rng: np.random.Generator, s: Scenario, width: int, height: int) -> tuple[list[str], dict]:
  """(the annotators' answers, the groundings record without its key)."""
  words = [str(w) for w in rng.choice(WORDS, len(s.valid) + s.singles, replace=False)]
  valid = words[:len(s.valid)]
  answers = [a for a, n in zip(valid, s.valid) for _ in range(n)] + words[len(s.valid):] + list(s.unusable)
  answers = [answers[j] for j in rng.permutation(len(answers))]
  boxes = regions(rng, s.relation, len(valid), width, height)
  record = {"several_questions": s.several, "width": width, "height": height,
            "answers": {a: _annotators(rng, box, j not in s.disagree)
                        for j, (a, box) in enumerate(zip(valid, boxes))}}
  return answers, record


def generate(out_dir: str, seed: int = 0) -> dict[str, str]:
  """Writes the raw input into out_dir; returns {"questions", "annotations",
  "vizwiz_train", "vizwiz_val", "groundings": path}."""
  rng = np.random.default_rng(seed)
  image_ids = iter(int(i) for i in rng.choice(np.arange(1, 600000), 100, replace=False))
  questions, annotations, vizwiz, groundings = [], [], {"train": [], "val": []}, []
  for s in SCENARIOS:
    for n in range(s.count):
      image_id = next(image_ids)
      width, height = (int(v) for v in rng.integers(96, 161, size=2))
      first = s.texts[n % len(s.texts)]
      for repeat, text in enumerate([first, first.lower().replace(" ", "  ")] if s.repeat else [first]):
        answers, record = _question(rng, s, width, height)
        if s.source == VIZWIZ:
          image = f"VizWiz_{s.split}_{image_id:08d}.jpg"
          vizwiz[s.split].append({
              "image": image, "question": text, "answerable": int(len(s.valid) > 1),
              "answer_type": "other" if len(s.valid) > 1 else "unanswerable",
              "answers": [{"answer": a, "answer_confidence": "yes"} for a in answers]})
          key = {"image": image}
        else:
          question_id = image_id * 1000 + repeat
          questions.append({"image_id": image_id, "question": text, "question_id": question_id})
          listed = [{"answer": a, "answer_confidence": "yes", "answer_id": j + 1}
                    for j, a in enumerate(answers)]
          annotations.append({
              "question_id": question_id, "image_id": image_id, "question_type": question_type(text),
              "answer_type": "other", "multiple_choice_answer": most_common_answer(answers),
              "answers": listed})
          key = {"question_id": question_id}
        if s.grounded:
          groundings.append({**key, **record})
  header = {"data_subtype": "train2014", "info": {"description": "synthetic AnswerTherapy raw input"},
             "license": {}}
  paths = {"questions": "v2_OpenEnded_mscoco_train2014_questions.json",
           "annotations": "v2_mscoco_train2014_annotations.json",
           "vizwiz_train": "train.json", "vizwiz_val": "val.json", "groundings": "groundings.json"}
  contents = {"questions": {**header, "task_type": "Open-Ended", "data_type": "mscoco",
                            "questions": questions},
              "annotations": {**header, "annotations": annotations},
              "vizwiz_train": vizwiz["train"], "vizwiz_val": vizwiz["val"], "groundings": groundings}
  paths = {name: os.path.join(out_dir, file) for name, file in paths.items()}
  write_atomic_many({paths[name]: json.dumps(contents[name]) for name in paths}, make_dirs=True)
  return paths
