"""The VQA dataset formats (`config.data.format`), one entry each in `FORMATS`: how a split is
read (from its files or a prepared TFDS dataset), how a questions-only test file is read, and
what the evaluation server's files of its predictions are called. The readers and writers
(`dataset.py`, `task.py`, `results.py`) look a format up here; a new format is one entry.

  vqa     VQA v1 / v2: a questions file and an annotations file per split (v1 also
          multiple-choice questions files); results name questions by `question_id`; the
          servers' files are `v2_...` (EvalAI) or `vqa_...` (v1, CodaLab), each also zipped
  vizwiz  VizWiz-VQA: one JSON list per split holds the questions and their answers; results
          name the `image`; the server's file is `VizWiz_<split>_<alg>_results.json`
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from vqajax.core import official_files
from vqajax.vqa import files as vqa_files
from vqajax.vqa import results


@dataclasses.dataclass(frozen=True)
class Format:
  read: Callable[[str, str], tuple[dict, list]]  # (questions, annotations path) -> questions, typed annotations
  read_tfds: Callable[[str, str, bool], tuple]   # (tfds_dir, split, with_choices) -> questions, annotations,
                                                 # multiple-choice questions or None, where (`tfds_records`)
  read_test: Callable[[str, Any, bytes], tuple[dict, str, dict]]  # (path, JSON, bytes) -> questions, the
                                                 # server's version, info (data_type, data_subtype)
  test_splits: tuple | None  # the server's test splits (a test file's data_subtype), None: any
  annotations: bool   # a split has annotations files apart from its questions files
  choices: bool       # VQA v1's multiple-choice files may come with it (`data.*_mc_questions` "auto")
  result_key: str     # what names a question in the server's results records
  submission: Callable[[str, dict, str], str]  # (task, test info, alg) -> the name of the server's results file
  zipped: bool        # each of the server's results files is also zipped alone


def _read_vqa(questions_path: str, annotations_path: str) -> tuple[dict, list]:
  return official_files.read_questions(questions_path), official_files.load_annotations(annotations_path)


def _read_vizwiz(questions_path: str, annotations_path: str) -> tuple[dict, list]:
  del annotations_path  # the same file
  questions, annotations = vqa_files.read_vizwiz(questions_path)
  return questions, official_files.typed_annotations(annotations["annotations"])


def _tfds_vqa(tfds_dir: str, split: str, with_choices: bool) -> tuple:
  from vqajax.vqa import tfds_records  # TensorFlow Datasets only for prepared data
  return tfds_records.read_vqa(tfds_dir, split, with_choices)


def _tfds_vizwiz(tfds_dir: str, split: str, with_choices: bool) -> tuple:
  from vqajax.vqa import tfds_records
  return tfds_records.read_vizwiz(tfds_dir, split, with_choices)


def _test_vqa(path: str, content, raw: bytes) -> tuple[dict, str, dict]:
  questions = official_files.read_questions(path, content=raw)
  version = "v2" if os.path.basename(path).startswith("v2_") else "v1"
  return questions, version, {"data_type": questions.get("data_type", "mscoco"),
                              "data_subtype": questions.get("data_subtype", "")}


def _test_vizwiz(path: str, content, raw: bytes) -> tuple[dict, str, dict]:
  del raw
  questions = vqa_files.read_vizwiz_questions(path, content)
  for q, record in zip(questions["questions"], content):  # the results name the image
    q["image"] = record["image"]
  return questions, "vizwiz", {"data_type": "VizWiz", "data_subtype": questions["data_subtype"]}


FORMATS = {
    "vqa": Format(_read_vqa, _tfds_vqa, _test_vqa, test_splits=results.COCO_SPLITS, annotations=True, choices=True,
                  result_key="question_id", zipped=True,
                  submission=lambda task, info, alg: results.results_name(
                      "v2_" if info["version"] == "v2" else "vqa_", task, info, alg)),
    "vizwiz": Format(_read_vizwiz, _tfds_vizwiz, _test_vizwiz, test_splits=None, annotations=False, choices=False,
                     result_key="image", zipped=False,
                     submission=lambda task, info, alg: f"VizWiz_{info['data_subtype']}_{alg}_results.json"),
}


def of_test_file(data_format: str, content) -> str:
  """The format of a test file's JSON `content` for a run on `data_format` data: a JSON list
  is a VizWiz-VQA file whatever the run was trained on."""
  return "vizwiz" if isinstance(content, list) else data_format
