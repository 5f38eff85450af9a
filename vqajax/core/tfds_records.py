"""Prepared TFDS datasets: opening one and reading its examples back as plain records.

The per-format features and the way back to the official objects are in
`vqa/tfds_records.py` and `answertherapy/tfds_records.py`. What follows is their common layout.

The builders of `data_pipeline/tfds` write one example per record with the features
below (every string exactly as in the file); `config.data.source = "tfds"` reads a
prepared dataset back here as the official JSON objects, so the same readers,
encoders and pipeline run on it as on the files. Splits are named after the files:

  vqa/v1, vqa/v2   train, val, test, test_dev (`*_train2014_*`, `*_val2014_*`,
                   `*_test2015_*`, `*_test-dev2015_*`); one example per question in
                   annotation-file order (questions-file order without annotations);
                   the files' other top-level fields (info, license, task_type,
                   data_type, data_subtype) are kept in the dataset's metadata
  vizwiz_vqa       train, val, test (`train.json`, ...), file order
  answer_therapy   VQA_train, VizWiz_train, ... (`VQA_train.json`, ...), file order

Integer ids of AnswerTherapy files (the released files have strings) come back as
their decimal strings. `image_features` (a builder option) holds each example's row of
a `FeatureStore`; training reads features from the store itself, never from here.
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import tensorflow_datasets as tfds

from vqajax.core import fs, runtime
from vqajax.core.official_files import DataFileError

runtime.tensorflow()  # set up before TFDS touches a device

F = tfds.features
IMAGE_FEATURES = "image_features"


def with_image(spec: dict, image: F.Tensor | None) -> F.FeaturesDict:
  return F.FeaturesDict(dict(spec, **{IMAGE_FEATURES: image}) if image is not None else spec)


def open_dataset(tfds_dir: str, name: str):
  """The prepared dataset in `tfds_dir` (`<data_dir>/<name>/<config>/<version>`), which
  must be a `name` dataset."""
  if not fs.exists(os.path.join(tfds_dir, "dataset_info.json")):
    raise DataFileError(f"{tfds_dir}: not a prepared TFDS dataset (no dataset_info.json); build it with "
                        "`vqajax tfds build` (README: 'Preparing data')")
  builder = tfds.builder_from_directory(tfds_dir)
  if builder.name != name:
    raise DataFileError(f"{tfds_dir}: a {builder.name} dataset, expected {name}")
  return builder


def examples(builder, tfds_dir: str, split: str) -> Iterator[dict]:
  """The split's examples in stored order (= file order), strings decoded, without the
  image features."""
  if split not in builder.info.splits:
    raise DataFileError(f"{tfds_dir}: no split '{split}' (it has {', '.join(sorted(builder.info.splits))})")
  features = {k: v for k, v in builder.info.features.items() if k != IMAGE_FEATURES}
  ds = builder.as_dataset(split=split, shuffle_files=False, decoders=tfds.decode.PartialDecoding(features))
  for ex in tfds.as_numpy(ds):
    yield {k: _decoded(v) for k, v in ex.items()}


def _decoded(value):
  if isinstance(value, dict):  # a sequence of dicts: dict of arrays -> list of dicts
    columns = {k: _decoded(v) for k, v in value.items()}
    return [dict(zip(columns, row)) for row in zip(*columns.values())]
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, np.ndarray) and value.dtype == object:
    return [v.decode("utf-8") for v in value]
  if isinstance(value, np.generic):
    return value.item()
  return value


