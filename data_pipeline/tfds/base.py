"""What the builders share: a manual directory of official files, an optional feature
store joined in by image id, examples stored in file order."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from typing import Callable, Iterator

import tensorflow_datasets as tfds
from etils import epath

from vqajax.core import tfds_records
from vqajax.core.official_files import DataFileError
from vqajax.features.store import FeatureStore

_READ_ROWS = 1024  # feature rows read from the store at a time


@dataclasses.dataclass(eq=False)
class Config(tfds.core.BuilderConfig):
  """`features`: a `FeatureStore` (.h5 / .npy) whose row of each example's image is
  stored as `image_features` ("" none)."""
  features: str = ""


def with_features(config: Config, store: str) -> Config:
  """`config` joined with the store at path `store`: named `<config>+<store file stem>`."""
  stem = re.sub(r"[^\w.-]", "_", os.path.basename(store).rsplit(".", 1)[0])
  return dataclasses.replace(config, name=f"{config.name}+{stem}", features=os.path.abspath(store),
                             description=f"{config.description} With the features of {store}.")


class _LocalInfo(tfds.core.DatasetInfo):
  """These datasets are never on TFDS's GCS bucket: not looking there also keeps TFDS from
  leaving an empty temporary folder behind for each builder made before its build."""

  def initialize_from_bucket(self) -> None:
    pass


class ManualBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A builder whose subclass gives `FEATURES(image spec or None)` and
  `_split_files(manual_dir) -> {split: files}` and `_records(split, files) ->
  (examples, feature-store keys, file naming them)`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release."}
  FEATURES: Callable = None
  EXPECTED_FILES = ""  # in errors

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    """The builder's file (TFDS 4.9.10 finds it only with `importlib_resources` installed)."""
    return epath.Path(inspect.getfile(cls))

  def _store(self) -> FeatureStore | None:
    if not self.builder_config.features:
      return None
    if getattr(self, "_opened_store", None) is None:
      self._opened_store = FeatureStore(self.builder_config.features)
    return self._opened_store

  def _info(self) -> tfds.core.DatasetInfo:
    store = self._store()
    image = None if store is None else tfds.features.Tensor(shape=store.shape, dtype=store.dtype)
    return _LocalInfo(builder=self, description=self.__doc__, features=self.FEATURES(image),
                      disable_shuffling=True, metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    manual_dir = str(dl_manager.manual_dir)
    splits = self._split_files(manual_dir)
    if not splits:
      raise DataFileError(f"{manual_dir}: none of the {self.name} files ({self.EXPECTED_FILES})")
    return {split: self._generate_examples(split, files) for split, files in splits.items()}

  def _generate_examples(self, split: str, files) -> Iterator[tuple[int, dict]]:
    examples, keys, source = self._records(split, files)
    store = self._store()
    rows = None if store is None else store.rows(keys, source)
    for start in range(0, len(examples), _READ_ROWS):
      chunk = examples[start:start + _READ_ROWS]
      if rows is not None:
        features = store.read(rows[start:start + _READ_ROWS]).astype(store.dtype)
        for example, row in zip(chunk, features):
          example[tfds_records.IMAGE_FEATURES] = row
      yield from enumerate(chunk, start)


def download_config(manual_dir: str) -> tfds.download.DownloadConfig:
  """Reads the official files from `manual_dir`; nothing is downloaded."""
  if not os.path.isdir(manual_dir):
    raise DataFileError(f"{manual_dir}: no such directory (the manual_dir with the official files)")
  if not os.listdir(manual_dir):  # TFDS would fail on it with an AssertionError and its traceback
    raise DataFileError(f"{manual_dir}: an empty directory (the manual_dir with the official files)")
  return tfds.download.DownloadConfig(manual_dir=manual_dir)

