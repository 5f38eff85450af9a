r"""Show, Ask, Attend, and Answer (Kazemi & Elqursh 2017, arXiv 1704.03162), beyond Table II.

A grid of image features l2-normalised over channels at every location; a 1-layer LSTM
(1024) over 300-d tanh word embeddings, its last (cell, hidden); attention: a 1x1 conv
(512) over [grid ; tiled question] -> ReLU -> a 1x1 conv to 2 glimpses, softmax over the
locations; [the 2 glimpses ; question] -> fc 1024 + ReLU -> the top-K answers, dropout
0.5 before both fully-connected layers and 0.2 on the attention's inputs (as the
Cyanogenoid/pytorch-vqa reproduction). Adam 1e-3, halved every 50k steps, batch 128,
24000 steps (the examples the paper-setting rows see: 6000 x 500).

Arguments: "" (the paper's setting), "cpu" (a few minutes on a 2-core CPU: LSTM 256,
attention 128, fc 256, 1500 steps) and "runlocal" (seconds: the tiny set, a toy-sized
model). It reads a grid store [N, H, W, C]: the synthetic `features/conv5_grid.npy`
(7x7x64), or what `vqajax features` writes with `--layer conv5` (VGG) or `--layer patches` (ViT):

  vqajax train --config=experiments/vqa/attention.py:cpu --workdir=/tmp/attention
  vqajax train --config=experiments/vqa/attention.py --workdir=gs://bucket/attention \
      --config.data.synthetic=False --config.data.dir=/data/VQA \
      --config.data.features=features/vgg19_conv5.npy
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  config = configs.vqa_config(arg, "attention", model="attention", lstm_layers=1)  # not a paper row
  config.data.features = "features/conv5_grid.npy"
  m, opt = config.model, config.optimizer
  m.lstm_dim, m.mlp_dims = {"": (1024, (1024,)), "cpu": (256, (256,)), "runlocal": (32, (64,))}[arg]
  if not arg:
    opt.name, opt.learning_rate, opt.lr_decay_per_step, opt.grad_clip = "adam", 1e-3, 0.5 ** (1 / 50000), 0.0
    config.batch_size = config.eval_batch_size = 128
    config.num_train_steps = 24000
  return config
