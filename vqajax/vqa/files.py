"""Readers of the official formats only the VQA paper reads: multiple-choice questions,
VizWiz-VQA and COCO captions (the questions and annotations files: `core/official_files.py`).
Real files are accepted unchanged; a malformed one raises `DataFileError` naming the
file, the record and what was expected."""

from __future__ import annotations

import os
import re

from vqajax.core.official_files import ANSWER_FIELDS, DataFileError, check_answers, column, load_json, records
from vqajax.core.text import most_common_answer


def attach_choices(questions: list[dict], mc_questions: dict, mc_path: str) -> None:
  """Adds to each question its `multiple_choices` from a multiple-choice questions file."""
  choices = {q["question_id"]: q for q in mc_questions["questions"]}
  for q in questions:
    mc = choices.get(q["question_id"])
    if mc is None or mc.get("multiple_choices") is None:  # null reads as absent
      raise DataFileError(f"{mc_path}: question_id {q['question_id']} has no multiple_choices")
    q["multiple_choices"] = mc["multiple_choices"]


# The answer types of VQA v1 / v2 and VizWiz-VQA ("unanswerable" is VizWiz's own).
ANSWER_TYPES = ("yes/no", "number", "other", "unanswerable")


def vizwiz_image_ids(path: str, records: list[dict]) -> list[int]:
  """The number in each record's image name (`VizWiz_train_00000012.jpg` -> 12)."""
  ids = []
  for i, image in enumerate(column(records, "image", str, lambda i: f"{path}: records[{i}]")):
    match = re.search(r"(\d+)\.\w+$", image)
    if not match:
      raise DataFileError(f"{path}: records[{i}] image '{image}' has no numeric id")
    ids.append(int(match.group(1)))
  return ids


def read_vizwiz(path: str, data: list | None = None, answer_fields: dict[str, type] = ANSWER_FIELDS,
                subtype: str = "") -> tuple[dict, dict]:
  """A VizWiz-VQA split as VQA-style (questions, annotations); `data` is the file's
  JSON list when already loaded (e.g. from a TFDS dataset, `path` then names it), and
  `subtype` the split's data_subtype ("": the file name without extension).

  question_id is the record's position; image_id the number in the image file name
  (`VizWiz_train_00000012.jpg` -> 12); question_type is the VQA-style type of the text.
  """
  from vqajax.vqa.question_types import question_type

  if data is None:
    data = load_json(path)
  questions = read_vizwiz_questions(path, data, subtype)
  where = lambda i: f"{path}: records[{i}]"
  check_answers(column(data, "answers", list, where), where, answer_fields)
  annotations = []
  for i, (r, q) in enumerate(zip(data, questions["questions"])):
    image_id = q["image_id"]
    answer_type = r.get("answer_type", "other")
    if answer_type not in ANSWER_TYPES:
      raise DataFileError(f"{path}: records[{i}] answer_type '{answer_type}' is not one of {ANSWER_TYPES}")
    answers = [dict(a, answer_id=j + 1) for j, a in enumerate(r["answers"])]
    annotations.append({
        "question_id": i, "image_id": image_id, "question_type": question_type(r["question"]),
        "answer_type": answer_type, "answers": answers,
        "multiple_choice_answer": most_common_answer(a["answer"] for a in answers)})
  return questions, {"data_subtype": questions["data_subtype"], "annotations": annotations}


def read_vizwiz_questions(path: str, data: list | None = None, subtype: str = "") -> dict:
  """The questions of a VizWiz-VQA file (answers or not: the test split has none) as a
  VQA-style questions object."""
  if data is None:
    data = load_json(path)
  if not isinstance(data, list):
    raise DataFileError(f"{path}: expected a JSON list of VizWiz records")
  where = lambda i: f"{path}: records[{i}]"
  questions = [{"question_id": i, "image_id": image_id, "question": question} for i, (image_id, question) in
               enumerate(zip(vizwiz_image_ids(path, data), column(data, "question", str, where)))]
  return {"data_subtype": subtype or os.path.splitext(os.path.basename(path))[0], "questions": questions}


def read_captions(path: str) -> dict[int, list[str]]:
  """A COCO captions file as {image_id: [caption, ...]} (file order)."""
  annotations = records(path, load_json(path), "annotations")
  where = lambda i: f"{path}: annotations[{i}]"
  captions: dict[int, list[str]] = {}
  for image_id, caption in zip(column(annotations, "image_id", int, where),
                               column(annotations, "caption", str, where)):
    captions.setdefault(image_id, []).append(caption)
  return captions
