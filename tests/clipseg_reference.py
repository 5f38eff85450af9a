"""Hugging Face transformers' CLIPSeg and CLIP tokenizer as the reference for tests/test_clipseg.py.

Writes into FOLDER/NAME, for each architecture of ARCHITECTURES, a random
`CLIPSegForImageSegmentation` (`save_pretrained`: config.json, model.safetensors) and into
FOLDER/tokenizer a CLIP tokenizer built from a small byte-level BPE vocabulary (vocab.json,
merges.txt and, from `save_pretrained`, tokenizer.json). `reference.npz` beside each model
holds, per batch of BATCHES, the images, the prompts' ids and mask, HF's logits for text
prompts, and HF's logits for prompt images. With PROMPTS (a JSON list of strings), it also
writes their HF encodings (`encodings.npz` in FOLDER/tokenizer, 77 tokens, padded and truncated).
Run in a subprocess: importing torch after TensorFlow (which other tests load) can crash a process.

  python tests/clipseg_reference.py FOLDER PROMPTS.json
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import tokenizers

if __name__ == "__main__":  # torch in the reference's own process only: tests import its constants
  import torch
  import transformers

TEXT = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=16)
VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4, image_size=32,
              patch_size=8)
DECODER = dict(projection_dim=24, extract_layers=[1, 2, 3], reduce_dim=16, decoder_num_attention_heads=2,
               decoder_intermediate_size=20)
# name -> changes: CLIPSeg-refined's head (a 3x3 convolution and two transposed ones, FiLM at the first
# decoder layer) and the plain one (one transposed convolution, FiLM at the second)
ARCHITECTURES = {"refined": dict(use_complex_transposed_convolution=True, conditional_layer=0),
                 "plain": dict(use_complex_transposed_convolution=False, conditional_layer=1)}
# (image height, width, prompt lengths): CLIP's own size, then another (position embeddings resized
# bicubically); HF's decoder reads square images only
BATCHES = [(32, 32, [16, 9]), (48, 48, [5, 12, 16])]
TEXTS = ["a dog", "the man on the left wearing a red hat", "grass", "2 cups of coffee!", "sky?"]
WORDS = ["a", "dog", "the", "man", "on", "left", "wearing", "red", "hat", "grass", "cup", "of", "coffee", "sky"]


def bpe_files(folder: str) -> None:
  """vocab.json and merges.txt of a small CLIP-style BPE: the byte alphabet (each also as a word end),
  merges that build WORDS, and the two special tokens."""
  alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
  vocab = [*alphabet, *(f"{c}</w>" for c in alphabet)]
  merges = []
  for word in WORDS:
    pieces = list(word[:-1]) + [word[-1] + "</w>"]
    while len(pieces) > 1:
      pair = (pieces[0], pieces[1])
      merged = "".join(pair)
      if pair not in merges:
        merges.append(pair)
        vocab.append(merged)
      pieces = [merged, *pieces[2:]]
  vocab = list(dict.fromkeys(vocab)) + ["<|startoftext|>", "<|endoftext|>"]
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump({token: i for i, token in enumerate(vocab)}, f, ensure_ascii=False)
  with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def _randomise(model: torch.nn.Module) -> None:
  """Every parameter drawn at random (LayerNorm scales around 1), so no tensor is HF's zeros or ones."""
  generator = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      norm = "norm" in name or "layrnorm" in name
      p.copy_(1 + 0.1 * noise if norm and name.endswith("weight") else 0.1 * noise)


def model_reference(folder: str, tokenizer, changes: dict) -> None:
  config = transformers.CLIPSegConfig(
      text_config=dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                       bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id, **TEXT),
      vision_config=VISION, **DECODER, **changes)
  torch.manual_seed(0)
  model = transformers.CLIPSegForImageSegmentation(config).eval()
  _randomise(model)
  model.save_pretrained(folder)
  rng = np.random.default_rng(0)
  out = {}
  for b, (height, width, lengths) in enumerate(BATCHES):
    images = rng.normal(size=(len(lengths), 3, height, width)).astype(np.float32)
    prompts = rng.normal(size=(len(lengths), 3, 32, 32)).astype(np.float32)
    texts = [TEXTS[(b + i) % len(TEXTS)] for i in range(len(lengths))]
    ids = np.zeros((len(lengths), max(lengths)), np.int64)
    mask = np.zeros_like(ids)
    for i, (text, length) in enumerate(zip(texts, lengths)):
      encoded = tokenizer(text, truncation=True, max_length=length, padding="max_length")
      ids[i, :length], mask[i, :length] = encoded["input_ids"], encoded["attention_mask"]
    with torch.no_grad():
      by_text = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      pixel_values=torch.from_numpy(images)).logits
      by_image = model(pixel_values=torch.from_numpy(images),
                       conditional_pixel_values=torch.from_numpy(prompts)).logits
    out.update({f"{b}/images": images.transpose(0, 2, 3, 1), f"{b}/prompts": prompts.transpose(0, 2, 3, 1),
                f"{b}/input_ids": ids, f"{b}/attention_mask": mask,
                f"{b}/by_text": by_text.numpy().reshape(len(lengths), *by_text.shape[-2:]),
                f"{b}/by_image": by_image.numpy().reshape(len(lengths), *by_image.shape[-2:])})
  np.savez(os.path.join(folder, "reference.npz"), **out)


def main(folder: str, prompts_path: str) -> None:
  words = os.path.join(folder, "tokenizer")
  bpe_files(words)
  tokenizer = transformers.CLIPTokenizer.from_pretrained(words)
  tokenizer.save_pretrained(words)  # adds tokenizer.json
  for name, changes in ARCHITECTURES.items():
    model_reference(os.path.join(folder, name), tokenizer, changes)
  with open(prompts_path, encoding="utf-8") as f:
    prompts = json.load(f)
  encoded = tokenizer(prompts, padding="max_length", truncation=True, max_length=77)
  np.savez(os.path.join(words, "encodings.npz"), input_ids=np.asarray(encoded["input_ids"]),
           attention_mask=np.asarray(encoded["attention_mask"]))


if __name__ == "__main__":
  main(*sys.argv[1:])
