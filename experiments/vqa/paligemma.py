r"""PaliGemma (Beyer et al. 2024) as a Table II row: fine-tuned to answer in words. The prompt is
PaliGemma's `answer en {question}` (`config.model.vqa_prompt`) after the picture's tokens; the answer
(the question's answer-table entry, then `<eos>`) is the causal suffix of the prefix-LM, and the loss
is the cross-entropy of its tokens alone (`config.model.targets` "tokens"). Evaluation decodes the
greedy reply (`config.model.max_decode_len` tokens), cleans or normalises it as the official
`vqaEval.py` does and scores it with the official accuracy (open-ended, on the host: every
evaluation writes its results files); multiple choice picks the choice of highest log-likelihood
(its tokens and `<eos>` after the prompt; choices outside the answer table are never picked unless
none is in it: the first). The images are a pixel store (`vqajax features --model pixels`), aspect
kept and padded (PaliGemma's processor stretches to a square).

Arguments (`vqajax/nn/paligemma_models.py`): "" (from a PaliGemma checkpoint, 224 px, AdamW 1e-5 over
10 epochs with a 5% warmup, bfloat16 matmuls, layers rematerialised: a setting after big_vision's
VQAv2 transfer, not checked against it), "cpu" (a from-scratch 2-layer 64-wide PaliGemma on 64 px
pictures, lr 1e-3, 1500 steps) and "runlocal" (1 layer, 32 px, 4 steps: seconds); the last two are
random weights. The `pt` checkpoints did not see VQAv2 or VizWiz in pretraining; the `mix` ones did
(their fine-tuning mixture holds both), so a `mix` checkpoint evaluated on VQAv2 is not zero-shot.

  hf download google/paligemma-3b-pt-224 --local-dir paligemma-3b-pt-224    # once, where the Hub is reachable
  vqajax features --images /data/coco/train2014 --model pixels --layer pixels --size 224 \
      --out /data/VQA/features/pixels224.npy
  vqajax train --config=experiments/vqa/paligemma.py --workdir=/ckpt/paligemma --config.data.synthetic=False \
      --config.data.dir=/data/VQA --config.model.init_from=paligemma-3b-pt-224 --config.mesh.fsdp=8
  vqajax train --config=experiments/vqa/paligemma.py:runlocal --workdir=/tmp/paligemma
"""

from vqajax.nn import paligemma_models
from vqajax.vqa import configs


def get_config(arg: str = ""):
  """`vqa_config`'s data with config.model PaliGemma's group at the argument's size, the pixel store of the
  data's images at that size (made from the embedded pictures on first use), AdamW with warmup and linear
  decay, results (and the open-ended accuracy) at every evaluation."""
  fields = paligemma_models.sized(arg, remat="full")
  config = configs.vqa_config(arg, "paligemma", model="paligemma", **fields)
  with config.unlocked():
    config.data.features = f"features/pixels{paligemma_models.SIDES[arg]}.npy"
    config.data.num_answers = 3129 if not arg else config.data.num_answers
    opt = config.optimizer
    opt.name, opt.learning_rate, opt.weight_decay, opt.warmup, opt.grad_clip = "adamw", 1e-5, 0.0, 0.05, 0.0
    config.batch_size = config.eval_batch_size = {"": 256, "cpu": 64, "runlocal": 16}[arg]
    config.num_epochs = 10.0 if not arg else 0.0
    config.evals.val.results = "every"  # the open-ended accuracy is scored from the replies, on the host
    if arg == "cpu":
      opt.learning_rate = 1e-3
      config.num_train_steps = 1500
      config.eval_every_steps = 500
    if arg == "runlocal":
      config.num_train_steps = 4
      config.eval_every_steps = config.log_every_steps = 2
  return config
