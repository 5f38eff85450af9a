r"""Transformer Q + norm I, beyond Table II: the deeper LSTM Q + norm I row with its question
LSTM replaced by a small pre-LN Transformer (`nn/question.TransformerEncoder`).

Word embeddings plus learned positions, 2 blocks of 8-head self-attention (padding masked
out) and a GELU MLP (4x), a final LayerNorm and the mean of the words' states, then as
the LSTM row: fc + tanh 1024, element-wise product with the l2-normalised image's fc +
tanh 1024, MLP 2 x 1000 tanh with dropout 0.5, the top-K answers. Dropout 0.1 inside the
encoder.

Arguments: "" (width 512, the paper row's optimiser and budget), "cpu" (width 128, 4 heads,
as the cpu LSTM rows: a few minutes on a 2-core CPU) and "runlocal" (1 block of width 32):

  vqajax train --config=experiments/vqa/transformer_q_norm_i.py:cpu --workdir=/tmp/transformer
"""

import ml_collections

from vqajax.vqa import configs


def get_config(arg: str = ""):
  config = configs.vqa_config(arg, "transformer_q_norm_i", question="transformer", init="default")  # not a paper row
  width, layers, heads = {"": (512, 2, 8), "cpu": (128, 2, 4), "runlocal": (32, 1, 2)}[arg]
  with config.model.unlocked():
    config.model.transformer = ml_collections.ConfigDict(
        {"width": width, "layers": layers, "heads": heads, "dropout": 0.1,
         "positions": config.data.max_question_len})
  return config
