"""The official VQA accuracy of results files, fast and strict (`vqajax score`: score_cli.py).

`evaluate_files` gives the official `accuracy` dict (`overall`, `perQuestionType`,
`perAnswerType`, percentages rounded to 2 decimals) and `evalQA` ({question_id: percent}).
Numbers are identical to the official `vqaEval.py` (the oracle: `bench/reference.py`); each distinct string is
normalised once and the rest is vectorised numpy. `accuracy_of` gives the same numbers
for records already in memory.

Parsing the annotations file dominates the run time; it is read by a typed fast path and
checked and encoded in columns, so every run reads the files as they are now (no cache).

Stricter than the official tools: any malformed input is one line on stderr naming the
file, the record and what was expected, with exit status 2 and no output written.
Where the official silently keeps the last of several results for one question_id, we
reject duplicate question ids; we also require the questions and annotations files to
cover the same question ids, every annotation to have at least one answer, and any
`multiple_choices` to be a non-empty list of strings. The files are read by
`vqajax.vqa.accuracy.inputs`: official files by a typed fast path, any other through
`vqajax.core.official_files` as for training, on the fields scoring reads.
"""

from __future__ import annotations

import operator
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from vqajax.core import official_files
from vqajax.core.errors import InputError
from vqajax.vqa.accuracy.encoded import EncodedAnnotations, QuestionInfo, encode_annotations
from vqajax.vqa.accuracy.inputs import check_covered, read_annotations, read_questions, read_results, some
from vqajax.vqa.accuracy.kernel import (
  aggregate_official,
  encode_predictions,
  percent_per_question,
  question_accuracy_exact,
)

__all__ = ["InputError", "accuracy_of", "evaluate_files", "score_encoded"]


def check_same_questions(
  questions_path: str, question_ids: Collection[int], annotations_path: str, annotation_ids: Collection[int]
) -> None:
  question_ids = set(question_ids)
  if len(question_ids) == len(annotation_ids) and question_ids.issuperset(annotation_ids):
    return  # both sides are unique ids: the same set
  annotation_ids = set(annotation_ids)
  for path, extra, other in (
    (questions_path, question_ids - annotation_ids, annotations_path),
    (annotations_path, annotation_ids - question_ids, questions_path),
  ):
    if extra:
      raise InputError(f"{path}: {len(extra)} question ids are missing from {other}: {some(extra)}")


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
  pred_ids = encode_predictions(map(results.__getitem__, ids), annotations.targets["unanimous"], annotations.interner())
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
  check_covered("", results, list(map(operator.itemgetter("question_id"), annotations)))
  with official_files.gc_paused():
    return score_encoded(encode_annotations(annotations), results)


def evaluate_files(
  questions_path: str, annotations_path: str, results_path: str, multiple_choice: bool = False
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official (`accuracy`, `evalQA`) of a results file; raises InputError on bad input."""
  with official_files.gc_paused():
    questions, annotations = read_questions(questions_path), read_annotations(annotations_path)
    check_same_questions(questions_path, questions.question_ids, annotations_path, annotations.question_ids)
    results = read_results(results_path, annotations.question_ids)
    if multiple_choice:
      check_multiple_choice(results_path, results, questions_path, questions)
    return score_encoded(annotations, results)
