"""VQA-AnswerTherapy files -> numeric arrays for the two challenges (single vs multiple
grounding, answer-grounding masks).

Every split is a dict of numpy arrays with one row per visual question (file order, the
`train_files` / `val_files` one after another; the results name a sample by its
released ids, `Sample.image_id` and `Sample.question_id`):

  label              0 single, 1 multiple (`binary_label`)
  source             0 VQAv2, 1 VizWiz (`therapy_files.SOURCES`)
  tokens, length     the question: ids [N, max_question_len] of the shared vocabulary
  answer_tokens, answer_length, answer_valid
                     the answers: [N, max_answers, max_answer_len], [N, A], [N, A]
                     (questions have 2-4 answers; padded slots are not valid)
  weight             class weight of the label (train only; `class_weights`)
  image_row          row in the grid feature store (when `data.features` is set)
  grid_mask          [N, A, G, G] share of each grid cell that the answer's grounding
                     covers (with `grid_masks`; `masks.to_grid` of the polygon
                     rasterised at 8G x 8G, the image stretched to a square); G is the
                     grid store's side, or the model's `config.model.mask_grid`
  input_ids, attention_mask, token_type_ids
                     with a model's own text encoder (its entry's `text`): its arrays of the
                     text its entry lays out (`Builder.texts`), [N, T] for the classifier,
                     [N, S, T] for the mask model (S answer slots, 1 for I+Q)

Question and answer words share one vocabulary (built on the train split), since both
go through the same text encoder. Without `val_files` the val split is a seeded
held-out share (`holdout`) of the train files' visual questions.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from absl import logging

from vqajax.answertherapy import files as therapy_files
from vqajax.answertherapy import masks
from vqajax.answertherapy import models as therapy_models
from vqajax.core import fs, text
from vqajax.core import model as model_lib
from vqajax.core.errors import InputError
from vqajax.core.files import check_name
from vqajax.core.official_files import DATA_SOURCES
from vqajax.core.task import TestFile
from vqajax.features.store import FeatureStore

_RASTER = 8  # raster pixels per grid cell side for the grid masks


# The text arrays both tasks read (the question, and each answer padded to `max_answers`; a model's
# own text encoder's): those a split has.
TEXT_KEYS = ("tokens", "length", "answer_tokens", "answer_length", "answer_valid", *model_lib.TEXT_KEYS)
LENGTHS = {"tokens": "length"}  # the question's ids cut to the length bucket of the batch (core/pipeline.py)


@dataclasses.dataclass
class Encoders:
  """The shared question / answer vocabulary, the image input's shape (None: text only) and the
  model's own text encoder (its entry's `text`), recorded with the run as `tables()` (`core/encoders.py`)."""
  vocab: text.Vocab
  image_shape: tuple[int, ...] | None
  text: model_lib.Text | None = None

  def tables(self) -> dict:
    return {"vocab": self.vocab.words[2:], "image_shape": None if self.image_shape is None else list(self.image_shape),
            **({} if self.text is None else {"text": self.text.tables()})}

  @classmethod
  def from_tables(cls, tables: dict) -> "Encoders":
    shape = tables["image_shape"]
    return cls(vocab=text.Vocab(tables["vocab"]), image_shape=None if shape is None else tuple(shape),
               text=model_lib.text_from_tables(therapy_models.MODELS, tables.get("text")))


@dataclasses.dataclass
class TherapyData:
  train: dict[str, np.ndarray]
  val: dict[str, np.ndarray]
  store: FeatureStore | None
  encoders: Encoders
  val_samples: list[therapy_files.Sample]  # the val rows' samples, for results files

  @property
  def vocab(self) -> text.Vocab:
    return self.encoders.vocab


def _read(config_data, files: str) -> list[therapy_files.Sample]:
  """The samples of the named files; with `source` "tfds", of the splits of the prepared
  TFDS dataset `tfds_dir` named after them (`VQA_train.json` -> split VQA_train)."""
  names = [f for f in files.split(",") if f]
  if not names:
    raise InputError("config.data: no therapy files named (comma-separated file names)")
  if config_data.source not in DATA_SOURCES:
    raise InputError(f"config.data.source '{config_data.source}' is not one of {DATA_SOURCES}")
  if config_data.source == "raw":
    return [s for name in names for s in therapy_files.read_therapy(
        name if fs.isabs(name) else os.path.join(config_data.dir, name))]
  from vqajax.answertherapy import tfds_records
  tfds_dir = config_data.tfds_dir if fs.isabs(config_data.tfds_dir) else os.path.join(
      config_data.dir, config_data.tfds_dir)
  splits = [os.path.splitext(os.path.basename(name))[0] for name in names]
  return [s for split in splits for s in therapy_files.read_therapy(
      f"{tfds_dir}[{split}]", tfds_records.therapy_file(tfds_dir, split))]


def holdout_split(samples: list, share: float, seed: int) -> tuple[list, list]:
  """(train, val): a seeded `share` of the visual questions held out as val."""
  if not 0 < share < 1:
    raise InputError(f"config.data.holdout must be in (0, 1) without val_files, got {share}")
  order = np.random.default_rng([seed, 4]).permutation(len(samples))
  cut = round(share * len(samples))
  return [samples[i] for i in sorted(order[cut:])], [samples[i] for i in sorted(order[:cut])]


def class_weights(labels: np.ndarray) -> np.ndarray:
  """[2] weights N / (2 N_c) from the train label counts (a class's examples weigh as
  much in total as the other's); an absent class weighs 0."""
  counts = np.bincount(labels, minlength=2).astype(np.float64)
  return np.where(counts > 0, len(labels) / (2 * np.maximum(counts, 1)), 0.0).astype(np.float32)


def grid_masks(sample: therapy_files.Sample, size: int, max_answers: int) -> np.ndarray:
  """[max_answers, size, size] cell fractions of the sample's groundings (padding: 0)."""
  out = np.zeros((max_answers, size, size), np.float32)
  raster = _RASTER * size
  for j, polygon in enumerate(sample.polygons):
    scaled = polygon * (raster / sample.width, raster / sample.height)
    out[j] = masks.to_grid(masks.polygon_mask(scaled, raster, raster), size)
  return out


def mask_grid(model_cfg, image_shape: tuple[int, ...]) -> int:
  """The side of the grid masks (targets and predictions): `config.model.mask_grid` where the model
  has one (a model over a pixel store), else the grid store's."""
  return model_cfg.get("mask_grid") or image_shape[0]


def text_arrays(questions: list[str], answers: list[tuple[str, ...]], enc: Encoders, config) -> dict[str, np.ndarray]:
  """The TEXT_KEYS arrays of questions and their answers (at most `max_answers` each); with the
  model's own text encoder also its arrays, of the text its entry lays out (`Builder.texts`)."""
  config_data, vocab = config.data, enc.vocab
  n, width = len(questions), config_data.max_answers
  tokens, lengths = vocab.encode([text.tokenize(q) for q in questions], config_data.max_question_len)
  answer_lists = [text.tokenize(a) for group in answers for a in tuple(group) + ("",) * (width - len(group))]
  answer_tokens, answer_lengths = vocab.encode(answer_lists, config_data.max_answer_len)
  out = {"tokens": tokens, "length": lengths,
         "answer_tokens": answer_tokens.reshape(n, width, -1),
         "answer_length": answer_lengths.reshape(n, width),
         "answer_valid": np.arange(width)[None, :] < np.array([len(group) for group in answers])[:, None]}
  if enc.text is not None:
    layout = model_lib.entry(therapy_models.MODELS, config.model).tasks[config.task].texts
    encoded = enc.text.encode(*layout(questions, answers, config))
    slots = () if config.task == "grounding_class" else (-1,)  # the mask model: [N, S, T]
    out.update({k: v.reshape(n, *slots, v.shape[-1]) for k, v in encoded.items()})
  return out


def _arrays(samples, enc: Encoders, config, store, grid: int | None) -> dict[str, np.ndarray]:
  width = config.data.max_answers
  too_many = next((s for s in samples if len(s.answers) > width), None)
  if too_many is not None:
    raise InputError(f"{too_many.path}: records[{too_many.index}] has {len(too_many.answers)} answers; "
                     f"config.data.max_answers is {width}")
  out = {
      "label": np.array([s.label == "multiple" for s in samples], np.int32),
      "source": np.array([therapy_files.SOURCES.index(s.source) for s in samples], np.int32),
      **text_arrays([s.question for s in samples], [s.answers for s in samples], enc, config),
  }
  if store is not None:
    keys = therapy_files.feature_keys(samples)
    out["image_row"] = store.rows(keys, samples[0].path).astype(np.int32)
  if grid is not None:
    out["grid_mask"] = np.stack([grid_masks(s, grid, width) for s in samples])
  return out


def open_store(config) -> FeatureStore | None:
  """The feature store of `config.data` (`features`, relative to `dir`), None without one."""
  data = config.data
  if not data.features:
    return None
  store = FeatureStore(data.features if fs.isabs(data.features) else os.path.join(data.dir, data.features))
  if data.feature_shape:
    store.check_shape(tuple(data.feature_shape))
  return store


def _reader(config) -> str:
  return f"config.model.name {config.model.get('name')!r}"


def _check_store(store: FeatureStore, config, pixels: bool) -> None:
  """The store holds what the model reads: pictures' pixels (`pixels`: models with their own text
  encoder) or image features."""
  (store.check_pixels if pixels else store.check_features)(_reader(config))


def load(config, grid_targets: bool = False) -> TherapyData:
  """Reads the train / val files and the feature store of `config.data`; with
  `grid_targets`, also the grid masks of the answers' groundings."""
  data = config.data
  train = _read(data, data.train_files)
  if data.val_files:
    val = _read(data, data.val_files)
  else:
    train, val = holdout_split(train, data.holdout, config.seed)
  store = open_store(config)
  if store is None and grid_targets:
    raise InputError("config.data.features: the mask predictor needs a grid feature store")
  make_text = model_lib.text_encoder(therapy_models.MODELS, config.model)  # from the training questions and answers
  if make_text is not None and store is None:
    raise InputError(f"config.data.features: {_reader(config)} reads a pixel store (vqajax features --model pixels)")
  if store is not None:
    _check_store(store, config, pixels=make_text is not None)
  vocab = text.Vocab.build((text.tokenize(t) for s in train for t in (s.question,) + s.answers),
                           data.vocab_min_count)
  image_shape = None if store is None else store.shape
  enc = Encoders(vocab=vocab, image_shape=image_shape, text=make_text and make_text(
      [t for s in train for t in (s.question,) + s.answers], image_shape or ()))
  grid = mask_grid(config.model, image_shape) if grid_targets else None
  arrays = {name: _arrays(samples, enc, config, store, grid) for name, samples in (("train", train), ("val", val))}
  weights = class_weights(arrays["train"]["label"])
  arrays["train"]["weight"] = weights[arrays["train"]["label"]]
  logging.info("therapy data: %d train / %d val questions, %.1f%% multiple in train; vocabulary %d",
               len(train), len(val), 100 * arrays["train"]["label"].mean(), len(vocab))
  return TherapyData(train=arrays["train"], val=arrays["val"], store=store, encoders=enc, val_samples=val)


def with_val(config, data: TherapyData, grid_targets: bool = False) -> TherapyData:
  """`data` with the val split (and feature store) that `config.data` names: an evaluation's
  own files (`core/evals.py`), encoded by the run's vocabulary."""
  samples = _read(config.data, config.data.val_files)
  store = open_store(config)
  if (store is None) != (data.encoders.image_shape is None):
    raise InputError("config.data.features: an evaluation reads image features where its run does, only there")
  if store is not None:
    store.check_shape(data.encoders.image_shape)
    _check_store(store, config, pixels=data.encoders.text is not None)
  grid = mask_grid(config.model, store.shape) if grid_targets else None
  return dataclasses.replace(data, val=_arrays(samples, data.encoders, config, store, grid), store=store,
                             val_samples=samples)


def read_test(config, enc: Encoders, store, path: str) -> TestFile:
  """The samples of the released-format file at `path`, encoded as the run's training
  data was (its encoders; image rows of its `store`, None for a text-only run); their
  labels and groundings, where the file has them, are not used. Its records are the
  samples, its name the file's stem (e.g. VQA_test)."""
  samples = therapy_files.read_therapy(path, labels_optional=True)
  name = check_name(os.path.splitext(os.path.basename(path))[0], f"{path}: the file name")
  return TestFile(path=path, name=name, records=samples, arrays=_arrays(samples, enc, config, store, None),
                  keys=TEXT_KEYS)


def sizes(data: TherapyData) -> dict[str, int]:
  """The data sizes recorded in run.json."""
  return {"train_questions": len(data.train["label"]), "val_questions": len(data.val["label"]),
          "train_multiple": int(data.train["label"].sum()), "val_multiple": int(data.val["label"].sum()),
          "vocab_size": len(data.vocab)}
