"""What `vqajax score` needs of the annotations and questions files, encoded.

`EncodedAnnotations` (id arrays, question and answer types, the interned strings predictions
are matched against) and `QuestionInfo` (ids and multiple choices), built from validated
records (`inputs.py` reads and validates the files).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from vqajax.core.text import unique_codes
from vqajax.vqa.accuracy.kernel import Interner, Labels, encode_answers, encode_targets, labels


@dataclasses.dataclass
class EncodedAnnotations:
  """Annotation records as the scorer uses them, in file order."""

  question_ids: list[int]
  targets: dict[str, np.ndarray]  # `encode_targets`: gt_ids, gt_dup, gt_valid, unanimous
  question_types: Labels
  answer_types: Labels
  strings: list[str]  # the interner's strings, in id order

  def interner(self) -> Interner:
    """An Interner with exactly the ids the targets were encoded with."""
    return Interner.of(self.strings)


def encode_annotations(annotations: Sequence[dict[str, Any]]) -> EncodedAnnotations:
  """Encodes annotation records (with `question_id`, `question_type`, `answer_type` and
  a non-empty `answers` list of {"answer": str, ...} each; not re-validated here)."""
  interner = Interner()
  targets = encode_targets(
    annotations, interner, max_answers=max(map(len, map(operator.itemgetter("answers"), annotations)))
  )
  return EncodedAnnotations(
    question_ids=list(map(operator.itemgetter("question_id"), annotations)),
    targets=targets,
    question_types=labels(map(operator.itemgetter("question_type"), annotations)),
    answer_types=labels(map(operator.itemgetter("answer_type"), annotations)),
    strings=interner.strings(),
  )


def encode_answer_columns(
  question_ids: list[int],
  question_types: Labels,
  answer_types: Labels,
  counts: np.ndarray,
  answers: Iterable[str],
  answer_ids: np.ndarray | None,
  rest: Callable[[int], list],
) -> EncodedAnnotations:
  """`encode_annotations` of validated columns (`kernel.encode_answers` says which)."""
  interner = Interner()
  targets = encode_answers(counts, answers, answer_ids, rest, interner, int(counts.max()))
  return EncodedAnnotations(question_ids, targets, question_types, answer_types, interner.strings())


@dataclasses.dataclass
class QuestionInfo:
  """Question ids in file order and the `multiple_choices` of each question."""

  question_ids: list[int]
  has_choices: np.ndarray  # [N] bool: the question has "multiple_choices"
  choice_counts: np.ndarray  # [N] int64: its length (0 where has_choices is False)
  choice_codes: np.ndarray  # [sum(choice_counts)] int32: indices into `choices`
  choices: list[str]  # distinct choice strings


def question_info(question_ids: list[int], choice_lists: Sequence[list[str] | None]) -> QuestionInfo:
  """QuestionInfo of validated questions: unique integer ids, and each question's
  `multiple_choices` (a non-empty list of strings) or None."""
  has = np.fromiter(map(operator.is_not, choice_lists, itertools.repeat(None)), bool, len(choice_lists))
  kept = [c or [] for c in choice_lists] if has.any() else []
  choices, codes = unique_codes(itertools.chain.from_iterable(kept), np.int32)
  return QuestionInfo(
    question_ids=question_ids,
    has_choices=has,
    choice_counts=np.fromiter(map(len, kept), np.int64, len(kept)) if kept else np.zeros(len(has), np.int64),
    choice_codes=codes,
    choices=choices,
  )
