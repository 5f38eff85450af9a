"""A trained run's images, as the models that answer about them (`vqa/ask.Answerer`,
`answertherapy/ask.Grounder`) share them: the image ids of the run's feature store and
their pictures, and image files of one's own, whose features are made as the store's were
(the extractor settings the run recorded: `recorded.Extractor`); the features of the last
`KEPT` files asked about by content (the demo's uploads) are kept.
"""

from __future__ import annotations

import collections
import hashlib
import os
from typing import Iterator

import numpy as np

from vqajax.core.errors import InputError
from vqajax.core.trained import Trained
from vqajax.features.recorded import Extractor

KEPT = 4  # files whose features `kept_features` keeps (the ones on the demo's pages now, mostly)


class RunImages:
  """The images of the run `run` (module docstring); `weights`: where the extractor's
  weights file is now, if it moved since the store was made."""

  def __init__(self, run: Trained, weights: str | None = None):
    self._run, self._weights, self._extractor = run, weights and os.fspath(weights), None
    self._kept: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()  # sha256 -> features

  @property
  def image_ids(self) -> list:
    """The run's feature store's image ids (empty when the store is not there)."""
    try:
      return self._run.store.image_ids.tolist()
    except InputError:
      return []

  def check_ids(self, image_ids) -> None:
    """Refuses an image id the run's feature store does not have, naming the store."""
    store = self._run.store
    unknown = [i for i, known in zip(image_ids, np.isin(image_ids, store.image_ids)) if not known]
    if unknown:
      raise InputError(f"image id {unknown[0]}: not in the run's feature store {store.path} "
                       f"({len(store.image_ids)} images, e.g. {store.image_ids[:3].tolist()})")

  def image_path(self, image_id) -> str | None:
    """The image file of a store image, if the store recorded one (extracted stores do)."""
    self.check_ids([image_id])
    return self._run.store.image_path(image_id)

  def feature_batches(self, image_paths: list[str]) -> Iterator[np.ndarray]:
    """Features of image files, made as the run's store's were (module docstring), one
    extractor batch at a time (long work: the caller reports progress)."""
    if self._extractor is None:
      self._extractor = Extractor(self._run.extractor_settings(), self._run.encoders.image_shape, self._run.path,
                                  self._weights)
    return self._extractor.batches(list(map(os.fspath, image_paths)))

  def features_of(self, image_paths: list[str]) -> np.ndarray:
    """Features of image files, made as the run's store's were (module docstring)."""
    return np.concatenate(list(self.feature_batches(image_paths)))

  def kept_features(self, image_path: str) -> np.ndarray:
    """The features of one image file, made once while it is among the last `KEPT` files
    asked about (by content: a file uploaded again is the same)."""
    with open(image_path, "rb") as f:
      digest = hashlib.sha256(f.read()).hexdigest()
    if digest not in self._kept:
      self._kept[digest] = self.features_of([image_path])[0]
    self._kept.move_to_end(digest)
    while len(self._kept) > KEPT:
      self._kept.popitem(last=False)
    return self._kept[digest]
