"""Reader and validator of the VQA-AnswerTherapy annotation files.

A file is a JSON list of samples `{image_id, question, answers: [strings],
grounding_labels: [one polygon per answer, each a list of {x, y} in pixels], width,
height, answer_type, binary_label, question_id (VQA-sourced samples only)}`. Checks go a
field at a time over all records (like `vqa_files`); a malformed file raises
`DataFileError` naming the file, the record and what was expected.

Bounds that keep the cost of a hostile file small (masks are rasterised at the image size):
  - `width` and `height` are at most MAX_SIDE = 10,000 pixels, well above the photos of
    these datasets (the released train files: at most 640 x 640 for VQA / COCO, 2592 x
    2592 for VizWiz), so a decoded mask is at most 100 MB;
  - a polygon's outline (the sum of its edges' max(|dx|, |dy|), each counted at most the
    image's larger side: its length once clipped) is at most MAX_OUTLINE = 100 times
    width + height (the released groundings reach 3.5 times); rasterising costs time and
    memory in proportion to it (`masks`), so a 1,000-point zigzag across a 10,000 x
    10,000 image (1.3 s, 0.5 GB) is refused and a polygon far outside the image is not;
  - two records with the same `image_id`, `question_id` (None for VizWiz), `question`
    and `answers` (in any order) are refused (`check_unique`), naming both.

`binary_label` is `same`/`diff` in the first release and `single`/`multiple` later; both
are read as `label` 'single' / 'multiple'. The source is inferred per record: a record
with a `question_id` comes from VQAv2, one without from VizWiz (the released format;
so one reader serves both files, and a file mixing the two).

A feature store keys images by integer: `features/keys.py` maps an `image_id` to its key.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Callable, Sequence

import numpy as np

from vqajax.core.official_files import DataFileError, column, load_json
from vqajax.features.keys import feature_key

BINARY_LABELS = {"same": "single", "single": "single", "diff": "multiple", "multiple": "multiple"}
VQA, VIZWIZ = "VQAv2", "VizWiz"
SOURCES = (VQA, VIZWIZ)
MAX_SIDE = 10_000  # pixels, for width and height (module docstring)
MAX_OUTLINE = 100  # x (width + height), for a polygon's outline (module docstring)


@dataclasses.dataclass(frozen=True, eq=False)
class Sample:
  """One visual question; `polygons[j]` ([P, 2] float64 x, y in pixels) grounds `answers[j]`."""
  path: str
  index: int  # position in the file
  source: str  # VQAv2 | VizWiz
  image_id: str | int
  question_id: str | int | None  # VQAv2 only
  question: str
  answers: tuple[str, ...]
  polygons: tuple[np.ndarray, ...]
  width: int
  height: int
  answer_type: str
  label: str  # single | multiple (binary_label)


def _typed(items: list, key: str, kinds: tuple[type, ...], expected: str,
           where: Callable[[int], str]) -> list:
  """[item[key]] checked to be of one of the JSON `kinds` (exactly: a bool is no int)."""
  try:
    values = list(map(operator.itemgetter(key), items))
  except (TypeError, KeyError):
    values = None
  if values is None or not set(map(type, values)) <= set(kinds):
    for i, item in enumerate(items):
      if not isinstance(item, dict):
        raise DataFileError(f"{where(i)}: expected an object, got {item!r}")
      if type(item.get(key)) not in kinds:
        raise DataFileError(f'{where(i)}: expected {expected} "{key}", got {item.get(key)!r}')
  return values


def _flatten(lists: list[list], where: Callable[[int], str]) -> tuple[list, Callable[[int], str]]:
  """The concatenated lists and a `where` naming item k as `where(i)[position]`."""
  counts = np.fromiter(map(len, lists), np.int64, len(lists))
  starts = np.cumsum(counts) - counts

  def where_item(k: int) -> str:
    i = int(np.searchsorted(starts, k, side="right")) - 1
    return f"{where(i)}[{k - starts[i]}]"

  return list(itertools.chain.from_iterable(lists)), where_item


def check_outlines(xy: np.ndarray, counts, widths, heights, where: Callable[[int], str]) -> None:
  """Refuses a polygon whose outline exceeds MAX_OUTLINE x (width + height) (module
  docstring); polygon m is counts[m] consecutive points of the [N, 2] `xy`, in a
  widths[m] x heights[m] image, and `where(m)` names it."""
  counts, widths, heights = (np.asarray(v, np.int64) for v in (counts, widths, heights))
  polygon = np.repeat(np.arange(len(counts)), counts)
  ends = np.cumsum(counts)
  following = np.arange(1, len(xy) + 1)  # each point's next one, closing every polygon
  following[ends[counts > 0] - 1] = (ends - counts)[counts > 0]
  # Halves: no overflow for coordinates near the float limit.
  half_steps = np.abs(xy[following] / 2 - xy / 2).max(axis=1, initial=0)
  steps = 2 * np.minimum(half_steps, np.maximum(widths, heights)[polygon] / 2)
  outlines = np.bincount(polygon, steps, minlength=len(counts))
  limits = MAX_OUTLINE * (widths + heights)
  if (outlines > limits).any():
    m = int(np.argmax(outlines > limits))
    raise DataFileError(f"{where(m)}: expected an outline of at most {MAX_OUTLINE} x (width + height) = "
                        f"{limits[m]} pixels (edges by max(|dx|, |dy|), each at most the image's larger "
                        f"side), got {outlines[m]:.0f}")


def _polygons(path: str, groundings: list[list], answers: list[list], widths: list[int],
              heights: list[int]) -> list[np.ndarray]:
  """Per record, its points as one [sum P, 2] array (polygons split by the caller)."""
  where = lambda i: f"{path}: records[{i}]"
  for i, (g, a) in enumerate(zip(groundings, answers)):
    if len(g) != len(a) or not a:
      raise DataFileError(f"{where(i)}: expected one polygon in grounding_labels per answer "
                          f"(at least one), got {len(g)} polygons for {len(a)} answers")
  polygons, where_polygon = _flatten(groundings, lambda i: f"{where(i)}: grounding_labels")
  if not set(map(type, polygons)) <= {list}:
    k = next(k for k, p in enumerate(polygons) if type(p) is not list)
    raise DataFileError(f"{where_polygon(k)}: expected a list of {{x, y}} points, got {polygons[k]!r}")
  points, where_point = _flatten(polygons, where_polygon)
  xy = [_typed(points, key, (int, float), "a number", where_point) for key in "xy"]
  xy = np.array(xy, np.float64).T.reshape(-1, 2)
  if not np.isfinite(xy).all():
    k = int(np.argmin(np.isfinite(xy).all(axis=1)))
    raise DataFileError(f"{where_point(k)}: expected finite x and y, got {points[k]!r}")
  polygons_per_record = np.fromiter(map(len, groundings), np.int64, len(groundings))
  check_outlines(xy, list(map(len, polygons)), np.repeat(widths, polygons_per_record),
                 np.repeat(heights, polygons_per_record), where_polygon)
  per_record = np.fromiter((sum(map(len, g)) for g in groundings), np.int64, len(groundings))
  return np.split(xy, np.cumsum(per_record)[:-1])


LABEL_FIELDS = ("binary_label", "grounding_labels")  # what a test file may lack


def read_therapy(path: str, data: list | None = None, labels_optional: bool = False) -> list[Sample]:
  """The samples of one VQA-AnswerTherapy file, in file order (see module docstring);
  `data` is its JSON list when already loaded (e.g. from a TFDS dataset, `path` then
  names it). With `labels_optional` (a test file), a file none of whose records has
  `binary_label` or `grounding_labels` is read without them (label "", no polygons)."""
  if data is None:
    data = load_json(path)
  if not isinstance(data, list) or not data:
    raise DataFileError(f"{path}: expected a non-empty JSON list of VQA-AnswerTherapy samples")
  where = lambda i: f"{path}: records[{i}]"
  labelled = not labels_optional or any(isinstance(r, dict) and any(k in r for k in LABEL_FIELDS) for r in data)
  image_ids = _typed(data, "image_id", (str, int), "a string or integer", where)
  questions = column(data, "question", str, where)
  answer_types = column(data, "answer_type", str, where)
  sizes = [column(data, key, int, where) for key in ("width", "height")]
  for key, values in zip(("width", "height"), sizes):
    if min(values) <= 0 or max(values) > MAX_SIDE:
      i = next(i for i, v in enumerate(values) if not 0 < v <= MAX_SIDE)
      raise DataFileError(f'{where(i)}: expected "{key}" from 1 to {MAX_SIDE} pixels, got {values[i]}')
  labels = column(data, "binary_label", str, where) if labelled else ["same"] * len(data)
  if not set(labels) <= set(BINARY_LABELS):
    i = next(i for i, label in enumerate(labels) if label not in BINARY_LABELS)
    raise DataFileError(f'{where(i)}: expected "binary_label" one of {sorted(BINARY_LABELS)}, got {labels[i]!r}')
  answers = column(data, "answers", list, where)
  flat, where_answer = _flatten(answers, lambda i: f"{where(i)}: answers")
  if not set(map(type, flat)) <= {str}:
    k = next(k for k, a in enumerate(flat) if type(a) is not str)
    raise DataFileError(f"{where_answer(k)}: expected a string, got {flat[k]!r}")
  if not labelled and not all(answers):
    raise DataFileError(f"{where(answers.index([]))}: expected at least one answer")
  groundings = column(data, "grounding_labels", list, where) if labelled else [[] for _ in data]
  points = _polygons(path, groundings, answers, *sizes) if labelled else [np.zeros((0, 2))] * len(data)
  question_ids = [r.get("question_id") for r in data]
  for i, qid in enumerate(question_ids):
    if qid is not None and type(qid) not in (str, int):
      raise DataFileError(f'{where(i)}: expected a string or integer "question_id", got {qid!r}')
  samples = []
  for i, record_points in enumerate(points):
    ends = np.cumsum([len(p) for p in groundings[i]])[:-1]
    samples.append(Sample(
        path=path, index=i, source=VIZWIZ if question_ids[i] is None else VQA,
        image_id=image_ids[i], question_id=question_ids[i], question=questions[i],
        answers=tuple(answers[i]), polygons=tuple(np.split(record_points, ends)) if labelled else (),
        width=sizes[0][i], height=sizes[1][i], answer_type=answer_types[i],
        label=BINARY_LABELS[labels[i]] if labelled else ""))
  check_unique(samples)
  return samples


def check_unique(samples: Sequence[Sample]) -> None:
  """Refuses a sample repeating an earlier one (same image_id, question_id, question and
  answers in any order), naming both records."""
  seen = {}
  for s in samples:
    first = seen.setdefault((s.image_id, s.question_id, s.question, tuple(sorted(s.answers))), s)
    if first is not s:
      earlier = f"records[{first.index}]" if first.path == s.path else f"{first.path}: records[{first.index}]"
      raise DataFileError(f"{s.path}: records[{s.index}]: repeats {earlier} (the same image_id, "
                          "question_id, question and answers)")


def feature_keys(samples: Sequence[Sample]) -> list[int]:
  """The feature-store key of each sample's image (`features/keys.py`); DataFileError naming the
  record of an image_id that has none (a name of no VizWiz split, beyond a store's int64)."""
  keys = []
  for s in samples:
    try:
      keys.append(feature_key(s.image_id))
    except ValueError as e:
      raise DataFileError(f"{s.path}: records[{s.index}]: {e}") from None
  return keys
