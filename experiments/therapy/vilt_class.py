r"""ViLT as Table 4's 'ViLT' row (VQA-AnswerTherapy, ICCV 2023, section 4.1): single vs multiple
answer grounding from one transformer over the picture's pixel patches and the text
"[CLS] question [SEP] answer 1 [SEP] answer 2 ... [SEP]" (`answertherapy/dataset.vilt_texts`;
`config.model.inputs` "i+q": the question alone), pooled -> a two-class head, with the
classifier's class-weighted loss; AdamW 5e-5, 10% warmup then linear decay, 20 epochs.

Arguments (`vqajax/answertherapy/configs.py:vilt_config`): "" (ViLT-B/32, 384 px, 40 tokens,
medium synthetic set), "cpu" (a 4-layer 128-wide ViLT on 64 px pictures, lr 5e-4), "runlocal"
(1 layer, 32 px, the tiny set, 4 steps). The pixel store of the embedded pictures
(`features/pixelsN.npy`) is made on first use; from scratch the tokenizer is the training
questions' and answers' words. From a Hub ViLT checkpoint, by id or folder (architecture, tokenizer, weights):

  vqajax train --config=experiments/therapy/vilt_class.py:cpu --workdir=/tmp/vilt_class
  vqajax train --config=experiments/therapy/vilt_class.py --workdir=/ckpt/vilt_class \
      --config.model.init_from=dandelin/vilt-b32-mlm
  vqajax therapy table4 /tmp/gc_iqa /tmp/vilt_class --out /tmp/table4

Results: WORKDIR/results/step_N/table4.{md,csv,json} with the naive baselines, predictions.json.
"""

from vqajax.answertherapy import configs


def get_config(arg: str = ""):
  return configs.vilt_config(arg, "vilt_class", "grounding_class")
