r"""Answer grounding masks (VQA-AnswerTherapy, ICCV 2023, section 4.2, Tables 5 and 6).

The mask predictor of `vqajax/answertherapy/models.py`: per answer slot, the text (question,
question + answer, or answer; one shared LSTM) modulates each grid cell's projected
feature (FiLM) -> a logit per cell; per-cell binary cross-entropy against the answer's
grid mask. The variant is `config.model.inputs`: "i+q", "i+q+a" (default), "i+a".
Arguments (comma-separated, `vqajax/answertherapy/configs.py:therapy_config`): "" full, "cpu" minutes
on 2 cores (medium synthetic set), "runlocal" seconds (tiny set).

  vqajax train --config=experiments/therapy/grounding_mask.py:cpu --workdir=/tmp/gm_iqa
  vqajax train --config=experiments/therapy/grounding_mask.py:cpu --workdir=/tmp/gm_iq \
      --config.model.inputs=i+q
  vqajax eval  --config=experiments/therapy/grounding_mask.py:cpu --workdir=/tmp/gm_iqa

Real images need a grid feature store keyed by `feature_key(image_id)`:
  --config.data.synthetic=False --config.data.dir=DIR --config.data.features=F.npy
(the grid shape comes from the store; --config.data.feature_shape='(14, 14, 512)' checks it).

Results: WORKDIR/results/step_N/table5 and table6 .{md,csv,json} (IoU-PQ / IoU with the
whole-image baseline), results.json (an RLE mask per answer), metrics.json.
"""

from vqajax.answertherapy import configs


def get_config(arg: str = ""):
  return configs.therapy_config(arg, "grounding_mask", "grounding_mask")
