"""What a ViLT row of either paper shares (`config.model.name` "vilt"): its architecture and
tokenizer (`Spec`, recorded with the run's encoders, so a trained run or bundle answers
without the data or the Hub folder), the pixels of a pixel store normalised on the device,
and the start from a Hub checkpoint (`config.model.init_from`: a folder or a Hub id, `nn/hub.py`;
the run records an id as `ORG/NAME@COMMIT`).

The tokenizer: with `init_from`, the checkpoint's WordPiece tokenizer (and its architecture,
from its config.json); from scratch, a WordPiece vocabulary of the training texts' whole
words (BERT's normalisation and pre-tokenisation: lower case, punctuation apart; words in
order of count, then alphabetically, so a run's vocabulary is a function of its data),
unseen words [UNK]. Either is kept as the `tokenizers` library's JSON.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
import tokenizers
from absl import logging

from vqajax.core.config import FLAG, TEXT, integer, number, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import Field
from vqajax.nn import vilt, vilt_hub

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's, ids 0..4
# The config.model fields of a from-scratch architecture (a ViltConfig field each, with `text_length`
# its max_position_embeddings); with init_from the folder's config.json gives them.
ARCHITECTURE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size",
                "hidden_dropout_prob", "attention_probs_dropout_prob")


@dataclasses.dataclass(frozen=True)
class Spec:
  """A ViLT run's architecture and tokenizer (the `tokenizers` JSON, padded / truncated to
  the architecture's `max_position_embeddings`)."""
  config: vilt.ViltConfig
  tokenizer_json: str

  @functools.cached_property
  def tokenizer(self) -> vilt_hub.Tokenizer:
    raw = tokenizers.Tokenizer.from_str(self.tokenizer_json)
    return vilt_hub.Tokenizer(raw, self.config.max_position_embeddings, raw.padding["pad_token"])

  def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict:
    """input_ids, attention_mask, token_type_ids [N, T] of texts (or of text pairs: [SEP]
    between them, token type 1 for the second)."""
    if pairs is None:
      return self.tokenizer(texts)
    return self.tokenizer(list(zip(texts, pairs)))

  def tables(self) -> dict:
    config = dataclasses.asdict(self.config)
    config["labels"] = list(config["labels"])
    return {"config": config, "tokenizer": json.loads(self.tokenizer_json)}

  @classmethod
  def from_tables(cls, tables: dict) -> Spec:
    config = dict(tables["config"], labels=tuple(tables["config"]["labels"]))
    return cls(vilt.ViltConfig(**config), json.dumps(tables["tokenizer"], sort_keys=True))


def word_tokenizer(texts: Sequence[str], max_length: int) -> str:
  """The JSON of a WordPiece tokenizer whose vocabulary is [PAD] [UNK] [CLS] [SEP] [MASK] (special
  tokens, matched in a text) and the whole words of `texts` (module docstring)."""
  normaliser = tokenizers.normalizers.BertNormalizer(lowercase=True)
  split = tokenizers.pre_tokenizers.BertPreTokenizer()
  counts = collections.Counter(word for text in texts
                               for word, _ in split.pre_tokenize_str(normaliser.normalize_str(text)))
  words = sorted(counts, key=lambda w: (-counts[w], w))
  vocab = {token: i for i, token in enumerate(SPECIAL + tuple(w for w in words if w not in SPECIAL))}
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
  tokenizer.normalizer, tokenizer.pre_tokenizer = normaliser, split
  tokenizer.post_processor = tokenizers.processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
  tokenizer.decoder = tokenizers.decoders.WordPiece()
  tokenizer.add_special_tokens(list(SPECIAL))  # as a Hub folder's: "[SEP]" in a text is the token
  tokenizer.enable_padding(length=max_length, pad_id=0, pad_token="[PAD]")
  tokenizer.enable_truncation(max_length)
  return tokenizer.to_str()


def _canonical(tokenizer_json: str) -> str:
  return json.dumps(json.loads(tokenizer_json), sort_keys=True)


def spec(model_cfg, texts: Sequence[str], image_shape: tuple[int, ...]) -> Spec:
  """The `Spec` of `config.model`: from `init_from`'s checkpoint (a Hub id resolved, and recorded
  in `init_from` as `ORG/NAME@COMMIT`), or from the config's sizes with a tokenizer of the
  training `texts`; `image_shape`: the pixel store's, [S, S, 4]."""
  if model_cfg.init_from:
    checkpoint = vilt_hub.checkpoint(model_cfg.init_from)
    model_cfg.init_from = checkpoint.name
    config = vilt_hub.read_config(checkpoint.folder)
    tokenizer = vilt_hub.read_tokenizer(checkpoint.folder, config.max_position_embeddings, config.vocab_size)
    return Spec(config, _canonical(tokenizer.tokenizer.to_str()))
  tokenizer_json = _canonical(word_tokenizer(texts, model_cfg.text_length))
  config = vilt.ViltConfig(
      vocab_size=tokenizers.Tokenizer.from_str(tokenizer_json).get_vocab_size(),
      max_position_embeddings=model_cfg.text_length, image_size=image_shape[0],
      **{name: model_cfg[name] for name in ARCHITECTURE})
  problem = vilt_hub.misfit(config)
  if problem:
    raise InputError(f"config.model: {problem} (image_size: the pixel store's, config.data.features)")
  return Spec(config, tokenizer_json)


# (pixels, text tokens, hidden, layers, heads, patch) of a ViLT row per size: ViLT-B/32 at 384 px, a
# 4-layer 128-wide ViLT on 64 px pictures (minutes on 2 cores), a 1-layer one on 32 px (seconds)
SIZES = {"": (384, 40, 768, 12, 12, 32), "cpu": (64, 24, 128, 4, 4, 8), "runlocal": (32, 16, 32, 1, 2, 8)}


# The config.model group of a ViLT row (both papers): each field's default (ViLT-B/32) and rule; from
# scratch an architecture of these sizes, with init_from the folder's config.json gives them.
GROUP = {
    "init_from": Field("", TEXT),                         # a Hub ViLT id or folder: its architecture, tokenizer, weights
    "init_head": Field(True, FLAG),                       # read its classifier too (False: every head initialised)
    "text_length": Field(40, integer(1, 512)),            # tokens (from scratch; init_from: max_position_embeddings)
    "hidden_size": Field(768, integer(1, 8192)),
    "num_hidden_layers": Field(12, integer(1, 64)),
    "num_attention_heads": Field(12, integer(1, 128)),
    "intermediate_size": Field(3072, integer(1, 65536)),
    "patch_size": Field(32, integer(1, 1024)),
    "hidden_dropout_prob": Field(0.0, number(0, 1, hi_open=True)),
    "attention_probs_dropout_prob": Field(0.0, number(0, 1, hi_open=True)),
    "dtype": Field("float32", one_of("float32", "bfloat16", "float16")),  # matmul inputs; "bfloat16" on accelerators
    "remat": Field("none", one_of(*vilt.REMAT)),          # what the backward pass recomputes: "none", "full", "dots"
}


def sized(size: str) -> dict:
  """The config.model fields of a from-scratch ViLT of `SIZES[size]`."""
  _, text_length, hidden, layers, heads, patch = SIZES[size]
  return dict(text_length=text_length, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
              intermediate_size=4 * hidden, patch_size=patch)


def pixel_inputs(image):
  """(pixel_values [B, S, S, 3] normalised as ViLT's processor does, (x / 255 - 0.5) / 0.5,
  and 0 on the padding; pixel_mask [B, S, S]) of a pixel store's rows ([B, S, S, 4]: RGB
  0..255 and the mask; uint8 streamed, float32 for new images)."""
  image = image.astype(jnp.float32)
  mask = image[..., 3] > 0
  values = jnp.where(mask[..., None], image[..., :3] / 127.5 - 1.0, 0.0)
  return values, mask.astype(jnp.int32)


class ViltOnBatch(nn.Module):
  """A ViLT model (`ViltClassifier`, `ViltMask`) applied to a task's batch: `input_ids`,
  `attention_mask`, `token_type_ids` (those present) and the pixel store's `image`. Its
  parameters are the wrapped model's (names as HF's table maps them: `vilt`, the head)."""
  model: nn.Module

  def setup(self):
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    values, mask = pixel_inputs(batch["image"])
    return self.model(batch["input_ids"], batch["attention_mask"], values, mask, batch.get("token_type_ids"),
                      train=train)


def initial_params(model_cfg, shapes, encoders):
  """The task contract's hook: None without `config.model.init_from` (the initial parameters
  stay), else the function that puts its checkpoint in place of the fresh parameters (its heads
  too unless `init_head` is false; a VQA head's outputs matched by answer where the encoders
  have an answer table, `encoders.answers`), saying in one line what stays initialised. Every
  file it will read is checked now, against the parameters' `shapes`."""
  if not model_cfg.get("init_from"):
    return None
  answers = getattr(getattr(encoders, "answers", None), "answers", None)
  checkpoint = vilt_hub.checkpoint(model_cfg.init_from)
  plan = vilt_hub.plan(checkpoint.folder, shapes, head=model_cfg.init_head, labels=answers, name=checkpoint.name)

  def load(params):
    if plan.initialised:
      logging.warning("%s: initialised %s (not in the checkpoint%s)", checkpoint.name, ", ".join(plan.initialised),
                      "" if model_cfg.init_head else ", or config.model.init_head=False")
    if plan.answers_found is not None and "classifier" not in plan.initialised:
      logging.warning("%s: %d of the %d answers have an output in the checkpoint (id2label); the others start "
                      "initialised", checkpoint.name, plan.answers_found, len(answers))
    return plan.load(params)
  return load
