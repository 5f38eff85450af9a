"""Precision and recall of a classifier from masked confusion sums (jittable), with the
host summary that leaves an undefined ratio (nothing predicted / no positives) as None.

Sums are per group (rows of `groups`, e.g. all / per source) and per class, each class
in turn the positive one: precision = TP / predicted, recall = TP / actual.
"""

from __future__ import annotations

import numpy as np


def confusion_sums(predicted, actual, groups, num_classes: int = 2, xp=None):
  """{true_positive, predicted, actual}: [S, C] sums over examples of `groups` [B, S]
  (weights: 0 for padding) with predicted / actual class ids [B]."""
  if xp is None:
    import jax.numpy as xp  # noqa: PLC0415
  pred = (predicted[:, None] == xp.arange(num_classes)[None, :]).astype(groups.dtype)
  true = (actual[:, None] == xp.arange(num_classes)[None, :]).astype(groups.dtype)
  return {"true_positive": groups.T @ (pred * true), "predicted": groups.T @ pred, "actual": groups.T @ true}


def ratio(num: float, den: float) -> float | None:
  """100 num / den in percent; None when den is 0 (undefined)."""
  return None if den == 0 else float(100 * num / den)


def precision_recall(sums) -> tuple[np.ndarray, np.ndarray]:
  """(precision, recall): object arrays [S, C] of percents or None."""
  tp, predicted, actual = (np.asarray(sums[k], np.float64) for k in ("true_positive", "predicted", "actual"))
  precision = np.vectorize(ratio, otypes=[object])(tp, predicted)
  recall = np.vectorize(ratio, otypes=[object])(tp, actual)
  return precision, recall


def always(actual, cls: int) -> dict[str, np.ndarray]:
  """The confusion sums of the naive baseline that always predicts `cls`, from `actual` [S, C]."""
  actual = np.asarray(actual, np.float64)
  predicted = np.zeros_like(actual)
  predicted[:, cls] = actual.sum(axis=1)
  true_positive = np.zeros_like(actual)
  true_positive[:, cls] = actual[:, cls]
  return {"true_positive": true_positive, "predicted": predicted, "actual": actual}
