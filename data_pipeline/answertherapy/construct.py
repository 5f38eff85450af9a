"""VQA-AnswerTherapy dataset construction (paper section 3.1).

From raw VQA v2 / VizWiz questions with 10 answers each and two annotators' groundings of
their valid answers to the released files, reporting what each step removed.

  vqajax therapy construct --groundings G.json --out DIR \\
      [--questions Q.json --annotations A.json] [--vizwiz train.json val.json ...] [--seed S]

Raw input (`raw` reads and validates it):
  --questions, --annotations  an official VQA v2 questions / annotations pair (the
      questions' image_id and question, the annotations' answer_type and answers).
  --vizwiz  official VizWiz-VQA split files: JSON lists of {image, question, answer_type,
      answers: [{answer, ...}]}; an image name is VizWiz_<split>_<number>.<ext> and names
      the record's split; an image appears once over all files (one question per image).
  --groundings  a JSON list with one record per question sent for grounding:
      {"question_id": int (VQAv2) | "image": str (VizWiz),
       "several_questions": bool,  (the annotators' flag: the text holds several questions)
       "width": int, "height": int,  (the image size in pixels, 1 to files.MAX_SIDE = 10,000)
       "answers": {answer: [polygon of annotator 1, polygon of annotator 2]}}
      where a polygon is a list of {"x": number, "y": number} in pixels. Every answer that
      is valid when the record is attached needs an entry; other entries are ignored, and
      so are records that match no input question.

The steps, in order (each a function `(questions) -> (kept, removed)`; the report counts
what each removed, in the unit it removes):
  unusable answers      drop each annotator's answer that is "unanswerable" or
                        "unsuitable" (after stripping and lower-casing)
  valid answers         keep the distinct answers given by >= 2 annotators (exact string
                        match), most frequent first, ties in order of first appearance
  < 2 valid answers     drop questions with fewer than two valid answers (only these were
                        sent for grounding)
  "and" questions       drop questions of more than five words (whitespace-separated, with
                        surrounding punctuation stripped) one of which is "and"
  repeated questions    of questions with the same source, image and text (lower-cased,
                        whitespace collapsed), keep the first in input order
  not grounded          drop questions without a groundings record
  several questions     drop questions whose record has "several_questions": true
  annotator agreement   per answer, the IoU of the two annotators' polygons (rasterised by
                        `vqajax.answertherapy.masks`, IoU by `vqajax.answertherapy.iou`); at IoU >= 0.75
                        keep the polygon with more pixels (the first on a tie), else drop
                        the answer
  < 2 grounded answers  drop questions left with fewer than two answers
Then VQAv2 questions are split 70/10/20 into train / val / test by a seeded permutation
(floor(0.7 n) train, floor(0.1 n) val, the rest test); VizWiz questions keep the split of
their image. Each record gets `binary_label` single / multiple by the analysis' rule
(`vqajax.answertherapy.analysis`: single when every pair of answer groundings has IoU > 0.9).

Output in DIR, written together: VQA_{train,val,test}.json (with VQAv2 input) and
VizWiz_<split>.json (each split of the VizWiz input), in the released format that
`vqajax.answertherapy.files.read_therapy` reads (records in input order, image_id and
question_id as strings like the released files, an empty split as []); then the tables
`construction` (per step) and `splits` (per file) as Markdown, CSV and JSON.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import string
from typing import Callable, Sequence

import numpy as np

from data_pipeline.answertherapy import construct_raw as raw
from data_pipeline.answertherapy.construct_raw import Question
from vqajax.answertherapy import analysis as therapy
from vqajax.answertherapy import masks
from vqajax.answertherapy.files import VIZWIZ, VQA, Sample
from vqajax.answertherapy.iou import iou_from_counts
from vqajax.core import tables
from vqajax.core.errors import InputError

UNUSABLE = ("unanswerable", "unsuitable")
MIN_ANNOTATORS = 2
MAX_WORDS = 5
AGREEMENT_IOU = 0.75
VQA_SPLITS = (("train", 7), ("val", 1), ("test", 2))  # tenths
FILE_PREFIX = {VQA: "VQA", VIZWIZ: "VizWiz"}

Step = Callable[[list[Question]], tuple[list[Question], int]]


def _answers(questions: Sequence[Question]) -> int:
  return sum(len(q.answers) for q in questions)


def drop_unusable_answers(questions: Sequence[Question]) -> tuple[list[Question], int]:
  """Removes the annotators' "unanswerable" / "unsuitable" answers; counts answers."""
  kept = [dataclasses.replace(q, answers=tuple(a for a in q.answers if a.strip().lower() not in UNUSABLE))
          for q in questions]
  return kept, _answers(questions) - _answers(kept)


def valid_answers(questions: Sequence[Question]) -> tuple[list[Question], int]:
  """Keeps the distinct answers of >= 2 annotators; counts the distinct answers dropped."""
  kept, removed = [], 0
  for q in questions:
    counts = collections.Counter(q.answers)  # insertion order: first appearance
    valid = tuple(sorted((a for a, n in counts.items() if n >= MIN_ANNOTATORS), key=lambda a: -counts[a]))
    kept.append(dataclasses.replace(q, answers=valid))
    removed += len(counts) - len(valid)
  return kept, removed


def at_least_two_answers(questions: Sequence[Question]) -> tuple[list[Question], int]:
  """Drops questions with fewer than two answers."""
  kept = [q for q in questions if len(q.answers) >= 2]
  return kept, len(questions) - len(kept)


def is_and_question(question: str) -> bool:
  """More than five words (whitespace-separated, surrounding punctuation stripped), one "and"."""
  words = [w for w in (w.strip(string.punctuation) for w in question.lower().split()) if w]
  return len(words) > MAX_WORDS and "and" in words


def drop_and_questions(questions: Sequence[Question]) -> tuple[list[Question], int]:
  kept = [q for q in questions if not is_and_question(q.question)]
  return kept, len(questions) - len(kept)


def drop_repeats(questions: Sequence[Question]) -> tuple[list[Question], int]:
  """Keeps the first question of each (source, image, lower-cased whitespace-collapsed text)."""
  seen, kept = set(), []
  for q in questions:
    key = (q.source, q.image_id, " ".join(q.question.lower().split()))
    if key not in seen:
      seen.add(key)
      kept.append(q)
  return kept, len(questions) - len(kept)


def attach_groundings(questions: Sequence[Question], groundings: dict) -> tuple[list[Question], int]:
  """Attaches each question's groundings record, dropping questions without one; a valid
  answer missing from its record is an error."""
  kept = []
  for q in questions:
    grounding = groundings.get((q.source, q.key))
    if grounding is None:
      continue
    missing = [a for a in q.answers if a not in grounding.answers]
    if missing:
      raise InputError(f"{grounding.where}: expected the two annotators' polygons of valid answer "
                       f"{missing[0]!r}, got answers {sorted(grounding.answers)}")
    kept.append(dataclasses.replace(q, grounding=grounding))
  return kept, len(questions) - len(kept)


def drop_several_questions(questions: Sequence[Question]) -> tuple[list[Question], int]:
  kept = [q for q in questions if not q.grounding.several_questions]
  return kept, len(questions) - len(kept)


def agreement(pair: Sequence[np.ndarray], height: int, width: int) -> tuple[float, int]:
  """(IoU of two annotators' polygons, index of the one with more pixels, 0 on a tie)."""
  areas, inter = masks.overlaps([masks.rasterize(p, height, width)[0] for p in pair])
  return float(iou_from_counts(inter[0, 1], areas[0], areas[1], np)), int(areas[1] > areas[0])


def keep_agreed_groundings(questions: Sequence[Question]) -> tuple[list[Question], int]:
  """Per answer: keeps the larger polygon when the annotators' IoU >= 0.75, else drops
  the answer; counts answers."""
  kept, removed = [], 0
  for q in questions:
    g = q.grounding
    answers, polygons = [], []
    for a in q.answers:
      value, larger = agreement(g.answers[a], g.height, g.width)
      if value >= AGREEMENT_IOU:
        answers.append(a)
        polygons.append(g.answers[a][larger])
    removed += len(q.answers) - len(answers)
    kept.append(dataclasses.replace(q, answers=tuple(answers), polygons=tuple(polygons)))
  return kept, removed


def steps(groundings: dict) -> list[tuple[str, str, Step]]:
  """(name, unit removed, step) in order (module docstring)."""
  return [
      ("unusable answers", "annotators' answers", drop_unusable_answers),
      ("valid answers", "distinct answers", valid_answers),
      ("< 2 valid answers", "questions", at_least_two_answers),
      ('"and" questions', "questions", drop_and_questions),
      ("repeated questions", "questions", drop_repeats),
      ("not grounded", "questions", lambda qs: attach_groundings(qs, groundings)),
      ("several questions", "questions", drop_several_questions),
      ("annotator agreement", "answers", keep_agreed_groundings),
      ("< 2 grounded answers", "questions", at_least_two_answers),
  ]


REPORT_COLUMNS = ["step", "unit", "removed", "questions", "answers"]


def run_steps(questions: Sequence[Question], groundings: dict) -> tuple[list[Question], list[dict]]:
  """(the questions that pass every step, one report row per step after an "input" row:
  what it removed and the questions and answers left)."""
  questions = list(questions)
  rows = [{"step": "input", "questions": len(questions), "answers": _answers(questions)}]
  for name, unit, step in steps(groundings):
    questions, removed = step(questions)
    rows.append({"step": name, "unit": unit, "removed": removed,
                 "questions": len(questions), "answers": _answers(questions)})
  return questions, rows


def split_vqa(questions: Sequence[Question], seed: int) -> list[Question]:
  """VQAv2 questions split 70/10/20 by a seeded permutation (module docstring); input order."""
  vqa = [i for i, q in enumerate(questions) if q.source == VQA]
  n = len(vqa)
  sizes = [n * tenths // 10 for _, tenths in VQA_SPLITS[:-1]]
  names = [name for (name, _), size in zip(VQA_SPLITS, sizes + [n - sum(sizes)]) for _ in range(size)]
  split = dict(zip((vqa[k] for k in np.random.default_rng(seed).permutation(n)), names))
  return [dataclasses.replace(q, split=split[i]) if i in split else q for i, q in enumerate(questions)]


def binary_label(q: Question) -> str:
  """single / multiple by the analysis' decision on the kept polygons."""
  sample = Sample(path="", index=0, source=q.source, image_id=q.image_id,
                  question_id=q.key if q.source == VQA else None, question=q.question,
                  answers=q.answers, polygons=q.polygons, width=q.grounding.width,
                  height=q.grounding.height, answer_type=q.answer_type,
                  label="")  # not read by `ground`: the label is what it decides
  return therapy.ground(sample).grounding


def to_record(q: Question) -> dict:
  """The released AnswerTherapy record of a constructed question."""
  record = {"image_id": str(q.image_id), "question": q.question, "answers": list(q.answers),
            "grounding_labels": [[{"x": x, "y": y} for x, y in p.tolist()] for p in q.polygons],
            "width": q.grounding.width, "height": q.grounding.height,
            "answer_type": q.answer_type, "binary_label": binary_label(q)}
  if q.source == VQA:
    record["question_id"] = str(q.key)
  return record


def build(out_dir: str, groundings_path: str, questions_path: str | None = None,
          annotations_path: str | None = None, vizwiz_paths: Sequence[str] = (),
          seed: int = 0) -> str:
  """Reads the raw input, runs the steps, writes the split files and the tables into
  `out_dir` (module docstring); returns the tables as Markdown."""
  if (questions_path is None) != (annotations_path is None):
    raise InputError("VQAv2 input needs both a questions and an annotations file")
  questions = raw.read_vqa(questions_path, annotations_path) if questions_path else []
  questions += raw.read_vizwiz(vizwiz_paths)
  if not questions:
    raise InputError("no input questions: give VQAv2 questions and annotations and/or VizWiz files")
  kept, rows = run_steps(questions, raw.read_groundings(groundings_path))
  kept = split_vqa(kept, seed)
  names = [(VQA, name) for name, _ in VQA_SPLITS] if any(q.source == VQA for q in questions) else []
  order = {name: k for k, (name, _) in enumerate(VQA_SPLITS)}
  names += sorted({(VIZWIZ, q.split) for q in questions if q.source == VIZWIZ},
                  key=lambda name: (order.get(name[1], len(order)), name[1]))
  files = {}
  for source, split in names:
    files[f"{FILE_PREFIX[source]}_{split}.json"] = [
        to_record(q) for q in kept if (q.source, q.split) == (source, split)]
  split_rows = [{"file": name, "questions": len(records),
                 "single": sum(r["binary_label"] == therapy.SINGLE for r in records),
                 "multiple": sum(r["binary_label"] == therapy.MULTIPLE for r in records)}
                for name, records in files.items()]
  made = {"construction": (REPORT_COLUMNS, rows), "splits": (["file", "questions", "single", "multiple"], split_rows)}
  beside = {os.path.join(out_dir, name): records for name, records in files.items()}
  return "\n".join(tables.write_tables(out_dir, made, beside).values())
