"""A PaliGemma checkpoint folder as it comes from the Hugging Face Hub, read as it is (no torch).

`config.json` (model_type "paligemma", a `siglip_vision_model` vision_config and a `gemma` or
`gemma2` text_config) -> `paligemma.PaliGemmaConfig`, HF's defaults filling the fields it omits
(a sub-config that is absent takes PaliGemma's, one that is present its model's own); the
safetensors weights (one file or a sharded index; every header checked first, `nn/hub.py`), under the names
the Hub's checkpoints use (`vision_tower.vision_model.*`, `language_model.model.*`), those
transformers' `save_pretrained` writes (`vision_tower.*`, `language_model.model.*`) or its modules'
own (`model.vision_tower.*`, `model.language_model.*`); the Gemma tokenizer from `tokenizer.json`
through `tokenizers`, holding `<image>`, `<loc0000>`..`<loc1023>` and `<seg000>`..`<seg127>`.
`parameter_table` is the one map from HF's tensor names to the Flax parameters of `paligemma.py`
(a layer's tensors go to row `i` of the scanned stack). `encode` builds the token rows HF's
`PaliGemmaProcessor` builds: the image's tokens, `<bos>`, the prompt and "\\n" (the prefix), then
the suffix and `<eos>`. Anything that does not fit is an InputError naming the file and the field or
tensor.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import jax
import numpy as np
import tokenizers

from vqajax.core.errors import InputError
from vqajax.nn import hub
from vqajax.nn.activations import ACTIVATIONS
from vqajax.nn.paligemma import GLOBAL, LOCAL, PaliGemma, PaliGemmaConfig, TextConfig, VisionConfig, example_inputs

MAX_SIZE = 1 << 16  # no released PaliGemma has a width, head count or image side near this
MAX_VOCAB = 1 << 20
MAX_LAYERS = 256
MAX_TOKENIZER_BYTES = 256 * 2**20  # Gemma's tokenizer.json is about 17 MB
IMAGE_TOKEN = "<image>"
EXTRA_TOKENS = tuple(f"<loc{i:04d}>" for i in range(1024)) + tuple(f"<seg{i:03d}>" for i in range(128))
# the stored names' prefixes -> transformers' module names (its "llava" conversion); the first that matches
NAMES = (("language_model.lm_head.", "lm_head."), ("language_model.model.", "model.language_model."),
         ("model.vision_tower.vision_model.", "model.vision_tower."), ("vision_tower.vision_model.", "model.vision_tower."),
         ("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector."))
VISION, PROJECTOR, TEXT = "model.vision_tower", "model.multi_modal_projector", "model.language_model"

# Each architecture's own defaults (a sub-config present in config.json) and PaliGemma's (one absent)
SIGLIP = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, image_size=224,
              patch_size=16, num_channels=3, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
PALIGEMMA_VISION = dict(SIGLIP, intermediate_size=4096, hidden_size=1152, patch_size=14, num_hidden_layers=27,
                        num_attention_heads=16)
GEMMA = dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
             num_key_value_heads=16, head_dim=256, rms_norm_eps=1e-6, attention_bias=False, bos_token_id=2,
             eos_token_id=1, pad_token_id=0, hidden_act="gelu_pytorch_tanh")
GEMMA2 = dict(GEMMA, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
              num_key_value_heads=4, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
              sliding_window=4096, final_logit_softcapping=30.0, attn_logit_softcapping=50.0)
PALIGEMMA_TEXT = dict(GEMMA, model_type="gemma", hidden_size=2048, num_hidden_layers=18, intermediate_size=16384,
                      num_attention_heads=8, num_key_value_heads=1, vocab_size=257152)


class _Fields:
  """The fields of one (sub-)config object of `path`, each checked as it is read; `where` prefixes
  their names in messages ("text_config.")."""

  def __init__(self, raw, defaults: dict, path: str, where: str = ""):
    if not isinstance(raw, dict):
      raise InputError(f"{path}: field {where.rstrip('.')} is {str(raw)[:40]!r}; expected an object")
    self.raw, self.defaults, self.path, self.where = raw, defaults, path, where

  def value(self, name: str, default=None):
    return self.raw.get(name, self.defaults.get(name, default))

  def fail(self, name: str, expected: str):
    raise InputError(f"{self.path}: field {self.where}{name} is {str(self.value(name))[:40]!r}; expected {expected}")

  def int(self, name: str, low: int = 1, high: int = MAX_SIZE, default=None) -> int:
    value = self.value(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
      self.fail(name, f"an integer in {low}..{high}")
    return value

  def number(self, name: str, high: float, default=None, optional: bool = False) -> float | None:
    """A number in (0, high); None where `optional` (a soft cap that is off)."""
    value = self.value(name, default)
    if value is None and optional:
      return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < high:
      self.fail(name, f"a number in (0, {high:g})" + (" or null" if optional else ""))
    return float(value)

  def flag(self, name: str, default=None) -> bool:
    value = self.value(name, default)
    if not isinstance(value, bool):
      self.fail(name, "true or false")
    return value

  def choice(self, name: str, choices, default=None) -> str:
    value = self.value(name, default)
    if value not in choices:
      self.fail(name, f"one of {sorted(choices)}")
    return value


def _vision(raw, path: str) -> VisionConfig:
  f = _Fields(PALIGEMMA_VISION if raw is None else raw, SIGLIP, path, "vision_config.")
  if raw is not None and raw.get("model_type") != "siglip_vision_model":
    f.fail("model_type", "'siglip_vision_model'")
  config = VisionConfig(
      hidden_size=f.int("hidden_size"), intermediate_size=f.int("intermediate_size"),
      num_hidden_layers=f.int("num_hidden_layers", high=MAX_LAYERS), num_attention_heads=f.int("num_attention_heads"),
      image_size=f.int("image_size"), patch_size=f.int("patch_size"), num_channels=f.int("num_channels"),
      hidden_act=f.choice("hidden_act", ACTIVATIONS), layer_norm_eps=f.number("layer_norm_eps", 1.0))
  if config.hidden_size % config.num_attention_heads or config.patch_size > config.image_size:
    raise InputError(f"{path}: vision_config sizes do not fit (hidden_size a multiple of num_attention_heads, "
                     "patch_size <= image_size)")
  return config


def _token_ids(f: _Fields, name: str) -> tuple[int, ...]:
  value = f.value(name)
  ids = value if isinstance(value, list) and value else [value]
  if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < MAX_VOCAB for i in ids):
    f.fail(name, f"a token id (0..{MAX_VOCAB - 1}) or a list of them")
  return tuple(ids)


def _rope_theta(f: _Fields) -> float:
  rope = f.raw.get("rope_parameters")
  if rope is None:
    if f.raw.get("rope_scaling") is not None:
      f.fail("rope_scaling", "null (PaliGemma's RoPE is unscaled)")
    return f.number("rope_theta", 1e12, default=10000.0)
  rope = _Fields(rope, {"rope_type": "default", "rope_theta": 10000.0}, f.path, f"{f.where}rope_parameters.")
  rope.choice("rope_type", ("default",))
  return rope.number("rope_theta", 1e12)


def _text(raw, path: str) -> TextConfig:
  if raw is None:
    raw = PALIGEMMA_TEXT
  kind = _Fields(raw, {}, path, "text_config.").choice("model_type", ("gemma", "gemma2"))
  gemma2 = kind == "gemma2"
  f = _Fields(raw, GEMMA2 if gemma2 else GEMMA, path, "text_config.")
  layers = f.int("num_hidden_layers", high=MAX_LAYERS)
  head_dim = f.int("head_dim")
  act = "hidden_activation" if gemma2 else "hidden_act"
  values = dict(
      model_type=kind, vocab_size=f.int("vocab_size", high=MAX_VOCAB), hidden_size=f.int("hidden_size"),
      intermediate_size=f.int("intermediate_size"), num_hidden_layers=layers,
      num_attention_heads=f.int("num_attention_heads"), num_key_value_heads=f.int("num_key_value_heads"),
      head_dim=head_dim, hidden_act=f.choice(act, ACTIVATIONS), rms_norm_eps=f.number("rms_norm_eps", 1.0),
      rope_theta=_rope_theta(f), attention_bias=f.flag("attention_bias"),
      bos_token_id=f.int("bos_token_id", 0, MAX_VOCAB - 1), eos_token_id=_token_ids(f, "eos_token_id"),
      pad_token_id=f.int("pad_token_id", 0, MAX_VOCAB - 1), layer_types=(GLOBAL,) * layers,
      query_pre_attn_scalar=float(head_dim))
  if not gemma2 and values["hidden_act"] == "gelu":  # HF's GemmaConfig reads Gemma's legacy "gelu" as tanh GELU
    values["hidden_act"] = "gelu_pytorch_tanh"
  if gemma2:
    types = f.value("layer_types") or [LOCAL if i % 2 == 0 else GLOBAL for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {LOCAL, GLOBAL}:
      f.fail("layer_types", f"{layers} of {LOCAL!r} / {GLOBAL!r}")
    values.update(layer_types=tuple(types), query_pre_attn_scalar=f.number("query_pre_attn_scalar", MAX_SIZE),
                  attn_logit_softcapping=f.number("attn_logit_softcapping", 1e6, optional=True),
                  final_logit_softcapping=f.number("final_logit_softcapping", 1e6, optional=True),
                  sliding_window=f.int("sliding_window", high=MAX_VOCAB))
  config = TextConfig(**values)
  if config.num_attention_heads % config.num_key_value_heads or config.head_dim % 2:
    raise InputError(f"{path}: text_config sizes do not fit (num_attention_heads a multiple of num_key_value_heads, "
                     "an even head_dim)")
  return config


def read_config(folder: str) -> PaliGemmaConfig:
  """The architecture of a PaliGemma folder's `config.json`."""
  path, raw = hub.read_config(folder, "paligemma", "PaliGemma checkpoint")
  vision = _vision(raw.get("vision_config"), path)
  text = _text(raw.get("text_config"), path)
  f = _Fields(raw, {"image_token_index": raw.get("image_token_id", 256000), "projection_dim": 2048,
                    "tie_word_embeddings": True}, path)
  if f.int("projection_dim") != text.hidden_size:
    f.fail("projection_dim", f"text_config.hidden_size ({text.hidden_size}): the projected image tokens are decoder inputs")
  return PaliGemmaConfig(vision=vision, text=text, image_token_index=f.int("image_token_index", 0, MAX_VOCAB - 1),
                         tie_word_embeddings=f.flag("tie_word_embeddings"))


def _weights(table: hub.Table, hf: str, path: tuple[str, ...], layer: int | None, bias: bool = True,
             kernel: str = "kernel", layout: str = "dense") -> None:
  table[f"{hf}.weight"] = hub.Place(path + (kernel,), layout, layer)
  if bias:
    table[f"{hf}.bias"] = hub.Place(path + ("bias",), "same", layer)


def parameter_table(config: PaliGemmaConfig) -> hub.Table:
  """HF `PaliGemmaForConditionalGeneration`'s module names -> Flax paths of `paligemma.PaliGemma`."""
  v, t = config.vision, config.text
  table: hub.Table = {f"{VISION}.embeddings.position_embedding.weight": hub.Place(("vision", "position_embedding")),
                      f"{TEXT}.embed_tokens.weight": hub.Place(("embed_tokens", "embedding"))}
  _weights(table, f"{VISION}.embeddings.patch_embedding", ("vision", "patch_embedding"), None, layout="conv")
  _weights(table, f"{VISION}.post_layernorm", ("vision", "post_layernorm"), None, kernel="scale", layout="same")
  _weights(table, f"{PROJECTOR}.linear", ("projector",), None)
  _weights(table, f"{TEXT}.norm", ("norm",), None, bias=False, kernel="scale", layout="same")
  if not config.tie_word_embeddings:
    _weights(table, "lm_head", ("lm_head",), None, bias=False)
  for i in range(v.num_hidden_layers):
    hf, path = f"{VISION}.encoder.layers.{i}", ("vision", "layers")
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
      _weights(table, f"{hf}.self_attn.{name}", path + (name,), i)
    for name in ("fc1", "fc2"):
      _weights(table, f"{hf}.mlp.{name}", path + (name,), i)
    for name in ("layer_norm1", "layer_norm2"):
      _weights(table, f"{hf}.{name}", path + (name,), i, kernel="scale", layout="same")
  norms = ["input_layernorm", "post_attention_layernorm"]
  if t.gemma2:
    norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
  for i in range(t.num_hidden_layers):
    hf, path = f"{TEXT}.layers.{i}", ("layers",)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
      _weights(table, f"{hf}.self_attn.{name}", path + (name,), i, bias=t.attention_bias)
    for name in ("gate_proj", "up_proj", "down_proj"):
      _weights(table, f"{hf}.mlp.{name}", path + (name,), i, bias=False)
    for name in norms:
      _weights(table, f"{hf}.{name}", path + (name,), i, bias=False, kernel="scale", layout="same")
  return table


def _module_name(name: str) -> str:
  for old, new in NAMES:
    if name.startswith(old):
      return new + name[len(old):]
  return name


def _shapes(config: PaliGemmaConfig) -> dict:
  return jax.eval_shape(lambda: PaliGemma(config).init(jax.random.key(0), **example_inputs(config))["params"])


FILES = ("config.json", "tokenizer.json", hub.WEIGHTS, hub.INDEX, "*.safetensors")  # what a Hub id downloads


def checkpoint(init_from: str) -> hub.Checkpoint:
  """The PaliGemma checkpoint `config.model.init_from` names: a folder, or a Hub id (`nn/hub.py`)."""
  return hub.resolve(init_from, FILES, "config.model.init_from")


def plan(folder: str, config: PaliGemmaConfig, shapes) -> tuple[hub.Table, dict[str, hub.Tensor]]:
  """(the table, the headers) of the folder's weights for `PaliGemma(config)` of parameter `shapes`:
  every tensor the model has, none it has not (SigLIP's pooling head, kept by checkpoints with
  `vision_use_head`, aside: PaliGemma does not read it), each of its shape and of floating point,
  checked in the headers before a tensor is read (a tied `lm_head` is read now, to compare)."""
  where, stored = hub.headers(folder, what="PaliGemma checkpoint")
  tensors = {_module_name(key): tensor for key, tensor in stored.items()}
  tensors = {key: tensor for key, tensor in tensors.items() if not key.startswith(f"{VISION}.head.")}
  head, embedding = tensors.get("lm_head.weight"), tensors.get(f"{TEXT}.embed_tokens.weight")
  if config.tie_word_embeddings and head is not None:
    del tensors["lm_head.weight"]
    if embedding is None or head.shape != embedding.shape or not np.array_equal(
        hub.read_tensor(head), hub.read_tensor(embedding)):
      raise InputError(f"{where}: tensor lm_head.weight differs from the embedding config.json ties it to "
                       "(tie_word_embeddings true)")
  table = parameter_table(config)
  unexpected, missing = sorted(set(tensors) - set(table)), sorted(set(table) - set(tensors))
  if unexpected or missing:
    raise InputError(f"{where}: {len(unexpected)} tensors that PaliGemma has not, {len(missing)} missing "
                     f"(e.g. {', '.join((unexpected or missing)[:4])})")
  targets = {path: tuple(np.shape(leaf)) for path, leaf in hub.leaves(shapes).items()}
  for key, place in table.items():
    hub.check_tensor(where, key, tensors[key], hub.hf_shape(place, targets[place.path]))
  return table, tensors


def read_params(folder: str, config: PaliGemmaConfig | None = None) -> dict:
  """The Flax parameters of `PaliGemma(config)` from the folder's weights (`plan`)."""
  config = config or read_config(folder)
  shapes = _shapes(config)
  return hub.load(*plan(folder, config, shapes), shapes)


def read_tokenizer(folder: str, config: PaliGemmaConfig) -> tokenizers.Tokenizer:
  """The folder's `tokenizer.json`, checked to hold `<image>` at config.json's image_token_index,
  the begin / end-of-sequence ids and every `<loc>` / `<seg>` token."""
  if not os.path.lexists(os.path.join(folder, "tokenizer.json")):
    raise InputError(f"{folder}: not a PaliGemma checkpoint folder (no tokenizer.json)")
  path = hub.check(folder, "tokenizer.json", MAX_TOKENIZER_BYTES)
  try:
    tokenizer = tokenizers.Tokenizer.from_file(path)
  except Exception as e:  # tokenizers raises its own Exception for any malformed file
    raise InputError(f"{path}: not a tokenizers JSON file ({type(e).__name__})") from None
  if tokenizer.token_to_id(IMAGE_TOKEN) != config.image_token_index:
    raise InputError(f"{path}: {IMAGE_TOKEN} has id {tokenizer.token_to_id(IMAGE_TOKEN)}; config.json's "
                     f"image_token_index is {config.image_token_index}")
  t = config.text
  for name, token in (("bos_token_id", t.bos_token_id), ("eos_token_id", t.eos_token_id[0])):
    if tokenizer.id_to_token(token) is None:
      raise InputError(f"{path}: has no token {token} (config.json's text_config.{name})")
  absent = [token for token in EXTRA_TOKENS if tokenizer.token_to_id(token) is None]
  if absent:
    raise InputError(f"{path}: lacks {len(absent)} of PaliGemma's location / segmentation tokens (e.g. {absent[0]})")
  return tokenizer


def prompt_text(prompt: str, num_image_tokens: int, bos: str = "<bos>", image: str = IMAGE_TOKEN) -> str:
  """The prefix HF's PaliGemmaProcessor writes for one image and `prompt`: the image's tokens,
  `<bos>`, the prompt, a newline."""
  return image * num_image_tokens + bos + prompt + "\n"


def encode(tokenizer: tokenizers.Tokenizer, config: PaliGemmaConfig, prompts: Sequence[str],
           suffixes: Sequence[str] | None = None, length: int | None = None) -> Mapping[str, np.ndarray]:
  """input_ids / input_mask / prefix_mask [N, length] of one image and prompt a row (and, with
  `suffixes`, the text to produce, ended by `<eos>`: the causal part), padded on the right with
  the pad id to `length` (default: the longest row). A row longer than `length` is an InputError."""
  t = config.text
  bos, eos = tokenizer.id_to_token(t.bos_token_id), tokenizer.id_to_token(t.eos_token_id[0])
  texts = [prompt_text(p, config.vision.num_patches, bos, tokenizer.id_to_token(config.image_token_index))
           for p in prompts]
  prefixes = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
  ends = [[]] * len(prefixes)
  if suffixes is not None:
    ends = [e.ids for e in tokenizer.encode_batch([s + eos for s in suffixes], add_special_tokens=False)]
  length = length or max(len(a) + len(b) for a, b in zip(prefixes, ends))
  ids = np.full((len(prefixes), length), t.pad_token_id, np.int32)
  mask, prefix = np.zeros_like(ids), np.zeros_like(ids)
  for row, (a, b) in enumerate(zip(prefixes, ends)):
    if len(a) + len(b) > length:
      raise InputError(f"prompt {row}: {len(a) + len(b)} tokens with its image's {config.vision.num_patches}; "
                       f"rows hold {length}")
    ids[row, :len(a) + len(b)] = a + b
    mask[row, :len(a) + len(b)] = 1
    prefix[row, :len(a)] = 1
  return {"input_ids": ids, "input_mask": mask, "prefix_mask": prefix}
