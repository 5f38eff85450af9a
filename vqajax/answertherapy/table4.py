"""The paper's Table 4 (single vs multiple grounding): precision and recall in percent with
each class as the positive one, overall and per source, of methods and of the naive
baselines "always single" / "always multiple", from the masked confusion sums of
`precision_recall`. An undefined value (nothing predicted, no positive) is absent from the
metrics and "-" (None) in the table. A method's metrics are named under a prefix (the
classifier: none; the decision from masks: `from_masks/`; `always_single/`, ...), e.g.
`from_masks/VizWiz/recall/multiple`.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from vqajax.answertherapy import precision_recall as pr
from vqajax.answertherapy.groups import BY_SOURCE, LABELS, key

BASELINES = (("always single", "always_single/"), ("always multiple", "always_multiple/"))
MEASURES = ("precision", "recall")


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
  """`named(sums, prefix)` and the naive baselines' metrics on the same questions."""
  metrics = named(sums, prefix)
  for c, (_, baseline) in enumerate(BASELINES):
    metrics.update(named(pr.always(sums["actual"], c), baseline))
  return metrics


def metric_pattern(prefix: str) -> str:
  """A regular expression of the metric names of a method under `prefix` and of the baselines."""
  methods = "|".join(map(re.escape, (prefix, *(b for _, b in BASELINES))))
  groups = "|".join(re.escape(g + "/") for g in BY_SOURCE if g)
  return rf"({methods})({groups})?({'|'.join(MEASURES)})/({'|'.join(LABELS)})"


def baseline_rows(metrics: Mapping[str, float]) -> list[tuple[str, Mapping[str, float], str]]:
  """The naive baselines as `table` methods, read from `metrics`."""
  return [(method, metrics, prefix) for method, prefix in BASELINES]


def table(methods: Sequence[tuple[str, Mapping[str, float], str]]) -> tuple[list[str], list[dict]]:
  """Columns and rows of Table 4: per source, one row per (method name, metrics, prefix)."""
  columns = ["source", "method"] + [f"{label} {m}" for label in LABELS for m in MEASURES]
  rows = []
  for group in BY_SOURCE:
    for method, metrics, prefix in methods:
      row = {"source": group or "all", "method": method}
      for label in LABELS:
        for m in MEASURES:
          row[f"{label} {m}"] = metrics.get(prefix + key(group, f"{m}/{label}"))
      rows.append(row)
  return columns, rows
