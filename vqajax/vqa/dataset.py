"""Official VQA files -> numeric arrays, the only place where strings become ids.

Every split is a dict of numpy arrays with one row per question (annotation-file
order); the input pipeline (core/pipeline.py) slices them and adds the image features.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from typing import Callable

import numpy as np
from absl import logging

from vqajax.core import fs, official_files, phases, text
from vqajax.core import model as model_lib
from vqajax.core.config import file_names
from vqajax.core.errors import InputError
from vqajax.core.files import SAFE_NAME
from vqajax.core.official_files import DATA_SOURCES
from vqajax.core.task import TestFile
from vqajax.features.store import FeatureStore
from vqajax.vqa import files as vqa_files
from vqajax.vqa import formats
from vqajax.vqa import models as vqa_models
from vqajax.vqa import text as vqa_text
from vqajax.vqa.accuracy import kernel as vqa_accuracy
from vqajax.vqa.files import ANSWER_TYPES


@dataclasses.dataclass
class VQAData:
  train: dict[str, np.ndarray]
  val: dict[str, np.ndarray]
  vocab: text.Vocab
  answers: text.TopK
  store: FeatureStore
  question_types: list[str]          # index -> name, for `question_type` ids
  val_records: list[tuple[dict, dict]]  # (question, annotation) of the val split
  val_info: dict[str, str]           # data_type / data_subtype, for official result names
  table_ids: dict[str, np.ndarray]   # raw_ids / norm_ids of the answer table
  encoders: Encoders                 # what turned the records into arrays (recorded with the run)

  @property
  def bag_sizes(self) -> dict[str, int]:
    return self.encoders.bag_sizes


def resolve(config_data, name: str) -> str:
  path = config_data[name]
  return path if fs.isabs(path) else os.path.join(config_data.dir, path)


OUT_OF_TABLE = -2  # an annotator's answer outside the answer table (answer_index)
MC_AUTO = "auto"  # data.<split>_mc_questions: VQA v1's multiple-choice file if present


def resolve_all(config_data, role: str) -> list[str]:
  """The paths of a file field's names (`core.config.file_names`), relative to `dir`."""
  return [n if fs.isabs(n) else os.path.join(config_data.dir, n)
          for n in file_names(config_data.get(role) or "")]


def _read_files(config_data, questions_path: str, annotations_path: str, mc_path: str):
  """(questions, annotation records, multiple-choice questions or None) of one file each."""
  questions, annotations = formats.FORMATS[config_data.format].read(questions_path, annotations_path)
  mc_questions = official_files.read_questions(mc_path) if mc_path else None
  return questions, annotations, mc_questions


def read_split(config_data, split: str):
  """(records, source, info) of a split: its (question, annotation) pairs in
  annotation-file order (the files of the split's roles one after another: e.g. train
  and val together before a test submission), questions with `multiple_choices` when
  the config names the split's multiple-choice files; what they came from (for
  errors); the (first) questions file's data_type / data_subtype. `config_data.source`
  "tfds" reads them from the prepared TFDS dataset `tfds_dir` instead of the files
  (`tfds_records`)."""
  if config_data.source not in DATA_SOURCES:
    raise InputError(f"config.data.source '{config_data.source}' is not one of {DATA_SOURCES}")
  mc_name = config_data.get(f"{split}_mc_questions") or ""
  data_format = formats.FORMATS[config_data.format]
  if config_data.source == "tfds":
    from vqajax.vqa import tfds_records
    tfds_dir = resolve(config_data, "tfds_dir")
    with_choices = bool(mc_name)
    if mc_name == MC_AUTO:
      with_choices = data_format.choices and tfds_records.has_choices(tfds_dir, split)
    questions, annotations, mc_questions, where = data_format.read_tfds(tfds_dir, split, with_choices)
    parts = [(questions, annotations, mc_questions, where, where, where)]
  else:
    questions_paths = resolve_all(config_data, f"{split}_questions")
    annotations_paths = (resolve_all(config_data, f"{split}_annotations") if data_format.annotations
                         else questions_paths)  # one file holds the questions and their answers
    if not questions_paths or len(annotations_paths) != len(questions_paths):
      raise InputError(f"config.data.{split}_annotations: expected one annotations file per questions file "
                       f"({len(questions_paths)} in config.data.{split}_questions), got {len(annotations_paths)}")
    if mc_name == MC_AUTO:  # VQA v1's file where it is (v2 and VizWiz have none)
      auto = os.path.join(config_data.dir, f"MultipleChoice_mscoco_{split}2014_questions.json")
      mc_paths = [auto] if data_format.choices and fs.exists(auto) else []
    else:
      mc_paths = resolve_all(config_data, f"{split}_mc_questions")
    if mc_paths and len(mc_paths) != len(questions_paths):
      raise InputError(f"config.data.{split}_mc_questions: expected one multiple-choice file per questions file "
                       f"({len(questions_paths)}), got {len(mc_paths)}")
    mc_paths = mc_paths or [""] * len(questions_paths)
    with phases.timed("reading"):
      parts = [(*_read_files(config_data, q, a, mc), q, a, mc)
               for q, a, mc in zip(questions_paths, annotations_paths, mc_paths)]
  with phases.timed("joining"):
    records = _joined(parts)
  questions, questions_path = parts[0][0], parts[0][3]
  info = {"data_type": questions.get("data_type", "mscoco"),
          "data_subtype": questions.get("data_subtype", f"{split}2014")}
  check_info(info, questions_path)
  return records, " + ".join(dict.fromkeys(p[3] for p in parts)), info


def _joined(parts) -> list[tuple[dict, dict]]:
  """The (question, annotation) pairs of every part, in order (`read_split`)."""
  records, first = [], {}  # first: question_id -> the questions file it came from
  for questions, annotated, mc_questions, questions_path, annotations_path, mc_path in parts:
    answer_types = list(map(operator.itemgetter("answer_type"), annotated))
    if not set(answer_types) <= set(ANSWER_TYPES):
      i = next(i for i, t in enumerate(answer_types) if t not in ANSWER_TYPES)
      raise official_files.DataFileError(
          f"{annotations_path}: annotations[{i}] answer_type '{answer_types[i]}' is not one of {ANSWER_TYPES}")
    part = official_files.join(questions["questions"], annotated, questions_path, annotations_path)
    if mc_questions is not None:
      vqa_files.attach_choices([q for q, _ in part], mc_questions, mc_path)
    ids = list(map(operator.itemgetter("question_id"), annotated))
    if not first.keys().isdisjoint(ids):  # a question of an earlier file: name the first
      for qid in ids:
        if first.get(qid, questions_path) != questions_path:
          raise official_files.DataFileError(f"{questions_path}: question_id {qid} is also in {first[qid]}")
    first.update(dict.fromkeys(ids, questions_path))
    records += part
  return records


def check_info(info: dict, questions_path: str) -> None:
  """data_type / data_subtype name the results files: plain names only."""
  for key, value in info.items():
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value) or value in (".", ".."):
      raise official_files.DataFileError(
          f'{questions_path}: "{key}" {value!r}: expected a plain name (it names the results files)')


@dataclasses.dataclass
class Encoders:
  """What turns records into arrays and answer ids into answers; built from the training
  split, recorded with the run as `tables()` (`core/encoders.py`)."""
  vocab: text.Vocab
  answers: text.TopK
  question_bag: vqa_text.QuestionBag
  caption_words: text.TopK | None
  question_types: dict[str, int]
  interner: vqa_accuracy.Interner
  max_len: int
  image_shape: tuple[int, ...]  # the features of one image
  text: model_lib.Text | None = None  # the model's own text encoder (its entry's `text`), if it has one

  @property
  def bag_sizes(self) -> dict[str, int]:
    """Bins of the bag-of-words inputs (question_bow, and caption_bow with captions)."""
    sizes = {"question_bow": self.question_bag.size}
    if self.caption_words is not None:
      sizes["caption_bow"] = len(self.caption_words)
    return sizes

  def questions(self, questions: list[str], words: text.Coded | None = None) -> dict[str, np.ndarray]:
    """The model's text inputs of question strings (or of their `text.tokenize` words,
    coded, when already made): tokens, length, question_bow; with the model's own text encoder
    also its arrays (`core/model.TEXT_KEYS`)."""
    if words is None:
      words = text.Coded.of(text.tokenize_all(questions))
    tokens, lengths = self.vocab.encode(words, self.max_len)
    out = {"tokens": tokens, "length": lengths, "question_bow": self.question_bag.indices(words, self.max_len)}
    return out if self.text is None else {**out, **self.text.encode(questions)}

  def tables(self) -> dict:
    return {"vocab": self.vocab.words[2:], "answers": self.answers.answers,
            "bow_words": self.question_bag.words.answers, "bow_leads": [t.answers for t in self.question_bag.leads],
            "caption_words": None if self.caption_words is None else self.caption_words.answers,
            "question_types": sorted(self.question_types, key=self.question_types.get),
            "max_question_len": self.max_len, "image_shape": list(self.image_shape),
            **({} if self.text is None else {"text": self.text.tables()})}

  @classmethod
  def from_tables(cls, tables: dict) -> "Encoders":
    return cls(vocab=text.Vocab(tables["vocab"]), answers=text.TopK(tables["answers"]),
               question_bag=vqa_text.QuestionBag(text.TopK(tables["bow_words"]), map(text.TopK, tables["bow_leads"])),
               caption_words=None if tables["caption_words"] is None else text.TopK(tables["caption_words"]),
               question_types={t: i for i, t in enumerate(tables["question_types"])},
               interner=vqa_accuracy.Interner(), max_len=tables["max_question_len"],
               image_shape=tuple(tables["image_shape"]),
               text=model_lib.text_from_tables(vqa_models.MODELS, tables.get("text")))


def caption_bags(image_ids, captions: dict[int, list[str]], path: str, table: text.TopK) -> np.ndarray:
  """[N, width] caption-word indices of each image's captions together (-1 padded)."""
  by_image = {}
  for image_id in dict.fromkeys(image_ids):
    if image_id not in captions:
      raise official_files.DataFileError(f"{path}: no caption for image_id {image_id}")
    by_image[image_id] = [w for c in captions[image_id] for w in text.tokenize(c)]
  width = max(int((table.index(words) >= 0).sum()) for words in by_image.values())
  per_image = text.bag_indices(list(by_image.values()), table, max(width, 1))
  row = {image_id: i for i, image_id in enumerate(by_image)}
  return per_image[[row[i] for i in image_ids]]


def _answer_indices(columns: vqa_accuracy.AnswerColumns, answers: text.TopK) -> np.ndarray:
  """[N, A] each annotator's answer's index in the answer table (`OUT_OF_TABLE` if it is
  not there, -1 padding), for soft targets (`vqa/task.make_loss`)."""
  counts = columns.counts
  index = answers.index(columns.answers.names)[columns.answers.codes]
  out = np.full((len(counts), counts.max()), -1, np.int32)
  out[np.arange(out.shape[1]) < counts[:, None]] = np.where(index >= 0, index, OUT_OF_TABLE)
  return out


def _question_arrays(questions, source, enc: Encoders, store, words=None) -> dict[str, np.ndarray]:
  """The arrays of the questions alone (the inputs, and the choices where they have them);
  `words`: their coded words, if already made."""
  out = {
      "question_id": np.fromiter(map(operator.itemgetter("question_id"), questions), np.int64, len(questions)),
      "image_row": store.rows(list(map(operator.itemgetter("image_id"), questions)), source).astype(np.int32),
      **enc.questions(list(map(operator.itemgetter("question"), questions)), words),
  }
  with_choices = [q.get("multiple_choices") is not None for q in questions]  # null reads as absent
  if any(with_choices):
    if not all(with_choices):
      lacking, having = with_choices.index(False), with_choices.index(True)
      raise official_files.DataFileError(
          f'{source}: question_id {questions[lacking]["question_id"]} has no "multiple_choices" where question_id '
          f"{questions[having]['question_id']} has them: a multiple-choice file gives every question its choices")
    width = max(len(q["multiple_choices"]) for q in questions)
    choice_index = np.full((len(questions), width), -1, np.int32)
    choice_raw = np.full((len(questions), width), -1, np.int32)
    choice_norm = np.full((len(questions), width), -1, np.int32)
    for i, q in enumerate(questions):
      n = len(q["multiple_choices"])
      choice_index[i, :n] = enc.answers.index(q["multiple_choices"])
      choice_raw[i, :n], choice_norm[i, :n] = vqa_accuracy.encode_answer_table(q["multiple_choices"], enc.interner)
    out.update(choice_index=choice_index, choice_raw=choice_raw, choice_norm=choice_norm)
  return out


def _arrays(records, source, enc: Encoders, store, captions=None, words=None):
  questions = list(map(operator.itemgetter(0), records))
  annotations = list(map(operator.itemgetter(1), records))
  out = _question_arrays(questions, source, enc, store, words)
  columns = vqa_accuracy.answer_columns(annotations)  # each answer string hashed once, here
  answer_types = {t: i for i, t in enumerate(ANSWER_TYPES)}
  out.update({
      "label": enc.answers.index(map(operator.itemgetter("multiple_choice_answer"), annotations)),
      "answer_index": _answer_indices(columns, enc.answers),
      "answer_type": np.fromiter(map(answer_types.__getitem__, map(operator.itemgetter("answer_type"), annotations)),
                                 np.int32, len(annotations)),
      "question_type": np.fromiter(map(enc.question_types.__getitem__,
                                       map(operator.itemgetter("question_type"), annotations)), np.int32,
                                   len(annotations)),
  })
  if captions is not None:
    out["caption_bow"] = caption_bags([q["image_id"] for q in questions], *captions, enc.caption_words)
  out.update(vqa_accuracy.encode_answers(*columns, enc.interner, vqa_accuracy.MAX_ANSWERS))
  return out


def read_test(config, enc: Encoders, store, path: str) -> TestFile:
  """The questions of the test file at `path` (VQA v1 / v2 questions, with or without
  `multiple_choices`, or a VizWiz-VQA list), encoded as the run's training data was (its
  encoders; image rows of its `store`). Answers in the file, if any, are not read. Its
  records are the questions (VizWiz's keep their `image`), its name the data_subtype (e.g.
  test-dev2015), its info data_type, data_subtype, `version` ("v2", "v1" or "vizwiz":
  which server's files) and `format` (its entry in `formats.FORMATS`); the task sets its keys."""
  if "caption_bow" in enc.bag_sizes:
    raise InputError(f"{path}: a caption model needs the test images' captions; "
                     "submissions are for the models without captions")
  raw = official_files.read_bytes(path)
  content = official_files.load_json(path, raw)
  _check_dataset(config, path, content)
  name = formats.of_test_file(config.data.format, content)
  questions, version, info = formats.FORMATS[name].read_test(path, content, raw)
  check_info(info, path)
  splits = formats.FORMATS[name].test_splits
  if splits is not None and info["data_subtype"] not in splits:
    raise official_files.DataFileError(f'{path}: "data_subtype" {info["data_subtype"]!r}: expected a split of '
                                       f"the evaluation server, one of {splits}")
  if not questions["questions"]:
    raise official_files.DataFileError(f"{path}: holds no questions")
  arrays = _question_arrays(questions["questions"], path, enc, store)
  return TestFile(path=path, name=info["data_subtype"], records=questions["questions"], arrays=arrays,
                  info={**info, "version": version, "format": name})


def _check_dataset(config, path: str, content) -> None:
  """A VQA-AnswerTherapy file (a list of records with "image_id", not "image") given to a VQA run."""
  first = content[0] if isinstance(content, list) and content else None
  if isinstance(first, dict) and "image_id" in first and "image" not in first:
    raise InputError(f'{path}: a VQA-AnswerTherapy file (records with "image_id" and answers), while this run is '
                     f"a {config.task} run on {config.data.format} data: it predicts VQA questions files "
                     "(or VizWiz-VQA lists); give AnswerTherapy files to a grounding_class or grounding_mask run")


def read_train_records(config_data):
  """The training (question, annotation) records and their source file, after the
  confidence filter when `config_data.confident_only`."""
  records, source, _ = read_split(config_data, "train")
  if config_data.confident_only:
    questions = {q["question_id"]: q for q, _ in records}
    kept = vqa_text.confident_only([a for _, a in records])
    logging.info("confidence filter: %d of %d training questions kept", len(kept), len(records))
    if not kept:
      raise official_files.DataFileError(f"config.data.confident_only: no question of {source} has "
                                         f"{vqa_text.MIN_CONFIDENT} or more answers with answer_confidence 'yes'")
    records = [(questions[a["question_id"]], a) for a in kept]
  return records, source


def _read_captions(config_data, split: str):
  """({image_id: [caption, ...]}, paths) of the split's COCO captions files, or None."""
  paths = resolve_all(config_data, f"{split}_captions")
  if not paths:
    return None
  captions = {}
  for path in paths:
    for image_id, texts in vqa_files.read_captions(path).items():
      captions.setdefault(image_id, []).extend(texts)
  return captions, " + ".join(paths)


def open_store(config_data) -> FeatureStore:
  """The feature store of `config.data` (`features`, relative to `dir`), shape checked."""
  store = FeatureStore(resolve(config_data, "features"))
  if config_data.feature_shape:
    store.check_shape(tuple(config_data.feature_shape))
  return store


def load(config_data, text_encoder: Callable | None = None) -> VQAData:
  """Reads train and val files and the feature store named by `config.data`; `text_encoder`:
  (training questions, store shape) -> the model's own `core/model.Text` (`model.text_encoder`)."""
  with official_files.gc_paused():
    return _load(config_data, text_encoder)


def _load(config_data, text_encoder: Callable | None) -> VQAData:
  """The train split is read, encoded and let go before the val split is read: the two
  splits' records are never in memory together."""
  train_records, train_source = read_train_records(config_data)

  with phases.timed("vocabulary"):
    answers = text.TopK.build((a["multiple_choice_answer"] for _, a in train_records),
                              config_data.num_answers)
    covered = np.mean(answers.index(a["multiple_choice_answer"] for _, a in train_records) >= 0)
  logging.info("answer table: top %d answers cover %.2f%% of training questions", len(answers), 100 * covered)

  with phases.timed("encoding"):
    train_words = text.Coded.of(text.tokenize_all(q["question"] for q, _ in train_records))
  with phases.timed("vocabulary"):
    vocab = text.Vocab.build(train_words, config_data.vocab_min_count)
  if text_encoder is None:  # a model with its own tokenizer reads no word vocabulary
    logging.info("question vocabulary: %d entries (min count %d, with PAD and UNK)", len(vocab),
                 config_data.vocab_min_count)

  with phases.timed("reading"):
    store = open_store(config_data)
    if text_encoder is None:  # models with their own text encoder read pixel stores
      store.check_features("this model (config.model.name)")
    else:
      store.check_pixels("this model (config.model.name)")
    captions = {split: _read_captions(config_data, split) for split in ("train", "val")}
  if (captions["train"] is None) != (captions["val"] is None):
    raise official_files.DataFileError("config.data: give both train_captions and val_captions, or neither")
  with phases.timed("vocabulary"):
    caption_words = None if captions["train"] is None else text.TopK.build(
        (w for c in captions["train"][0].values() for s in c for w in text.tokenize(s)),
        config_data.caption_words)
    train_types = sorted({a["question_type"] for _, a in train_records})  # with val's: below
    enc = Encoders(vocab=vocab, answers=answers,
                   question_bag=vqa_text.QuestionBag.build(train_words, config_data.bow_words,
                                                           config_data.bow_lead_words),
                   caption_words=caption_words,
                   question_types={t: i for i, t in enumerate(train_types)},
                   interner=vqa_accuracy.Interner(), max_len=config_data.max_question_len, image_shape=store.shape,
                   text=text_encoder and text_encoder([q["question"] for q, _ in train_records], store.shape))
    raw_ids, norm_ids = vqa_accuracy.encode_answer_table(answers.answers, enc.interner)
  with phases.timed("encoding"):
    train = _arrays(train_records, train_source, enc, store, captions["train"], train_words)
    if config_data.drop_unknown_answers:
      train = {k: v[train["label"] >= 0] for k, v in train.items()}
  del train_records, train_words
  val_records, val_source, val_info = read_split(config_data, "val")
  with phases.timed("encoding"):
    question_types = sorted(set(train_types).union(a["question_type"] for _, a in val_records))
    enc.question_types = {t: i for i, t in enumerate(question_types)}
    train["question_type"] = np.array([enc.question_types[t] for t in train_types], np.int32)[train["question_type"]]
    val = _arrays(val_records, val_source, enc, store, captions["val"])
  return VQAData(train=train, val=val,
                 vocab=vocab, answers=answers, store=store, question_types=question_types,
                 val_records=val_records, val_info=val_info,
                 table_ids={"raw_ids": raw_ids, "norm_ids": norm_ids}, encoders=enc)


def with_val(config_data, data: VQAData) -> VQAData:
  """`data` with the val split (and feature store) that `config_data` names: an evaluation's
  own files (`core/evals.py`), encoded by the run's encoders; its question types its own."""
  records, source, info = read_split(config_data, "val")
  store = open_store(config_data)
  store.check_shape(data.encoders.image_shape)
  if data.encoders.text is not None:
    store.check_pixels("this model (config.model.name)")
  captions = _read_captions(config_data, "val")
  if (captions is None) != (data.encoders.caption_words is None):
    raise official_files.DataFileError("config.data.val_captions: a caption model's evaluations need their "
                                       "images' captions, and only a caption model's")
  question_types = sorted({a["question_type"] for _, a in records})
  enc = dataclasses.replace(data.encoders, question_types={t: i for i, t in enumerate(question_types)})
  return dataclasses.replace(data, val=_arrays(records, source, enc, store, captions), store=store,
                             question_types=question_types, val_records=records, val_info=info)
