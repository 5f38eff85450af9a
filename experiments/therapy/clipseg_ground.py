r"""CLIPSeg's answer grounding masks (VQA-AnswerTherapy, ICCV 2023, Tables 5 and 6; CLIPSeg, Lüddecke
& Ecker, CVPR 2022): per answer slot, CLIPSeg reads the picture and a prompt, the question and the
answer ("i+q+a", default), the question ("i+q": one mask per question) or the answer ("i+a")
(`config.model.inputs`), and its logit map is resized (bilinear) to the 14 x 14 grid of the targets
(`config.model.mask_grid`); per-cell binary cross-entropy as the grid mask predictor's. The paper
size fine-tunes CIDAS/clipseg-rd64-refined's decoder (CLIP frozen, `config.model.train` "decoder",
as CLIPSeg trains) on 352 px pictures: AdamW 1e-4, 10% warmup then linear decay, 20 epochs.

Arguments (`vqajax/nn/clipseg_models.py`): "" (the checkpoint, 352 px), "cpu" (a from-scratch 4-layer
64-wide CLIPSeg on 64 px pictures, everything trained, lr 5e-4, 10 epochs: no download), "runlocal"
(2 layers, 32 px, 4 steps).

  hf download CIDAS/clipseg-rd64-refined --local-dir clipseg-rd64-refined    # once, where the Hub is reachable
  vqajax train --config=experiments/therapy/clipseg_ground.py --workdir=/tmp/clipseg_ground \
      --config.model.init_from=clipseg-rd64-refined
  vqajax train --config=experiments/therapy/clipseg_ground.py:cpu --workdir=/tmp/clipseg_cpu
  vqajax train --config=experiments/therapy/clipseg_ground.py:cpu --workdir=/tmp/clipseg_cpu_ia \
      --config.model.inputs=i+a

Results: WORKDIR/results/step_N/table5 and table6 .{md,csv,json} (IoU-PQ / IoU with the whole-image
baseline, grid and pixel level), table4 (single / multiple from the masks), results.json.
"""

from vqajax.answertherapy import configs
from vqajax.nn import clipseg_models

CHECKPOINT = "CIDAS/clipseg-rd64-refined"  # the paper size's start
SIDES = {"": 352, "cpu": 64, "runlocal": 32}  # the pixel store's side per size ("": CLIPSeg's processor's)


def get_config(arg: str = ""):
  flags = set(arg.split(",")) - {""}
  if "real" in flags:
    raise ValueError("'real' (the released files, no images) is not an argument of a CLIPSeg row: it reads pixels")
  size = "runlocal" if "runlocal" in flags else "cpu" if "cpu" in flags else ""
  fields = dict(clipseg_models.SIZES[size], train="all") if size else dict(init_from=CHECKPOINT)
  config = configs.therapy_config(arg, "clipseg_ground", "grounding_mask", model="clipseg", **fields)
  with config.unlocked():
    config.data.features = f"features/pixels{SIDES[size]}.npy"
    opt = config.optimizer
    opt.name, opt.learning_rate, opt.weight_decay, opt.warmup = "adamw", 1e-4, 0.01, 0.1
    config.num_epochs = 20.0
    if size == "cpu":
      opt.learning_rate = 5e-4
      config.num_epochs = 10.0
    if size == "runlocal":
      config.num_epochs = 0.0
      config.num_train_steps = 4
      config.eval_every_steps = config.log_every_steps = 2
  config.lock()
  return config
