"""VQA v1 / v2 from the official question and annotation files (configs v1, v2)."""

from __future__ import annotations

import os

from data_pipeline.tfds import base
from vqajax.core import official_files
from vqajax.vqa import files as vqa_files
from vqajax.vqa import tfds_records

_RECORD_LISTS = ("questions", "annotations")
# What the builder keeps of each answer (the reader checks "answer" only).
ANSWER_FIELDS = {"answer": str, "answer_confidence": str, "answer_id": int}


def file_names(release: str, split: str) -> dict[str, str]:
  """The official names of a split's questions, annotations and multiple-choice files."""
  subtype = tfds_records.VQA_SPLITS[split]
  prefix = "v2_" if release == "v2" else ""
  return {"questions": f"{prefix}OpenEnded_mscoco_{subtype}_questions.json",
          "annotations": f"{prefix}mscoco_{subtype}_annotations.json",
          "multiple_choice": f"MultipleChoice_mscoco_{subtype}_questions.json"}


def _header(data: dict) -> dict:
  """A file's top-level fields besides its record list (info, license, task_type, ...)."""
  return {k: v for k, v in data.items() if k not in _RECORD_LISTS}


class Vqa(base.ManualBuilder):
  """VQA v1 / v2 (visualqa.org): one example per question with its annotation (10 answers
  with confidence and id, question_type, answer_type, multiple_choice_answer) and, where
  the split has a MultipleChoice_* file (VQA v1), its 18 choices; every string as in the
  files. Splits train, val, test, test_dev, those whose questions file is present."""

  BUILDER_CONFIGS = [
      base.Config(name="v2", description="VQA v2 (v2_OpenEnded_mscoco_*, v2_mscoco_*)."),
      base.Config(name="v1", description="VQA v1 (OpenEnded_mscoco_*, mscoco_*, MultipleChoice_mscoco_*)."),
  ]
  FEATURES = staticmethod(tfds_records.vqa_features)
  EXPECTED_FILES = "e.g. v2_OpenEnded_mscoco_train2014_questions.json, v2_mscoco_train2014_annotations.json"
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the official files of visualqa.org, unzipped, in one directory (manual_dir), e.g.
  v2: v2_OpenEnded_mscoco_{train2014,val2014,test2015,test-dev2015}_questions.json,
      v2_mscoco_{train2014,val2014}_annotations.json
      [MultipleChoice_mscoco_{train2014,val2014}_questions.json: v1 choices, where wanted]
  v1: OpenEnded_mscoco_*_questions.json, mscoco_*_annotations.json,
      MultipleChoice_mscoco_*_questions.json
  """

  def _release(self) -> str:
    return self.builder_config.name.split("+")[0]

  def _split_files(self, manual_dir: str) -> dict[str, dict[str, str]]:
    splits = {}
    for split in tfds_records.VQA_SPLITS:
      paths = {k: os.path.join(manual_dir, name) for k, name in file_names(self._release(), split).items()}
      if os.path.exists(paths["questions"]):
        splits[split] = {k: p for k, p in paths.items() if os.path.exists(p)}
    return splits

  def _records(self, split: str, paths: dict[str, str]):
    """Reads and checks the split's files (the readers of `vqajax.vqa.files`)."""
    data = {"questions": official_files.read_questions(paths["questions"])}
    questions = data["questions"]["questions"]
    pairs = [(q, None) for q in questions]
    if "annotations" in paths:
      data["annotations"] = official_files.read_annotations(paths["annotations"], answer_fields=ANSWER_FIELDS)
      pairs = official_files.join(questions, data["annotations"]["annotations"], paths["questions"],
                                  paths["annotations"])
    if "multiple_choice" in paths:
      data["multiple_choice"] = official_files.read_questions(paths["multiple_choice"])
      vqa_files.attach_choices([q for q, _ in pairs], data["multiple_choice"], paths["multiple_choice"])
    self.info.metadata.setdefault("splits", {})[split] = {
        k: _header(data[k]) if k in data else None for k in ("questions", "annotations", "multiple_choice")}
    examples = [tfds_records.vqa_example(q, a) for q, a in pairs]
    return examples, [q["image_id"] for q, _ in pairs], paths["questions"]
