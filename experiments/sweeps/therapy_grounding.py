"""The grounding challenge of VQA-AnswerTherapy (ICCV 2023, Tables 5 and 6): every mask row, trained
(or, zero-shot, evaluated at step 0) and collected into one grounding table (`vqajax therapy
grounding`: IoU-PQ / IoU at the grid and pixel levels beside the whole image).

  vqajax sweep experiments/sweeps/therapy_grounding.py:cpu --workdir=workdirs/grounding

The argument ("", "cpu", "runlocal") is passed to every row config. At "cpu" and "runlocal" the
CLIPSeg rows start from no download: the zero-shot rows read a tiny CLIPSeg of random weights and the
fine-tuned rows train a small one from scratch (`experiments/therapy/clipseg_zeroshot.py`,
`clipseg_ground.py`); the PaliGemma rows (zero-shot, `experiments/therapy/paligemma_ground.py`)
evaluate a from-scratch PaliGemma of random weights. A row is one line of ROWS: its point name, its config file, its overrides.
"""

ROWS = (
    ("grid_iq", "grounding_mask", {"model.inputs": "i+q"}),
    ("grid_iqa", "grounding_mask", {"model.inputs": "i+q+a"}),
    ("grid_ia", "grounding_mask", {"model.inputs": "i+a"}),
    ("vilt_iqa", "vilt_mask", {"model.inputs": "i+q+a"}),
    ("clipseg_zeroshot_iq", "clipseg_zeroshot", {"model.inputs": "i+q"}),
    ("clipseg_zeroshot_iqa", "clipseg_zeroshot", {"model.inputs": "i+q+a"}),
    ("clipseg_zeroshot_ia", "clipseg_zeroshot", {"model.inputs": "i+a"}),
    ("clipseg_iq", "clipseg_ground", {"model.inputs": "i+q"}),
    ("clipseg_iqa", "clipseg_ground", {"model.inputs": "i+q+a"}),
    ("clipseg_ia", "clipseg_ground", {"model.inputs": "i+a"}),
    ("paligemma_zeroshot_iq", "paligemma_ground", {"model.inputs": "i+q"}),
    ("paligemma_zeroshot_iqa", "paligemma_ground", {"model.inputs": "i+q+a"}),
    ("paligemma_zeroshot_ia", "paligemma_ground", {"model.inputs": "i+a"}),
)


def get_sweep(arg: str = ""):
  return {"base": None, "points": [{"name": name, "config": f"../therapy/{config}.py:{arg}", "overrides": overrides}
                                   for name, config, overrides in ROWS]}
