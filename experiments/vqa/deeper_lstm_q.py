"""deeper LSTM Q (VQA, ICCV 2015, Table II): 2-layer LSTM (512); last cell + hidden of
both layers (2048) -> fully-connected + tanh 1024 -> MLP.

Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/deeper_lstm_q.py:cpu --workdir=/tmp/deeper_lstm_q
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "deeper_lstm_q", use_image=False, project=("question",))
