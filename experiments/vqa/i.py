"""I (VQA, ICCV 2015, Table II): image features only (4096-d fc7, not normalised) -> MLP.

Raw fc7 features are scaled by 0.01 (`model.image_scale`, see `vqajax/vqa/models.py`).
Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/i.py:cpu --workdir=/tmp/i
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "i", question="none", image_norm=False, project=())
