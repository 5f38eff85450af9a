"""LSTM Q (VQA, ICCV 2015, Table II): 1-layer LSTM (512) over 300-d tanh word embeddings;
last cell + hidden (1024-d) -> MLP.

Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/lstm_q.py:cpu --workdir=/tmp/lstm_q
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "lstm_q", lstm_layers=1, use_image=False, project=())
