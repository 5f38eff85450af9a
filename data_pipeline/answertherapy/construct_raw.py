"""Readers of the construction's raw input (the format is in the `construct` docstring).

Every reader validates all its records before anything is built; a malformed file raises
`DataFileError` (an `InputError`): one line naming the file, the record and what was
expected.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

import numpy as np

from vqajax.answertherapy.files import MAX_SIDE, VIZWIZ, VQA, check_outlines
from vqajax.core import official_files
from vqajax.core.official_files import DataFileError, column, load_json

VIZWIZ_IMAGE = re.compile(r"VizWiz_([A-Za-z]+)_\d+\.\w+")  # the split is the middle part


@dataclasses.dataclass(frozen=True, eq=False)
class Grounding:
  """One question's groundings record: per answer, the two annotators' [P, 2] polygons."""
  where: str  # names the record in errors
  several_questions: bool
  width: int
  height: int
  answers: dict[str, tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass(frozen=True, eq=False)
class Question:
  """A visual question as it moves through the steps (`construct`)."""
  source: str  # VQAv2 | VizWiz
  key: int | str  # question_id (VQAv2) or image file name (VizWiz): joins the groundings
  image_id: int | str
  question: str
  answer_type: str
  answers: tuple[str, ...]  # the annotators' answers, then the valid answers
  split: str | None = None  # VizWiz: from the image name; VQAv2: drawn by `split_vqa`
  grounding: Grounding | None = None  # attached by `attach_groundings`
  polygons: tuple[np.ndarray, ...] = ()  # one per answer, set by `keep_agreed_groundings`


def read_vqa(questions_path: str, annotations_path: str) -> list[Question]:
  """The questions of an official VQA v2 questions / annotations pair (annotation order)."""
  questions = official_files.read_questions(questions_path, {"image_id": int, "question": str})
  annotations = official_files.read_annotations(annotations_path, {"image_id": int, "answer_type": str})
  return [Question(VQA, q["question_id"], q["image_id"], q["question"], a["answer_type"],
                   tuple(x["answer"] for x in a["answers"]))
          for q, a in official_files.join(questions["questions"], annotations["annotations"], questions_path,
                                          annotations_path)]


def read_vizwiz(paths: Sequence[str]) -> list[Question]:
  """The questions of VizWiz-VQA split files (file then record order); the split of each
  is the one its image name states, and an image appears once over all files."""
  out: list[Question] = []
  first: dict[str, str] = {}
  for path in paths:
    data = load_json(path)
    if not isinstance(data, list) or not data:
      raise DataFileError(f"{path}: expected a non-empty JSON list of VizWiz records")
    where = lambda i, path=path: f"{path}: records[{i}]"
    images, texts, types, answer_lists = (
        column(data, key, kind, where) for key, kind in
        (("image", str), ("question", str), ("answer_type", str), ("answers", list)))
    for i, (image, answers) in enumerate(zip(images, answer_lists)):
      match = VIZWIZ_IMAGE.fullmatch(image)
      if not match:
        raise DataFileError(
            f"{where(i)}: expected an image name VizWiz_<split>_<number>.<ext>, got {image!r}")
      if image in first:
        raise DataFileError(f"{where(i)}: image {image} appears twice (first at {first[image]})")
      first[image] = where(i)
      answers = column(answers, "answer", str, lambda k: f"{where(i)}: answers[{k}]")
      out.append(Question(VIZWIZ, image, image, texts[i], types[i], tuple(answers), match.group(1)))
  return out


def _field(record: dict, key: str, kinds: tuple[type, ...], expected: str, where: str):
  value = record.get(key)
  if type(value) not in kinds:
    raise DataFileError(f'{where}: expected {expected} "{key}", got {value!r}')
  return value


def _polygon(points, where: str) -> np.ndarray:
  """A list of {x, y} points (finite numbers) as a [P, 2] float64 array."""
  if type(points) is not list:
    raise DataFileError(f"{where}: expected a list of {{x, y}} points, got {points!r}")
  for k, p in enumerate(points):
    if not (isinstance(p, dict) and all(type(p.get(c)) in (int, float) and math.isfinite(p[c])
                                        for c in "xy")):
      raise DataFileError(f"{where}[{k}]: expected a point {{x, y}} of finite numbers, got {p!r}")
  return np.array([(p["x"], p["y"]) for p in points], np.float64).reshape(-1, 2)


def _grounding(record: dict, where: str) -> Grounding:
  several = _field(record, "several_questions", (bool,), "a boolean", where)
  width, height = (_field(record, key, (int,), "a positive integer", where) for key in ("width", "height"))
  if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
    raise DataFileError(f'{where}: expected "width" and "height" from 1 to {MAX_SIDE} pixels, '
                        f"got {width} x {height}")
  answers = _field(record, "answers", (dict,), "an object", where)
  polygons = {}
  for answer, pair in answers.items():
    at = f"{where}: answers[{answer!r}]"
    if type(pair) is not list or len(pair) != 2:
      raise DataFileError(f"{at}: expected the two annotators' polygons, got {pair!r}")
    polygons[answer] = tuple(_polygon(p, f"{at}[{k}]") for k, p in enumerate(pair))
    check_outlines(np.concatenate(polygons[answer]), list(map(len, polygons[answer])), [width] * 2,
                   [height] * 2, lambda k, at=at: f"{at}[{k}]")
  return Grounding(where, several, width, height, polygons)


def read_groundings(path: str) -> dict[tuple[str, int | str], Grounding]:
  """{(source, key): Grounding} of a groundings file; a key appears once."""
  data = load_json(path)
  if not isinstance(data, list):
    raise DataFileError(f"{path}: expected a JSON list of groundings records")
  out: dict[tuple[str, int | str], Grounding] = {}
  for i, record in enumerate(data):
    where = f"{path}: records[{i}]"
    if not isinstance(record, dict):
      raise DataFileError(f"{where}: expected an object, got {record!r}")
    names = [name for name in ("question_id", "image") if name in record]
    if len(names) != 1:
      raise DataFileError(f'{where}: expected exactly one of "question_id" (VQAv2) and "image" (VizWiz)')
    name = names[0]
    source, kinds, expected = ((VQA, (int,), "an integer") if name == "question_id"
                               else (VIZWIZ, (str,), "a string"))
    key = _field(record, name, kinds, expected, where)
    where = f"{where} ({name}={key})"
    if (source, key) in out:
      raise DataFileError(f"{where}: {name} appears twice (first at {out[source, key].where})")
    out[source, key] = _grounding(record, where)
  return out
