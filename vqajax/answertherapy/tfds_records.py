"""The TFDS form of the released VQA-AnswerTherapy records, both ways (the layout:
`core/tfds_records.py`)."""

from __future__ import annotations

import numpy as np

from vqajax.core.tfds_records import F, examples, open_dataset, with_image

THERAPY_SPLITS = tuple(f"{source}_{split}" for source in ("VQA", "VizWiz") for split in ("train", "val", "test"))


def therapy_features(image: F.Tensor | None = None) -> F.FeaturesDict:
  """A VQA-AnswerTherapy sample; `grounding_labels` as `points` [P, 2] (x, y, float64,
  every polygon after the previous one) and `polygon_sizes` [A] (points per answer's
  polygon); `source` VQAv2 (with `question_id`) or VizWiz (`question_id` "")."""
  return with_image({
      "image_id": F.Text(), "question_id": F.Text(), "source": F.Text(), "question": F.Text(),
      "answers": F.Sequence(F.Text()),
      "points": F.Tensor(shape=(None, 2), dtype=np.float64, encoding=F.Encoding.BYTES),
      "polygon_sizes": F.Tensor(shape=(None,), dtype=np.int64),
      "width": np.int64, "height": np.int64, "answer_type": F.Text(), "binary_label": F.Text(),
  }, image)


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
