r"""ViLT (Kim et al. 2021) as a Table II row: one transformer over WordPiece tokens and 32 x 32
pixel patches (no CNN features), pooled -> the VQA classifier over the answer table, fine-tuned
as ViLT is: binary cross-entropy against each answer's VQA score (0, .3, .6, .9, 1 for 0-4+
annotators), AdamW (lr 1e-4, weight decay 0.01), linear warmup over 10% of the steps then linear
decay, 10 epochs, batch 256. The images are a pixel store (`vqajax features --model pixels`):
384 px, padded, normalised on the device.

Arguments (`vqajax/vqa/configs.py:vilt_config`): "" (ViLT-B/32, 384 px, 40 tokens), "cpu" (a
4-layer 128-wide ViLT on 64 px pictures, 8 px patches, 24 tokens, AdamW 1e-3 over 3000 steps:
about 25 minutes on 2 cores) and
"runlocal" (1 layer, 32 px, 4 steps: seconds). On the embedded data the pixel store is made from
its pictures on first use; from scratch the tokenizer is the training questions' words
(`vqajax/nn/vilt_run.py`). From a Hub checkpoint, by id (recorded as ORG/NAME@COMMIT) or folder
(architecture, WordPiece tokenizer and weights; a head it lacks is initialised and said so):

  vqajax train --config=experiments/vqa/vilt.py:cpu --workdir=/tmp/vilt
  vqajax features --images /data/coco/train2014 --model pixels --layer pixels --out /data/VQA/features/pixels384.npy
  vqajax train --config=experiments/vqa/vilt.py --workdir=/ckpt/vilt --config.data.synthetic=False \
      --config.data.dir=/data/VQA --config.model.init_from=dandelin/vilt-b32-finetuned-vqa
"""

from vqajax.vqa import configs


def get_config(arg: str = ""):
  return configs.vilt_config(arg, "vilt")
