r"""deeper LSTM Q + norm I (VQA, ICCV 2015, Table II): the paper's best model.

2-layer LSTM (512) over 300-d tanh word embeddings; last (cell, hidden) of both layers
(2048) -> fc + tanh 1024; l2-normalised 4096-d image -> fc + tanh 1024; element-wise
product; MLP 2 x 1000 tanh with dropout 0.5; softmax over the top-K answers. Optimiser
as in the paper's released code: RMSprop (lr 3e-4, alpha 0.8), element-wise gradient
clip 0.1, per-step lr decay, batch 500.

Arguments: "" (the paper's setting), "cpu" (a few minutes on a 2-core CPU:
narrower layers, Adam 1e-3, batch 128, 1500 steps) and "runlocal" (seconds: the tiny
set and a toy-sized model, for tests and smoke runs). On the embedded synthetic data
(generated on first use):

  vqajax-train --config=experiments/vqa/deeper_lstm_norm_i.py:cpu --workdir=/tmp/vqa

Full synthetic run, then the same on the real VQA v2 files:

  vqajax-train --config=experiments/vqa/deeper_lstm_norm_i.py --workdir=/tmp/vqa
  vqajax-train --config=experiments/vqa/deeper_lstm_norm_i.py --workdir=gs://bucket/vqa \
      --config.data.synthetic=False --config.data.dir=/data/VQA \
      --config.data.features=features/vgg19_fc7.h5
"""

import ml_collections


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in ("", "cpu", "runlocal"):
    raise ValueError(f"unknown config argument '{arg}' (expected '', 'cpu' or 'runlocal')")
  runlocal = arg == "runlocal"
  config = ml_collections.ConfigDict()
  config.name = "deeper_lstm_q_norm_i"
  config.seed = 0

  config.data = data = ml_collections.ConfigDict()
  data.synthetic = True                 # generate the embedded dataset into `dir` if missing
  data.synthetic_scale = {"": "medium", "cpu": "medium", "runlocal": "tiny"}[arg]
  data.dir = ""                         # "" -> ~/.cache/vqajax/synthetic/<scale>-seed<seed>
  data.format = "vqa"                   # or "vizwiz" (one JSON list per split)
  data.train_questions = "v2_OpenEnded_mscoco_train2014_questions.json"
  data.train_annotations = "v2_mscoco_train2014_annotations.json"
  data.train_mc_questions = ""
  data.val_questions = "v2_OpenEnded_mscoco_val2014_questions.json"
  data.val_annotations = "v2_mscoco_val2014_annotations.json"
  data.val_mc_questions = "MultipleChoice_mscoco_val2014_questions.json"  # "" -> open-ended only
  data.features = "features/fc7.h5"
  data.feature_shape = (4096,)
  data.num_answers = 1000               # K
  data.vocab_min_count = 1              # 5 / 11: the vocabulary ablations
  data.max_question_len = 26
  data.drop_unknown_answers = True      # train only on questions whose answer is in the top K
  data.confident_only = False           # the paper's confidence-filtered training set
  data.results_prefix = "v2_"           # official naming: "" for v1 files

  config.model = model = ml_collections.ConfigDict()
  model.question = "lstm"               # see vqajax/models/vqa.py QUESTION_ENCODERS
  model.embed_dim = 300
  model.lstm_dim = 512
  model.lstm_layers = 2
  model.use_image = True
  model.image_norm = True
  model.fusion = "mul"                  # or "concat"
  model.fused_dim = 1024
  model.mlp_dims = (1000, 1000)
  model.dropout = 0.5

  config.optimizer = opt = ml_collections.ConfigDict()
  opt.name = "rmsprop"                  # or "adam"
  opt.learning_rate = 3e-4
  opt.lr_decay_per_step = 0.99997592083
  opt.rmsprop_decay = 0.8
  opt.eps = 1e-8
  opt.grad_clip = 0.1                   # element-wise; 0 disables

  config.batch_size = 500
  config.eval_batch_size = 500
  config.num_train_steps = 6000
  config.log_every_steps = 100
  config.eval_every_steps = 1000        # each evaluation also saves a checkpoint
  config.keep_checkpoints = 3           # the last k, plus the best by val accuracy

  if arg:  # "cpu", and "runlocal" on top of it
    model.embed_dim, model.lstm_dim, model.fused_dim, model.mlp_dims = 64, 128, 256, (256, 256)
    opt.name, opt.learning_rate, opt.lr_decay_per_step, opt.grad_clip = "adam", 1e-3, 1.0, 0.0
    config.batch_size = config.eval_batch_size = 128
    config.num_train_steps = 1500
    config.eval_every_steps = 500
  if runlocal:
    data.num_answers = 100
    model.embed_dim, model.lstm_dim, model.fused_dim, model.mlp_dims = 32, 32, 64, (64, 64)
    config.batch_size = config.eval_batch_size = 32
    config.num_train_steps = 40
    config.log_every_steps = 10
    config.eval_every_steps = 20
  config.lock()
  return config
