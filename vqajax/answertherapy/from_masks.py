"""Single vs multiple grounding decided from one mask per answer, as the challenge entries
decide it: single when every pair of a question's answer masks has IoU > 0.9, the rule
the dataset's labels follow (`iou.single_grounding`, which `analysis` applies to the
annotated polygons).

Masks are boolean, at any size (a model's grid or the image). Empty masks are treated as
`analysis` treats empty polygons: two empty masks are the same grounding (IoU 1), an empty
and a non-empty one are disjoint (IoU 0). A question with one valid answer has no pair:
single.
"""

from __future__ import annotations

from types import ModuleType
from typing import Sequence

import numpy as np

from vqajax.answertherapy import iou

SINGLE, MULTIPLE = "single", "multiple"  # class ids 0 and 1, as the labels


def multiple(masks, valid, xp: ModuleType | None = None):
  """True (multiple) / False (single) [...] from answer masks [..., A, H, W] with `valid`
  [..., A] False for padded answers; jittable (xp jax.numpy, the default) or numpy."""
  first, second = np.triu_indices(masks.shape[-3], 1)
  ious = iou.iou(masks[..., first, :, :], masks[..., second, :, :], xp)
  return ~iou.single_grounding(ious, valid[..., first] & valid[..., second], xp)


def grounding(masks: Sequence[np.ndarray]) -> str:
  """"single" or "multiple" for one question's answer masks (boolean [H, W] each), on the
  host a pair at a time (so image-size masks need no [A, A, H, W] array)."""
  ious = [iou.iou(masks[a], masks[b], np) for a, b in zip(*np.triu_indices(len(masks), 1))]
  return SINGLE if iou.single_grounding(np.array(ious, np.float64), xp=np) else MULTIPLE
