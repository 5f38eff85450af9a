"""VizWiz-VQA from the official split files `train.json`, `val.json`, `test.json`."""

from __future__ import annotations

import os

from data_pipeline.tfds import base
from vqajax.core import official_files
from vqajax.vqa import files as vqa_files
from vqajax.vqa import tfds_records

ANSWER_FIELDS = {"answer": str, "answer_confidence": str}


class VizwizVqa(base.ManualBuilder):
  """VizWiz-VQA (vizwiz.org): one example per record in file order, with its image name,
  question, 10 answers with confidence, answer_type and answerable (test: neither);
  every string as in the files."""

  BUILDER_CONFIGS = [base.Config(name="default", description="VizWiz-VQA.")]
  FEATURES = staticmethod(tfds_records.vizwiz_features)
  EXPECTED_FILES = "train.json, val.json, test.json"
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the official VizWiz-VQA annotation files (Annotations.zip, unzipped: train.json,
  val.json, test.json) in one directory (manual_dir).
  """

  def _split_files(self, manual_dir: str) -> dict[str, str]:
    paths = {split: os.path.join(manual_dir, f"{split}.json") for split in tfds_records.VIZWIZ_SPLITS}
    return {split: path for split, path in paths.items() if os.path.exists(path)}

  def _records(self, split: str, path: str):
    """Reads and checks a split file (`vqa_files.read_vizwiz`; image and question only
    for a file without answers, the test split)."""
    data = official_files.load_json(path)
    if not isinstance(data, list) or not data:
      raise official_files.DataFileError(f"{path}: expected a non-empty JSON list of VizWiz records")
    where = lambda i: f"{path}: records[{i}]"
    if "answers" in data[0]:
      vqa_files.read_vizwiz(path, data, answer_fields=ANSWER_FIELDS)
      for name, kind in (("answer_type", str), ("answerable", int)):
        official_files.column(data, name, kind, where)
    else:
      official_files.column(data, "question", str, where)
    keys = vqa_files.vizwiz_image_ids(path, data)
    return [tfds_records.vizwiz_example(r) for r in data], keys, path
