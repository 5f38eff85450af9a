r"""ViLT's answer grounding masks (VQA-AnswerTherapy, ICCV 2023, section 4.2, Tables 5 and 6):
per answer slot, ViLT reads the picture's pixel patches and the slot's text, and a dense layer
maps each final patch token to a logit, resized (bilinear) from the patch grid to the 14 x 14
grid of the targets (`config.model.mask_grid`); per-cell binary cross-entropy as the grid mask
predictor's. The variant is `config.model.inputs` (`nn/vilt_models.texts`):
"i+q+a" (default: "[CLS] question [SEP] answer [SEP]"), "i+q" (the question: one mask per
question), "i+a" (the answer alone). AdamW 5e-5, 10% warmup then linear decay, 20 epochs.

Arguments (`experiments/therapy/_vilt.py:vilt_config`): "" (ViLT-B/32, 384 px), "cpu" (a
4-layer 128-wide ViLT on 64 px pictures, lr 5e-4, 10 epochs), "runlocal" (1 layer, 32 px, 4 steps).

  vqajax train --config=experiments/therapy/vilt_mask.py:cpu --workdir=/tmp/vilt_mask
  vqajax train --config=experiments/therapy/vilt_mask.py:cpu --workdir=/tmp/vilt_mask_ia \
      --config.model.inputs=i+a
  vqajax ask --workdir /tmp/vilt_mask --image photo.jpg --question "what is it?" --answers cup,mug

Results: WORKDIR/results/step_N/table5 and table6 .{md,csv,json} (IoU-PQ / IoU with the
whole-image baseline, grid and pixel level), table4 (from the masks), results.json.
"""

from experiments.therapy import _vilt


def get_config(arg: str = ""):
  return _vilt.vilt_config(arg, "vilt_mask", "grounding_mask")
