r"""Single vs multiple answer grounding (VQA-AnswerTherapy, ICCV 2023, section 4.1, Table 4).

The classifier of `vqajax/answertherapy/models.py`: an LSTM over the question and, with the
same weights, over each answer (mean-pooled), an attention over the 14 x 14 grid
features, element-wise fusion, MLP, 2 classes; class-weighted loss. The variant is
`config.model.inputs`: "q", "q+a", "i+q", "i+q+a" (default). Arguments (comma-separated,
`vqajax/answertherapy/configs.py:therapy_config`): "" full, "cpu" minutes on 2 cores (medium synthetic
set), "runlocal" seconds (tiny set), "real" the released train files with a seeded 80/20
held-out split, text-only (inputs "q+a"; "q" also works).

  vqajax train --config=experiments/therapy/grounding_class.py:cpu --workdir=/tmp/gc_iqa
  vqajax train --config=experiments/therapy/grounding_class.py:cpu --workdir=/tmp/gc_q \
      --config.model.inputs=q
  vqajax eval  --config=experiments/therapy/grounding_class.py:cpu --workdir=/tmp/gc_iqa
  vqajax train --config=experiments/therapy/grounding_class.py:real,cpu --workdir=/tmp/gc_real

Results: WORKDIR/results/step_N/table4.{md,csv,json} (precision / recall per class and
source, with the naive baselines), predictions.json, metrics.json.
"""

from vqajax.answertherapy import configs


def get_config(arg: str = ""):
  return configs.therapy_config(arg, "grounding_class", "grounding_class")
