"""VizWiz-VQA split files -> the official VQA v2 questions / annotations files, so a VQA
config (`data.format = "vqa"`) trains, evaluates and scores on VizWiz.

  vqajax convert vizwiz FILE.json... --out DIR

Each FILE is a released split file (`train.json`, `val.json`, `test.json`): a JSON list of
{image, question, answers: [{answer, answer_confidence}] x10, answer_type, answerable}
(`test.json`: image and question only). Its records are read and checked by
`vqajax.vqa.files.read_vizwiz` (or `read_vizwiz_questions` when no record has answers), which
also gives `question_type` (the VQA-style type of the text, `vqajax/vqa/question_types.py`),
`multiple_choice_answer` (the most frequent answer string, ties to the one given first:
`vqajax.core.text.most_common_answer`) and `answer_id` (1..10 in file order). Then:

  image_id      the feature-store key of the image name (`vqajax.features.keys.feature_key`):
                `VizWiz_val_00000028.jpg` -> 2_000_000_028 (train 1e9 + n, val 2e9 + n,
                test 3e9 + n), which is the key `vqajax features --images DIR` stores for
                that file, so one store over the VizWiz images serves every split
  question_id   QUESTION_IDS[split] + the record's position in its file (read_vizwiz's
                question_id): train 100_000_000 + i, val 200_000_000 + i, test 300_000_000 + i,
                unique over the splits and within int32, as VQA's are
  data_subtype  the split the image names state (train / val / test; one split per file,
                each split once per command); data_type "vizwiz"

Written to DIR (`v2_OpenEnded_vizwiz_<split>_questions.json` and, for files with answers,
`v2_vizwiz_<split>_annotations.json`), all files or none, never over an input. `answerable`
has no official field and is not carried (its answers say "unanswerable").
"""

from __future__ import annotations

import os
from typing import Sequence

from vqajax.core.files import write_atomic_many
from vqajax.core.official_files import DataFileError, column, load_json
from vqajax.features.keys import feature_key, vizwiz_split
from vqajax.vqa import files as vqa_files

DATA_TYPE = "vizwiz"
QUESTION_IDS = {"train": 100_000_000, "val": 200_000_000, "test": 300_000_000}  # + the record's position
ANSWER_FIELDS = {"answer": str, "answer_confidence": str}  # what an official answer keeps, besides answer_id
LICENSE = {"name": "Creative Commons Attribution 4.0 International License",
           "url": "https://creativecommons.org/licenses/by/4.0/"}


def file_names(split: str) -> dict[str, str]:
  """The official-style names of a split's questions and annotations files."""
  return {"questions": f"v2_OpenEnded_{DATA_TYPE}_{split}_questions.json",
          "annotations": f"v2_{DATA_TYPE}_{split}_annotations.json"}


def _keys(path: str, data: list) -> tuple[str, list[int]]:
  """(the file's split, each record's image key); names that are no VizWiz image and
  several splits in one file are errors."""
  if not isinstance(data, list) or not data:
    raise DataFileError(f"{path}: expected a non-empty JSON list of VizWiz-VQA records")
  images = column(data, "image", str, lambda i: f"{path}: records[{i}]")
  keys = []
  for i, image in enumerate(images):
    try:
      key = feature_key(image)
    except ValueError:
      raise DataFileError(f"{path}: records[{i}]: expected an image name VizWiz_<train|val|test>_<number>.jpg, "
                          f"got {image!r}") from None
    if vizwiz_split(key) != vizwiz_split(keys[0] if keys else key):
      raise DataFileError(f"{path}: records[{i}]: image {image!r} is not of split {vizwiz_split(keys[0])}, "
                          "as records[0]'s is (one split per file)")
    keys.append(key)
  return vizwiz_split(keys[0]), keys


def _header(path: str, split: str) -> dict:
  return {"info": {"description": f"VizWiz-VQA {os.path.basename(path)} as official VQA v2 files "
                                  "(vqajax convert vizwiz)", "url": "https://vizwiz.org/tasks-and-datasets/vqa/"},
          "license": LICENSE, "data_type": DATA_TYPE, "data_subtype": split}


def convert(path: str) -> tuple[str, dict[str, dict]]:
  """(split, {"questions": object[, "annotations": object]}) of one VizWiz-VQA file (module
  docstring)."""
  data = load_json(path)
  split, keys = _keys(path, data)
  answered = any(isinstance(record, dict) and "answers" in record for record in data)
  if answered:  # the records checked before any is converted
    _, annotations = vqa_files.read_vizwiz(path, data, answer_fields=ANSWER_FIELDS, subtype=split)
  else:
    vqa_files.read_vizwiz_questions(path, data, split)
  ids = [QUESTION_IDS[split] + i for i in range(len(data))]
  questions = [{"image_id": key, "question": record["question"], "question_id": qid}
               for key, qid, record in zip(keys, ids, data)]
  out = {"questions": {**_header(path, split), "task_type": "Open-Ended", "questions": questions}}
  if not answered:
    return split, out
  out["annotations"] = {**_header(path, split), "annotations": [
      {"question_id": qid, "image_id": key, "question_type": a["question_type"], "answer_type": a["answer_type"],
       "multiple_choice_answer": a["multiple_choice_answer"],
       "answers": [{"answer": x["answer"], "answer_confidence": x["answer_confidence"], "answer_id": x["answer_id"]}
                   for x in a["answers"]]}
      for key, qid, a in zip(keys, ids, annotations["annotations"])]}
  return split, out


def write(paths: Sequence[str], out_dir: str) -> dict[str, list[str]]:
  """Converts every file, then writes them all into `out_dir` (or nothing): {input path:
  the files written for it}."""
  converted, split_of = {}, {}
  for path in paths:
    split, objects = convert(path)
    if split in split_of:
      raise DataFileError(f"{path}: holds split {split}, as {split_of[split]} does (one file per split)")
    split_of[split] = path
    names = file_names(split)
    converted[path] = {os.path.join(out_dir, names[kind]): obj for kind, obj in objects.items()}
  write_atomic_many({p: obj for outputs in converted.values() for p, obj in outputs.items()}, make_dirs=True)
  return {path: list(outputs) for path, outputs in converted.items()}
