"""BoW Q + I (VQA, ICCV 2015, Table II): question bag of words and image features,
concatenated -> MLP.

Raw fc7 features are scaled by 0.01 (`model.image_scale`, see `vqajax/vqa/models.py`).
Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/bow_q_i.py:cpu --workdir=/tmp/bow_q_i
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "bow_q_i", question="bow", image_norm=False, project=(),
                            fusion="concat")
