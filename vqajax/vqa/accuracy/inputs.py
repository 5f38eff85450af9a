"""The three files `vqajax score` reads, validated: questions, annotations and results.

Files in the official layout take a fast path: msgspec decodes them straight into the
fields scoring reads, checking their JSON types as it goes (strictly: a bool is no
int), and what is left (unique ids within 64 bits, non-empty lists) is checked on whole
columns. A file that does not fit (a JSON error, a wrong type, answer dicts with other
keys than the official three) is read again by the generic path of
`vqajax.core.official_files`, which reports its first bad record or accepts what the
fast path only does not cover (e.g. answers without `answer_id`). Both paths give the
same values; the one difference: the fast path skips fields scoring never reads without
converting them, so an integer of over 4300 digits there (which Python's `int` refuses)
is not an error.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any, Collection, Literal, Mapping

import msgspec
import numpy as np

from vqajax.core import official_files
from vqajax.core.errors import InputError
from vqajax.vqa.accuracy.encoded import (
  EncodedAnnotations,
  QuestionInfo,
  encode_annotations,
  encode_answer_columns,
  question_info,
)
from vqajax.vqa.accuracy.kernel import labels

_SHOW_IDS = 5
# Validated besides question ids and answers (scoring reads nothing else of the files).
_SCORED_FIELDS = {"question_type": str, "answer_type": str}


class _Answer(msgspec.Struct, forbid_unknown_fields=True, gc=False):
  """An answer dict of the official files, all of it: duplicates are whole equal dicts.
  The official confidences as literals: no string to make and free for each."""

  answer: str
  answer_confidence: Literal["yes", "maybe", "no"]
  answer_id: int


class _Annotation(msgspec.Struct, gc=False):
  question_id: int
  question_type: str
  answer_type: str
  answers: list[_Answer]


class _Annotations(msgspec.Struct, gc=False):
  annotations: list[_Annotation]


class _Question(msgspec.Struct, gc=False):
  question_id: int
  multiple_choices: list[str] | None = None  # null reads as absent, as with dict.get


class _Questions(msgspec.Struct, gc=False):
  questions: list[_Question]


class _Result(msgspec.Struct, gc=False):
  question_id: int
  answer: str


_ids = operator.attrgetter("question_id")
_dict_ids = operator.itemgetter("question_id")
_flat = itertools.chain.from_iterable


def some(ids: Collection[int]) -> str:
  """A few of `ids`, for messages."""
  shown = sorted(ids)[:_SHOW_IDS]
  return ", ".join(map(str, shown)) + (", ..." if len(ids) > _SHOW_IDS else "")


def read_questions(path: str) -> QuestionInfo:
  """What scoring needs of an official questions file: ids and `multiple_choices`."""
  content = official_files.read_bytes(path)
  file = official_files.decode_as(content, _Questions)
  if file is not None and file.questions:
    ids = list(map(_ids, file.questions))
    choices = list(map(operator.attrgetter("multiple_choices"), file.questions))
    if official_files.unique_int64(ids) and [] not in choices:
      return question_info(ids, choices)
  questions = official_files.read_questions(path, fields={}, content=content)["questions"]
  return question_info(list(map(_dict_ids, questions)), [q.get("multiple_choices") for q in questions])


def decode_annotations(content: bytes) -> list[_Annotation] | None:
  """The fast path's records of an annotations file, or None where it does not apply."""
  file = official_files.decode_as(content, _Annotations)
  return None if file is None or not file.annotations else file.annotations


def encode_decoded(annotations: list[_Annotation]) -> EncodedAnnotations | None:
  """The encoding of fast-path records, or None where the checks left fail."""
  ids = list(map(_ids, annotations))
  answer_lists = list(map(operator.attrgetter("answers"), annotations))
  counts = np.fromiter(map(len, answer_lists), np.int64, len(answer_lists))
  if not counts.all() or not official_files.unique_int64(ids):
    return None
  total = int(counts.sum())
  try:
    answer_ids = np.fromiter(map(operator.attrgetter("answer_id"), _flat(answer_lists)), np.int64, total)
  except OverflowError:  # beyond int64: the generic path compares them as objects
    return None

  def rest(row: int) -> list[tuple[str, int]]:
    return [(a.answer_confidence, a.answer_id) for a in answer_lists[row]]

  return encode_answer_columns(
    ids,
    labels(map(operator.attrgetter("question_type"), annotations)),
    labels(map(operator.attrgetter("answer_type"), annotations)),
    counts,
    map(operator.attrgetter("answer"), _flat(answer_lists)),
    answer_ids,
    rest,
  )


def read_annotations(path: str) -> EncodedAnnotations:
  """The encoding of an official annotations file (`encoded.EncodedAnnotations`)."""
  content = official_files.read_bytes(path)
  annotations = decode_annotations(content)
  encoded = None if annotations is None else encode_decoded(annotations)
  if encoded is not None:
    return encoded
  data = official_files.read_annotations(path, fields=_SCORED_FIELDS, content=content)
  return encode_annotations(data["annotations"])


def check_covered(where: str, results: Mapping[int, Any], question_ids: Collection[int]) -> None:
  missing = set(itertools.filterfalse(results.__contains__, question_ids))
  if missing:
    expected = len(set(question_ids))
    raise InputError(f"{where}no result for {len(missing)} of {expected} annotated question ids: {some(missing)}")


def checked_results(path: str, content: bytes) -> dict[int, str]:
  """{question_id: answer} of any results file (the generic path), or the first bad record's error."""
  records = official_files.load_json(path, content)
  if not isinstance(records, list):
    raise InputError(f'{path}: expected a JSON list of {{"question_id", "answer"}} objects, got {type(records).__name__}')
  ids = official_files.question_ids(path, "results", records)
  answers = official_files.column(records, "answer", str, lambda i: f"{path}: results[{i}] (question_id={ids[i]})")
  return dict(zip(ids, answers))


def read_results(path: str, annotated_ids: Collection[int]) -> dict[int, str]:
  """{question_id: answer} of a results file covering exactly the annotated questions
  (`annotated_ids`: distinct)."""
  content = official_files.read_bytes(path)
  records = official_files.decode_as(content, list[_Result])
  results = None
  if records is not None:
    results = dict(zip(map(_ids, records), map(operator.attrgetter("answer"), records)))
    if len(results) != len(records) or not official_files.fit_int64(results):  # repeated ids, or beyond 64 bits
      results = None
  if results is None:
    results = checked_results(path, content)
  check_covered(f"{path}: ", results, annotated_ids)
  if len(results) > len(annotated_ids):  # each (unique) annotated id has its result: more are unknown
    unknown = results.keys() - set(annotated_ids)
    raise InputError(f"{path}: {len(unknown)} question ids are not in the annotations: {some(unknown)}")
  return results
