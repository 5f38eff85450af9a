"""BoW Q + C (VQA, ICCV 2015, Table II): question bag of words and caption bag of words,
concatenated -> MLP.

Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/bow_q_c.py:cpu --workdir=/tmp/bow_q_c
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "bow_q_c", question="bow", use_image=False, caption=True,
                            project=(), fusion="concat")
