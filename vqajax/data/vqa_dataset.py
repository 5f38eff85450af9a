"""Official VQA files -> numeric arrays, the only place where strings become ids.

Every split is a dict of numpy arrays with one row per question (annotation-file
order); the tf.data pipeline slices them and adds the image features.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from absl import logging

from vqajax.data import text
from vqajax.data import vqa_files
from vqajax.data.features import FeatureStore
from vqajax.metrics import vqa_accuracy

ANSWER_TYPES = ("yes/no", "number", "other", "unanswerable")


@dataclasses.dataclass
class VQAData:
  train: dict[str, np.ndarray]
  val: dict[str, np.ndarray]
  vocab: text.Vocab
  answers: text.AnswerTable
  store: FeatureStore
  question_types: list[str]          # index -> name, for `question_type` ids
  val_records: list[tuple[dict, dict]]  # (question, annotation) of the val split
  val_info: dict[str, str]           # data_type / data_subtype, for official result names
  table_ids: dict[str, np.ndarray]   # raw_ids / norm_ids of the answer table


def resolve(config_data, name: str) -> str:
  path = config_data[name]
  return path if os.path.isabs(path) else os.path.join(config_data.dir, path)


def read_split(config_data, split: str):
  questions_path = resolve(config_data, f"{split}_questions")
  annotations_path = resolve(config_data, f"{split}_annotations")
  if config_data.format == "vizwiz":  # one file holds questions and answers
    annotations_path = questions_path
    questions, annotations = vqa_files.read_vizwiz(questions_path)
  else:
    questions = vqa_files.read_questions(questions_path)
    annotations = vqa_files.read_annotations(annotations_path)
  for i, a in enumerate(annotations["annotations"]):
    if a["answer_type"] not in ANSWER_TYPES:
      raise vqa_files.DataFileError(
          f"{annotations_path}: annotations[{i}] answer_type '{a['answer_type']}' is not one of {ANSWER_TYPES}")
  records = vqa_files.join(questions, annotations, questions_path, annotations_path)
  mc_name = f"{split}_mc_questions"
  if config_data.get(mc_name):
    mc_path = resolve(config_data, mc_name)
    choices = {q["question_id"]: q for q in vqa_files.read_questions(mc_path)["questions"]}
    for q, a in records:
      mc = choices.get(q["question_id"])
      if mc is None or "multiple_choices" not in mc:
        raise vqa_files.DataFileError(
            f"{mc_path}: question_id {q['question_id']} has no multiple_choices")
      q["multiple_choices"] = mc["multiple_choices"]
  info = {"data_type": questions.get("data_type", "mscoco"),
          "data_subtype": questions.get("data_subtype", f"{split}2014")}
  return records, questions_path, info


def _arrays(records, source, vocab, answers, store, interner, type_index, max_len):
  questions = [q for q, _ in records]
  annotations = [a for _, a in records]
  tokens, lengths = vocab.encode([text.tokenize(q["question"]) for q in questions], max_len)
  out = {
      "question_id": np.array([q["question_id"] for q in questions], np.int64),
      "image_row": store.rows([q["image_id"] for q in questions], source).astype(np.int32),
      "tokens": tokens,
      "length": lengths,
      "label": answers.index(a["multiple_choice_answer"] for a in annotations),
      "answer_type": np.array([ANSWER_TYPES.index(a["answer_type"]) for a in annotations], np.int32),
      "question_type": np.array([type_index[a["question_type"]] for a in annotations], np.int32),
  }
  out.update(vqa_accuracy.encode_targets(annotations, interner))
  if "multiple_choices" in questions[0]:
    width = max(len(q["multiple_choices"]) for q in questions)
    choice_index = np.full((len(questions), width), -1, np.int32)
    choice_raw = np.full((len(questions), width), -1, np.int32)
    choice_norm = np.full((len(questions), width), -1, np.int32)
    for i, q in enumerate(questions):
      n = len(q["multiple_choices"])
      choice_index[i, :n] = answers.index(q["multiple_choices"])
      choice_raw[i, :n], choice_norm[i, :n] = vqa_accuracy.encode_answer_table(q["multiple_choices"], interner)
    out.update(choice_index=choice_index, choice_raw=choice_raw, choice_norm=choice_norm)
  return out


def read_train_records(config_data):
  """The training (question, annotation) records and their source file, after the
  confidence filter when `config_data.confident_only`."""
  records, source, _ = read_split(config_data, "train")
  if config_data.confident_only:
    kept = {a["question_id"] for a in text.confident_only([a for _, a in records])}
    logging.info("Confidence filter keeps %d of %d training questions", len(kept), len(records))
    records = [(q, a) for q, a in records if a["question_id"] in kept]
  return records, source


def load(config_data) -> VQAData:
  """Reads train and val files and the feature store named by `config.data`."""
  train_records, train_source = read_train_records(config_data)
  val_records, val_source, val_info = read_split(config_data, "val")

  answers = text.AnswerTable.build((a["multiple_choice_answer"] for _, a in train_records),
                                   config_data.num_answers)
  covered = np.mean(answers.index(a["multiple_choice_answer"] for _, a in train_records) >= 0)
  logging.info("Top-%d answers cover %.2f%% of training questions", len(answers), 100 * covered)
  print(f"answer table: top {len(answers)} answers cover {100 * covered:.2f}% of training questions")

  vocab = text.Vocab.build((text.tokenize(q["question"]) for q, _ in train_records),
                           config_data.vocab_min_count)
  print(f"question vocabulary: {len(vocab)} entries (min count {config_data.vocab_min_count}, with PAD and UNK)")

  store = FeatureStore(resolve(config_data, "features"))
  store.check_shape(tuple(config_data.feature_shape))
  question_types = sorted({a["question_type"] for _, a in train_records + val_records})
  type_index = {t: i for i, t in enumerate(question_types)}
  interner = vqa_accuracy.Interner()
  raw_ids, norm_ids = vqa_accuracy.encode_answer_table(answers.answers, interner)
  build = lambda records, source: _arrays(records, source, vocab, answers, store, interner,
                                          type_index, config_data.max_question_len)
  train = build(train_records, train_source)
  if config_data.drop_unknown_answers:
    train = {k: v[train["label"] >= 0] for k, v in train.items()}
  return VQAData(train=train, val=build(val_records, val_source), vocab=vocab, answers=answers,
                 store=store, question_types=question_types, val_records=val_records, val_info=val_info,
                 table_ids={"raw_ids": raw_ids, "norm_ids": norm_ids})
