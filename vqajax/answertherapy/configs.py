"""The shared config of the VQA-AnswerTherapy challenges (`experiments/therapy/*.py` build
on `therapy_config`)."""

from __future__ import annotations

import functools
import os

import ml_collections

from vqajax.answertherapy import models as therapy_models
from vqajax.core import config as config_lib
from vqajax.core import evals
from vqajax.core import model as model_lib
from vqajax.core.config import FILE_LIST, FLAG, TEXT, dims, integer, number, one_of, path
from vqajax.core.official_files import DATA_SOURCES
from vqajax.nn import question

THERAPY_ARGS = ("cpu", "runlocal", "real")
# The released train files: $VQAJAX_THERAPY_DIR, else ../shared/data/answertherapy beside the checkout.
THERAPY_DIR = os.environ.get("VQAJAX_THERAPY_DIR", os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "answertherapy")))

# What each field of `therapy_config` may hold (both tasks), checked before a command does anything;
# config.model's fields are those of the model it names (`therapy_models.MODELS`: `rules`).
FIELDS = {
    **config_lib.TRAINING,
    "data.synthetic": FLAG, "data.synthetic_scale": TEXT, "data.dir": path(),
    "data.train_files": FILE_LIST, "data.val_files": FILE_LIST, "data.holdout": number(0, 1, lo_open=True, hi_open=True),
    "data.source": one_of(*DATA_SOURCES), "data.tfds_dir": TEXT, "data.features": path(),
    "data.feature_shape": dims(), "data.features_on_device": one_of("auto", "true", "false", "sharded"),
    "data.max_question_len": integer(), "data.max_answer_len": integer(), "data.max_answers": integer(),
    "data.vocab_min_count": integer(),
    **question.FIELDS,
}


def rules(config) -> dict:
  """Every field's rule of `config`: `FIELDS` and those of the model it names (`core/model.rules`)."""
  return {**FIELDS, **model_lib.rules(therapy_models.MODELS, config)}


# Its rules across fields (each raises InputError), checked after FIELDS: the question encoder's, a
# zero-shot row's budget.
CHECKS = (question.check, functools.partial(model_lib.check_trains, therapy_models.MODELS))

# The config.data fields an evaluation may set for its own split (config.evals.NAME.data).
EVAL_DATA = ("val_files", "features", "feature_shape")
TASK_MODELS = {"grounding_class": "grounding_classifier", "grounding_mask": "mask_predictor"}  # each task's own
# config.model's sizes in the smaller settings (of the fields the model has)
SIZES = {"cpu": dict(embed_dim=64, lstm_dim=128, fused_dim=128, attention_dim=64, mlp_dims=(128,), cell_dim=64),
         "runlocal": dict(embed_dim=16, lstm_dim=32, fused_dim=32, attention_dim=16, mlp_dims=(32,), cell_dim=16)}


def therapy_config(arg: str, name: str, task: str, model: str = "", **fields) -> ml_collections.ConfigDict:
  """The locked config of row `name` of a VQA-AnswerTherapy challenge (`task` 'grounding_class' or
  'grounding_mask'), config.model the group of `model` (`therapy_models.MODELS`; "": the task's
  own, `TASK_MODELS`) with `fields` set in it. `arg`: comma-separated, any of "cpu" (minutes on a 2-core CPU, the
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

  model = model or TASK_MODELS[task]
  if model not in therapy_models.MODELS or task not in therapy_models.MODELS[model].tasks:
    raise ValueError(f"row '{name}': config.model.name '{model}' is not a model of the {task} task")
  if "real" in flags and task == "grounding_class":
    fields = {"inputs": "q+a", **fields}  # no image features: the text-only classifier
  config.model = m = therapy_models.MODELS[model].config(model, task, **fields)

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
    m.update({k: v for k, v in SIZES["runlocal" if "runlocal" in flags else "cpu"].items() if k in m})
    config.batch_size = 64
    config.num_train_steps = 1000
    config.eval_every_steps = 500
  if "runlocal" in flags:
    config.batch_size = config.eval_batch_size = 32
    config.num_train_steps = 20
    config.log_every_steps = 10
    config.eval_every_steps = 10
  config.lock()
  return config
