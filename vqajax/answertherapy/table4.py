"""The paper's Table 4 (single vs multiple grounding): precision and recall in percent with
each class as the positive one, overall and per source, of methods and of the naive
baselines "always single" / "always multiple", from the masked confusion sums of
`precision_recall`. An undefined value (nothing predicted, no positive) is absent from the
metrics and "-" (None) in the table. A method's metrics are named under a prefix (the
classifier: none; the decision from masks: `from_masks/`; `always_single/`, ...), e.g.
`from_masks/VizWiz/recall/multiple`. A method that may answer neither (a zero-shot model's reply)
leaves those questions out of its precision and recall and counts them (`left_out`, per source); the
baselines are on every question.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np

from vqajax.answertherapy import precision_recall as pr
from vqajax.answertherapy.groups import BY_SOURCE, LABELS, key

BASELINES = (("always single", "always_single/"), ("always multiple", "always_multiple/"))
MEASURES = ("precision", "recall")
LEFT_OUT = "left_out"  # the count of questions a method left out (sums: their actual classes [S, C])


def named(sums, prefix: str = "") -> dict[str, float]:
  """The defined precisions / recalls of confusion sums [S, C] (groups BY_SOURCE)."""
  precision, recall = pr.precision_recall(sums)
  out = {}
  for g, group in enumerate(BY_SOURCE):
    for c, label in enumerate(LABELS):
      for name, value in zip(MEASURES, (precision[g, c], recall[g, c])):
        if value is not None:
          out[prefix + key(group, f"{name}/{label}")] = value
  return out


def with_baselines(sums, prefix: str = "") -> dict[str, float]:
  """`named(sums, prefix)`, the count of questions left out where `sums` has one (`LEFT_OUT`), and
  the naive baselines' metrics on every question."""
  metrics = named(sums, prefix)
  actual = np.asarray(sums["actual"], np.float64)
  if LEFT_OUT in sums:
    left_out = np.asarray(sums[LEFT_OUT], np.float64)
    actual = actual + left_out
    metrics.update({prefix + key(group, LEFT_OUT): float(left_out[g].sum()) for g, group in enumerate(BY_SOURCE)})
  for c, (_, baseline) in enumerate(BASELINES):
    metrics.update(named(pr.always(actual, c), baseline))
  return metrics


def metric_pattern(prefix: str) -> str:
  """A regular expression of the metric names of a method under `prefix` and of the baselines."""
  methods = "|".join(map(re.escape, (prefix, *(b for _, b in BASELINES))))
  groups = "|".join(re.escape(g + "/") for g in BY_SOURCE if g)
  return rf"({methods})({groups})?(({'|'.join(MEASURES)})/({'|'.join(LABELS)})|{LEFT_OUT})"


def baseline_rows(metrics: Mapping[str, float]) -> list[tuple[str, Mapping[str, float], str]]:
  """The naive baselines as `table` methods, read from `metrics`."""
  return [(method, metrics, prefix) for method, prefix in BASELINES]


def table(methods: Sequence[tuple[str, Mapping[str, float], str]]) -> tuple[list[str], list[dict]]:
  """Columns and rows of Table 4: per source, one row per (method name, metrics, prefix); "left out":
  the questions a method left out ("-" for one that answers every question)."""
  columns = ["source", "method"] + [f"{label} {m}" for label in LABELS for m in MEASURES] + ["left out"]
  rows = []
  for group in BY_SOURCE:
    for method, metrics, prefix in methods:
      row = {"source": group or "all", "method": method}
      for label in LABELS:
        for m in MEASURES:
          row[f"{label} {m}"] = metrics.get(prefix + key(group, f"{m}/{label}"))
      left_out = metrics.get(prefix + key(group, LEFT_OUT))
      row["left out"] = None if left_out is None else int(left_out)
      rows.append(row)
  return columns, rows
