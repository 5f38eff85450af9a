"""Plain per-question re-implementation of the official `VQAEval.evaluate` loop.

This is the test oracle and the benchmark baseline for `vqa_accuracy`: it follows the
official control flow step by step (including the leave-one-out by dict inequality and
the left-to-right float sums) and favours obviousness over speed. Like the official code
it is Python 2 where that matters: `round` ties go away from zero and sums are plain
left-to-right additions (not Python >= 3.12's compensated `sum`).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

from vqajax.vqa.accuracy.normalize import clean, normalize


def round_official(x: float, ndigits: int = 2) -> float:
  """Python 2 `round`: nearest multiple of 10**-ndigits of the exact binary value,
  ties away from zero (Python 3's `round` sends ties to even, e.g. 0.125 -> 0.12)."""
  return float(Decimal(x).quantize(Decimal(1).scaleb(-ndigits), rounding=ROUND_HALF_UP))


def mean_percent(values: list[float]) -> float:
  total = 0
  for v in values:
    total += v
  return round_official(100 * float(total) / len(values))


def reference_accuracy(
  annotations: list[dict[str, Any]], results: Mapping[int, str]
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official accuracy of `results` ({question_id: answer}) on parsed annotation records.

  Returns the official `accuracy` dict and `evalQA` ({question_id: rounded percent}).
  The inputs are not modified (answer dicts are copied before the in-place cleaning).
  """
  all_acc: list[float] = []
  by_question_type: dict[str, list[float]] = {}
  by_answer_type: dict[str, list[float]] = {}
  per_question: dict[int, float] = {}
  for ann in annotations:
    answers = [dict(a) for a in ann["answers"]]
    for a in answers:
      a["answer"] = clean(a["answer"])
    prediction = clean(results[ann["question_id"]])
    if len({a["answer"] for a in answers}) > 1:
      for a in answers:
        a["answer"] = normalize(a["answer"])
      prediction = normalize(prediction)
    total = 0
    for gt in answers:
      others = [a for a in answers if a != gt]
      matches = [a for a in others if a["answer"] == prediction]
      total += min(1, float(len(matches)) / 3)
    acc = float(total) / len(answers)
    all_acc.append(acc)
    by_question_type.setdefault(ann["question_type"], []).append(acc)
    by_answer_type.setdefault(ann["answer_type"], []).append(acc)
    per_question[ann["question_id"]] = round_official(100 * acc)
  accuracy = {
    "overall": mean_percent(all_acc),
    "perQuestionType": {t: mean_percent(v) for t, v in by_question_type.items()},
    "perAnswerType": {t: mean_percent(v) for t, v in by_answer_type.items()},
  }
  return accuracy, per_question
