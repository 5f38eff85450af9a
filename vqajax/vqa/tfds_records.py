"""The TFDS form of the official VQA v1/v2 and VizWiz-VQA records, both ways (the layout:
`core/tfds_records.py`)."""

from __future__ import annotations

import numpy as np

from vqajax.core.official_files import DataFileError, typed_annotations
from vqajax.core.tfds_records import F, examples, open_dataset, with_image
from vqajax.vqa import files as vqa_files

VQA_SPLITS = {"train": "train2014", "val": "val2014", "test": "test2015", "test_dev": "test-dev2015"}
VIZWIZ_SPLITS = ("train", "val", "test")


def vqa_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VQA v1/v2 question with its annotation ("" and [] without one) and its
  `multiple_choices` ([] without a multiple-choice file)."""
  return with_image({
      "question_id": np.int64, "image_id": np.int64, "question": F.Text(),
      "multiple_choices": F.Sequence(F.Text()),
      "question_type": F.Text(), "answer_type": F.Text(), "multiple_choice_answer": F.Text(),
      "answers": F.Sequence({"answer": F.Text(), "answer_confidence": F.Text(), "answer_id": np.int64}),
  }, image)


def vizwiz_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VizWiz-VQA record (test: answers [], answer_type "", answerable -1)."""
  return with_image({
      "image": F.Text(), "question": F.Text(),
      "answers": F.Sequence({"answer": F.Text(), "answer_confidence": F.Text()}),
      "answer_type": F.Text(), "answerable": np.int64,
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


def has_choices(tfds_dir: str, split: str) -> bool:
  """Whether the split of a prepared vqa dataset was built with a multiple-choice file."""
  builder = open_dataset(tfds_dir, "vqa")
  return split in builder.info.splits and builder.info.metadata["splits"][split]["multiple_choice"] is not None


def read_vqa(tfds_dir: str, split: str, with_choices: bool):
  """(questions, annotation records, multiple-choice questions or None, where) of a split
  of a prepared vqa dataset, for `vqa_dataset.read_split` (the records typed:
  `official_files.typed_annotations`); `where` names the dataset and split in errors."""
  where = f"{tfds_dir}[{split}]"
  questions, annotations, choices = vqa_objects(tfds_dir, split)
  if annotations is None:
    raise DataFileError(f"{where}: the split has no annotations")
  if with_choices and choices is None:
    raise DataFileError(f"{where}: the split has no multiple-choice questions (no MultipleChoice_* file was built in)")
  return questions, typed_annotations(annotations["annotations"]), choices if with_choices else None, where


def read_vizwiz(tfds_dir: str, split: str, with_choices: bool):
  """`read_vqa` of a split of a prepared vizwiz_vqa dataset (which has no multiple choices)."""
  where = f"{tfds_dir}[{split}]"
  if with_choices:
    raise DataFileError(f"{where}: VizWiz-VQA has no multiple-choice questions")
  questions, annotations = vqa_files.read_vizwiz(where, vizwiz_file(tfds_dir, split), subtype=split)
  return questions, typed_annotations(annotations["annotations"]), None, where
