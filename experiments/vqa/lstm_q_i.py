"""LSTM Q + I (VQA, ICCV 2015, Table II): 1-layer LSTM Q (1024-d) times the image (4096 ->
fully-connected + tanh 1024), element-wise -> MLP.

Raw fc7 features are scaled by 0.01 (`model.image_scale`, see `vqajax/vqa/models.py`).
Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/lstm_q_i.py:cpu --workdir=/tmp/lstm_q_i
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "lstm_q_i", lstm_layers=1, image_norm=False, project=("image",))
