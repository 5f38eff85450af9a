"""Table II of VQA (ICCV 2015): the non-neural baselines and every neural row, open-ended
and multiple-choice; after the paper's rows, attention over grid features (Show, Ask,
Attend, and Answer, 2017: `experiments/vqa/attention.py`) and a small Transformer question
encoder with norm I (`experiments/vqa/transformer_q_norm_i.py`).

  vqajax sweep experiments/sweeps/vqa_table2.py:cpu --workdir=workdirs/table2

The argument ("", "cpu", "runlocal") is passed to every row config. The paper size ("") adds PaliGemma
fine-tuned from its checkpoint (`experiments/vqa/paligemma.py`, an accelerator's row); the smaller
sizes leave it out (`experiments/vqa/paligemma.py:cpu` runs it alone).
"""

ROWS = ("bow_q", "i", "bow_q_i", "lstm_q", "lstm_q_i", "deeper_lstm_q", "deeper_lstm_norm_i",
        "caption", "bow_q_c", "attention", "transformer_q_norm_i")
PRETRAINED = ("paligemma",)  # rows of the paper size only
BASELINES = ("random", "prior", "q_type_prior", "nearest_neighbour")


def get_sweep(arg: str = ""):
  baselines = {"name": "baselines", "command": "baselines", "baselines": BASELINES,
               "config": f"../vqa/deeper_lstm_norm_i.py:{arg}"}  # baselines use config.data only
  return {"base": None,
          "points": [baselines] + [{"name": row, "config": f"../vqa/{row}.py:{arg}"}
                                   for row in ROWS + (PRETRAINED if not arg else ())]}
