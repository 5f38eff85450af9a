"""The TFDS form of the official records, both ways.

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

import logging
import os
from typing import Iterator

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vqajax.vqa import files as vqa_files
from vqajax.vqa.files import DataFileError

tf.config.set_visible_devices([], "GPU")  # the accelerator belongs to JAX


class _DropDeprecationNotes(logging.Filter):
  """TFDS 4.9 warns of its own use of `FeatureConnector.dtype` on every build and read."""

  def filter(self, record: logging.LogRecord) -> bool:
    return "is deprecated. Please change your code to use NumPy" not in record.getMessage()


tfds.display_progress_bar(False)
logging.getLogger("absl").addFilter(_DropDeprecationNotes())

F = tfds.features
IMAGE_FEATURES = "image_features"
VQA_SPLITS = {"train": "train2014", "val": "val2014", "test": "test2015", "test_dev": "test-dev2015"}
VIZWIZ_SPLITS = ("train", "val", "test")
THERAPY_SPLITS = tuple(f"{source}_{split}" for source in ("VQA", "VizWiz") for split in VIZWIZ_SPLITS)


def _with_image(spec: dict, image: F.Tensor | None) -> F.FeaturesDict:
  return F.FeaturesDict(dict(spec, **{IMAGE_FEATURES: image}) if image is not None else spec)


def vqa_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VQA v1/v2 question with its annotation ("" and [] without one) and its
  `multiple_choices` ([] without a multiple-choice file)."""
  return _with_image({
      "question_id": np.int64, "image_id": np.int64, "question": F.Text(),
      "multiple_choices": F.Sequence(F.Text()),
      "question_type": F.Text(), "answer_type": F.Text(), "multiple_choice_answer": F.Text(),
      "answers": F.Sequence({"answer": F.Text(), "answer_confidence": F.Text(), "answer_id": np.int64}),
  }, image)


def vizwiz_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VizWiz-VQA record (test: answers [], answer_type "", answerable -1)."""
  return _with_image({
      "image": F.Text(), "question": F.Text(),
      "answers": F.Sequence({"answer": F.Text(), "answer_confidence": F.Text()}),
      "answer_type": F.Text(), "answerable": np.int64,
  }, image)


def therapy_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VQA-AnswerTherapy sample; `grounding_labels` as `points` [P, 2] (x, y, float64,
  every polygon after the previous one) and `polygon_sizes` [A] (points per answer's
  polygon); `source` VQAv2 (with `question_id`) or VizWiz (`question_id` "")."""
  return _with_image({
      "image_id": F.Text(), "question_id": F.Text(), "source": F.Text(), "question": F.Text(),
      "answers": F.Sequence(F.Text()),
      "points": F.Tensor(shape=(None, 2), dtype=np.float64, encoding=F.Encoding.BYTES),
      "polygon_sizes": F.Tensor(shape=(None,), dtype=np.int64),
      "width": np.int64, "height": np.int64, "answer_type": F.Text(), "binary_label": F.Text(),
  }, image)


def vqa_example(question: dict, annotation: dict | None) -> dict:
  """The example of an official question (with `multiple_choices` if it has them) and
  its annotation (None: a test split)."""
  a = annotation or {"question_type": "", "answer_type": "", "multiple_choice_answer": "", "answers": []}
  return {
      "question_id": question["question_id"], "image_id": question["image_id"],
      "question": question["question"], "multiple_choices": question.get("multiple_choices", []),
      "question_type": a["question_type"], "answer_type": a["answer_type"],
      "multiple_choice_answer": a["multiple_choice_answer"],
      "answers": [{k: x[k] for k in ("answer", "answer_confidence", "answer_id")} for x in a["answers"]],
  }


def vizwiz_example(record: dict) -> dict:
  """The example of a VizWiz-VQA record (a test record has only image and question)."""
  return {
      "image": record["image"], "question": record["question"],
      "answers": [{k: x[k] for k in ("answer", "answer_confidence")} for x in record.get("answers", [])],
      "answer_type": record.get("answer_type", ""), "answerable": record.get("answerable", -1),
  }


def therapy_example(record: dict, source: str, polygons) -> dict:
  """The example of an AnswerTherapy record whose groundings are `polygons` ([P, 2]
  float64 arrays, `therapy_files.Sample.polygons`)."""
  return {
      "image_id": str(record["image_id"]), "question_id": str(record.get("question_id", "")),
      "source": source, "question": record["question"], "answers": record["answers"],
      "points": np.concatenate(polygons).reshape(-1, 2),
      "polygon_sizes": np.array([len(p) for p in polygons], np.int64),
      "width": record["width"], "height": record["height"],
      "answer_type": record["answer_type"], "binary_label": record["binary_label"],
  }


def open_dataset(tfds_dir: str, name: str):
  """The prepared dataset in `tfds_dir` (`<data_dir>/<name>/<config>/<version>`), which
  must be a `name` dataset."""
  if not os.path.exists(os.path.join(tfds_dir, "dataset_info.json")):
    raise DataFileError(f"{tfds_dir}: not a prepared TFDS dataset (no dataset_info.json); build it with "
                        "`python -m vqajax.tfds.cli build` (data_pipeline/README.md)")
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


def vqa_objects(tfds_dir: str, split: str) -> tuple[dict, dict | None, dict | None]:
  """The split's (questions, annotations, multiple-choice questions) objects as in the
  official files; None for a file the split did not have."""
  builder = open_dataset(tfds_dir, "vqa")
  headers = builder.info.metadata["splits"][split] if split in builder.info.splits else {}
  questions, annotations, choices = [], [], []
  for ex in examples(builder, tfds_dir, split):
    question = {k: ex[k] for k in ("question_id", "image_id", "question")}
    questions.append(question)
    choices.append(dict(question, multiple_choices=ex["multiple_choices"]))
    annotations.append({k: ex[k] for k in ("question_id", "image_id", "question_type", "answer_type",
                                           "multiple_choice_answer", "answers")})

  def file(key: str, records: list):
    return None if headers[key] is None else dict(headers[key], **{
        "annotations" if key == "annotations" else "questions": records})

  return file("questions", questions), file("annotations", annotations), file("multiple_choice", choices)


def vizwiz_file(tfds_dir: str, split: str) -> list[dict]:
  """The split's VizWiz-VQA records as in the official file."""
  builder = open_dataset(tfds_dir, "vizwiz_vqa")
  records = []
  for ex in examples(builder, tfds_dir, split):
    record = {"image": ex["image"], "question": ex["question"]}
    if ex["answerable"] >= 0:  # not a test record
      record.update(answers=ex["answers"], answer_type=ex["answer_type"], answerable=ex["answerable"])
    records.append(record)
  return records


def therapy_file(tfds_dir: str, split: str) -> list[dict]:
  """The split's VQA-AnswerTherapy records as in the released file."""
  builder = open_dataset(tfds_dir, "answer_therapy")
  records = []
  for ex in examples(builder, tfds_dir, split):
    ends = np.cumsum(ex["polygon_sizes"])[:-1]
    record = {k: ex[k] for k in ("image_id", "question", "answers", "width", "height", "answer_type",
                                 "binary_label")}
    record["grounding_labels"] = [[{"x": x, "y": y} for x, y in polygon.tolist()]
                                  for polygon in np.split(ex["points"], ends)]
    if ex["source"] == "VQAv2":
      record["question_id"] = ex["question_id"]
    records.append(record)
  return records


def read_vqa(tfds_dir: str, split: str, data_format: str, with_choices: bool):
  """(questions, annotations, multiple-choice questions or None, where) of a split of a
  prepared vqa (`data_format` "vqa") or vizwiz_vqa dataset, for `vqa_dataset.read_split`;
  `where` names the dataset and split in errors."""
  where = f"{tfds_dir}[{split}]"
  if data_format == "vizwiz":
    if with_choices:
      raise DataFileError(f"{where}: VizWiz-VQA has no multiple-choice questions")
    questions, annotations = vqa_files.read_vizwiz(where, vizwiz_file(tfds_dir, split), subtype=split)
    return questions, annotations, None, where
  questions, annotations, choices = vqa_objects(tfds_dir, split)
  if annotations is None:
    raise DataFileError(f"{where}: the split has no annotations")
  if with_choices and choices is None:
    raise DataFileError(f"{where}: the split has no multiple-choice questions (no MultipleChoice_* file was built in)")
  return questions, annotations, choices if with_choices else None, where
