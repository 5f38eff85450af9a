"""Answer groundings as masks: polygon -> COCO RLE or boolean mask at the image size, the
areas and pairwise intersections of a question's groundings, model-grid fractions, and a
grid mask back at the image size (`upsample`; `upsample_rle` as an RLE, without the mask).

Rasterisation is pycocotools' (`frPyObjects` of the flattened [x1, y1, x2, y2, ...]):
pixel (row i, column j) is in the mask when its centre (x=j+0.5, y=i+0.5) is inside the
polygon (even-odd rule); vertices are quantised to 1/5 pixel first, which decides a
centre lying exactly on an edge. So the rectangle with integer corners (x0, y0),
(x1, y1) covers exactly columns x0..x1-1 and rows y0..y1-1, (x1 - x0) * (y1 - y0)
pixels, and rectangles sharing an edge share no pixel.

Degenerate polygons are never fatal; `rasterize` names what it found:
  FEW_POINTS  fewer than 3 points: an empty mask (pycocotools would read 2 points as a
              box and cannot take fewer);
  OUTSIDE     points outside the image [0, width] x [0, height]: the polygon is clipped
              to the image (`clip`) before rasterising, so the mask is its part inside
              whatever the coordinates (pycocotools alone would walk every edge at 1/5
              pixel: 3 GB for a square at +-1e7, and an empty mask at +-1e9 from an
              integer overflow);
  EMPTY       the mask has no pixel (zero area, or a sliver covering no pixel centre).
An empty grounding is disjoint from any non-empty one (IoU 0) and equal to another empty
one (IoU(empty, empty) = 1, `metrics.iou`). The released train files have none of these
(0 of their 8,161 polygons), so the rule cannot move the analysis there; it keeps a
bad polygon visible (counted) without dropping its question.

Cost: pycocotools walks every edge at 1/5 pixel, so rasterising a polygon of P points takes
time and memory O(P + its outline), the sum of its clipped edges' max(|dx|, |dy|) (each at
most the image's larger side); an RLE is at most O(width * height). The readers bound
both (`files.MAX_SIDE`, `files.MAX_OUTLINE`).
"""

from __future__ import annotations

import numpy as np
from pycocotools import mask as coco_mask

FEW_POINTS = "fewer than 3 points"
OUTSIDE = "points outside the image (clipped)"
EMPTY = "empty mask"


def clip(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
  """The part of a [P, 2] x, y polygon inside [0, width] x [0, height] (Sutherland-Hodgman:
  exact for any polygon against a rectangle; edges it adds along the border cover no pixel
  centre): its points inside and where its edges cross the border, [0, 2] if none."""
  for axis, limit, low in ((0, 0, True), (0, width, False), (1, 0, True), (1, height, False)):
    start, end = polygon, np.roll(polygon, -1, axis=0)
    inside = start[:, axis] >= limit if low else start[:, axis] <= limit
    crosses = inside != np.roll(inside, -1)
    # Where a crossing edge meets the line; halved coordinates keep the differences finite
    # near the float limit, and the convex combination cannot overflow.
    half, half_end = start[:, axis] / 2, end[:, axis] / 2
    t = np.where(crosses, (limit / 2 - half) / np.where(crosses, half_end - half, 1), 0)[:, None]
    meet = (1 - t) * start + t * end
    meet[:, axis] = limit
    polygon = np.stack([start, meet], axis=1)[np.stack([inside, crosses], axis=1)]
  return polygon


def rasterize(polygon: np.ndarray, height: int, width: int) -> tuple[dict, tuple[str, ...]]:
  """(compressed COCO RLE of the [P, 2] x, y polygon at height x width, its problems)."""
  problems = []
  if len(polygon) and ((polygon < 0).any() or (polygon > (width, height)).any()):
    problems.append(OUTSIDE)
  if len(polygon) < 3:
    problems.append(FEW_POINTS)
  elif OUTSIDE in problems:
    polygon = clip(polygon, height, width)  # nothing inside: no points, an empty mask
  if len(polygon) < 3:
    rle = coco_mask.frPyObjects({"size": [height, width], "counts": [height * width]}, height, width)
  else:
    rle = coco_mask.frPyObjects([polygon.ravel().tolist()], height, width)[0]
  if coco_mask.area(rle) == 0:
    problems.append(EMPTY)
  return rle, tuple(problems)


def polygon_mask(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
  """The boolean [height, width] mask of a [P, 2] x, y polygon (rules in the docstring)."""
  return coco_mask.decode(rasterize(polygon, height, width)[0]).astype(bool)


def overlaps(rles: list[dict]) -> tuple[np.ndarray, np.ndarray]:
  """(areas [n], intersections [n, n]) in pixels of n RLE masks of one image."""
  areas = coco_mask.area(rles).astype(np.int64)
  inter = np.diag(areas)
  for a in range(len(rles)):
    for b in range(a + 1, len(rles)):
      inter[a, b] = inter[b, a] = coco_mask.area(coco_mask.merge([rles[a], rles[b]], intersect=True))
  return areas, inter


def _cell_weights(n: int, size: int) -> np.ndarray:
  """[size, n]: the share of cell k (of `size` equal cells over n pixels) that pixel i covers."""
  edges = np.arange(size + 1) * (n / size)
  pixels = np.arange(n + 1)
  overlap = (np.minimum(edges[1:, None], pixels[None, 1:])
             - np.maximum(edges[:-1, None], pixels[None, :-1]))
  return np.clip(overlap, 0, None) * (size / n)


def to_grid(mask: np.ndarray, size: int = 14) -> np.ndarray:
  """Area fraction in [0, 1] of each of size x size equal cells covered by a boolean
  [..., H, W] mask (exact, also where size does not divide H or W); float32
  [..., size, size]. Threshold it (e.g. >= 0.5) for a binary grid target."""
  rows = _cell_weights(mask.shape[-2], size)
  cols = _cell_weights(mask.shape[-1], size)
  # C order: a Fortran-ordered mask (pycocotools decodes to one) makes the product far slower.
  return (rows @ np.ascontiguousarray(mask, np.float64) @ cols.T).astype(np.float32)


def upsample(grid: np.ndarray, height: int, width: int) -> np.ndarray:
  """A boolean [size, size] grid mask at height x width: pixel (i, j) takes the cell that
  holds it, (i * size // height, j * size // width)."""
  rows = np.arange(height) * grid.shape[0] // height
  cols = np.arange(width) * grid.shape[1] // width
  return grid[rows[:, None], cols[None, :]]


def upsample_rle(grid: np.ndarray, height: int, width: int) -> dict:
  """The COCO RLE (pycocotools' form) of `upsample(grid, height, width)`, built from the
  grid's runs without the [height, width] mask: memory O(width x grid rows)."""
  rows_per_cell = np.bincount(np.arange(height) * grid.shape[0] // height, minlength=grid.shape[0])
  columns = grid[:, np.arange(width) * grid.shape[1] // width].T  # [width, rows]: column-major order
  values, lengths = columns.ravel(), np.tile(rows_per_cell, width)
  values, lengths = values[lengths > 0], lengths[lengths > 0]
  counts = np.add.reduceat(lengths, np.flatnonzero(np.r_[True, values[1:] != values[:-1]]))
  if values[0]:  # COCO runs start with the zeros
    counts = np.r_[0, counts]
  return coco_mask.frPyObjects({"size": [height, width], "counts": counts.tolist()}, height, width)


def to_json(rle: dict) -> dict:
  """A pycocotools RLE, JSON-ready (`counts` a str)."""
  return {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}


def encode(mask: np.ndarray) -> dict:
  """The compressed COCO RLE of a boolean [H, W] mask, JSON-ready (`counts` a str)."""
  return to_json(coco_mask.encode(np.asfortranarray(mask, np.uint8)))
