r"""CLIPSeg's answer grounding masks zero-shot (VQA-AnswerTherapy, ICCV 2023, Tables 5 and 6: the
UNINEXT / SEEM role; CLIPSeg, Lüddecke & Ecker, CVPR 2022): a CLIPSeg checkpoint
(`config.model.init_from`) evaluated as it is, with no training (`num_train_steps` 0: the run
evaluates its start at step 0 and keeps it as its checkpoint). Per answer slot CLIPSeg reads the
picture and a prompt, the question and the answer ("i+q+a", default), the question ("i+q") or the
answer ("i+a") (`config.model.inputs`); its logit map resized to the 14 x 14 grid is the mask where
sigmoid >= 0.5, as every grounding row's (`clipseg_ground.py`, the fine-tuned row, has the rest).

Arguments: "" (CIDAS/clipseg-rd64-refined on 352 px pictures), "cpu" (64 px) and "runlocal" (32 px,
the tiny set), which read a tiny CLIPSeg of RANDOM weights written on first use with no download
(`vqajax/synthetic/clipseg.py`, in ~/.cache/vqajax/clipseg-random-v1): their figures are random
weights', a smoke test of the row, not CLIPSeg's; name a real checkpoint with
--config.model.init_from.

  hf download CIDAS/clipseg-rd64-refined --local-dir clipseg-rd64-refined    # once, where the Hub is reachable
  vqajax train --config=experiments/therapy/clipseg_zeroshot.py --workdir=/tmp/clipseg_zs_iqa \
      --config.model.init_from=clipseg-rd64-refined
  vqajax train --config=experiments/therapy/clipseg_zeroshot.py --workdir=/tmp/clipseg_zs_iq \
      --config.model.init_from=clipseg-rd64-refined --config.model.inputs=i+q
  vqajax train --config=experiments/therapy/clipseg_zeroshot.py:runlocal --workdir=/tmp/clipseg_zs_random

Results: WORKDIR/results/step_0/table5 and table6 .{md,csv,json} (IoU-PQ / IoU with the whole-image
baseline, grid and pixel level), table4 (single / multiple from the masks), results.json.
"""

from experiments.therapy import clipseg_ground
from vqajax.synthetic import embedded


def get_config(arg: str = ""):
  config = clipseg_ground.get_config(arg)
  small = bool(set(arg.split(",")) & {"cpu", "runlocal"})
  with config.unlocked():
    config.name = "clipseg_zeroshot"
    config.model.init_from = embedded.RANDOM_CLIPSEG if small else clipseg_ground.CHECKPOINT
    config.model.train = "decoder"  # nothing trains; the optimizer's state is that of the decoder alone
    config.num_epochs, config.num_train_steps = 0.0, 0
  config.lock()
  return config
