"""Caption (VQA, ICCV 2015, Table II): bag of the 1000 most frequent caption words over
the image"s COCO captions -> MLP.

Shared head: MLP 2 x 1000 tanh with dropout 0.5, softmax over the top-K answers. Config
arguments ("", "cpu", "runlocal") as in `vqajax/vqa/configs.py`:

  vqajax train --config=experiments/vqa/caption.py:cpu --workdir=/tmp/caption
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vqa_config(arg, "caption", question="none", use_image=False, caption=True,
                            project=())
