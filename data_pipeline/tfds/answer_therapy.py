"""VQA-AnswerTherapy from the released files `VQA_<split>.json`, `VizWiz_<split>.json`."""

from __future__ import annotations

import os

from data_pipeline.tfds import base
from vqajax.answertherapy import files as therapy_files
from vqajax.answertherapy import tfds_records
from vqajax.core import official_files


class AnswerTherapy(base.ManualBuilder):
  """VQA-AnswerTherapy (ICCV 2023): one example per visual question in file order, with
  its 2-4 answers, one grounding polygon per answer (`points`, `polygon_sizes`), image
  size, answer_type, binary_label (same/diff or single/multiple, as released) and source
  (VQAv2 with its question_id, or VizWiz); every string as in the files. One split per
  file: VQA_train, VQA_val, VQA_test, VizWiz_train, ... (combine with "+")."""

  BUILDER_CONFIGS = [base.Config(name="default", description="VQA-AnswerTherapy.")]
  FEATURES = staticmethod(tfds_records.therapy_features)
  EXPECTED_FILES = "VQA_train.json, VizWiz_train.json, ..."
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the released VQA-AnswerTherapy files (VQA_{train,val,test}.json,
  VizWiz_{train,val,test}.json, any of them) in one directory (manual_dir).
  """

  def _split_files(self, manual_dir: str) -> dict[str, str]:
    paths = {split: os.path.join(manual_dir, f"{split}.json") for split in tfds_records.THERAPY_SPLITS}
    return {split: path for split, path in paths.items() if os.path.exists(path)}

  def _records(self, split: str, path: str):
    """Reads and checks a file (`therapy_files.read_therapy`); the feature-store key of an
    image is `therapy_files.feature_keys`."""
    data = official_files.load_json(path)
    samples = therapy_files.read_therapy(path, data)
    examples = [tfds_records.therapy_example(r, s.source, s.polygons) for r, s in zip(data, samples)]
    keys = therapy_files.feature_keys(samples) if self.builder_config.features else []
    return examples, keys, path
