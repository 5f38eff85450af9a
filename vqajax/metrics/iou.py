"""IoU and IoU-PQ of answer-grounding masks (VQA-AnswerTherapy), jittable or numpy.

IoU = |A & B| / |A | B|, with IoU(empty, empty) = 1: two groundings that both cover
nothing agree. IoU-PQ is the mean IoU over a question's groundings, then over questions.
`xp` is jax.numpy (default, jittable) or numpy.
"""

from __future__ import annotations

from types import ModuleType


def _xp(xp: ModuleType | None) -> ModuleType:
  if xp is None:
    import jax.numpy as xp  # noqa: PLC0415  (keeps jax off the CLI import path)
  return xp


def iou_from_counts(intersection, area_a, area_b, xp: ModuleType | None = None):
  """IoU from pixel counts (arrays broadcast); 1 where both areas are 0."""
  xp = _xp(xp)
  union = area_a + area_b - intersection
  return xp.where(union > 0, intersection / xp.maximum(union, 1), 1.0)


def iou(pred, gt, xp: ModuleType | None = None):
  """IoU [...] of boolean masks [..., H, W]."""
  xp = _xp(xp)
  axes = (-2, -1)
  return iou_from_counts((pred & gt).sum(axes), pred.sum(axes), gt.sum(axes), xp)


def iou_pq_sums(pred, gt, valid, xp: ModuleType | None = None):
  """(sum over questions of the mean IoU of their valid groundings, number of questions
  with a valid grounding): masked sums over boolean masks [Q, G, H, W] with `valid` [Q, G]
  False for padded groundings (and all False for padded questions)."""
  xp = _xp(xp)
  counts = valid.sum(axis=-1)
  per_question = xp.where(valid, iou(pred, gt, xp), 0.0).sum(axis=-1) / xp.maximum(counts, 1)
  return per_question.sum(), (counts > 0).sum()


def iou_pq(pred, gt, valid, xp: ModuleType | None = None):
  """IoU-PQ: the mean over questions of the mean IoU over a question's valid groundings."""
  total, count = iou_pq_sums(pred, gt, valid, xp)
  return total / count
