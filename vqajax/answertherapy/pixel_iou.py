"""Pixel-level IoU of predicted grid masks, as a user scoring the RLE results would: each
answer's grid mask upsampled to its image (`masks.upsample_rle`, the mask results.json
holds) against its polygon rasterised at the image size (`masks.rasterize`), and the
whole image (every pixel on) against the same polygon. On the host, one image at a time,
on RLEs (pixel counts from pycocotools' RLE operations): memory O(width x grid rows +
the RLEs), never a decoded image-size mask, so 10,000-pixel sides cost megabytes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vqajax.answertherapy import masks
from vqajax.answertherapy.files import Sample
from vqajax.answertherapy.iou import group_sums_of, iou_from_counts


def answer_ious(sample: Sample, predicted: Sequence[dict]) -> tuple[list[float], list[float]]:
  """(model, whole image) pixel IoUs of each answer of `sample`; `predicted` holds the
  answers' upsampled RLEs."""
  model, whole = [], []
  for polygon, rle in zip(sample.polygons, predicted):
    truth, _ = masks.rasterize(polygon, sample.height, sample.width)
    areas, inter = masks.overlaps([rle, truth])
    model.append(float(iou_from_counts(inter[0, 1], areas[0], areas[1], np)))
    whole.append(float(iou_from_counts(areas[1], sample.height * sample.width, areas[1], np)))
  return model, whole


def group_sums(samples: Sequence[Sample], predicted: Sequence[Sequence[dict]], groups: np.ndarray,
               max_answers: int) -> dict[str, dict]:
  """{"model", "whole_image"}: `iou.group_sums` at the pixel level over the samples (rows of
  `groups` [N, S]), from each sample's answers' upsampled RLEs."""
  ious = {name: np.zeros((len(samples), max_answers)) for name in ("model", "whole_image")}
  valid = np.zeros((len(samples), max_answers), bool)
  for q, (sample, rles) in enumerate(zip(samples, predicted)):
    model, whole = answer_ious(sample, rles)
    ious["model"][q, :len(model)], ious["whole_image"][q, :len(whole)] = model, whole
    valid[q, :len(model)] = True
  return {name: group_sums_of(values, valid, groups, np) for name, values in ious.items()}
