r"""deeper LSTM Q + norm I (VQA, ICCV 2015, Table II): the paper's best model.

2-layer LSTM (512) over 300-d tanh word embeddings; last (cell, hidden) of both layers
(2048) -> fc + tanh 1024; l2-normalised 4096-d image -> fc + tanh 1024; element-wise
product; MLP 2 x 1000 tanh with dropout 0.5; softmax over the top-K answers. Optimiser
as in the paper's released code: RMSprop (lr 3e-4, alpha 0.8), element-wise gradient
clip 0.1, per-step lr decay, batch 500.

Arguments: "" (the paper's setting), "cpu" (a few minutes on a 2-core CPU:
narrower layers, Adam 1e-3, batch 128, 1500 steps) and "runlocal" (seconds: the tiny
set and a toy-sized model, for tests and smoke runs); see `vqajax/vqa/configs.py`. On the
embedded synthetic data (generated on first use):

  vqajax train --config=experiments/vqa/deeper_lstm_norm_i.py:cpu --workdir=/tmp/vqa

Full synthetic run, then the same on the real VQA v2 files:

  vqajax train --config=experiments/vqa/deeper_lstm_norm_i.py --workdir=/tmp/vqa
  vqajax train --config=experiments/vqa/deeper_lstm_norm_i.py --workdir=gs://bucket/vqa \
      --config.data.synthetic=False --config.data.dir=/data/VQA \
      --config.data.features=features/vgg19_fc7.h5
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "deeper_lstm_norm_i")
