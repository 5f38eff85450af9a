"""Inter-human agreement of VQA annotations (the paper's Table I, "Question + Image" human).

Each human answer is scored like a prediction against the OTHER annotators of the same
question with the official accuracy: annotator j gets

    acc_j = min(1, #{i != j : answer_i == answer_j} / 3)

and a question's accuracy is the mean of acc_j over its annotators. Leaving j out is what
makes this a fair score for a human: counting j's own answer would give every answer a
free match. Answers are prepared like the official `vqaEval.py` prepares ground truth:
newlines and tabs become spaces and the answer is stripped; only if the question's
answers then still differ is each one normalised (punctuation, number words, articles,
contractions). Aggregation and rounding are the official ones (Python 2 `round`, plain
left-to-right sums), so the output has the shape of the official `accuracy` dict.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from vqajax.core.errors import InputError
from vqajax.vqa.accuracy.kernel import aggregate_official, percent_per_question
from vqajax.vqa.accuracy.normalize import clean, normalize


def question_agreement(ann: dict[str, Any]) -> float:
  """One question's human agreement in [0, 1] (the rule in the module docstring)."""
  answers = [clean(a["answer"]) for a in ann["answers"]]
  if len(answers) < 2:
    raise InputError(f"question_id={ann['question_id']}: human agreement needs at least 2 "
                     f"answers, got {len(answers)}")
  if len(set(answers)) > 1:
    answers = [normalize(a) for a in answers]
  counts = Counter(answers)
  total = 0.0
  for a in answers:
    total += min(1, float(counts[a] - 1) / 3)
  return total / len(answers)


def human_agreement(annotations: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """Human accuracy of official annotation records, as the official accuracy dict plus
  "perQuestion" ({question_id: percent}); percents rounded to 2 decimals."""
  annotations = list(annotations)
  if not annotations:
    raise InputError("human agreement needs at least one annotation")
  accs = np.array([question_agreement(ann) for ann in annotations], np.float64)
  official = aggregate_official(accs, [a["question_type"] for a in annotations],
                                [a["answer_type"] for a in annotations])
  ids = [a["question_id"] for a in annotations]
  return {**official, "perQuestion": dict(zip(ids, percent_per_question(accs)))}
