"""Vectorised official VQA accuracy, shared by device metrics and the `vqajax score` tool.

Strings are dealt with once, on the host: every distinct string is cleaned and
normalised a single time and interned to an int id. What is left is integer arithmetic
on padded arrays:

    gt_ids   [N, A] int32  id of each ground-truth answer as the official compares it
                           (cleaned if the question's cleaned answers are unanimous,
                           else cleaned + normalised); -1 in padding
    gt_dup   [N, A] int32  how many answer dicts of the question equal this one after
                           normalisation (the official leave-one-out drops all of them)
    gt_valid [N, A] bool   False in padding (questions with fewer than A answers)
    unanimous [N]   bool   predictions are normalised only where this is False

`question_accuracy` runs under `jax.jit` (float32) or on numpy; `question_accuracy_exact`
and `aggregate_official` repeat the official float operations in the official order so
the host scorer is bit-identical with `reference.reference_accuracy`.
"""

from __future__ import annotations

import itertools
import operator
from decimal import ROUND_HALF_UP, Decimal
from types import ModuleType
from typing import Any, Callable, Hashable, Iterable, NamedTuple, Sequence

import numpy as np

from vqajax.core.errors import InputError
from vqajax.core.text import unique_codes
from vqajax.vqa.accuracy.normalize import clean, normalize

MAX_ANSWERS = 10  # answers per question in VQA (one per annotator)


class Interner:
  """Maps strings to dense int ids, in order of first appearance."""

  def __init__(self) -> None:
    self._ids: dict[str, int] = {}

  @classmethod
  def of(cls, strings: Sequence[str]) -> Interner:
    """The Interner whose ids are the positions of the distinct `strings`."""
    interner = cls()
    interner._ids = dict(zip(strings, range(len(strings))))
    if len(interner) != len(strings):
      raise ValueError("repeated interned strings")
    return interner

  def __call__(self, s: str) -> int:
    return self._ids.setdefault(s, len(self._ids))

  def __len__(self) -> int:
    return len(self._ids)

  def strings(self) -> list[str]:
    """The strings in id order."""
    return list(self._ids)


class Labels(NamedTuple):
  """Labels coded by first appearance: `names[codes[i]]` is item i's label."""

  names: list[Any]
  codes: np.ndarray


def labels(values: Iterable[Hashable]) -> Labels:
  return Labels(*unique_codes(values, np.int32))


def encode_answer_table(answers: Sequence[str], interner: Interner) -> tuple[np.ndarray, np.ndarray]:
  """Ids of clean(a) and of normalize(clean(a)) for each answer of a table."""
  cleaned = [clean(a) for a in answers]
  normalized = {c: normalize(c) for c in dict.fromkeys(cleaned)}  # once per distinct string
  raw_ids = np.array([interner(c) for c in cleaned], np.int32)
  norm_ids = np.array([interner(normalized[c]) for c in cleaned], np.int32)
  return raw_ids, norm_ids


def _processed_ids(strings: Iterable[str] | Labels, interner: Interner) -> tuple[np.ndarray, np.ndarray]:
  """`encode_answer_table` of many strings (or of their `labels`), processing each
  distinct string once."""
  unique, codes = strings if isinstance(strings, Labels) else unique_codes(strings)
  raw_ids, norm_ids = encode_answer_table(unique, interner)
  return raw_ids[codes], norm_ids[codes]


def _answer_id_codes(ids: list[Any]) -> np.ndarray | None:
  """Values equal exactly where the answers' `ids` are equal; None if unhashable."""
  if set(map(type, ids)) == {int}:
    return np.array(ids)  # the official files' case; object dtype beyond int64
  try:
    return unique_codes(ids)[1]
  except TypeError:
    return None


def _dup_counts(
  gt_ids: np.ndarray, gt_valid: np.ndarray, answer_ids: np.ndarray | None, rest: Callable[[int], list]
) -> np.ndarray:
  """`gt_dup`: per answer dict, the number of the question's dicts equal to it."""
  rows = np.arange(len(gt_ids))
  answer_id = None
  if answer_ids is not None:  # equal dicts have equal answer_ids
    answer_id = np.zeros(gt_ids.shape, answer_ids.dtype)
    answer_id[gt_valid] = answer_ids
    # Increasing answer_ids (the official files': 1 to 10) have no equal pair.
    increasing = (answer_id[:, 1:] > answer_id[:, :-1]) | ~gt_valid[:, 1:]
    rows = np.flatnonzero(~increasing.all(axis=1))
    answer_id = answer_id[rows]
  i, j = np.triu_indices(gt_ids.shape[1], 1)  # each pair of answers once; i < j
  ids = gt_ids[rows]
  same = (ids[:, i] == ids[:, j]) & gt_valid[rows][:, j]  # padding comes last: j valid => i valid
  if answer_id is not None:
    same &= answer_id[:, i] == answer_id[:, j]
  dup = np.ones(gt_ids.shape, np.int32)
  for row in rows[same.any(axis=1)]:
    keys = list(zip(gt_ids[row].tolist(), rest(row)))
    dup[row, : len(keys)] = [keys.count(key) for key in keys]
  return dup


def encode_answers(
  counts: np.ndarray,
  answers: Iterable[str] | Labels,
  answer_ids: np.ndarray | None,
  rest: Callable[[int], list],
  interner: Interner,
  max_answers: int,
) -> dict[str, np.ndarray]:
  """`encode_targets` of answer columns: `counts` [N] answers per question (1 to
  max_answers), `answers` every question's answer strings in turn (iterated once; or
  their `labels`),
  `answer_ids` values equal exactly where the answer dicts' answer_ids are (None:
  unknown), `rest(row)` the answer dicts of question `row` without their "answer", as
  comparable values (asked for the rare questions where two dicts may be equal)."""
  raw, norm = _processed_ids(answers, interner)
  gt_valid = np.arange(max_answers) < counts[:, None]
  raw_ids = np.full(gt_valid.shape, -1, np.int32)
  raw_ids[gt_valid] = raw  # row-major order of the mask is the flattened answer order
  unanimous = ((raw_ids == raw_ids[:, :1]) | ~gt_valid).all(axis=1)
  gt_ids = np.full(gt_valid.shape, -1, np.int32)
  gt_ids[gt_valid] = np.where(np.repeat(unanimous, counts), raw, norm)
  return {
    "gt_ids": gt_ids,
    "gt_dup": _dup_counts(gt_ids, gt_valid, answer_ids, rest),
    "gt_valid": gt_valid,
    "unanimous": unanimous,
  }


class AnswerColumns(NamedTuple):
  """The answers of annotation records as `encode_answers` takes them (its arguments)."""

  counts: np.ndarray  # [N] answers per question
  answers: Labels  # every question's answer strings in turn, coded
  answer_ids: np.ndarray | None
  rest: Callable[[int], list]


def answer_columns(annotations: Sequence[dict[str, Any]], max_answers: int = MAX_ANSWERS) -> AnswerColumns:
  """The answers of official annotation records, their answers dicts as in the JSON files
  or `official_files.Answer`s (`load_annotations`: equal where their three fields are); a
  record with no answers or more than `max_answers` is an InputError naming its
  question_id."""
  answer_lists = list(map(operator.itemgetter("answers"), annotations))
  counts = np.fromiter(map(len, answer_lists), np.int64, len(answer_lists))
  bad = np.flatnonzero((counts == 0) | (counts > max_answers))
  if bad.size:
    raise InputError(
      f"the annotation of question_id {annotations[bad[0]]['question_id']}: has {counts[bad[0]]} answers, "
      f"expected 1 to {max_answers} (one per annotator)"
    )
  flat = list(itertools.chain.from_iterable(answer_lists))
  if not flat or isinstance(flat[0], dict):
    answers = list(map(operator.itemgetter("answer"), flat))
    ids = list(map(operator.methodcaller("get", "answer_id"), flat))

    def rest(row: int) -> list:
      return [{k: v for k, v in a.items() if k != "answer"} for a in answer_lists[row]]
  else:
    answers = list(map(operator.attrgetter("answer"), flat))
    ids = list(map(operator.attrgetter("answer_id"), flat))

    def rest(row: int) -> list:
      return [(a.answer_confidence, a.answer_id) for a in answer_lists[row]]

  return AnswerColumns(counts, labels(answers), _answer_id_codes(ids), rest)


def encode_targets(
  annotations: Sequence[dict[str, Any]], interner: Interner, max_answers: int = MAX_ANSWERS
) -> dict[str, np.ndarray]:
  """Padded id arrays (see module docstring) for official annotation records
  (`answer_columns` says which)."""
  return encode_answers(*answer_columns(annotations, max_answers), interner, max_answers)


def encode_predictions(strings: Iterable[str], unanimous: np.ndarray, interner: Interner) -> np.ndarray:
  """Prediction ids [N]: cleaned where the question is unanimous, else normalised
  (`strings`: one per question, iterated once)."""
  raw, norm = _processed_ids(strings, interner)
  return np.where(unanimous, raw, norm).astype(np.int32)


def pred_ids_from_table(pred_index, unanimous, raw_ids, norm_ids, xp: ModuleType | None = None):
  """Prediction ids for predictions given as indices into an `encode_answer_table`."""
  if xp is None:
    import jax.numpy as xp  # noqa: PLC0415  (keeps jax off the CLI import path)
  return xp.where(unanimous, raw_ids[pred_index], norm_ids[pred_index])


def question_accuracy(pred_ids, gt_ids, gt_dup, gt_valid, xp: ModuleType | None = None):
  """Per-question accuracy [N]; xp is jax.numpy (default, jittable) or numpy.

  Rows without any valid answer (batch padding) score 0.
  """
  if xp is None:
    import jax.numpy as xp  # noqa: PLC0415  (keeps jax off the CLI import path)
  match = (gt_ids == pred_ids[:, None]) & gt_valid
  others = match.sum(axis=1, keepdims=True) - xp.where(match, gt_dup, 0)
  per_annotator = xp.where(gt_valid, xp.minimum(1.0, others / 3.0), 0.0)
  return per_annotator.sum(axis=1) / xp.maximum(gt_valid.sum(axis=1), 1)


def question_accuracy_exact(
  pred_ids: np.ndarray, gt_ids: np.ndarray, gt_dup: np.ndarray, gt_valid: np.ndarray
) -> np.ndarray:
  """float64 per-question accuracy, bit-identical with the official: annotator terms
  are added left to right, then divided by the number of answers."""
  match = (gt_ids == pred_ids[:, None]) & gt_valid
  others = match.sum(axis=1, keepdims=True) - np.where(match, gt_dup, 0)
  per_annotator = np.where(gt_valid, np.minimum(1.0, others / 3.0), 0.0)
  total = np.zeros(len(pred_ids))
  for column in per_annotator.T:  # padding adds 0.0: exact
    total += column
  return total / gt_valid.sum(axis=1)


def round_official(x: float, ndigits: int = 2) -> float:
  """Python 2 `round`, as the official code: nearest multiple of 10**-ndigits of the exact
  binary value, ties away from zero (Python 3 sends ties to even: 0.125 -> 0.12)."""
  return float(Decimal(x).quantize(Decimal(1).scaleb(-ndigits), rounding=ROUND_HALF_UP))


def _sequential_sum(values: np.ndarray) -> float:
  """Left-to-right sum (np.sum is pairwise and could differ in the last bit)."""
  return float(np.cumsum(values)[-1])


def mean_percent(values: np.ndarray) -> float:
  return round_official(100 * _sequential_sum(values) / len(values))


def _per_group(acc: np.ndarray, groups: Labels) -> dict[Any, float]:
  """Official mean percent per label, labels in first-appearance order."""
  names, group = groups
  order = np.argsort(group, kind="stable")  # stable: file order within each label
  parts = np.split(acc[order], np.cumsum(np.bincount(group, minlength=len(names)))[:-1])
  return {label: mean_percent(part) for label, part in zip(names, parts)}


def _as_labels(values: Sequence[Any] | Labels) -> Labels:
  return values if isinstance(values, Labels) else labels(values)


def aggregate_official(
  per_question_acc: np.ndarray, question_types: Sequence[Any] | Labels, answer_types: Sequence[Any] | Labels
) -> dict[str, Any]:
  """The official `accuracy` dict from float64 per-question accuracies in file order
  and each question's question and answer type (a list, or `Labels`)."""
  acc = np.asarray(per_question_acc, np.float64)
  return {
    "overall": mean_percent(acc),
    "perQuestionType": _per_group(acc, _as_labels(question_types)),
    "perAnswerType": _per_group(acc, _as_labels(answer_types)),
  }


def percent_per_question(per_question_acc: np.ndarray) -> list[float]:
  """round(100 * acc, 2) per question, as the official `evalQA` (one rounding per value)."""
  values, inverse = np.unique(np.asarray(per_question_acc, np.float64), return_inverse=True)
  rounded = [round_official(100 * v) for v in values.tolist()]
  return list(map(rounded.__getitem__, inverse.tolist()))
