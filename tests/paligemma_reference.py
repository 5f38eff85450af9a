"""Hugging Face transformers' PaliGemma as the reference for tests/test_paligemma.py.

Writes into FOLDER/NAME, for each architecture of ARCHITECTURES, a random
`PaliGemmaForConditionalGeneration` (`save_pretrained` in shards: config.json, the safetensors
index and its files) and the tiny tokenizer `tokenizer()` builds (tokenizer.json: a BPE with
Gemma's special tokens, `<image>`, the `<loc>` and `<seg>` tokens). `reference.npz` beside each
model holds, per batch of LOGITS (prompts and suffixes as HF's `PaliGemmaProcessor` encodes them,
padded on the right), the images, the token rows and HF's logits; and for GENERATE's prompts the
rows padded on the right, HF's greedy tokens (`generate(do_sample=False)`, the rows padded on the
left as HF generates) with the configured end-of-sequence id and with one the first row alone
meets early. Run in a subprocess: importing torch after TensorFlow (which other tests load) can crash a
process.

  python tests/paligemma_reference.py FOLDER
  python tests/paligemma_reference.py --reply CHECKPOINT PICTURE PROMPT STEPS   (`reply`)
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import PIL.Image
import tokenizers

if __name__ == "__main__":  # torch in the reference's own process only: tests import its constants
  import torch
  import transformers

TEXT = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=1, head_dim=8,
            rms_norm_eps=1e-6)
GEMMA2 = dict(hidden_size=48, num_hidden_layers=3, num_key_value_heads=2, query_pre_attn_scalar=12,
              sliding_window=6, attn_logit_softcapping=4.0, final_logit_softcapping=3.0)
VISION = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4)
# name -> (text_config changes, vision_config changes, top-level changes): Gemma at 28 px in 14 px patches,
# Gemma 2 (grouped heads, local layers, soft caps) at 32 px in 8 px patches, and Gemma 2 with an untied
# output projection, attention biases, no final soft cap and SigLIP's pooling head stored (PaliGemma reads none)
ARCHITECTURES = {
    "gemma": (dict(model_type="gemma", num_hidden_layers=2), dict(image_size=28, patch_size=14), {}),
    "gemma2": (dict(model_type="gemma2", **GEMMA2), dict(image_size=32, patch_size=8), {}),
    "gemma2_untied": (dict(GEMMA2, model_type="gemma2", attention_bias=True, final_logit_softcapping=None),
                      dict(image_size=28, patch_size=14, vision_use_head=True), dict(tie_word_embeddings=False)),
}
PROMPTS = ["what is in the image?", "answer en where is the cat", "caption en", "segment the red car",
           "detect cat ; dog", "is this a cup of coffee?", "how many people are there?", "a", ""]
SUFFIXES = ["a dog", "on the grass", "<loc0012><loc1023><seg007> car", "2", "yes", "no\nyes", "3 cats", "", "dog"]
# per batch: (prompt, suffix) indices; the rows have several lengths, padded on the right
LOGITS = [[(0, 0), (2, 2), (7, 3)], [(4, 1), (8, 8)]]
GENERATE = [1, 2, 5]
STEPS = 16
CORPUS = PROMPTS + SUFFIXES + ["a dog on the grass", "where is the red cup of coffee", "3 people, 2 dogs!"]


def tokenizer() -> transformers.PreTrainedTokenizerFast:
  """A BPE over CORPUS with Gemma's special tokens at Gemma's ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3),
  `<image>` and PaliGemma's 1,152 location / segmentation tokens; spaces as Gemma's "▁"."""
  m = tokenizers
  bpe = m.Tokenizer(m.models.BPE(unk_token="<unk>"))
  bpe.normalizer = m.normalizers.Replace(" ", "▁")
  bpe.pre_tokenizer = m.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
  bpe.decoder = m.decoders.Metaspace(replacement="▁", prepend_scheme="never")
  alphabet = [chr(c) for c in range(33, 127)] + ["▁", "\n"]
  trainer = m.trainers.BpeTrainer(vocab_size=160, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>", "<image>"],
                                  initial_alphabet=alphabet, show_progress=False)
  bpe.train_from_iterator(CORPUS * 4, trainer)
  bpe.add_tokens([f"<loc{i:04d}>" for i in range(1024)] + [f"<seg{i:03d}>" for i in range(128)])
  return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<bos>", eos_token="<eos>",
                                              pad_token="<pad>", unk_token="<unk>")


def _randomise(model: torch.nn.Module) -> None:
  """Every parameter drawn at random (LayerNorm scales around 1, Gemma's (1 + scale) norms around 0), the
  token embeddings small beside the layers' outputs: otherwise a tied output projection repeats the
  last token and greedy generation tests little."""
  generator = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      layer_norm = "vision_tower" in name and "norm" in name and name.endswith("weight")
      p.copy_(1 + 0.1 * noise if layer_norm else (0.05 if "embed_tokens" in name else 0.5) * noise)


def _processor(words, image_size: int, patches: int, side: str):
  words.padding_side = side
  images = transformers.SiglipImageProcessor(size={"height": image_size, "width": image_size})
  images.image_seq_length = patches
  return transformers.PaliGemmaProcessor(image_processor=images, tokenizer=words)


def model_reference(folder: str, words, changes) -> None:
  text, vision, top = changes
  image_size, patches = vision["image_size"], (vision["image_size"] // vision["patch_size"]) ** 2
  config = transformers.PaliGemmaConfig(
      vision_config=dict(dict(model_type="siglip_vision_model", vision_use_head=False, **VISION), **vision),
      text_config=dict(TEXT, vocab_size=len(words), **text),
      image_token_index=words.convert_tokens_to_ids("<image>"), vocab_size=len(words),
      projection_dim=text.get("hidden_size", TEXT["hidden_size"]), **top)
  config._attn_implementation = "eager"
  torch.manual_seed(0)
  model = transformers.PaliGemmaForConditionalGeneration(config).eval()
  _randomise(model)
  model.save_pretrained(folder, max_shard_size="200KB")
  words.save_pretrained(folder)
  rng = np.random.default_rng(0)
  image = [np.zeros((image_size, image_size, 3), np.uint8)]
  out = {}
  for b, rows in enumerate(LOGITS):
    encoded = _processor(words, image_size, patches, "right")(
        images=image * len(rows), text=[PROMPTS[p] for p, _ in rows], suffix=[SUFFIXES[s] for _, s in rows],
        padding="longest", return_tensors="pt")
    pixels = rng.uniform(-1, 1, size=(len(rows), 3, image_size, image_size)).astype(np.float32)
    with torch.no_grad():
      logits = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                     token_type_ids=encoded["token_type_ids"], pixel_values=torch.from_numpy(pixels)).logits
    out.update({f"{b}/pixels": pixels.transpose(0, 2, 3, 1), f"{b}/logits": logits.numpy(),
                **{f"{b}/{key}": encoded[key].numpy() for key in ("input_ids", "attention_mask", "token_type_ids")}})
  prompts = [PROMPTS[p] for p in GENERATE]
  pixels = rng.uniform(-1, 1, size=(len(prompts), 3, image_size, image_size)).astype(np.float32)
  right = _processor(words, image_size, patches, "right")(images=image * len(prompts), text=prompts,
                                                           padding="longest", return_tensors="np")
  left = _processor(words, image_size, patches, "left")(images=image * len(prompts), text=prompts,
                                                         padding="longest", return_tensors="pt")
  left = {key: left[key] for key in ("input_ids", "attention_mask", "token_type_ids")}
  out.update({"generate/pixels": pixels.transpose(0, 2, 3, 1), "generate/input_ids": right["input_ids"],
              "generate/attention_mask": right["attention_mask"]})
  eos = words.eos_token_id
  for key in ("tokens", "tokens_early_eos"):
    with torch.no_grad():
      tokens = model.generate(**left, pixel_values=torch.from_numpy(pixels), max_new_tokens=STEPS, do_sample=False,
                              eos_token_id=eos, pad_token_id=words.pad_token_id)
    out[f"generate/{key}"] = tokens[:, left["input_ids"].shape[1]:].numpy()
    out[f"generate/{key}_eos"] = np.asarray(eos)
    first, others = out["generate/tokens"][0], out["generate/tokens"][1:]
    eos = int(next(t for t in first[2:10] if t not in others))  # a token of the first row alone ends it early
  np.savez(os.path.join(folder, "reference.npz"), **out)


def reply(folder: str, picture: str, prompt: str, steps: str) -> None:
  """Prints (JSON) HF's greedy reply to `prompt` about the picture file: its tokens and its text
  (special tokens skipped), from the checkpoint in `folder` through `PaliGemmaProcessor` and `generate`."""
  model = transformers.PaliGemmaForConditionalGeneration.from_pretrained(folder).eval()
  words = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
  vision = model.config.vision_config
  processor = _processor(words, vision.image_size, (vision.image_size // vision.patch_size) ** 2, "left")
  encoded = processor(images=[PIL.Image.open(picture).convert("RGB")], text=[prompt], return_tensors="pt")
  with torch.no_grad():
    tokens = model.generate(**encoded, max_new_tokens=int(steps), do_sample=False)[0, encoded["input_ids"].shape[1]:]
  print(json.dumps({"tokens": tokens.tolist(), "text": words.decode(tokens, skip_special_tokens=True)}))


def main(folder: str) -> None:
  words = tokenizer()
  for name, changes in ARCHITECTURES.items():
    model_reference(os.path.join(folder, name), words, changes)
  encoded = _processor(words, 28, 4, "right")(images=[np.zeros((28, 28, 3), np.uint8)] * len(PROMPTS), text=PROMPTS,
                                               suffix=SUFFIXES, padding="longest", return_tensors="np")
  np.savez(os.path.join(folder, "encodings.npz"), **{key: encoded[key] for key in
                                                     ("input_ids", "attention_mask", "token_type_ids")})


if __name__ == "__main__":
  reply(*sys.argv[2:]) if sys.argv[1] == "--reply" else main(*sys.argv[1:])
