"""Readers for the official VQA v1/v2 and VizWiz-VQA files.

Real files are accepted unchanged; a malformed one raises `DataFileError` naming the
file, the record and what was expected.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from vqajax.errors import InputError


class DataFileError(InputError):
  """A data file that does not have the official layout."""


def load_json(path: str) -> Any:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except FileNotFoundError:
    raise DataFileError(f"{path}: file not found") from None
  except OSError as e:
    raise DataFileError(f"{path}: cannot read ({e.strerror})") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise DataFileError(f"{path}: not valid JSON ({e})") from None


def _records(path: str, data: Any, key: str) -> list:
  if not isinstance(data, dict) or not isinstance(data.get(key), list):
    raise DataFileError(f"{path}: expected a JSON object with a list '{key}'")
  return data[key]


def _check(path: str, what: str, i: int, record: Any, fields: dict[str, type]) -> None:
  """Checks that `record` is a dict whose `fields` have the given types."""
  if not isinstance(record, dict):
    raise DataFileError(f"{path}: {what}[{i}] is {type(record).__name__}, expected an object")
  for name, kind in fields.items():
    value = record.get(name)
    if value is None:
      rid = f" (question_id={record['question_id']})" if "question_id" in record else ""
      raise DataFileError(f"{path}: {what}[{i}]{rid} has no '{name}'")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
      raise DataFileError(
          f"{path}: {what}[{i}] field '{name}' is {type(value).__name__}, expected {kind.__name__}")


def _unique_ids(path: str, what: str, records: list[dict]) -> None:
  seen = set()
  for i, r in enumerate(records):
    if r["question_id"] in seen:
      raise DataFileError(f"{path}: {what}[{i}] repeats question_id {r['question_id']}")
    seen.add(r["question_id"])


def read_questions(path: str) -> dict:
  """A questions file; `multiple_choices` (v1 MC files) are checked when present."""
  data = load_json(path)
  questions = _records(path, data, "questions")
  for i, q in enumerate(questions):
    _check(path, "questions", i, q, {"question_id": int, "image_id": int, "question": str})
    choices = q.get("multiple_choices")
    if choices is not None and not (
        isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)):
      raise DataFileError(
          f"{path}: questions[{i}] (question_id={q['question_id']}) 'multiple_choices' "
          "must be a non-empty list of strings")
  _unique_ids(path, "questions", questions)
  return data


def read_annotations(path: str) -> dict:
  data = load_json(path)
  annotations = _records(path, data, "annotations")
  for i, a in enumerate(annotations):
    _check(path, "annotations", i, a, {
        "question_id": int, "image_id": int, "question_type": str, "answer_type": str,
        "multiple_choice_answer": str, "answers": list})
    check_answers(path, f"annotations[{i}] (question_id={a['question_id']})", a["answers"])
  _unique_ids(path, "annotations", annotations)
  return data


def check_answers(path: str, where: str, answers: list) -> None:
  if not answers:
    raise DataFileError(f"{path}: {where} has no answers")
  for j, ans in enumerate(answers):
    if not isinstance(ans, dict) or not isinstance(ans.get("answer"), str):
      raise DataFileError(f"{path}: {where} answers[{j}] must be an object with a string 'answer'")


def join(questions: dict, annotations: dict, questions_path: str, annotations_path: str):
  """Pairs each annotation with its question (annotation-file order)."""
  by_id = {q["question_id"]: q for q in questions["questions"]}
  anns = annotations["annotations"]
  missing = [a["question_id"] for a in anns if a["question_id"] not in by_id]
  if missing or len(by_id) != len(anns):
    extra = len(by_id) - (len(anns) - len(missing))
    raise DataFileError(
        f"{annotations_path}: {len(missing)} annotated question ids are not in {questions_path} "
        f"(e.g. {missing[:3]}) and {extra} questions have no annotation")
  for i, a in enumerate(anns):
    if by_id[a["question_id"]]["image_id"] != a["image_id"]:
      raise DataFileError(
          f"{annotations_path}: annotations[{i}] (question_id={a['question_id']}) has image_id "
          f"{a['image_id']}, {questions_path} says {by_id[a['question_id']]['image_id']}")
  return [(by_id[a["question_id"]], a) for a in anns]


_VIZWIZ_ANSWER_TYPES = ("yes/no", "number", "other", "unanswerable")


def read_vizwiz(path: str) -> tuple[dict, dict]:
  """A VizWiz-VQA split as VQA-style (questions, annotations).

  question_id is the record's position; image_id the number in the image file name
  (`VizWiz_train_00000012.jpg` -> 12); question_type is the VQA-style type of the text.
  """
  from vqajax.data.question_types import question_type  # pylint: disable=g-import-not-at-top

  data = load_json(path)
  if not isinstance(data, list):
    raise DataFileError(f"{path}: expected a JSON list of VizWiz records")
  questions, annotations = [], []
  for i, r in enumerate(data):
    _check(path, "records", i, r, {"image": str, "question": str, "answers": list})
    match = re.search(r"(\d+)\.\w+$", r["image"])
    if not match:
      raise DataFileError(f"{path}: records[{i}] image '{r['image']}' has no numeric id")
    check_answers(path, f"records[{i}]", r["answers"])
    answer_type = r.get("answer_type", "other")
    if answer_type not in _VIZWIZ_ANSWER_TYPES:
      raise DataFileError(f"{path}: records[{i}] answer_type '{answer_type}' is not one of {_VIZWIZ_ANSWER_TYPES}")
    image_id = int(match.group(1))
    questions.append({"question_id": i, "image_id": image_id, "question": r["question"]})
    answers = [dict(a, answer_id=j + 1) for j, a in enumerate(r["answers"])]
    annotations.append({
        "question_id": i, "image_id": image_id, "question_type": question_type(r["question"]),
        "answer_type": answer_type, "answers": answers,
        "multiple_choice_answer": most_common_answer(answers)})
  subtype = os.path.splitext(os.path.basename(path))[0]
  return ({"data_subtype": subtype, "questions": questions},
          {"data_subtype": subtype, "annotations": annotations})


def most_common_answer(answers: list[dict]) -> str:
  """Most frequent answer string; ties go to the one seen first."""
  counts: dict[str, int] = {}
  for a in answers:
    counts[a["answer"]] = counts.get(a["answer"], 0) + 1
  return max(counts, key=counts.get)
