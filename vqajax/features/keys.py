"""The feature-store key of an image id.

A feature store keys images by integer (`data.features`): a COCO id (an integer or a
digit string) is itself, a VizWiz name `VizWiz_<split>_<n>.jpg` is `VIZWIZ_KEYS[split] + n`
(above any COCO id).
"""

from __future__ import annotations

import re

VIZWIZ_KEYS = {"train": 1_000_000_000, "val": 2_000_000_000, "test": 3_000_000_000}
_VIZWIZ_NAME = re.compile(r"VizWiz_(train|val|test)_(\d{1,9})\.jpg")  # n < 1e9: the splits' keys never meet


MAX_KEY = 2**63 - 1  # a store's image ids are int64


def feature_key(image_id: str | int) -> int:
  """The feature-store key of an image (module docstring)."""
  if type(image_id) is int or (isinstance(image_id, str) and image_id.isascii() and image_id.isdigit()):
    if not -MAX_KEY - 1 <= int(image_id) <= MAX_KEY:
      raise ValueError(f"image_id {image_id}: expected at most 2**63 - 1 (a feature store's ids are int64)")
    return int(image_id)
  match = _VIZWIZ_NAME.fullmatch(image_id) if isinstance(image_id, str) else None
  if match is None:
    raise ValueError(f"image_id {image_id!r} has no feature key: expected a COCO id or "
                     "'VizWiz_<train|val|test>_<number>.jpg'")
  return VIZWIZ_KEYS[match[1]] + int(match[2])


def vizwiz_split(key: int) -> str | None:
  """The VizWiz split whose image has feature key `key` (None: a COCO id)."""
  return next((split for split, base in VIZWIZ_KEYS.items() if base <= key < base + 1_000_000_000), None)
