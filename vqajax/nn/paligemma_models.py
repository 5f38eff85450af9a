"""PaliGemma as a model entry (`PALIGEMMA`, `config.model.name` "paligemma" in `nn/pretrained.MODELS`),
reading a pixel store (its pictures, normalised as PaliGemma's processor does, to [-1, 1]) and its own
text (the image's tokens, `<bos>`, the prompt, "\\n"; a suffix after: `nn/paligemma_hub.encode`, with
`token_type_ids` 1 on the suffix, as HF's processor marks it):

  grounding_class  zero-shot (Table 4): asked `config.model.prompt` (the question and its answers
                   filled in), the greedy reply's first three characters, lower-cased, are read
                   (`read_reply`): "yes" among them -> single (all answers on the same visual
                   content), else "no" among them -> multiple, else the question is left out (a third
                   class the task counts and leaves out of precision and recall). A zero-shot row
                   trains no step (`config.num_train_steps` 0; a training step would give no
                   gradient).
  vqa              `AnswerVQA`: fine-tuned to answer in words, the prompt `config.model.vqa_prompt`
                   ("answer en {question}"), the answer-table entry of the example's answer the
                   causal suffix whose tokens alone carry the loss (`config.model.targets` "tokens");
                   evaluated on its greedy replies (scored on the host by the VQA task) and, for
                   multiple choice, on each choice's log-likelihood.

Its start (`config.model.init_from`): a PaliGemma checkpoint, a folder or a Hub id (e.g.
`google/paligemma-3b-pt-224`), whose architecture and Gemma tokenizer the run records (`Spec`), its
weights checked against the run's parameters before the run is recorded; without one, a from-scratch
PaliGemma of the config's sizes with a WordPiece tokenizer of the training texts' and the prompt's words (single
characters spell the others, `word_tokenizer`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import string
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tokenizers

from vqajax.core.config import TEXT, Rule, integer, one_of
from vqajax.core.errors import InputError
from vqajax.core.model import Builder, Field, Model, TextEncoding
from vqajax.nn import hub, paligemma_ground, paligemma_hub, vilt_run
from vqajax.nn.paligemma import GLOBAL, PaliGemma, PaliGemmaConfig, TextConfig, VisionConfig
from vqajax.nn.paligemma_decode import reply

# A from-scratch vocabulary's special tokens, at Gemma's ids (pad 0, eos 1, bos 2, unk 3) and <image>
PAD, EOS, BOS, UNKNOWN = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIAL = (PAD, EOS, BOS, UNKNOWN, paligemma_hub.IMAGE_TOKEN)
# Table 4's zero-shot question (written after the paper's description of its prompt: whether all
# plausible answers point to the same visual content; its exact text is not published with the data)
PROMPT = ("answer en Question: {question} Answers: {answers}. "
          "Do all of these answers point to the same visual content in the image?")
PROMPT_RULE = Rule("a text holding {question} and {answers}",
                   lambda v: isinstance(v, str) and "{question}" in v and "{answers}" in v)
VQA_PROMPT_RULE = Rule("a text holding {question}", lambda v: isinstance(v, str) and "{question}" in v)
REMAT = {"none": None, "full": "nothing_saveable", "dots": "dots_with_no_batch_dims_saveable"}
SINGLE, MULTIPLE, LEFT_OUT = 0, 1, 2  # `read_reply`'s classes (AnswerTherapy's labels, then "left out")
HEAD = 3  # the characters of a reply that are read


def read_reply(reply: str) -> int:
  """The class of a zero-shot reply: its first three characters, lower-cased, holding "yes" -> SINGLE,
  else holding "no" -> MULTIPLE, else LEFT_OUT."""
  head = reply[:HEAD].lower()
  return SINGLE if "yes" in head else MULTIPLE if "no" in head else LEFT_OUT


@dataclasses.dataclass(frozen=True)
class Spec:
  """A PaliGemma run's architecture and tokenizer (the `tokenizers` JSON); `length` text tokens
  after the image's; `template` makes each text its prompt."""
  config: PaliGemmaConfig
  tokenizer_json: str
  length: int
  template: str = "{question}"  # a text's prompt ("answer en {question}" for VQA)

  @functools.cached_property
  def tokenizer(self) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_str(self.tokenizer_json)

  def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict:
    """input_ids, attention_mask, token_type_ids (1 on the suffix) [N, image tokens + length] of
    prompts (and the suffixes to produce)."""
    prompts = [self.template.replace("{question}", t) for t in texts]
    try:
      out = paligemma_hub.encode(self.tokenizer, self.config, prompts, None if pairs is None else list(pairs),
                                 self.config.vision.num_patches + self.length)
    except InputError as e:
      raise InputError(f"config.model.text_length ({self.length} text tokens) is too short: {e}") from None
    return {"input_ids": out["input_ids"], "attention_mask": out["input_mask"],
            "token_type_ids": out["input_mask"] * (1 - out["prefix_mask"])}

  def answer_tokens(self, answers: Sequence[str]) -> np.ndarray:
    """[K, A] int32: each answer's tokens and `<eos>` (the suffix to produce), -1 after."""
    rows = [e.ids + [self.config.text.eos_token_id[0]]
            for e in self.tokenizer.encode_batch(list(answers), add_special_tokens=False)]
    out = np.full((len(rows), max(map(len, rows), default=1)), -1, np.int32)
    for i, row in enumerate(rows):
      out[i, :len(row)] = row
    return out

  @functools.cached_property
  def _skipped(self) -> frozenset[int]:
    """The ids a reply's text leaves out: the tokenizer's special tokens but `<loc>` / `<seg>` (a
    reply's masks, whether or not a checkpoint's tokenizer.json marks them special)."""
    extra = set(paligemma_hub.EXTRA_TOKENS)
    return frozenset(i for i, token in self.tokenizer.get_added_tokens_decoder().items()
                     if token.special and token.content not in extra)

  def decode(self, tokens) -> list[str]:
    """The texts of generated token rows [N, L], each up to its first end-of-sequence token."""
    ends = set(self.config.text.eos_token_id)
    rows = [[int(t) for t in row] for row in np.asarray(tokens)]
    rows = [row[:next((i for i, t in enumerate(row) if t in ends), len(row))] for row in rows]
    rows = [[t for t in row if t not in self._skipped] for row in rows]
    return self.tokenizer.decode_batch(rows, skip_special_tokens=False)

  @functools.cached_property
  def heads(self) -> np.ndarray:
    """[vocab, HEAD] int32: each token's first characters (lower-cased) as code points, -1 past its text
    (Gemma's tokens hold their spaces; a from-scratch tokenizer's words are read without the space
    its decoder puts between them)."""
    texts = self.tokenizer.decode_batch([[i] for i in range(self.config.text.vocab_size)], skip_special_tokens=True)
    if json.loads(self.tokenizer_json)["model"]["type"] == "WordPiece":  # a from-scratch word's continuation
      texts = [t[2:] if t.startswith("##") else t for t in texts]
    out = np.full((len(texts), HEAD), -1, np.int32)
    for i, text in enumerate(texts):
      head = [ord(c) for c in text.lower()[:HEAD]]
      out[i, :len(head)] = head
    return out

  def tables(self) -> dict:
    return {"config": dataclasses.asdict(self.config), "tokenizer": json.loads(self.tokenizer_json),
            "length": self.length, "template": self.template}

  @classmethod
  def from_tables(cls, tables: dict) -> Spec:
    raw = tables["config"]
    text = dict(raw["text"], layer_types=tuple(raw["text"]["layer_types"]),
                eos_token_id=tuple(raw["text"]["eos_token_id"]))
    config = PaliGemmaConfig(vision=VisionConfig(**raw["vision"]), text=TextConfig(**text),
                             **{k: v for k, v in raw.items() if k not in ("vision", "text")})
    return cls(config, json.dumps(tables["tokenizer"], sort_keys=True), tables["length"], tables["template"])


def word_tokenizer(texts: Sequence[str]) -> str:
  """The JSON of a WordPiece tokenizer after Gemma's special tokens (`SPECIAL`, matched in a text): the
  whole words of `texts` (lower case, punctuation apart; by count, then alphabetically), then single
  characters (their letters, digits, a-z, 0-9) and their `##` continuations, so that a word they lack
  (an answer no question holds) is spelled."""
  normaliser = tokenizers.normalizers.Lowercase()
  split = tokenizers.pre_tokenizers.BertPreTokenizer()
  counts = collections.Counter(w for t in texts for w, _ in split.pre_tokenize_str(normaliser.normalize_str(t)))
  words = sorted(set(counts) - set(SPECIAL), key=lambda w: (-counts[w], w))
  chars = sorted(set("".join(words)) | set(string.ascii_lowercase + string.digits))
  pieces = [c for c in chars if c not in counts] + [f"##{c}" for c in chars]
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(
      {token: i for i, token in enumerate((*SPECIAL, *words, *pieces))}, unk_token=UNKNOWN))
  tokenizer.normalizer, tokenizer.pre_tokenizer = normaliser, split
  tokenizer.decoder = tokenizers.decoders.WordPiece()
  tokenizer.add_special_tokens(list(SPECIAL))
  return json.dumps(json.loads(tokenizer.to_str()), sort_keys=True)


def spec(model_cfg, texts: Sequence[str], image_shape: tuple[int, ...]) -> Spec:
  """The `Spec` of `config.model`: from `init_from`'s checkpoint (a Hub id recorded as
  `ORG/NAME@COMMIT`; its image size must be the pixel store's), or a from-scratch PaliGemma of the
  config's sizes whose vocabulary holds the training `texts`' words and the prompt's."""
  side, template = image_shape[0], model_cfg.get("vqa_prompt", "{question}")
  if model_cfg.init_from:
    checkpoint = paligemma_hub.checkpoint(model_cfg.init_from)
    model_cfg.init_from = checkpoint.name
    config = paligemma_hub.read_config(checkpoint.folder)
    if config.vision.image_size != side:
      raise InputError(f"config.data.features: a pixel store of {side} px; {checkpoint.name} reads "
                       f"{config.vision.image_size} px pictures (vqajax features --model pixels --size "
                       f"{config.vision.image_size})")
    tokenizer = paligemma_hub.read_tokenizer(checkpoint.folder, config)
    return Spec(config, json.dumps(json.loads(tokenizer.to_str()), sort_keys=True), model_cfg.text_length, template)
  prompts = [model_cfg.get(k, "").replace("{question}", "").replace("{answers}", "") for k in ("prompt", "vqa_prompt")]
  tokenizer_json = word_tokenizer([*texts, *prompts, "yes no"])
  c = model_cfg
  if c.hidden_size % c.num_attention_heads or c.num_attention_heads % c.num_key_value_heads or (
      c.vision_hidden_size % c.vision_heads or c.patch_size > side):
    raise InputError("config.model: hidden_size a multiple of num_attention_heads, num_attention_heads of "
                     f"num_key_value_heads, vision_hidden_size of vision_heads, patch_size at most the pixel store's "
                     f"side {side}")
  head_dim = c.hidden_size // c.num_attention_heads
  vision = VisionConfig(hidden_size=c.vision_hidden_size, intermediate_size=4 * c.vision_hidden_size,
                        num_hidden_layers=c.vision_layers, num_attention_heads=c.vision_heads, image_size=side,
                        patch_size=c.patch_size)
  text = TextConfig(vocab_size=tokenizers.Tokenizer.from_str(tokenizer_json).get_vocab_size(),
                    hidden_size=c.hidden_size, intermediate_size=8 * c.hidden_size,
                    num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                    num_key_value_heads=c.num_key_value_heads, head_dim=head_dim, query_pre_attn_scalar=float(head_dim),
                    layer_types=(GLOBAL,) * c.num_hidden_layers)
  return Spec(PaliGemmaConfig(vision=vision, text=text, image_token_index=SPECIAL.index(paligemma_hub.IMAGE_TOKEN)),
              tokenizer_json, c.text_length, template)


def _spec(enc) -> Spec:
  if enc.text is None:
    raise InputError("config.model.name 'paligemma': this run's encoders hold no PaliGemma tokenizer (train it as one)")
  return enc.text.encoder


def pixel_values(image):
  """A pixel store's rows ([B, S, S, 4]) as PaliGemma's processor normalises pictures (x / 127.5 - 1),
  0 on the padding."""
  return vilt_run.pixel_inputs(image)[0]


def read_heads(tokens, heads, eos_ids):
  """The `read_reply` class [B] of generated tokens [B, L] on the device: the first HEAD characters
  of the concatenated texts of each row's tokens before its first end-of-sequence token, from
  each token's first characters (`heads` [vocab, HEAD], -1 past its text)."""
  ended = jnp.cumsum(jnp.isin(tokens, eos_ids), axis=1) > 0
  chars = jnp.where(ended[..., None], -1, heads[tokens])                       # [B, L, HEAD]
  lengths = jnp.sum(chars >= 0, axis=-1)                                        # [B, L]
  starts = jnp.cumsum(lengths, axis=1) - lengths
  head = []
  for k in range(HEAD):  # character k of the reply: in the token whose text spans it
    inside = (starts <= k) & (k < starts + lengths)
    at = jnp.take_along_axis(chars, jnp.clip(k - starts, 0, HEAD - 1)[..., None], axis=-1)[..., 0]
    head.append(jnp.max(jnp.where(inside, at, -1), axis=1))
  y, e, s, n, o = (ord(c) for c in "yesno")
  yes = (head[0] == y) & (head[1] == e) & (head[2] == s)
  no = ((head[0] == n) & (head[1] == o)) | ((head[1] == n) & (head[2] == o))
  return jnp.where(yes, SINGLE, jnp.where(no, MULTIPLE, LEFT_OUT))


class ZeroShotClass(nn.Module):
  """Table 4 zero-shot: the greedy reply (`max_decode_len` tokens) to each question's prompt read by
  `read_heads` -> logits [B, 3] (0 for the class read, a large negative number for the others).
  Its parameters are `PaliGemma`'s (`model`'s), so a Hub checkpoint's table maps them; nothing trains."""
  config: PaliGemmaConfig
  dtype: jnp.dtype
  remat: str | None
  heads: np.ndarray
  max_decode_len: int

  def setup(self):
    self.model = PaliGemma(self.config, self.dtype, self.remat)
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    pixels, ids, mask = pixel_values(batch["image"]), batch["input_ids"], batch["attention_mask"]
    if self.is_initializing() or train:  # the parameters' shapes; a zero-shot row has no training step
      logits = self.model(pixels, ids, mask, 1 - batch["token_type_ids"])
      return jnp.zeros((ids.shape[0], 3)) + 0 * logits[:, :1, 0]
    tokens = reply(self.model, pixels, ids, mask, self.max_decode_len)
    read = read_heads(tokens, jnp.asarray(self.heads), jnp.asarray(self.config.text.eos_token_id))
    return jnp.where(jnp.arange(3) == read[:, None], 0.0, -1e9)


def _grounding_class(cfg, enc) -> ZeroShotClass:
  """PaliGemma asked Table 4's question zero-shot, its reply read as single / multiple / left out."""
  spec = _spec(enc)
  return ZeroShotClass(spec.config, jnp.dtype(cfg.dtype), REMAT[cfg.remat], spec.heads, cfg.max_decode_len)


def _grounding_mask(cfg, enc) -> paligemma_ground.Slots:
  """PaliGemma's `segment` replies per answer slot, zero-shot (`nn/paligemma_ground.py`); a mask decoder
  named is read now (a bad file refused before the run)."""
  paligemma_ground.decoder(cfg)
  return paligemma_ground.Slots(_spec(enc).config, jnp.dtype(cfg.dtype), REMAT[cfg.remat], cfg.max_decode_len)


def with_suffix(ids, mask, suffix):
  """(ids, mask, weights) [B, T] of prompt rows (`ids` padded on the right, `mask`) with each row's
  `suffix` [B, A] (-1 after its end) written after its prompt; `weights` 1 where a suffix token is
  (what the loss predicts); a suffix past the row's end is cut."""
  j = jnp.arange(ids.shape[1])[None] - jnp.sum(mask > 0, axis=1, keepdims=True)  # the suffix's token at each slot
  token = jnp.take_along_axis(suffix, jnp.clip(j, 0, suffix.shape[1] - 1), axis=1)
  placed = (j >= 0) & (j < suffix.shape[1]) & (token >= 0)
  return jnp.where(placed, token, ids), (mask > 0) | placed, placed


def suffix_logits(model, pixels, ids, mask, suffix):
  """Teacher-forced, each row's `suffix` [B, A] (-1 after its end) after its prompt: (the logits
  [B, A, vocab] predicting the suffix's tokens, those tokens [B, A], and True where one is). Only the
  A slots before them reach the vocabulary-wide output projection."""
  full, valid, placed = with_suffix(ids, mask, suffix)
  slots = jnp.sum(mask > 0, axis=1, keepdims=True) + jnp.arange(suffix.shape[1])[None]  # the suffix's
  inside, slots = slots < ids.shape[1], jnp.minimum(slots, ids.shape[1] - 1)
  logits = model(pixels, full, valid, mask, keep=slots - 1)
  return logits, jnp.take_along_axis(full, slots, 1), inside & jnp.take_along_axis(placed, slots, 1)


def suffix_likelihood(model, pixels, ids, mask, suffix):
  """The log-likelihood [B] of each row's `suffix` [B, A] after its prompt (teacher-forced)."""
  logits, targets, placed = suffix_logits(model, pixels, ids, mask, suffix)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]
  return jnp.sum(jnp.where(placed, logp, 0.0), axis=1)


class AnswerVQA(nn.Module):
  """PaliGemma answering a question's prompt (`Spec.template`, "answer en {question}"). Training:
  the answer-table entry of the example's `label` (`answers` [K, A]: its tokens and `<eos>`) is the
  suffix, outputs {logits, targets, weights} with weight 1 on the answer's tokens alone (the VQA
  task's "tokens" loss); an answer outside the table (label -1) has none. Evaluation: the greedy
  reply {tokens [B, max_decode_len]}, its log-likelihood {reply_logprob [B]} and, with multiple
  choices, each choice's log-likelihood {choice_scores [B, C]} (choices outside the table: -inf)."""
  config: PaliGemmaConfig
  dtype: jnp.dtype
  remat: str | None
  answers: np.ndarray
  max_decode_len: int

  def setup(self):
    self.model = PaliGemma(self.config, self.dtype, self.remat)
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    pixels, ids, mask = pixel_values(batch["image"]), batch["input_ids"], batch["attention_mask"]
    answers = jnp.asarray(self.answers)
    if self.is_initializing() or train:
      label = batch["label"]
      suffix = jnp.where(label[:, None] >= 0, answers[jnp.maximum(label, 0)], -1)
      logits, targets, placed = suffix_logits(self.model, pixels, ids, mask, suffix)
      return {"logits": logits, "targets": targets, "weights": placed.astype(jnp.float32)}
    eos = jnp.asarray(self.config.text.eos_token_id)
    tokens = reply(self.model, pixels, ids, mask, self.max_decode_len)
    ended = jnp.cumsum(jnp.isin(tokens, eos), axis=1) - jnp.isin(tokens, eos) > 0  # past the first <eos>
    out = {"tokens": tokens,
           "reply_logprob": suffix_likelihood(self.model, pixels, ids, mask, jnp.where(ended, -1, tokens))}
    if "choice_index" in batch:
      choices = batch["choice_index"]
      b, n = choices.shape
      repeat = lambda x: jnp.repeat(x, n, axis=0)
      scores = suffix_likelihood(self.model, repeat(pixels), repeat(ids), repeat(mask),
                                 answers[jnp.maximum(choices, 0)].reshape(b * n, -1)).reshape(b, n)
      out["choice_scores"] = jnp.where(choices >= 0, scores, -jnp.inf)
    return out


def _vqa(cfg, enc) -> AnswerVQA:
  """PaliGemma fine-tuned to answer in words (`AnswerVQA`), its answers the run's answer table's."""
  spec = _spec(enc)
  return AnswerVQA(spec.config, jnp.dtype(cfg.dtype), REMAT[cfg.remat], spec.answer_tokens(enc.answers.answers),
                   cfg.max_decode_len)


def class_texts(questions: list[str], answers: list[tuple[str, ...]], config) -> tuple[list[str], None]:
  """Table 4's prompts: `config.model.prompt` with each question and its answers (joined by ", ")."""
  prompt = config.model.prompt
  return [prompt.replace("{question}", q).replace("{answers}", ", ".join(a)) for q, a in zip(questions, answers)], None


def initial_params(model_cfg, shapes, encoders):
  """None from scratch; else the function putting `init_from`'s checkpoint in place of the fresh
  parameters, every tensor checked now against the parameters' `shapes`."""
  if not model_cfg.get("init_from"):
    return None
  checkpoint = paligemma_hub.checkpoint(model_cfg.init_from)
  table, tensors = paligemma_hub.plan(checkpoint.folder, _spec(encoders).config, shapes)
  return lambda params: hub.load(table, tensors, params)


GROUP = {
    "init_from": Field("", TEXT),                # a PaliGemma Hub id or folder (google/paligemma-3b-pt-224)
    "text_length": Field(96, integer(2, 4096)),  # text tokens after the image's: <bos>, the prompt, "\n", a suffix
    "max_decode_len": Field(8, integer(1, 1024)),  # the tokens a reply may have (greedy)
    # from scratch (no init_from): the decoder's width, depth, heads, key / value heads; SigLIP's width, depth,
    # heads and patch side (MLPs 8x and 4x wide)
    "hidden_size": Field(2048, integer(1, 65536)),
    "num_hidden_layers": Field(18, integer(1, 256)),
    "num_attention_heads": Field(8, integer(1, 256)),
    "num_key_value_heads": Field(1, integer(1, 256)),
    "vision_hidden_size": Field(1152, integer(1, 65536)),
    "vision_layers": Field(27, integer(1, 256)),
    "vision_heads": Field(16, integer(1, 256)),
    "patch_size": Field(14, integer(1, 1024)),
    "dtype": Field("float32", one_of("float32", "bfloat16", "float16")),  # matmul inputs; "bfloat16" on accelerators
    "remat": Field("none", one_of(*REMAT)),  # what the backward pass recomputes: "none", "full", "dots"
}
# from-scratch sizes: a 2-layer 64-wide model on 64 px pictures (minutes on 2 cores); 1 layer, 16 wide (seconds)
SIZES = {"cpu": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                     vision_hidden_size=64, vision_layers=2, vision_heads=4, patch_size=8),
         "runlocal": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                          vision_hidden_size=16, vision_layers=1, vision_heads=2, patch_size=8, max_decode_len=3)}
SIDES = {"": 224, "cpu": 64, "runlocal": 32}  # the pixel store's side per size ("": PaliGemma's pt-224)
CHECKPOINT = "google/paligemma-3b-pt-224"  # the paper size's start


def sized(size: str, **paper) -> dict:
  """A row's config.model fields at `size`: a random PaliGemma of `SIZES[size]`, or ("") `CHECKPOINT`
  in bfloat16 with the paper size's own `paper` fields."""
  return dict(SIZES[size]) if size else dict(init_from=CHECKPOINT, dtype="bfloat16", **paper)

PALIGEMMA = Model(
    group=GROUP,
    tasks={"grounding_class": Builder(_grounding_class, {
        "inputs": Field("i+q+a", one_of("i+q+a")),  # what the prompt holds: the picture, question and answers
        "prompt": Field(PROMPT, PROMPT_RULE),       # Table 4's question ({question}, {answers} filled in)
    }, class_texts, trains=False),
        "grounding_mask": Builder(_grounding_mask, paligemma_ground.FIELDS, paligemma_ground.texts, trains=False),
        "vqa": Builder(_vqa, {
            "targets": Field("tokens", one_of("tokens")),  # the answer's tokens (prefix-LM, the loss on them alone)
            "vqa_prompt": Field("answer en {question}", VQA_PROMPT_RULE),  # the prompt before the answer
        })},
    text=TextEncoding(spec, Spec.from_tables),
    initial_params=initial_params,
    label="PaliGemma")
