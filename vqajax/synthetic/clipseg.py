"""A tiny CLIPSeg checkpoint of random weights, written as the Hub ships one (`nn/clipseg_hub.save`):
what the zero-shot CLIPSeg rows read at their `cpu` and `runlocal` sizes, where no download is made
(`embedded.RANDOM_CLIPSEG`). Its masks are those of random weights, not of CLIPSeg.

Two 32-wide layers per tower, 8 px patches on CLIP's 32 px pictures (position embeddings are resized
to a store's side), CLIP's 77 text positions; its tokenizer is CLIP's byte-level BPE with no merges,
so every text is read a character at a time.
"""

from __future__ import annotations

import os

import jax
import tokenizers

from vqajax.nn import clipseg, clipseg_hub

SPECIALS = ("<|startoftext|>", "<|endoftext|>")


def vocabulary() -> dict[str, int]:
  """CLIP's byte alphabet, each byte also as a word's end (`</w>`), then the two special tokens."""
  alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
  return {token: i for i, token in enumerate([*alphabet, *(f"{c}</w>" for c in alphabet), *SPECIALS])}


def config(vocab_size: int) -> clipseg.CLIPSegConfig:
  tower = clipseg.Tower(32, 64, 2, 2)
  return clipseg.CLIPSegConfig(text=tower, vision=tower, vocab_size=vocab_size, eos_token_id=vocab_size - 1,
                               image_size=32, patch_size=8, projection_dim=32, extract_layers=(0, 1), reduce_dim=16,
                               decoder_num_attention_heads=2, decoder_intermediate_size=32)


def write(folder: str, seed: int = 0) -> dict[str, str]:
  """Writes the checkpoint into the existing `folder` (parameters drawn from `seed`); {file name: path}."""
  vocab = vocabulary()
  architecture = config(len(vocab))
  inputs = clipseg.example_inputs(architecture, text_length=4)
  params = jax.jit(clipseg.CLIPSeg(architecture).init)(jax.random.key(seed), **inputs)["params"]
  paths = clipseg_hub.save(folder, architecture, params, vocab)
  return {os.path.basename(path): path for path in paths}
