"""The paper's Fig. 9 (Pr(system correct | answer)) and Fig. 10 (Pr(answer | system correct)).

"Correct" is the soft VQA accuracy of the official evaluation (min(#matching humans / 3, 1),
averaged over the leave-one-out subsets), read from its per-question `_evalQA.json`
({question_id: percent}); so Pr(correct | answer) is a mean accuracy, and
Pr(answer | correct) is the share of the total accuracy earned by questions where the
system predicted that answer. Only questions in the per-question file are counted.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from typing import Any, Mapping, Sequence

from vqajax.core.errors import InputError
from vqajax.core.files import write_atomic_many
from vqajax.core.tables import csv_text

FIG9_COLUMNS = ("answer", "questions", "accuracy")
FIG10_COLUMNS = ("answer", "predicted", "share")
FIG9_LABEL = "Pr(system correct | answer)"
FIG10_LABEL = "Pr(answer | system correct)"


def _by_question(per_question: Mapping[Any, float], values: Mapping[Any, Any], what: str
                 ) -> list[tuple[Any, float]]:
  """[(values[qid], accuracy)] for every evaluated question; qids may be int or str."""
  values = {int(k): v for k, v in values.items()}
  pairs = []
  for qid, acc in per_question.items():
    if int(qid) not in values:
      raise InputError(f"question_id={qid} has an accuracy but no {what}")
    pairs.append((values[int(qid)], float(acc)))
  return pairs


def _top(counts: Counter, top: int) -> list[str]:
  """The `top` most frequent keys, ties in alphabetical order."""
  return sorted(counts, key=lambda a: (-counts[a], a))[:top]


def correct_given_answer(annotations: Sequence[dict[str, Any]], per_question: Mapping[Any, float],
                         top: int = 50) -> list[dict[str, Any]]:
  """Fig. 9: mean accuracy (percent) per ground-truth answer (`multiple_choice_answer`),
  for the `top` most frequent ones."""
  truth = {a["question_id"]: a["multiple_choice_answer"] for a in annotations}
  accs: dict[str, list[float]] = {}
  for answer, acc in _by_question(per_question, truth, "annotation"):
    accs.setdefault(answer, []).append(acc)
  counts = Counter({a: len(v) for a, v in accs.items()})
  return [{"answer": a, "questions": counts[a], "accuracy": round(sum(accs[a]) / counts[a], 2)}
          for a in _top(counts, top)]


def answer_given_correct(results: Mapping[Any, str], per_question: Mapping[Any, float],
                         top: int = 50) -> list[dict[str, Any]]:
  """Fig. 10: share (percent) of the total accuracy earned where the system predicted each
  answer, for the `top` most frequently predicted ones (0.0 when the total is 0)."""
  pairs = _by_question(per_question, results, "result")
  counts = Counter(answer for answer, _ in pairs)
  earned: Counter = Counter()
  for answer, acc in pairs:
    earned[answer] += acc
  total = sum(acc for _, acc in pairs)
  return [{"answer": a, "predicted": counts[a],
           "share": round(100 * earned[a] / total, 2) if total else 0.0}
          for a in _top(counts, top)]


def _png(rows: list[dict[str, Any]], key: str, label: str, title: str) -> bytes:
  """A bar chart of `rows[key]` (`label`, in percent) over the answers, as PNG bytes."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # here: matplotlib takes ~0.4 s to import
  from matplotlib.figure import Figure
  fig = Figure(figsize=(max(8.0, 0.22 * len(rows) + 1.5), 4.5))
  ax = fig.add_subplot()
  ax.bar(range(len(rows)), [r[key] for r in rows])
  ax.set_xticks(range(len(rows)), [r["answer"] for r in rows], rotation=90, fontsize=7)
  ax.set_xlim(-0.75, max(len(rows), 1) - 0.25)
  ax.set_ylim(bottom=0)
  ax.set_ylabel(f"{label} (%)")
  ax.set_title(title, fontsize=10)
  fig.tight_layout()
  buf = io.BytesIO()
  FigureCanvasAgg(fig).print_png(buf)
  return buf.getvalue()


def write_figures(out_dir: str, name: str, fig9_rows: list[dict[str, Any]],
                  fig10_rows: list[dict[str, Any]]) -> list[str]:
  """Writes Fig. 9 and Fig. 10 as PNG bar charts and CSV tables, atomically; returns
  the paths (fig9 .png, .csv, fig10 .png, .csv)."""
  fig9 = os.path.join(out_dir, f"{name}_fig9_correct_given_answer")
  fig10 = os.path.join(out_dir, f"{name}_fig10_answer_given_correct")
  outputs = {
      fig9 + ".png": _png(fig9_rows, "accuracy", FIG9_LABEL,
                          f"{name}: {FIG9_LABEL}, top {len(fig9_rows)} ground-truth answers"),
      fig9 + ".csv": csv_text(FIG9_COLUMNS, fig9_rows),
      fig10 + ".png": _png(fig10_rows, "share", FIG10_LABEL,
                           f"{name}: {FIG10_LABEL}, top {len(fig10_rows)} predicted answers"),
      fig10 + ".csv": csv_text(FIG10_COLUMNS, fig10_rows),
  }
  write_atomic_many(outputs, make_dirs=True)
  return list(outputs)
