"""A CLIPSeg checkpoint folder as it comes from the Hugging Face Hub, read as it is (no torch).

`config.json` (model_type "clipseg") -> `clipseg.CLIPSegConfig`; the safetensors weights of
`CLIPSegForImageSegmentation` (one file or a sharded index; every header checked before a tensor is read);
CLIP's byte-level BPE tokenizer from `tokenizer.json`, or built from `vocab.json` and
`merges.txt` as transformers' converter builds it. `parameter_table` is the one map from HF's
tensor names to the Flax parameters of `clipseg.py` (a layer's tensors go to row `i` of the
scanned stack); `save` writes such a folder (a random checkpoint without a download). Anything
that does not fit is an InputError naming the file and the field or tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping, Sequence

import jax
import numpy as np
import tokenizers
from safetensors import numpy as safetensors_numpy

from vqajax.core.errors import InputError
from vqajax.nn import hub
from vqajax.nn.activations import ACTIVATIONS
from vqajax.nn.clipseg import CLIPSeg, CLIPSegConfig, Tower, example_inputs

FILES = ("config.json", "*.safetensors", hub.INDEX, "tokenizer.json", "vocab.json", "merges.txt")
UNUSED = ("clip.logit_scale",)  # CLIP's contrastive temperature: read by no mask
MAX_TOKENIZER_BYTES = 64 * 2**20  # tokenizer.json, vocab.json, merges.txt
MAX_SIZE = 1 << 16  # no released CLIP has a width, depth, vocabulary or length near this
MAX_LAYERS = 256


def _field(raw: dict, name: str, default, path: str, where: str = ""):
  value = raw.get(name, default)
  kind = type(default)
  if kind is tuple:
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    value = tuple(value) if ok else value
  elif kind is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
  elif kind is int:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE
  else:
    ok = isinstance(value, kind)
  if not ok:
    raise InputError(f"{path}: field {where}{name} is {str(value)[:40]!r}; expected {kind.__name__} like {default!r}"
                     + (f" (0..{MAX_SIZE})" if kind is int else " (0..1)" if kind is float else ""))
  return kind(value) if kind is not tuple else value


def _tower(raw: dict, default: Tower, path: str, where: str) -> Tower:
  if not isinstance(raw, dict):
    raise InputError(f"{path}: field {where.rstrip('.')} must be an object")
  values = {f.name: _field(raw, f.name, getattr(default, f.name), path, where) for f in dataclasses.fields(Tower)}
  tower = Tower(**values)
  if tower.hidden_act not in ACTIVATIONS:
    raise InputError(f"{path}: field {where}hidden_act is {tower.hidden_act!r}; expected one of {sorted(ACTIVATIONS)}")
  if not 0 < tower.num_hidden_layers <= MAX_LAYERS or min(tower.hidden_size, tower.num_attention_heads) <= 0 \
      or tower.hidden_size % tower.num_attention_heads:
    raise InputError(f"{path}: {where.rstrip('.')} sizes do not fit (1..{MAX_LAYERS} layers, hidden_size a positive multiple "
                     "of num_attention_heads)")
  return tower


def read_config(folder: str) -> CLIPSegConfig:
  """The architecture of a CLIPSeg folder's `config.json`; HF's defaults fill the fields it omits."""
  path, raw = hub.read_config(folder, "clipseg", "CLIPSeg checkpoint")
  base = CLIPSegConfig()
  text, vision = raw.get("text_config") or {}, raw.get("vision_config") or {}
  text_tower = _tower(text, Tower(512, 2048, 12, 8), path, "text_config.")
  vision_tower = _tower(vision, Tower(768, 3072, 12, 12), path, "vision_config.")
  values = {name: _field(raw, name, getattr(base, name), path) for name in (
      "projection_dim", "extract_layers", "reduce_dim", "decoder_num_attention_heads", "decoder_intermediate_size",
      "conditional_layer", "use_complex_transposed_convolution")}
  values.update({name: _field(text, name, default, path, "text_config.") for name, default in (
      ("vocab_size", 49408), ("max_position_embeddings", 77), ("eos_token_id", 49407))})
  values.update({name: _field(vision, name, default, path, "vision_config.") for name, default in (
      ("image_size", 224), ("patch_size", 32), ("num_channels", 3))})
  config = CLIPSegConfig(text=text_tower, vision=vision_tower, **values)
  layers = config.extract_layers
  if not layers or not all(0 <= i < vision_tower.num_hidden_layers for i in layers):
    raise InputError(f"{path}: field extract_layers {list(layers)} must name vision layers "
                     f"0..{vision_tower.num_hidden_layers - 1}")
  if not 0 <= config.conditional_layer < len(layers) or config.reduce_dim % config.decoder_num_attention_heads:
    raise InputError(f"{path}: conditional_layer must index extract_layers and reduce_dim be a multiple of "
                     "decoder_num_attention_heads")
  step = config.patch_size // 4 if config.use_complex_transposed_convolution else config.patch_size
  if not 0 < config.patch_size <= config.image_size or step < 1 or min(config.vocab_size, config.projection_dim) < 1:
    raise InputError(f"{path}: sizes do not fit (patch_size in 1..image_size, at least 4 with "
                     "use_complex_transposed_convolution; positive vocab_size and projection_dim)")
  return config


def _layer(table: hub.Table, hf: str, path: tuple[str, ...], layer: int | None = None) -> None:
  for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
    hub.linear(table, f"{hf}.self_attn.{name}", path + (name,), layer)
  for name in ("fc1", "fc2"):
    hub.linear(table, f"{hf}.mlp.{name}", path + (name,), layer)
  for name in ("layer_norm1", "layer_norm2"):
    hub.layer_norm(table, f"{hf}.{name}", path + (name,), layer)


def parameter_table(config: CLIPSegConfig) -> hub.Table:
  """HF `CLIPSegForImageSegmentation` names -> Flax paths of `clipseg.CLIPSeg`."""
  t, v, Place = "clip.text_model", "clip.vision_model", hub.Place
  table: hub.Table = {
      f"{t}.embeddings.token_embedding.weight": Place(("text", "token_embedding", "embedding")),
      f"{t}.embeddings.position_embedding.weight": Place(("text", "position_embedding")),
      f"{v}.embeddings.class_embedding": Place(("vision", "class_embedding")),
      f"{v}.embeddings.patch_embedding.weight": Place(("vision", "patch_embedding", "kernel"), "conv"),
      f"{v}.embeddings.position_embedding.weight": Place(("vision", "position_embedding")),
  }
  hub.linear(table, "clip.text_projection", ("text", "text_projection"), bias=False)
  hub.linear(table, "clip.visual_projection", ("vision", "visual_projection"), bias=False)
  hub.layer_norm(table, f"{t}.final_layer_norm", ("text", "final_layer_norm"))
  hub.layer_norm(table, f"{v}.pre_layrnorm", ("vision", "pre_layrnorm"))
  hub.layer_norm(table, f"{v}.post_layernorm", ("vision", "post_layernorm"))
  for tower, hf, count in (("text", t, config.text.num_hidden_layers), ("vision", v, config.vision.num_hidden_layers)):
    for i in range(count):
      _layer(table, f"{hf}.encoder.layers.{i}", (tower, "layers"), i)
  for name in ("film_mul", "film_add"):
    hub.linear(table, f"decoder.{name}", ("decoder", name))
  for i in range(len(config.extract_layers)):
    hub.linear(table, f"decoder.reduces.{i}", ("decoder", f"reduces_{i}"))
    _layer(table, f"decoder.layers.{i}", ("decoder", f"layers_{i}"))
  head = "decoder.transposed_convolution"
  if config.use_complex_transposed_convolution:
    table[f"{head}.0.weight"] = Place(("decoder", "conv", "kernel"), "conv")
    table[f"{head}.0.bias"] = Place(("decoder", "conv", "bias"))
    for index, name in ((2, "upsample_0"), (4, "upsample_1")):
      table[f"{head}.{index}.weight"] = Place(("decoder", name, "kernel"), "convT")
      table[f"{head}.{index}.bias"] = Place(("decoder", name, "bias"))
  else:
    table[f"{head}.weight"] = Place(("decoder", "upsample", "kernel"), "convT")
    table[f"{head}.bias"] = Place(("decoder", "upsample", "bias"))
  return table


def _shapes(config: CLIPSegConfig) -> dict:
  inputs = example_inputs(config, text_length=1)
  return jax.eval_shape(lambda: CLIPSeg(config).init(jax.random.key(0), **inputs)["params"])


def checkpoint(init_from: str) -> hub.Checkpoint:
  """The CLIPSeg checkpoint `config.model.init_from` names: a folder, or a Hub id (`nn/hub.py`)."""
  return hub.resolve(init_from, FILES, "config.model.init_from")


def plan(folder: str, config: CLIPSegConfig, shapes) -> tuple[hub.Table, dict[str, hub.Tensor]]:
  """(the table, the headers) of the folder's weights for `CLIPSeg(config)` of parameter `shapes`:
  every tensor the model has, none it has not, each of its shape and of floating point, checked in
  the headers before a tensor is read."""
  where, stored = hub.headers(folder, what="CLIPSeg checkpoint")
  tensors = {key: tensor for key, tensor in stored.items() if key not in UNUSED}
  table = parameter_table(config)
  unexpected, missing = sorted(set(tensors) - set(table)), sorted(set(table) - set(tensors))
  if unexpected or missing:
    raise InputError(f"{where}: {len(unexpected)} tensors that CLIPSeg has not, {len(missing)} missing "
                     f"(e.g. {', '.join((unexpected or missing)[:4])})")
  targets = {path: tuple(np.shape(leaf)) for path, leaf in hub.leaves(shapes).items()}
  for key, place in table.items():
    hub.check_tensor(where, key, tensors[key], hub.hf_shape(place, targets[place.path]))
  return table, tensors


def read_params(folder: str, config: CLIPSegConfig | None = None) -> dict:
  """The Flax parameters of `CLIPSeg(config)` from the folder's weights (`plan`)."""
  config = config or read_config(folder)
  shapes = _shapes(config)
  return hub.load(*plan(folder, config, shapes), shapes)


def _clip_tokenizer(folder: str) -> tokenizers.Tokenizer:
  """CLIP's tokenizer from `vocab.json` + `merges.txt`, as transformers' CLIPConverter builds it."""
  vocab = hub.read_object(folder, "vocab.json", "CLIPSeg checkpoint", MAX_TOKENIZER_BYTES)
  if not os.path.lexists(os.path.join(folder, "merges.txt")):
    raise InputError(f"{folder}: no tokenizer.json, nor merges.txt beside vocab.json")
  with open(hub.check(folder, "merges.txt", MAX_TOKENIZER_BYTES), encoding="utf-8", errors="replace") as f:
    text = f.read()
  lines = [line for line in text.splitlines()[1:] if line]  # a version line first
  merges = [tuple(line.split()) for line in lines]
  if not all(len(m) == 2 for m in merges) or not all(isinstance(i, int) for i in vocab.values()):
    raise InputError(f"{folder}: merges.txt / vocab.json are not CLIP's BPE files")
  bpe = tokenizers.models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="</w>",
                              unk_token="<|endoftext|>", fuse_unk=False)
  tokenizer = tokenizers.Tokenizer(bpe)
  n = tokenizers.normalizers
  tokenizer.normalizer = n.Sequence([n.NFC(), n.Replace(tokenizers.Regex(r"\s+"), " "), n.Lowercase()])
  pattern = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
  p = tokenizers.pre_tokenizers
  tokenizer.pre_tokenizer = p.Sequence([p.Split(tokenizers.Regex(pattern), behavior="removed", invert=True),
                                        p.ByteLevel(add_prefix_space=False)])
  tokenizer.decoder = tokenizers.decoders.ByteLevel()
  ids = {token: vocab.get(token) for token in ("<|startoftext|>", "<|endoftext|>")}
  if None in ids.values():
    raise InputError(f"{folder}/vocab.json: lacks <|startoftext|> or <|endoftext|>")
  tokenizer.add_special_tokens(list(ids))
  tokenizer.post_processor = tokenizers.processors.RobertaProcessing(
      ("<|endoftext|>", ids["<|endoftext|>"]), ("<|startoftext|>", ids["<|startoftext|>"]),
      add_prefix_space=False, trim_offsets=False)
  return tokenizer


def read_tokenizer(folder: str) -> tokenizers.Tokenizer:
  """The folder's CLIP tokenizer (`tokenizer.json`, else vocab.json + merges.txt)."""
  if not os.path.lexists(os.path.join(folder, "tokenizer.json")):
    return _clip_tokenizer(folder)
  path = hub.check(folder, "tokenizer.json", MAX_TOKENIZER_BYTES)
  try:
    return tokenizers.Tokenizer.from_file(path)
  except Exception as e:  # tokenizers raises its own Exception for any malformed file
    raise InputError(f"{path}: not a tokenizers JSON file ({type(e).__name__})") from None


def encode(tokenizer: tokenizers.Tokenizer, texts: list[str], length: int, pad_id: int) -> Mapping[str, np.ndarray]:
  """input_ids / attention_mask [N, length] of `texts`: truncated to `length` (keeping the
  end-of-text token), padded on the right with `pad_id`."""
  ids = np.full((len(texts), length), pad_id, np.int32)
  mask = np.zeros((len(texts), length), np.int32)
  for row, encoding in enumerate(tokenizer.encode_batch(texts)):
    tokens = encoding.ids
    if len(tokens) > length:
      tokens = tokens[:length - 1] + tokens[-1:]
    ids[row, :len(tokens)] = tokens
    mask[row, :len(tokens)] = 1
  return {"input_ids": ids, "attention_mask": mask}


def save(folder: str, config: CLIPSegConfig, params: Mapping, vocab: Mapping[str, int],
         merges: Sequence[tuple[str, str]] = ()) -> list[str]:
  """Writes `CLIPSeg(config)`'s `params` into the existing `folder` as the Hub ships a checkpoint
  (the inverse of `read_config`, `read_params` and `read_tokenizer`): config.json (its towers under
  text_config / vision_config), model.safetensors in HF's names and layouts, and CLIP's BPE files
  (vocab.json, merges.txt); returns their paths."""
  raw = dataclasses.asdict(config)
  text = dict(raw.pop("text"), **{k: raw.pop(k) for k in ("vocab_size", "max_position_embeddings", "eos_token_id")})
  vision = dict(raw.pop("vision"), **{k: raw.pop(k) for k in ("image_size", "patch_size", "num_channels")})
  paths = [os.path.join(folder, name) for name in ("config.json", hub.WEIGHTS, "vocab.json", "merges.txt")]
  with open(paths[0], "w", encoding="utf-8") as f:
    json.dump({"model_type": "clipseg", "text_config": text, "vision_config": vision, **raw}, f, indent=2)
  safetensors_numpy.save_file(hub.hf_tensors(parameter_table(config), params), paths[1])
  with open(paths[2], "w", encoding="utf-8") as f:
    json.dump(dict(vocab), f, ensure_ascii=False)
  with open(paths[3], "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
  return paths
