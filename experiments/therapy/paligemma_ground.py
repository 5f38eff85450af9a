r"""PaliGemma's answer grounding masks zero-shot (VQA-AnswerTherapy, ICCV 2023, Tables 5 and 6: the
UNINEXT / SEEM role): per answer slot PaliGemma is asked `segment {question} {answer}` ("i+q+a",
default), `segment {question}` ("i+q": one reply per question) or `segment {answer}` ("i+a")
(`config.model.inputs`; these prompts are ours, `nn/paligemma_ground.py`), and its greedy reply
(`max_decode_len` 20: one object's 4 `<loc>` and 16 `<seg>` tokens) is read as a mask on the host:
its `<loc>` box, or its `<seg>` mask when `config.model.mask_decoder` names big_vision's vae-oid.npz.
A malformed reply is an empty mask, counted in the `malformed` metric. No step trains
(`config.num_train_steps` 0): the checkpoint is evaluated as it is and kept as step 0.

Arguments (`vqajax/nn/paligemma_models.py`): "" (google/paligemma-3b-pt-224, 224 px; the `mix`
checkpoints were fine-tuned on a mixture holding RefCOCO referring segmentation, and VQAv2 / VizWiz
questions, so theirs is not zero-shot), "cpu" (a from-scratch 2-layer 64-wide PaliGemma on 64 px
pictures) and "runlocal" (1 layer, 32 px, the tiny set: seconds): the last two are random weights
whose vocabulary has no `<loc>` token, so their replies are malformed or empty: a smoke test of the
row, not PaliGemma's figures.

  hf download google/paligemma-3b-pt-224 --local-dir paligemma-3b-pt-224    # once, where the Hub is reachable
  vqajax train --config=experiments/therapy/paligemma_ground.py --workdir=/tmp/pali_ground \
      --config.model.init_from=paligemma-3b-pt-224 --config.model.mask_decoder=vae-oid.npz
  vqajax train --config=experiments/therapy/paligemma_ground.py:runlocal --workdir=/tmp/pali_ground_random

Results: WORKDIR/results/step_0/table5 and table6 .{md,csv,json} (IoU-PQ / IoU with the whole-image
baseline, grid and pixel level), table4 (single / multiple from the masks), results.json.
"""

from vqajax.answertherapy import configs
from vqajax.nn import paligemma_models

MAX_DECODE_LEN = 20  # one object: 4 <loc> and 16 <seg> tokens


def get_config(arg: str = ""):
  flags = set(arg.split(",")) - {""}
  if "real" in flags:
    raise ValueError("'real' (the released files, no images) is not an argument of a PaliGemma row: it reads pixels")
  size = "runlocal" if "runlocal" in flags else "cpu" if "cpu" in flags else ""
  fields = dict(paligemma_models.sized(size), max_decode_len=MAX_DECODE_LEN)
  config = configs.therapy_config(arg, "paligemma_ground", "grounding_mask", model="paligemma", **fields)
  with config.unlocked():
    config.data.features = f"features/pixels{paligemma_models.SIDES[size]}.npy"
    config.num_epochs, config.num_train_steps = 0.0, 0
    config.batch_size = config.eval_batch_size = 8  # questions; a generation per answer slot
  config.lock()
  return config
