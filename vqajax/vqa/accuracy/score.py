"""The official VQA accuracy of results files, fast and strict (`vqajax score`: score_cli.py).

`evaluate_files` gives the official `accuracy` dict (`overall`, `perQuestionType`,
`perAnswerType`, percentages rounded to 2 decimals) and `evalQA` ({question_id: percent}).
Numbers are identical to the official `vqaEval.py` (tests: `tests/reference.py`); each distinct string is
normalised once and the rest is vectorised numpy. `accuracy_of` gives the same numbers
for records already in memory.

Parsing the annotations file dominates the run time, so what scoring needs of it (and of
the questions file) is cached on disk, keyed by path, size and mtime: scoring more
results files against the same val set skips parsing them (`--no-cache` disables this;
see `vqajax.vqa.accuracy.cache` for where and how). Numbers are identical either way.

Stricter than the official tools: any malformed input is one line on stderr naming the
file, the record and what was expected, with exit status 2 and no output written.
Where the official silently keeps the last of several results for one question_id, we
reject duplicate question ids; we also require the questions and annotations files to
cover the same question ids, every annotation to have at least one answer, and any
`multiple_choices` to be a non-empty list of strings. The questions and annotations files
are validated by `vqajax.core.official_files`, as for training, on the fields scoring reads.
"""

from __future__ import annotations

import contextlib
import gc
import operator
from typing import Any, Collection, Iterator, Mapping, Sequence

import numpy as np

from vqajax.core import official_files
from vqajax.core.errors import InputError
from vqajax.vqa.accuracy.cache import EncodedAnnotations, QuestionInfo, cached, encode_annotations, question_info
from vqajax.vqa.accuracy.kernel import (
  aggregate_official,
  encode_predictions,
  percent_per_question,
  question_accuracy_exact,
)

__all__ = ["InputError", "accuracy_of", "evaluate_files", "score_encoded"]

_SHOW_IDS = 5
# Validated besides question ids and answers (scoring reads nothing else of the files).
_SCORED_FIELDS = {"question_type": str, "answer_type": str}


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
  """Pause the cyclic GC: JSON trees are acyclic, and with millions of live containers
  its repeated full passes would double the loading time."""
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


def _some(ids: Collection[int]) -> str:
  shown = sorted(ids)[:_SHOW_IDS]
  return ", ".join(map(str, shown)) + (", ..." if len(ids) > _SHOW_IDS else "")


def read_questions(path: str) -> list[dict[str, Any]]:
  """Question records of an official questions file, checked for what scoring reads."""
  return official_files.read_questions(path, fields={})["questions"]


def read_annotations(path: str) -> list[dict[str, Any]]:
  """Annotation records of an official annotations file, checked for what scoring reads."""
  return official_files.read_annotations(path, fields=_SCORED_FIELDS)["annotations"]


def check_same_questions(
  questions_path: str, question_ids: Collection[int], annotations_path: str, annotation_ids: Collection[int]
) -> None:
  question_ids, annotation_ids = set(question_ids), set(annotation_ids)
  for path, extra, other in (
    (questions_path, question_ids - annotation_ids, annotations_path),
    (annotations_path, annotation_ids - question_ids, questions_path),
  ):
    if extra:
      raise InputError(f"{path}: {len(extra)} question ids are missing from {other}: {_some(extra)}")


def _check_covered(where: str, results: Mapping[int, str], question_ids: Collection[int]) -> set[int]:
  expected = set(question_ids)
  missing = expected - results.keys()
  if missing:
    raise InputError(f"{where}no result for {len(missing)} of {len(expected)} annotated question ids: {_some(missing)}")
  return expected


def read_results(path: str, annotated_ids: Collection[int]) -> dict[int, str]:
  """{question_id: answer} of a results file covering exactly the annotated questions."""
  records = official_files.load_json(path)
  if not isinstance(records, list):
    raise InputError(
      f'{path}: expected a JSON list of {{"question_id", "answer"}} objects, got {type(records).__name__}'
    )
  ids = official_files.question_ids(path, "results", records)
  answers = official_files.column(records, "answer", str, lambda i: f"{path}: results[{i}] (question_id={ids[i]})")
  results = dict(zip(ids, answers))
  expected = _check_covered(f"{path}: ", results, annotated_ids)
  unknown = results.keys() - expected
  if unknown:
    raise InputError(f"{path}: {len(unknown)} question ids are not in the annotations: {_some(unknown)}")
  return results


def check_multiple_choice(
  results_path: str, results: Mapping[int, str], questions_path: str, questions: QuestionInfo
) -> None:
  """Every answer must be one of its question's `multiple_choices` (as given, uncleaned);
  the first question (in file order) that breaks this is reported."""
  index = {c: i for i, c in enumerate(questions.choices)}
  ids = questions.question_ids
  answer_codes = np.array([index.get(results[q], -1) for q in ids], np.int64)
  rows = np.repeat(np.arange(len(ids)), questions.choice_counts)
  hit = np.zeros(len(ids), bool)
  hit[rows[questions.choice_codes == answer_codes[rows]]] = True
  bad = np.flatnonzero(~hit)
  if bad.size:
    i = int(bad[0])
    if not questions.has_choices[i]:
      raise InputError(
        f"{questions_path}: question_id {ids[i]}: expected a "
        f'"multiple_choices" list of strings (needed by --multiple-choice)'
      )
    raise InputError(
      f"{results_path}: question_id {ids[i]}: answer {results[ids[i]]!r} "
      f"is not one of its {questions.choice_counts[i]} multiple_choices"
    )


def score_encoded(
  annotations: EncodedAnnotations, results: Mapping[int, str]
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official (`accuracy`, `evalQA`) of encoded annotations and a result per question."""
  ids = annotations.question_ids
  pred_ids = encode_predictions([results[q] for q in ids], annotations.targets["unanimous"], annotations.interner())
  t = annotations.targets
  acc = question_accuracy_exact(pred_ids, t["gt_ids"], t["gt_dup"], t["gt_valid"])
  accuracy = aggregate_official(acc, annotations.question_types, annotations.answer_types)
  return accuracy, dict(zip(ids, percent_per_question(acc)))


def accuracy_of(
  annotations: Sequence[dict[str, Any]], results: Mapping[int, str]
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official (`accuracy`, `evalQA`) of annotation records already in memory.

  `annotations`: official records (`question_id`, `question_type`, `answer_type`, a
  non-empty `answers` list of {"answer": str, ...}), as in the "annotations" list of
  `official_files.read_annotations`; not re-validated. `results`: {question_id: answer};
  every annotated question needs one (else InputError), others are ignored. Same
  numbers, and same code path, as `evaluate_files` and the official `vqaEval.py`.
  """
  _check_covered("", results, map(operator.itemgetter("question_id"), annotations))
  with _gc_paused():
    return score_encoded(encode_annotations(annotations), results)


def evaluate_files(
  questions_path: str, annotations_path: str, results_path: str, multiple_choice: bool = False, cache: bool = True
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official (`accuracy`, `evalQA`) of a results file; raises InputError on bad input.

  With `cache`, the encoded questions and annotations come from (or go to) the cache
  of `vqajax.vqa.accuracy.cache`.
  """
  with _gc_paused():
    questions = cached("questions", questions_path, lambda: question_info(read_questions(questions_path)), cache)
    annotations = cached(
      "annotations", annotations_path, lambda: encode_annotations(read_annotations(annotations_path)), cache
    )
    check_same_questions(questions_path, questions.question_ids, annotations_path, annotations.question_ids)
    results = read_results(results_path, annotations.question_ids)
    if multiple_choice:
      check_multiple_choice(results_path, results, questions_path, questions)
    return score_encoded(annotations, results)
