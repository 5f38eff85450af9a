"""The shared config of the VQA paper's rows (`experiments/vqa/*.py` build on `vqa_config`).

Arguments of every row: "" (the paper's setting), "cpu" (a few minutes on a 2-core CPU:
narrower layers, Adam 1e-3, batch 128, 1500 steps) and "runlocal" (seconds: the tiny
synthetic set and a toy-sized model, for tests and smoke runs).
"""

from __future__ import annotations

import ml_collections

from vqajax.core import config as config_lib
from vqajax.core import evals
from vqajax.core.config import FILE_LIST, FLAG, TEXT, dims, integer, names, number, one_of, path
from vqajax.core.official_files import DATA_SOURCES
from vqajax.nn import initializers, lstm, question, vilt_run
from vqajax.vqa import formats
from vqajax.vqa import models as vqa_models

ARGS = ("", "cpu", "runlocal")
# The paper's code (VQA_LSTM_CNN's train.lua) multiplies the learning rate by 0.99997592083 after
# every iteration ("-- 50000"): 0.3 ** (1 / 50000), the rate falling to 0.3x every 50,000 iterations.
LR_DECAY_PER_STEP = 0.3 ** (1 / 50000)
_FILES = ("train_questions", "train_annotations", "val_questions", "val_annotations", "train_captions", "val_captions")
# "auto" (VQA v1's multiple-choice file where it is), "" (none), or files as FILE_LIST
_MC_FILES = config_lib.Rule("'auto', '' or " + FILE_LIST.expected, FILE_LIST.ok)
# What each field of `vqa_config` may hold, checked before a command does anything (`config_lib.check`).
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
    "data.drop_unknown_answers": FLAG, "data.confident_only": FLAG, "data.results_prefix": TEXT,
    "model.name": one_of(*vqa_models.MODELS), "model.question": one_of(*vqa_models.QUESTION_ENCODERS),
    "model.embed_dim": integer(), "model.lstm_dim": integer(),
    "model.lstm_layers": integer(), "model.use_image": FLAG, "model.image_norm": FLAG,
    "model.image_scale": number(0, lo_open=True), "model.caption": FLAG, "model.project": names(),
    "model.fusion": one_of(*vqa_models.FUSIONS), "model.fused_dim": integer(), "model.mlp_dims": dims(),
    "model.dropout": number(0, 1, hi_open=True), "model.glimpses": integer(0), "model.attention_dim": integer(),
    "model.attention_dropout": number(0, 1, hi_open=True), "model.dtype": one_of("float32", "bfloat16", "float16"),
    "model.lstm_impl": one_of("auto", *lstm.IMPLS), "model.init": one_of(*initializers.RULES),
    "model.targets": one_of("answer", "soft", "bce"), **question.FIELDS, **vilt_run.FIELDS,
}

# Its rules across fields (each raises InputError), checked after FIELDS: the question encoder's.
CHECKS = (question.check,)


def vqa_config(arg: str, name: str, **model) -> ml_collections.ConfigDict:
  """The locked config of row `name`; `model` overrides fields of `config.model`."""
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

  config.model = m = ml_collections.ConfigDict()
  m.name = "late_fusion"                # or "attention" (vqajax/vqa/models.py MODELS)
  m.question = "lstm"                   # "none" | "bow" | an encoder of vqajax/nn/question.py ENCODERS
  m.embed_dim = 300
  m.lstm_dim = 512
  m.lstm_layers = 2
  m.use_image = True
  m.image_norm = True
  m.image_scale = 0.01                  # without image_norm: raw fc7 times this (vqa/models.py)
  m.caption = False
  m.project = ("question", "image")     # inputs that get fully-connected + tanh to fused_dim
  m.fusion = "mul"                      # or "concat"
  m.fused_dim = 1024
  m.mlp_dims = (1000, 1000)
  m.dropout = 0.5                       # before each layer of the MLP
  m.glimpses = 0                        # the attention model's glimpses (experiments/vqa/attention.py)
  m.attention_dim = 512                 # its 1x1 convolution's width
  m.attention_dropout = 0.2             # on the attention's inputs
  m.dtype = "float32"                   # matmul inputs; "bfloat16": parameters stay float32
  m.lstm_impl = "auto"                  # the recurrence: "chunked" (CPU) | "scan" (TPU / GPU) | "auto": by backend
  m.targets = "answer"                  # the loss: "answer" (the paper's: the most common
                                        # answer) or "soft" (the annotators' answers' distribution)
  m.init = "paper"                      # every parameter U(-0.08, 0.08) as the paper's code, or
                                        # "default": flax's per layer (vqajax/nn/initializers.py)
  unknown = set(model) - set(m.keys())
  if unknown:
    raise ValueError(f"row '{name}': unknown config.model fields {sorted(unknown)}")
  m.update(model)
  if m.caption:
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
    m.embed_dim, m.lstm_dim, m.fused_dim, m.mlp_dims, m.attention_dim = 64, 128, 256, (256, 256), 128
    opt.name, opt.learning_rate, opt.lr_decay_per_step, opt.grad_clip = "adam", 1e-3, 1.0, 0.0
    config.batch_size = config.eval_batch_size = 128
    config.num_train_steps = 1500
    config.eval_every_steps = 500
  if arg == "runlocal":
    data.num_answers = 100
    m.embed_dim, m.lstm_dim, m.fused_dim, m.mlp_dims, m.attention_dim = 32, 32, 64, (64, 64), 32
    config.batch_size = config.eval_batch_size = 32
    config.num_train_steps = 40
    config.log_every_steps = 10
    config.eval_every_steps = 20
  config.lock()
  return config


def vilt_config(arg: str, name: str) -> ml_collections.ConfigDict:
  """The locked config of a ViLT row (`experiments/vqa/vilt.py`): `vqa_config`'s data and
  training, config.model the ViLT group (`nn/vilt_run.model_config`), the pixel store of the
  data's images at the row's size (`features/pixelsN.npy`: made from the embedded pictures on
  first use), AdamW with warmup and linear decay, soft-target BCE."""
  config = vqa_config(arg, name)
  pixels, text_length, hidden, layers, heads, patch = vilt_run.SIZES[arg]
  with config.unlocked():
    config.model = vilt_run.model_config(text_length, hidden, layers, heads, patch)
    config.model.targets = "bce"          # ViLT's: BCE against the VQA score of every answer
    config.data.features = f"features/pixels{pixels}.npy"
    config.data.num_answers = 3129 if not arg else config.data.num_answers
    opt = config.optimizer
    opt.name, opt.learning_rate, opt.weight_decay, opt.warmup, opt.grad_clip = "adamw", 1e-4, 0.01, 0.1, 0.0
    config.batch_size = config.eval_batch_size = {"": 256, "cpu": 64, "runlocal": 16}[arg]
    config.num_epochs = 10.0 if not arg else 0.0     # ViLT's VQA fine-tuning
    if arg == "cpu":
      opt.learning_rate = 1e-3
      config.num_train_steps = 3000
      config.eval_every_steps = 500
    if arg == "runlocal":
      config.num_train_steps = 4
      config.eval_every_steps = 2
      config.log_every_steps = 2
  return config
