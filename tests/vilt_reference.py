"""Hugging Face transformers' ViLT and BERT tokenizer as the reference for tests/test_vilt.py.

Writes into FOLDER a random `ViltForQuestionAnswering` of a tiny config (`save_pretrained`:
config.json, model.safetensors) with its `BertTokenizer` (tokenizer.json), and `reference.npz`:
for each batch of padded images and texts, the inputs, HF's pooled output, logits, final
states and, from `visual_embed` under the same seed, which patch each image token is
(patch_index, its mask). With QUESTIONS (a JSON list of strings), it also writes their HF
encodings (40 tokens, padded and truncated), lower-cased and cased. Run in a subprocess:
importing torch after TensorFlow (which other tests load) can crash the process.

  python tests/vilt_reference.py FOLDER QUESTIONS.json
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

if __name__ == "__main__":  # torch in the reference's own process only: tests import its constants
  import torch
  import transformers

CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=32,
              patch_size=8, max_position_embeddings=16, num_labels=5, hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1)
QUESTION_LENGTH = 40  # ViLT's text length
# (canvas height, width, [(valid height, width) per image], text length): a canvas of the config's size and two
# larger ones (5 x 7 patches, the second with rows and columns the patches do not cover), each with padded images.
BATCHES = [(32, 32, [(32, 32), (24, 17), (8, 32)], 12),
           (40, 56, [(40, 56), (17, 9), (33, 50), (40, 8)], 16),
           (44, 60, [(44, 60), (9, 30)], 7)]
TEXTS = ["what is it?", "how many dogs are on the grass near 3 trees?", "is the man wearing a hat", "color?"]


def vocabulary() -> list[str]:
  """A small WordPiece vocabulary: BERT's special tokens, some words, and every letter and
  digit as a word start and a continuation, so that most words split into pieces."""
  words = ["what", "is", "it", "how", "many", "dogs", "are", "on", "the", "grass", "near", "trees", "man", "wearing",
           "a", "hat", "color", "there", "in", "this", "picture", "cafe", "##s", "##ing", "##ed"]
  chars = [*"abcdefghijklmnopqrstuvwxyz0123456789", *"?!.,;:'\"-()/&%$"]
  pieces = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
  return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(words + chars + pieces)]


def _randomise(model: torch.nn.Module) -> None:
  """Every parameter drawn at random (LayerNorm scales around 1), so no tensor is HF's zeros or ones."""
  generator = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=generator)
      norm = "LayerNorm" in name or "layernorm" in name or name.startswith("classifier.1")
      p.copy_(1 + 0.2 * noise if norm and name.endswith("weight") else 0.3 * noise)


def main(folder: str, questions_path: str) -> None:
  vocab = {token: i for i, token in enumerate(vocabulary())}
  tokenizer = transformers.BertTokenizer(vocab=vocab)
  config = transformers.ViltConfig(vocab_size=len(vocab), **CONFIG)
  torch.manual_seed(0)
  model = transformers.ViltForQuestionAnswering(config).eval()
  _randomise(model)
  model.save_pretrained(folder)
  tokenizer.save_pretrained(folder)
  rng = np.random.default_rng(0)
  out = {}
  for b, (height, width, valid, length) in enumerate(BATCHES):
    pixels = rng.normal(size=(len(valid), 3, height, width)).astype(np.float32)
    mask = np.zeros((len(valid), height, width), np.int64)
    for i, (h, w) in enumerate(valid):
      mask[i, :h, :w] = 1
      pixels[i, :, h:] = pixels[i, :, :, w:] = 0  # as ViLT's processor pads
    texts = [TEXTS[(b + i) % len(TEXTS)] for i in range(len(valid))]
    text = tokenizer(texts, padding="max_length", truncation=True, max_length=length, return_tensors="pt")
    text["token_type_ids"][-1, 1] = 1  # a second token type somewhere
    inputs = dict(**text, pixel_values=torch.from_numpy(pixels), pixel_mask=torch.from_numpy(mask))
    with torch.no_grad():
      torch.manual_seed(b)
      encoded = model.vilt(**inputs)
      torch.manual_seed(b)
      logits = model(**inputs).logits
      torch.manual_seed(b)
      _, image_mask, (patch_index, _) = model.vilt.embeddings.visual_embed(
          inputs["pixel_values"], inputs["pixel_mask"], max_image_length=config.max_image_length)
    out.update({f"{b}/{name}": value.numpy() for name, value in inputs.items()})
    out.update({f"{b}/pooled": encoded.pooler_output.numpy(), f"{b}/states": encoded.last_hidden_state.numpy(),
                f"{b}/logits": logits.numpy(), f"{b}/patch_index": patch_index.numpy(),
                f"{b}/image_mask": image_mask.numpy()})
  with open(questions_path, encoding="utf-8") as f:
    questions = json.load(f)
  for name, lower in (("uncased", True), ("cased", False)):
    encoded = transformers.BertTokenizer(vocab=vocab, do_lower_case=lower)(
        questions, padding="max_length", truncation=True, max_length=QUESTION_LENGTH)
    out.update({f"{name}/{key}": np.array(value) for key, value in encoded.items()})
  np.savez(os.path.join(folder, "reference.npz"), **out)


if __name__ == "__main__":
  main(*sys.argv[1:])
