"""BoW Q (VQA, ICCV 2015, Table II): the 1030-bin question bag of words (top-1000 words +
the top-10 first, second and third words) -> MLP.

Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/bow_q.py:cpu --workdir=/tmp/bow_q
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "bow_q", question="bow", use_image=False, project=())
