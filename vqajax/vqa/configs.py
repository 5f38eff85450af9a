"""The shared config of the VQA paper's rows (`experiments/vqa/*.py` build on `vqa_config`).

Arguments of every row: "" (the paper's setting), "cpu" (a few minutes on a 2-core CPU:
narrower layers, Adam 1e-3, batch 128, 1500 steps) and "runlocal" (seconds: the tiny
synthetic set and a toy-sized model, for tests and smoke runs).
"""

from __future__ import annotations

import ml_collections

from vqajax.core import config as config_lib
from vqajax.core import evals
from vqajax.core import model as model_lib
from vqajax.core.config import FILE_LIST, FLAG, TEXT, dims, integer, one_of, path
from vqajax.core.official_files import DATA_SOURCES
from vqajax.nn import question
from vqajax.vqa import formats
from vqajax.vqa import models as vqa_models

ARGS = ("", "cpu", "runlocal")
# The paper's code (VQA_LSTM_CNN's train.lua) multiplies the learning rate by 0.99997592083 after
# every iteration ("-- 50000"): 0.3 ** (1 / 50000), the rate falling to 0.3x every 50,000 iterations.
LR_DECAY_PER_STEP = 0.3 ** (1 / 50000)
_FILES = ("train_questions", "train_annotations", "val_questions", "val_annotations", "train_captions", "val_captions")
# "auto" (VQA v1's multiple-choice file where it is), "" (none), or files as FILE_LIST
_MC_FILES = config_lib.Rule("'auto', '' or " + FILE_LIST.expected, FILE_LIST.ok)
# What each field of `vqa_config` may hold, checked before a command does anything (`config_lib.check`);
# config.model's fields are those of the model it names (`vqa_models.MODELS`: `rules`).
FIELDS = {
    **config_lib.TRAINING,
    "data.synthetic": FLAG, "data.synthetic_scale": TEXT, "data.dir": path(),
    "data.format": one_of(*formats.FORMATS), "data.source": one_of(*DATA_SOURCES), "data.tfds_dir": TEXT,
    **{f"data.{name}": FILE_LIST for name in _FILES},
    "data.train_mc_questions": _MC_FILES, "data.val_mc_questions": _MC_FILES,
    "data.features": path(), "data.feature_shape": dims(),
    "data.features_on_device": one_of("auto", "true", "false", "sharded"),
    "data.num_answers": integer(), "data.vocab_min_count": integer(), "data.max_question_len": integer(),
    "data.bow_words": integer(), "data.bow_lead_words": integer(0), "data.caption_words": integer(),
    "data.drop_unknown_answers": FLAG, "data.confident_only": FLAG,
    "data.results_prefix": config_lib.NAME_PREFIX,  # it begins the results files' names
    **question.FIELDS,
}


def rules(config) -> dict:
  """Every field's rule of `config`: `FIELDS` and those of the model it names (`core/model.rules`)."""
  return {**FIELDS, **model_lib.rules(vqa_models.MODELS, config)}


# Its rules across fields (each raises InputError), checked after FIELDS: the question encoder's.
CHECKS = (question.check,)
# config.model's sizes in the smaller settings (of the fields the model has)
SIZES = {"cpu": dict(embed_dim=64, lstm_dim=128, fused_dim=256, mlp_dims=(256, 256), attention_dim=128),
         "runlocal": dict(embed_dim=32, lstm_dim=32, fused_dim=64, mlp_dims=(64, 64), attention_dim=32)}


def vqa_config(arg: str, name: str, model: str = "late_fusion", **fields) -> ml_collections.ConfigDict:
  """The locked config of row `name` with config.model the group of `model` (`vqa_models.MODELS`),
  `fields` set in it."""
  if arg not in ARGS:
    raise ValueError(f"unknown config argument '{arg}' (expected one of {ARGS})")
  config = ml_collections.ConfigDict()
  config.name = name
  config.task = "vqa"                   # vqajax/core/task.py
  config.seed = 0
  config.mesh = config_lib.mesh_config()  # how the devices split the batch and the parameters

  config.data = data = ml_collections.ConfigDict()
  data.synthetic = True                 # generate the embedded dataset into `dir` if missing
  data.synthetic_scale = "tiny" if arg == "runlocal" else "medium"
  data.dir = ""                         # "" -> ~/.cache/vqajax/synthetic-v3/<scale>-seed<seed>
  data.format = "vqa"                   # or "vizwiz" (one JSON list per split)
  data.source = "raw"                   # or "tfds": the records of a prepared TFDS dataset ...
  data.tfds_dir = ""                    # ... in this directory (data_pipeline/tfds), relative to dir
  # file fields take several comma-separated names (or a list), paired in order: e.g. train
  # and val together before a test submission (`vqajax submit`)
  data.train_questions = "v2_OpenEnded_mscoco_train2014_questions.json"
  data.train_annotations = "v2_mscoco_train2014_annotations.json"
  data.train_mc_questions = ""
  data.val_questions = "v2_OpenEnded_mscoco_val2014_questions.json"
  data.val_annotations = "v2_mscoco_val2014_annotations.json"
  data.val_mc_questions = "auto"        # VQA v1's MultipleChoice_mscoco_val2014_questions.json
                                        # if present (v2 has none); "" -> open-ended only
  data.train_captions = ""              # COCO captions, for the caption rows
  data.val_captions = ""
  data.features = "features/fc7.h5"
  data.feature_shape = ()               # per image, checked against the store; () -> the store's
  data.features_on_device = "auto"      # the feature table on the devices: auto | true | false | sharded
  data.num_answers = 1000               # K
  data.vocab_min_count = 1              # 5 / 11: the vocabulary ablations
  data.max_question_len = 26
  data.bow_words = 1000                 # BoW Q: top question words ...
  data.bow_lead_words = 10              # ... + top first / second / third words
  data.caption_words = 1000             # Caption: top caption words
  data.drop_unknown_answers = True      # train only on questions whose answer is in the top K
  data.confident_only = False           # the paper's confidence-filtered training set
  data.results_prefix = "v2_"           # official naming: "" for v1 files

  if model not in vqa_models.MODELS:
    raise ValueError(f"row '{name}': config.model.name '{model}' is not one of {tuple(vqa_models.MODELS)}")
  config.model = m = vqa_models.MODELS[model].config(model, "vqa", **fields)
  if m.get("caption"):
    data.train_captions, data.val_captions = "captions_train2014.json", "captions_val2014.json"

  config.optimizer = opt = ml_collections.ConfigDict()
  opt.name = "rmsprop"                  # as the paper's released code; or "adam"
  opt.learning_rate = 3e-4
  opt.lr_decay_per_step = LR_DECAY_PER_STEP
  opt.rmsprop_decay = 0.8
  opt.eps = 1e-8
  opt.grad_clip = 0.1                   # element-wise; 0 disables

  config.batch_size = 500
  config.eval_batch_size = 500
  config.num_train_steps = 6000
  config.num_epochs = 0.0               # > 0: the budget in epochs (sets num_train_steps)
  config.log_every_steps = 100
  config.eval_every_steps = 1000        # each evaluation also saves a checkpoint
  config.keep_checkpoints = 3           # the last k, plus the best by best_metric
  config.checkpoint_every_steps = 0    # > 0: also a checkpoint every that many steps (saved asynchronously)
  config.profile_steps = ()             # (first, last): a profiler trace of those steps in the workdir (TensorBoard)
  config.evals = evals.default()        # the evaluations (vqajax/core/evals.py): `val`, on data.val_*
  config.best_metric = "val/accuracy"   # EVAL/METRIC that picks the best checkpoint ...
  config.best_mode = "max"              # ... its highest ("max") or lowest ("min")

  if arg:  # "cpu", and "runlocal" on top of it
    m.update({k: v for k, v in SIZES[arg].items() if k in m})
    opt.name, opt.learning_rate, opt.lr_decay_per_step, opt.grad_clip = "adam", 1e-3, 1.0, 0.0
    config.batch_size = config.eval_batch_size = 128
    config.num_train_steps = 1500
    config.eval_every_steps = 500
  if arg == "runlocal":
    data.num_answers = 100
    config.batch_size = config.eval_batch_size = 32
    config.num_train_steps = 40
    config.log_every_steps = 10
    config.eval_every_steps = 20
  config.lock()
  return config

