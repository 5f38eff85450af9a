"""Table IV of VQA (ICCV 2015): ablations of deeper LSTM Q + norm I (open-ended).

  vqajax sweep experiments/sweeps/vqa_ablations.py:cpu --workdir=workdirs/ablations
  vqajax sweep experiments/sweeps/vqa_ablations.py --workdir=gs://bucket/abl --print-commands

The argument ("", "cpu", "runlocal") is passed to the row config. The test set is never
filtered; the vocabulary sizes and K of every point are reported in table4.
"""

CONFIG = "../vqa/deeper_lstm_norm_i.py"

ABLATIONS = {
    "base": {},                                    # K = 1000, full question vocabulary
    "no_image_norm": {"model.image_norm": False},
    "concat_fusion": {"model.fusion": "concat"},
    "k500": {"data.num_answers": 500},
    "k2000": {"data.num_answers": 2000},
    "vocab_min5": {"data.vocab_min_count": 5},     # words seen < 5 times -> UNK
    "vocab_min11": {"data.vocab_min_count": 11},
    "confident_only": {"data.confident_only": True},  # answers with confidence "yes", >= 5 per question
    "soft_targets": {"model.targets": "soft"},     # beyond the paper: the annotators' distribution
}


def get_sweep(arg: str = ""):
  return {"base": "base",
          "points": [{"name": name, "config": f"{CONFIG}:{arg}", "overrides": overrides}
                     for name, overrides in ABLATIONS.items()]}
