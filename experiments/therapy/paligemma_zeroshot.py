r"""PaliGemma zero-shot as Table 4's vision-language row (VQA-AnswerTherapy, ICCV 2023, section 4.1,
where mPLUG-Owl holds it): asked whether all of a question's answers point to the same visual content
(`config.model.prompt`, `nn/paligemma_models.PROMPT`: the question and its answers filled in), the
greedy reply's first three characters, lower-cased, are read: "yes" -> single, "no" -> multiple,
anything else is left out of precision and recall and counted (Table 4's "left out" column). No step
trains (`config.num_train_steps` 0): the checkpoint is evaluated as it is and kept as step 0.

Arguments (`vqajax/nn/paligemma_models.py`): "" (a PaliGemma checkpoint, 224 px: name its folder or Hub
id), "cpu" (a from-scratch 2-layer 64-wide PaliGemma on 64 px pictures) and "runlocal" (1 layer, 32 px,
the tiny set: seconds); the last two are random weights, so their rows say nothing of PaliGemma. The
`pt` checkpoints saw neither VQAv2 nor VizWiz in pretraining; the `mix` ones were fine-tuned on a
mixture holding VQAv2 and VizWiz-VQA, so on the VQAv2 / VizWiz questions theirs is not zero-shot.

  hf download google/paligemma-3b-pt-224 --local-dir paligemma-3b-pt-224    # once, where the Hub is reachable
  vqajax train --config=experiments/therapy/paligemma_zeroshot.py --workdir=/tmp/pali_zeroshot \
      --config.model.init_from=paligemma-3b-pt-224
  vqajax train --config=experiments/therapy/paligemma_zeroshot.py:runlocal --workdir=/tmp/pali_zs
  vqajax therapy table4 /tmp/gc_iqa /tmp/vilt_class /tmp/pali_zeroshot --out /tmp/table4

Results: WORKDIR/results/step_0/table4.{md,csv,json} with the naive baselines and the questions left out.
"""

from vqajax.answertherapy import configs
from vqajax.nn import paligemma_models


def get_config(arg: str = ""):
  flags = set(arg.split(",")) - {""}
  if "real" in flags:
    raise ValueError("'real' (the released files, no images) is not an argument of a PaliGemma row: it reads pixels")
  size = "runlocal" if "runlocal" in flags else "cpu" if "cpu" in flags else ""
  fields = paligemma_models.sized(size)
  config = configs.therapy_config(arg, "paligemma_zeroshot", "grounding_class", model="paligemma", **fields)
  with config.unlocked():
    config.data.features = f"features/pixels{paligemma_models.SIDES[size]}.npy"
    config.num_train_steps = 0
    config.batch_size = config.eval_batch_size = {"": 32, "cpu": 32, "runlocal": 8}[size]
  config.lock()
  return config
