"""IoU and IoU-PQ of answer-grounding masks (VQA-AnswerTherapy), jittable or numpy.

IoU = |A & B| / |A | B|, with IoU(empty, empty) = 1: two groundings that both cover
nothing agree. IoU-PQ is the mean IoU over a question's groundings, then over questions.
The dataset's rule (`single_grounding`): a question has a single grounding when every pair
of its groundings has IoU > EQUAL_IOU = 0.9 (`analysis` on the annotated polygons,
`from_masks` on predicted masks).
`xp` is jax.numpy (default, jittable) or numpy. Under jax, large masks (at least
PACKED_PIXELS pixels, e.g. 448x448) are counted from their pixels packed 32 to a word and
`population_count`: XLA:CPU widens summed booleans to int32 and reduces a long row slowly
(on bench_iou's masks, summing took 4x packing's time at 448x448). Small ones (the 14x14
grid), where packing's shifts cost more than they save, are read as they lie, a boolean a
byte: 4 pixels a uint32 word (a bitcast), whose byte lanes (0 or 1 each) one multiply by
0x01010101 adds up in the top byte; each word's three counts (pred, gt, both) go in 10-bit
fields of one int32 (a mask under PACKED_PIXELS counts at most 1023), so one reduction over a
mask's words counts all three. On bench_iou's 14x14 grid that took 0.4-0.6x the time of
summing each pixel's three bits as int32 fields (one device, one thread); a mask whose pixel
count is not a multiple of 4 is padded first, a copy that makes it about as fast as that sum.
PACKED_PIXELS lies between the two sizes measured.
"""

from __future__ import annotations

from types import ModuleType

EQUAL_IOU = 0.9
PACKED_PIXELS = 1024  # masks of at least this many pixels are counted packed (under jax)
_FIELD = (PACKED_PIXELS - 1).bit_length()  # bits of a smaller mask's count: 3 fields fit an int32


def _xp(xp: ModuleType | None) -> ModuleType:
  if xp is None:
    import jax.numpy as xp  # noqa: PLC0415  (keeps jax off the CLI import path)
  return xp


def iou_from_counts(intersection, area_a, area_b, xp: ModuleType | None = None):
  """IoU from pixel counts (arrays broadcast); 1 where both areas are 0."""
  xp = _xp(xp)
  union = area_a + area_b - intersection
  return xp.where(union > 0, intersection / xp.maximum(union, 1), 1.0)


def single_grounding(pair_ious, pair_valid=None, xp: ModuleType | None = None):
  """True where every pair over the last axis (those of `pair_valid`, if given) has IoU >
  EQUAL_IOU, the dataset's rule for a single grounding; a question with no pair is single."""
  xp = _xp(xp)
  same = pair_ious > EQUAL_IOU
  if pair_valid is not None:
    same = same | ~pair_valid
  return xp.all(same, axis=-1)


def _pixel_groups(mask, n: int, dtype):
  """Boolean masks [..., H, W] -> [..., ceil(H * W / n), n] pixels of `dtype`, padded with zeros."""
  import jax.numpy as jnp  # noqa: PLC0415
  flat = mask.reshape(mask.shape[:-2] + (-1,)).astype(dtype)
  flat = jnp.pad(flat, [(0, 0)] * (flat.ndim - 1) + [(0, -flat.shape[-1] % n)])
  return flat.reshape(flat.shape[:-1] + (-1, n))


def _bit_words(mask):
  """Boolean masks [..., H, W] -> uint32 words [..., ceil(H * W / 32)], 32 pixels each."""
  import jax.numpy as jnp  # noqa: PLC0415
  bits = _pixel_groups(mask, 32, jnp.uint32)
  return (bits << jnp.arange(32, dtype=jnp.uint32)).sum(-1, dtype=jnp.uint32)


def _byte_words(mask):
  """Boolean masks [..., H, W] -> uint32 words [..., ceil(H * W / 4)], 4 pixels each, a byte (0 or 1) a pixel."""
  import jax.numpy as jnp  # noqa: PLC0415
  from jax import lax  # noqa: PLC0415
  return lax.bitcast_convert_type(_pixel_groups(mask, 4, jnp.uint8), jnp.uint32)


def _counts(pred, gt, xp: ModuleType):
  """(|pred & gt|, |pred|, |gt|) over the last two axes of boolean masks."""
  if xp.__name__ == "numpy":
    axes = (-2, -1)
    return (pred & gt).sum(axes), pred.sum(axes), gt.sum(axes)
  from jax import lax  # noqa: PLC0415
  if pred.shape[-2] * pred.shape[-1] < PACKED_PIXELS:  # the three counts in one pass, a field each of an int32
    lanes = lambda w: (w * xp.uint32(0x01010101)) >> 24  # the sum of a word's 4 byte lanes
    p, g = _byte_words(pred), _byte_words(gt)
    fields = lanes(p) | (lanes(g) << _FIELD) | (lanes(p & g) << 2 * _FIELD)
    total, low = fields.sum(-1, dtype=xp.uint32).astype(xp.int32), (1 << _FIELD) - 1
    return total >> 2 * _FIELD, total & low, (total >> _FIELD) & low
  p, g = _bit_words(pred), _bit_words(gt)
  return tuple(lax.population_count(w).sum(-1, dtype=xp.int32) for w in (p & g, p, g))


def iou(pred, gt, xp: ModuleType | None = None):
  """IoU [...] of boolean masks [..., H, W]."""
  xp = _xp(xp)
  return iou_from_counts(*_counts(pred, gt, xp), xp)


def group_sums(pred, gt, valid, groups, xp: ModuleType | None = None) -> dict:
  """Masked sums per group over boolean masks [Q, G, H, W] with `valid` [Q, G] False for
  padded groundings (all False for padded questions) and `groups` [Q, S] weights:
  `iou_pq` the sum over questions of the mean IoU of their valid groundings, `questions`
  the questions with a valid grounding, `iou` the sum of IoUs and `groundings` their count."""
  return group_sums_of(iou(pred, gt, xp), valid, groups, xp)


def group_sums_of(ious, valid, groups, xp: ModuleType | None = None) -> dict:
  """`group_sums` from the IoUs [Q, G] of the groundings (e.g. counted elsewhere)."""
  xp = _xp(xp)
  ious = xp.where(valid, ious, 0.0)
  counts = valid.sum(axis=-1)
  per_question = ious.sum(axis=-1) / xp.maximum(counts, 1)
  has = (counts > 0).astype(groups.dtype)
  return {"iou_pq": per_question @ groups, "questions": has @ groups,
          "iou": ious.sum(axis=-1) @ groups, "groundings": counts.astype(groups.dtype) @ groups}


def iou_pq_sums(pred, gt, valid, xp: ModuleType | None = None):
  """(sum over questions of the mean IoU of their valid groundings, number of questions
  with a valid grounding): `group_sums` with one group holding every question."""
  xp = _xp(xp)
  sums = group_sums(pred, gt, valid, xp.ones((valid.shape[0], 1), xp.float32), xp)
  return sums["iou_pq"][0], sums["questions"][0]


def iou_pq(pred, gt, valid, xp: ModuleType | None = None):
  """IoU-PQ: the mean over questions of the mean IoU over a question's valid groundings."""
  total, count = iou_pq_sums(pred, gt, valid, xp)
  return total / count
