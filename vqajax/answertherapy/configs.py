"""The shared config of the VQA-AnswerTherapy challenges (`experiments/therapy/*.py` build
on `therapy_config`)."""

from __future__ import annotations

import os

import ml_collections

from vqajax.answertherapy import models as therapy_models
from vqajax.core import config as config_lib
from vqajax.core import evals
from vqajax.core.config import FILE_LIST, FLAG, TEXT, dims, integer, number, one_of, path
from vqajax.core.official_files import DATA_SOURCES
from vqajax.nn import lstm, question, vilt_run

THERAPY_ARGS = ("cpu", "runlocal", "real")
# The released train files: $VQAJAX_THERAPY_DIR, else ../shared/data/answertherapy beside the checkout.
THERAPY_DIR = os.environ.get("VQAJAX_THERAPY_DIR", os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "answertherapy")))

# What each field of `therapy_config` may hold (both tasks), checked before a command does anything.
FIELDS = {
    **config_lib.TRAINING,
    "data.synthetic": FLAG, "data.synthetic_scale": TEXT, "data.dir": path(),
    "data.train_files": FILE_LIST, "data.val_files": FILE_LIST, "data.holdout": number(0, 1, lo_open=True, hi_open=True),
    "data.source": one_of(*DATA_SOURCES), "data.tfds_dir": TEXT, "data.features": path(),
    "data.feature_shape": dims(), "data.features_on_device": one_of("auto", "true", "false", "sharded"),
    "data.max_question_len": integer(), "data.max_answer_len": integer(), "data.max_answers": integer(),
    "data.vocab_min_count": integer(),
    "model.name": one_of(*therapy_models.MODELS), "model.question": one_of(*question.ENCODERS),
    "model.inputs": TEXT, "model.embed_dim": integer(), "model.lstm_dim": integer(), "model.lstm_layers": integer(),
    "model.lstm_impl": one_of("auto", *lstm.IMPLS), "model.dropout": number(0, 1, hi_open=True),
    "model.fused_dim": integer(), "model.attention_dim": integer(), "model.mlp_dims": dims(),
    "model.cell_dim": integer(), **question.FIELDS, **vilt_run.FIELDS,
    "model.dtype": one_of("float32", "bfloat16", "float16"), "model.mask_grid": integer(1, 1024),
}

# Its rules across fields (each raises InputError), checked after FIELDS: the question encoder's.
CHECKS = (question.check,)

# The config.data fields an evaluation may set for its own split (config.evals.NAME.data).
EVAL_DATA = ("val_files", "features", "feature_shape")


def therapy_config(arg: str, name: str, task: str, **model) -> ml_collections.ConfigDict:
  """The locked config of a VQA-AnswerTherapy challenge (`task` 'grounding_class' or
  'grounding_mask'). `arg`: comma-separated, any of "cpu" (minutes on a 2-core CPU, the
  medium synthetic set), "runlocal" (seconds, the tiny set) and "real" (the released
  train files in `$VQAJAX_THERAPY_DIR`, default ../shared/data/answertherapy, with a
  seeded 80/20 held-out split and no image features: text-only models); "" is the full
  setting on the medium synthetic set."""
  flags = set(arg.split(",")) - {""}
  if flags - set(THERAPY_ARGS):
    raise ValueError(f"unknown config argument '{arg}' (expected comma-separated {THERAPY_ARGS})")
  config = ml_collections.ConfigDict()
  config.name = name
  config.task = task                    # vqajax/core/task.py
  config.seed = 0
  config.mesh = config_lib.mesh_config()  # how the devices split the batch and the parameters

  config.data = data = ml_collections.ConfigDict()
  data.synthetic = True                 # generate the synthetic therapy set into `dir` if missing
  data.synthetic_scale = "tiny" if "runlocal" in flags else "medium"
  data.dir = ""                         # "" -> ~/.cache/vqajax/synthetic_therapy-v2/<scale>-seed<seed>
  data.train_files = "VQA_train.json,VizWiz_train.json"  # comma-separated, relative to dir
  data.val_files = "VQA_val.json,VizWiz_val.json"        # "" -> a held-out share of train
  data.holdout = 0.2                    # that share (seeded by config.seed), without val_files
  data.source = "raw"                   # or "tfds": the files' splits of a prepared TFDS dataset ...
  data.tfds_dir = ""                    # ... in this directory (data_pipeline/tfds), relative to dir
  data.features = "features/therapy_grid.npy"  # grid store keyed by therapy_files.feature_key; "" none
  data.feature_shape = ()               # [G, G, C] checked against the store; () -> the store's
  data.features_on_device = "auto"      # the feature table on the devices: auto | true | false | sharded
  data.max_question_len = 16
  data.max_answer_len = 6
  data.max_answers = 4                  # answers per question (2-4 in the released files)
  data.vocab_min_count = 1
  if "real" in flags:
    data.synthetic, data.dir, data.val_files, data.features = False, THERAPY_DIR, "", ""

  config.model = m = ml_collections.ConfigDict()
  m.name = "grounding_classifier" if task == "grounding_class" else "mask_predictor"  # models.py MODELS
  m.question = "lstm"                   # the text encoder: one of vqajax/nn/question.py ENCODERS
  m.inputs = "i+q+a"                    # answertherapy/models.py: q, q+a, i+q, i+q+a | i+q, i+q+a, i+a
  m.embed_dim = 300
  m.lstm_dim = 512
  m.lstm_layers = 1
  m.lstm_impl = "auto"                  # the recurrence: "chunked" (CPU) | "scan" (TPU / GPU) | "auto": by backend
  m.dropout = 0.5 if task == "grounding_class" else 0.1
  if task == "grounding_class":
    m.fused_dim = 512
    m.attention_dim = 256
    m.mlp_dims = (512,)
  else:
    m.cell_dim = 256
  if "real" in flags:
    m.inputs = "q+a"
  unknown = set(model) - set(m.keys())
  if unknown:
    raise ValueError(f"'{name}': unknown config.model fields {sorted(unknown)}")
  m.update(model)

  config.optimizer = opt = ml_collections.ConfigDict()
  opt.name = "adam"
  opt.learning_rate = 1e-3
  opt.lr_decay_per_step = 1.0
  opt.rmsprop_decay = 0.9
  opt.eps = 1e-8
  opt.grad_clip = 0.0

  config.batch_size = 128
  config.eval_batch_size = 256
  config.num_train_steps = 4000
  config.num_epochs = 0.0               # > 0: the budget in epochs (sets num_train_steps)
  config.log_every_steps = 100
  config.eval_every_steps = 1000
  config.keep_checkpoints = 3
  config.checkpoint_every_steps = 0    # > 0: also a checkpoint every that many steps (saved asynchronously)
  config.profile_steps = ()             # (first, last): a profiler trace of those steps in the workdir (TensorBoard)
  config.evals = evals.default()        # the evaluations (vqajax/core/evals.py): `val`, on data.val_files
  config.best_metric = "val/" + ("balanced_accuracy" if task == "grounding_class" else "iou_pq")  # EVAL/METRIC
  config.best_mode = "max"              # the best checkpoint: its highest ("max") or lowest ("min")
  if flags & {"cpu", "runlocal"}:
    m.embed_dim, m.lstm_dim = 64, 128
    if task == "grounding_class":
      m.fused_dim, m.attention_dim, m.mlp_dims = 128, 64, (128,)
    else:
      m.cell_dim = 64
    config.batch_size = 64
    config.num_train_steps = 1000
    config.eval_every_steps = 500
  if "runlocal" in flags:
    m.embed_dim, m.lstm_dim = 16, 32
    if task == "grounding_class":
      m.fused_dim, m.attention_dim, m.mlp_dims = 32, 16, (32,)
    else:
      m.cell_dim = 16
    config.batch_size = config.eval_batch_size = 32
    config.num_train_steps = 20
    config.log_every_steps = 10
    config.eval_every_steps = 10
  config.lock()
  return config


def vilt_config(arg: str, name: str, task: str) -> ml_collections.ConfigDict:
  """The locked config of a ViLT row of `task` (`experiments/therapy/vilt_class.py`,
  `vilt_mask.py`): `therapy_config`'s data and training, config.model the ViLT group
  (`nn/vilt_run.model_config`, sized by `vilt_run.SIZES`: "", "cpu", "runlocal") with the
  inputs (I+Q+A) and, for the masks, their grid (14, the grid rows', so that grid-level
  metrics compare), the pixel store of the pictures at the row's size (made from the embedded
  pictures on first use), AdamW 5e-5 with a 10% linear warmup then linear decay, 20 epochs
  (the paper's fine-tuning of ViLT; "cpu": 5e-4, the model starting from scratch, and 10 epochs
  for the masks, ~30 minutes on 2 cores)."""
  flags = set(arg.split(",")) - {""}
  if "real" in flags:
    raise ValueError("'real' (the released files, no images) is not an argument of a ViLT row: it reads pixels")
  config = therapy_config(arg, name, task)
  size = "runlocal" if "runlocal" in flags else "cpu" if "cpu" in flags else ""
  pixels, text_length, hidden, layers, heads, patch = vilt_run.SIZES[size]
  with config.unlocked():
    config.model = m = vilt_run.model_config(text_length, hidden, layers, heads, patch)
    m.inputs = "i+q+a"                    # grounding_class: i+q, i+q+a | grounding_mask: i+q, i+q+a, i+a
    if task == "grounding_mask":
      m.mask_grid = 14                    # the side of the predicted and target masks
    config.data.features = f"features/pixels{pixels}.npy"
    opt = config.optimizer
    opt.name, opt.learning_rate, opt.weight_decay, opt.warmup = "adamw", 5e-5, 0.01, 0.1
    config.num_epochs = 20.0
    if size == "cpu":
      opt.learning_rate = 5e-4
      config.num_epochs = 20.0 if task == "grounding_class" else 10.0  # a ViLT pass per answer slot: 4x a question
    if size == "runlocal":
      config.num_epochs = 0.0
      config.num_train_steps = 4
      config.eval_every_steps = config.log_every_steps = 2
  config.lock()
  return config
