"""CLIPSeg as a model entry (`CLIPSEG`, `config.model.name` "clipseg" in `nn/pretrained.MODELS`) of
the AnswerTherapy grounding challenge (`grounding_mask`): a mask for every answer slot from the
picture (a pixel store) and the slot's prompt, the question (I+Q), the question and the answer
(I+Q+A) or the answer (I+A) (`config.model.inputs`), resized to the targets' grid
(`config.model.mask_grid`).

Its start (`config.model.init_from`): a CLIPSeg checkpoint, a folder or a Hub id (e.g.
`CIDAS/clipseg-rd64-refined`), whose architecture and CLIP tokenizer the run records (`Spec`);
without one, a from-scratch CLIPSeg of the config's sizes with a word-level tokenizer of the
training texts. `config.model.train` "decoder" trains the decoder alone, CLIP's towers frozen (no
gradient flows into them, and the optimizer leaves them as they are), as CLIPSeg was trained;
"all" trains everything. The vision tower runs once per picture; the decoder once per slot.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tokenizers

from vqajax.core.config import TEXT, integer, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import Builder, Field, Model, TextEncoding
from vqajax.nn import clipseg_hub, hub, vilt_models
from vqajax.nn.clipseg import CLIPSegConfig, Decoder, TextTower, Tower, VisionTower

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # CLIPSeg's processor (ImageNet's)
START, END, UNKNOWN = "<|startoftext|>", "<|endoftext|>", "<|unk|>"  # a from-scratch vocabulary's specials
FROZEN = ("text", "vision")  # CLIP's towers: what `train` "decoder" keeps as they are


@dataclasses.dataclass(frozen=True)
class Spec:
  """A CLIPSeg run's architecture and tokenizer (the `tokenizers` JSON), texts of `length` tokens."""
  config: CLIPSegConfig
  tokenizer_json: str
  length: int

  @functools.cached_property
  def _tokenizer(self) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_str(self.tokenizer_json)

  def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict:
    """input_ids, attention_mask (token_type_ids zeros) [N, length] of the texts (a pair joined by a space)."""
    if pairs is not None:
      texts = [f"{t} {p}".strip() for t, p in zip(texts, pairs)]
    out = dict(clipseg_hub.encode(self._tokenizer, list(texts), self.length, self.config.eos_token_id))
    out["token_type_ids"] = np.zeros_like(out["input_ids"])
    return out

  def tables(self) -> dict:
    config = dataclasses.asdict(self.config)
    return {"config": config, "tokenizer": json.loads(self.tokenizer_json), "length": self.length}

  @classmethod
  def from_tables(cls, tables: dict) -> Spec:
    raw = dict(tables["config"])
    raw.update(text=Tower(**raw["text"]), vision=Tower(**raw["vision"]), extract_layers=tuple(raw["extract_layers"]))
    return cls(CLIPSegConfig(**raw), json.dumps(tables["tokenizer"], sort_keys=True), tables["length"])


def word_tokenizer(texts: Sequence[str]) -> str:
  """The JSON of a word-level tokenizer of the training `texts` (lower case, punctuation apart; words
  by count, then alphabetically), `<|startoftext|>` ... `<|endoftext|>` around each text."""
  normaliser = tokenizers.normalizers.Lowercase()
  split = tokenizers.pre_tokenizers.BertPreTokenizer()
  counts = collections.Counter(w for t in texts for w, _ in split.pre_tokenize_str(normaliser.normalize_str(t)))
  words = sorted(counts, key=lambda w: (-counts[w], w))
  vocab = {token: i for i, token in enumerate((UNKNOWN, START, END, *words))}
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=UNKNOWN))
  tokenizer.normalizer, tokenizer.pre_tokenizer = normaliser, split
  tokenizer.add_special_tokens([START, END])
  tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
      single=f"{START} $A {END}", special_tokens=[(START, vocab[START]), (END, vocab[END])])
  return json.dumps(json.loads(tokenizer.to_str()), sort_keys=True)


def spec(model_cfg, texts: Sequence[str], image_shape: tuple[int, ...]) -> Spec:
  """The `Spec` of `config.model`: from `init_from`'s checkpoint (a Hub id recorded as
  `ORG/NAME@COMMIT`), or a from-scratch CLIPSeg of the config's sizes; `image_shape` the pixel store's."""
  if model_cfg.init_from:
    checkpoint = clipseg_hub.checkpoint(model_cfg.init_from)
    model_cfg.init_from = checkpoint.name
    config = clipseg_hub.read_config(checkpoint.folder)
    tokenizer = clipseg_hub.read_tokenizer(checkpoint.folder)
    return Spec(config, json.dumps(json.loads(tokenizer.to_str()), sort_keys=True), config.max_position_embeddings)
  tokenizer_json = word_tokenizer(texts)
  width, layers, heads, patch = (model_cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                          "patch_size"))
  tower = Tower(width, 4 * width, layers, heads)
  config = CLIPSegConfig(
      text=tower, vision=tower, vocab_size=tokenizers.Tokenizer.from_str(tokenizer_json).get_vocab_size(),
      max_position_embeddings=model_cfg.text_length, eos_token_id=2, image_size=image_shape[0], patch_size=patch,
      projection_dim=width, extract_layers=tuple(sorted({max(0, layers * k // 4 - 1) for k in (1, 2, 3)})),
      reduce_dim=model_cfg.reduce_dim, decoder_num_attention_heads=heads, decoder_intermediate_size=4 * width,
      use_complex_transposed_convolution=patch % 4 == 0)
  if width % heads or model_cfg.reduce_dim % heads or patch > image_shape[0]:
    raise InputError(f"config.model: hidden_size and reduce_dim must be multiples of num_attention_heads, patch_size "
                     f"at most the pixel store's side {image_shape[0]}")
  return Spec(config, tokenizer_json, model_cfg.text_length)


def pixel_values(image):
  """A pixel store's rows ([B, S, S, 4]: RGB 0..255 and the mask) normalised as CLIPSeg's processor
  does (x / 255, ImageNet's mean and std), 0 on the padding."""
  image = image.astype(jnp.float32)
  mask = image[..., 3:] > 0
  return jnp.where(mask, (image[..., :3] / 255.0 - jnp.asarray(MEAN)) / jnp.asarray(STD), 0.0)


class ClipsegSlots(nn.Module):
  """CLIPSeg on each answer slot's prompt ([B, S, T]) with the question's picture -> [B, A, G, G]
  logits; one prompt per question (S = 1, I+Q) gives every answer slot the same map. Its parameters
  are `clipseg.CLIPSeg`'s (`text`, `vision`, `decoder`), so a Hub checkpoint's table maps them."""
  config: CLIPSegConfig
  grid: int
  frozen: bool
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, batch, *, train: bool):
    c = self.config
    b, slots, length = batch["input_ids"].shape
    hold = jax.lax.stop_gradient if self.frozen else (lambda x: x)
    prompts = hold(TextTower(c, self.dtype, name="text")(batch["input_ids"].reshape(b * slots, length),
                                                         batch["attention_mask"].reshape(b * slots, length)))
    pixels = pixel_values(batch["image"])
    states, _ = VisionTower(c, self.dtype, name="vision")(pixels)
    layers = {layer: jnp.repeat(hold(states[layer]), slots, axis=0) for layer in c.extract_layers}
    rows, cols = pixels.shape[1] // c.patch_size, pixels.shape[2] // c.patch_size
    logits = Decoder(c, self.dtype, name="decoder")(layers, prompts, rows, cols)  # [B * S, H', W']
    logits = jax.image.resize(logits, (b * slots, self.grid, self.grid), "bilinear").reshape(b, slots, self.grid,
                                                                                              self.grid)
    return jnp.broadcast_to(logits, (b, batch["answer_valid"].shape[1], self.grid, self.grid))


def _spec(enc) -> Spec:
  if enc.text is None:
    raise InputError("config.model.name 'clipseg': this run's encoders hold no CLIPSeg tokenizer (train it as one)")
  return enc.text.encoder


def _grounding_mask(cfg, enc) -> ClipsegSlots:
  """CLIPSeg with a mask per answer slot, on the slot's own prompt (`nn/clipseg_models.py`)."""
  return ClipsegSlots(_spec(enc).config, cfg.mask_grid, cfg.train == "decoder", jnp.dtype(cfg.dtype))


def texts(questions: list[str], answers: list[tuple[str, ...]], config) -> tuple[list[str], list[str] | None]:
  """The prompts, laid out per answer slot as ViLT's masks are (`vilt_models.texts`)."""
  return vilt_models.texts(questions, answers, config)


def initial_params(model_cfg, shapes, encoders):
  """None from scratch; else the function putting `init_from`'s checkpoint in place of the fresh
  parameters, every tensor checked now against the parameters' `shapes`."""
  if not model_cfg.get("init_from"):
    return None
  checkpoint = clipseg_hub.checkpoint(model_cfg.init_from)
  table, tensors = clipseg_hub.plan(checkpoint.folder, _spec(encoders).config, shapes)
  return lambda params: hub.load(table, tensors, params)


def frozen(model_cfg) -> tuple[str, ...]:
  """The top-level parameter groups the optimizer leaves as they are."""
  return FROZEN if model_cfg.train == "decoder" else ()


GROUP = {
    "init_from": Field("", TEXT),                         # a CLIPSeg Hub id or folder (CIDAS/clipseg-rd64-refined)
    "train": Field("decoder", one_of("decoder", "all")),  # what trains: the decoder (CLIP frozen), or everything
    # from scratch (no init_from): the towers' width, depth, heads, the patch side, the prompt's tokens, the decoder's width
    "hidden_size": Field(768, integer(1, 8192)),
    "num_hidden_layers": Field(12, integer(1, 64)),
    "num_attention_heads": Field(12, integer(1, 128)),
    "patch_size": Field(16, integer(1, 1024)),
    "text_length": Field(77, integer(2, 512)),
    "reduce_dim": Field(64, integer(1, 4096)),
    "dtype": Field("float32", one_of("float32", "bfloat16", "float16")),  # matmul inputs; "bfloat16" on accelerators
}
SIZES = {"cpu": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, patch_size=8, text_length=24,
                     reduce_dim=32),
         "runlocal": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=8, text_length=16,
                          reduce_dim=16)}

CLIPSEG = Model(
    group=GROUP,
    tasks={"grounding_mask": Builder(_grounding_mask, {
        "inputs": Field("i+q+a", one_of(*vilt_models.INPUTS["grounding_mask"])),  # what the prompt holds
        "mask_grid": Field(14, integer(1, 1024)),  # the side of the predicted and target masks (the grid rows')
    }, texts)},
    text=TextEncoding(spec, Spec.from_tables),
    initial_params=initial_params,
    frozen=frozen,
    label="CLIPSeg")
