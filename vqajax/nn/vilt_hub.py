"""A ViLT checkpoint folder as it comes from the Hugging Face Hub, read as it is (no torch).

`config.json` (model_type "vilt") -> `vilt.ViltConfig`; `model.safetensors` (or its sharded
index) through safetensors' numpy API; `tokenizer.json`, or `vocab.txt` with the lower-casing
`tokenizer_config.json` names, through the `tokenizers` library. `parameter_table` is the one
map from HF's tensor names to the Flax parameters of `vilt.py` (HF's per-layer tensors to rows of
the stacked layers), for `ViltModel` checkpoints (names without the `vilt.` prefix) and
`ViltForQuestionAnswering` ones (`vilt.*`, `classifier.*`); `hub_tensors` maps back. A folder with only `pytorch_model.bin` is refused with the command that
converts it. Anything that does not fit is an InputError naming the folder and the tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping, Sequence

import jax
import numpy as np
import tokenizers
from safetensors import SafetensorError
from safetensors import numpy as safetensors_numpy

from vqajax.core.errors import InputError
from vqajax.nn.vilt import ACTIVATIONS, ViltClassifier, ViltConfig, ViltMask, example_inputs

WEIGHTS, INDEX, TORCH_WEIGHTS = "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
OTHER_HEADS = ("mlm_score.", "itm_score.", "rank_output.")  # HF's pre-training / retrieval heads: read by no model here
BUFFERS = ("vilt.embeddings.text_embeddings.position_ids", "vilt.embeddings.text_embeddings.token_type_ids")
ANSWER_LAYER = "classifier.3."  # the VQA head's last layer: one output per label (`id2label`)


@dataclasses.dataclass(frozen=True)
class Loaded:
  """`init_from`'s result: the parameters, the top-level modules left as initialised (heads the
  checkpoint lacks), and the checkpoint's tensors no module read (other tasks' heads)."""
  params: dict
  initialised: tuple[str, ...]
  unused: tuple[str, ...]
  answers_found: int | None = None  # with `labels`: how many have an output in the checkpoint


def read_config(folder: str) -> ViltConfig:
  """The architecture of a ViLT folder's `config.json`; HF's defaults fill the fields it omits."""
  path = os.path.join(folder, "config.json")
  if not os.path.isdir(folder):
    raise InputError(f"{folder}: not a folder (expected a ViLT checkpoint folder with config.json and {WEIGHTS})")
  try:
    with open(path, encoding="utf-8") as f:
      raw = json.load(f)
  except FileNotFoundError:
    raise InputError(f"{folder}: not a ViLT checkpoint folder (no config.json)") from None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise InputError(f"{path}: not a readable JSON file ({type(e).__name__}: {e})") from None
  if not isinstance(raw, dict) or raw.get("model_type") != "vilt":
    found = raw.get("model_type") if isinstance(raw, dict) else type(raw).__name__
    raise InputError(f"{path}: not a ViLT checkpoint (model_type {found!r}, expected 'vilt')")
  values = {}
  for field in dataclasses.fields(ViltConfig):
    if field.name in raw and field.name != "labels":
      default = field.default
      value, kind = raw[field.name], type(default)
      ok = (isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
            else isinstance(value, kind) and (kind is bool or not isinstance(value, bool)))
      if not ok:
        raise InputError(f"{path}: field {field.name} is {value!r}; expected {kind.__name__} (e.g. {default!r})")
      values[field.name] = kind(value)
  labels = raw.get("id2label")
  if labels is None:
    labels = {str(i): f"LABEL_{i}" for i in range(raw.get("num_labels", 2))}
  if (not isinstance(labels, dict) or sorted(labels, key=str) != sorted(map(str, range(len(labels))), key=str)
      or not all(isinstance(v, str) for v in labels.values())):
    raise InputError(f"{path}: field id2label must map every id 0..n-1 to a string label")
  config = ViltConfig(**values, labels=tuple(labels[str(i)] for i in range(len(labels))))
  sizes = ("vocab_size", "type_vocab_size", "modality_type_vocab_size", "max_position_embeddings", "hidden_size",
           "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size", "patch_size", "num_channels")
  bad = [name for name in sizes if getattr(config, name) <= 0]
  if bad or config.hidden_size % config.num_attention_heads or config.patch_size > config.image_size:
    raise InputError(f"{path}: sizes do not fit ({', '.join(bad) or 'hidden_size, num_attention_heads, patch_size'}"
                     ": positive sizes, hidden_size a multiple of num_attention_heads, patch_size <= image_size)")
  if config.hidden_act not in ACTIVATIONS:
    raise InputError(f"{path}: field hidden_act is {config.hidden_act!r}; expected one of {sorted(ACTIVATIONS)}")
  return config


def _convert_command(folder: str) -> str:
  try:
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
      architecture = (json.load(f).get("architectures") or ["ViltModel"])[0]
  except (OSError, ValueError, AttributeError, IndexError):
    architecture = "ViltModel"
  return (f"python -c \"import transformers; transformers.{architecture}.from_pretrained('{folder}')"
          f".save_pretrained('{folder}')\" (needs torch and transformers; it adds {WEIGHTS})")


def read_tensors(folder: str) -> dict[str, np.ndarray]:
  """HF tensor name -> float32 array of the folder's safetensors weights (one file or shards)."""
  files = [WEIGHTS]
  index = os.path.join(folder, INDEX)
  if not os.path.exists(os.path.join(folder, WEIGHTS)) and os.path.exists(index):
    try:
      with open(index, encoding="utf-8") as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      raise InputError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
    if not all(isinstance(name, str) and os.path.basename(name) == name for name in files):
      raise InputError(f"{index}: weight_map must name files in the folder")
  elif not os.path.exists(os.path.join(folder, WEIGHTS)):
    if os.path.exists(os.path.join(folder, TORCH_WEIGHTS)):
      raise InputError(f"{folder}: has {TORCH_WEIGHTS} only; convert it to {WEIGHTS} once: {_convert_command(folder)}")
    raise InputError(f"{folder}: not a ViLT checkpoint folder (no {WEIGHTS})")
  tensors = {}
  for name in files:
    path = os.path.join(folder, name)
    try:
      tensors.update(safetensors_numpy.load_file(path))
    except (OSError, SafetensorError) as e:
      raise InputError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
  return {name: np.asarray(tensor, np.float32) for name, tensor in tensors.items()}


# HF tensor name -> (Flax parameter path, layout, layer): "dense" [out, in] -> [in, out]; "conv" [out, in, h, w] ->
# [h, w, in, out]; "same" as it is; `layer` the row of a stacked (scanned) parameter HF keeps per layer, else None.
Table = dict[str, tuple[tuple[str, ...], str, int | None]]


def _linear(table: Table, hf: str, path: tuple[str, ...], layer: int | None = None) -> None:
  table[f"{hf}.weight"] = (path + ("kernel",), "dense", layer)
  table[f"{hf}.bias"] = (path + ("bias",), "same", layer)


def _layer_norm(table: Table, hf: str, path: tuple[str, ...], layer: int | None = None) -> None:
  table[f"{hf}.weight"] = (path + ("scale",), "same", layer)
  table[f"{hf}.bias"] = (path + ("bias",), "same", layer)


def parameter_table(num_layers: int) -> Table:
  """HF `ViltForQuestionAnswering` names (`vilt.*` and `classifier.*`) -> Flax paths of
  `ViltClassifier` (`vilt` and `classifier`); HF's `vilt.encoder.layer.{i}.*` tensors are row i of
  the stacked `vilt/layers/*` arrays. A `ViltModel` checkpoint's names are the `vilt.*` ones
  without the prefix."""
  e, v = "vilt.embeddings", ("vilt",)
  table: Table = {
      f"{e}.text_embeddings.word_embeddings.weight": (
          v + ("text_embeddings", "word_embeddings", "embedding"), "same", None),
      f"{e}.text_embeddings.position_embeddings.weight": (v + ("text_embeddings", "position_embeddings"), "same", None),
      f"{e}.text_embeddings.token_type_embeddings.weight": (
          v + ("text_embeddings", "token_type_embeddings", "embedding"), "same", None),
      f"{e}.cls_token": (v + ("cls_token",), "same", None),
      f"{e}.position_embeddings": (v + ("position_embeddings",), "same", None),
      f"{e}.patch_embeddings.projection.weight": (v + ("patch_embeddings", "kernel"), "conv", None),
      f"{e}.patch_embeddings.projection.bias": (v + ("patch_embeddings", "bias"), "same", None),
      f"{e}.token_type_embeddings.weight": (v + ("modality_embeddings", "embedding"), "same", None),
  }
  _layer_norm(table, f"{e}.text_embeddings.LayerNorm", v + ("text_embeddings", "layer_norm"))
  path = v + ("layers",)
  for i in range(num_layers):
    hf = f"vilt.encoder.layer.{i}"
    _layer_norm(table, f"{hf}.layernorm_before", path + ("layernorm_before",), i)
    for name in ("query", "key", "value"):
      _linear(table, f"{hf}.attention.attention.{name}", path + (name,), i)
    _linear(table, f"{hf}.attention.output.dense", path + ("attention_output",), i)
    _layer_norm(table, f"{hf}.layernorm_after", path + ("layernorm_after",), i)
    _linear(table, f"{hf}.intermediate.dense", path + ("intermediate",), i)
    _linear(table, f"{hf}.output.dense", path + ("output",), i)
  _layer_norm(table, "vilt.layernorm", v + ("layernorm",))
  _linear(table, "vilt.pooler.dense", v + ("pooler",))
  _linear(table, "classifier.0", ("classifier", "dense_0"))
  _layer_norm(table, "classifier.1", ("classifier", "layer_norm"))
  _linear(table, "classifier.3", ("classifier", "dense_1"))
  return table


_TO_FLAX = {"same": lambda w: w, "dense": lambda w: w.T, "conv": lambda w: w.transpose(2, 3, 1, 0)}
_TO_HF = {"same": lambda w: w, "dense": lambda w: w.T, "conv": lambda w: w.transpose(3, 2, 0, 1)}
_TO_HF_SHAPE = {"same": lambda s: s, "dense": lambda s: s[::-1], "conv": lambda s: (s[3], s[2], s[0], s[1])}


def _leaves(params: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], np.ndarray]:
  out = {}
  for key, value in params.items():
    if isinstance(value, Mapping):
      out.update(_leaves(value, prefix + (key,)))
    else:
      out[prefix + (key,)] = value
  return out


def _num_layers(params: Mapping) -> int:
  """The depth of `params`' stacked layers (their leading axis)."""
  return int(np.shape(params["vilt"]["layers"]["query"]["kernel"])[0])


def hub_tensors(params: Mapping) -> dict[str, np.ndarray]:
  """The inverse of the table: HF's tensors (names with the `vilt.` prefix, HF's layouts, one per
  layer) of a `ViltClassifier`'s or `ViltMask`'s parameters, for every name the model has."""
  leaves = _leaves(params)
  return {name: np.ascontiguousarray(_TO_HF[layout](np.asarray(leaves[path] if layer is None else leaves[path][layer])))
          for name, (path, layout, layer) in parameter_table(_num_layers(params)).items() if path in leaves}


def _listed(names: Sequence[str], limit: int = 4) -> str:
  more = f", ... {len(names) - limit} more" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


def init_from(folder: str, params: Mapping, *, head: bool = True, labels: Sequence[str] | None = None) -> Loaded:
  """`params` (of a `ViltClassifier` or `ViltMask`, freshly initialised) with every tensor of
  the checkpoint in `folder` put in its place. With `labels` (the run's answers, one per
  output), the VQA head's last layer is matched by label: an answer the checkpoint's
  `id2label` has gets that output's weights, any other keeps its initial ones.

  The backbone must be complete; a head the checkpoint lacks (or every head with `head=False`,
  to fine-tune a VQA checkpoint for other labels) keeps its initial values and is named in
  `initialised`. Tensors of HF's other heads (masked LM, ITM, retrieval; the classifier with
  `head=False` or for a model without one) are named in `unused`; a tensor no ViLT model has,
  or one whose shape differs from the model's, is an InputError naming it.
  """
  if "vilt" not in params:
    raise ValueError("init_from takes a ViltClassifier's or ViltMask's parameters (the backbone under 'vilt')")
  hub_labels = read_config(folder).labels
  tensors = read_tensors(folder)
  if not any(name.startswith("vilt.") for name in tensors):  # a ViltModel checkpoint
    tensors = {f"vilt.{name}": tensor for name, tensor in tensors.items()}
  tensors = {name: tensor for name, tensor in tensors.items() if name not in BUFFERS}
  weights = os.path.join(folder, WEIGHTS if os.path.exists(os.path.join(folder, WEIGHTS)) else INDEX)
  table = parameter_table(_num_layers(params))
  targets = _leaves(params)
  unexpected = [name for name in tensors if name not in table and not name.startswith(OTHER_HEADS)]
  if unexpected:
    raise InputError(f"{weights}: {len(unexpected)} tensors that no ViLT model here has ({_listed(unexpected)})")
  loaded, used, missing = {}, set(), []
  for name, (path, layout, layer) in table.items():
    if path not in targets or (not head and path[0] != "vilt"):
      continue
    if name not in tensors:
      missing.append(name)
      continue
    shape = tuple(np.shape(targets[path]))
    value, expected = _TO_FLAX[layout](tensors[name]), shape if layer is None else shape[1:]
    if labels is not None and name.startswith(ANSWER_LAYER):
      value = _by_label(value, np.asarray(targets[path]), hub_labels, labels)
    if value.shape != expected:
      raise InputError(f"{weights}: tensor {name} has shape {tuple(tensors[name].shape)}; the model expects "
                       f"{_TO_HF_SHAPE[layout](expected)}")
    if layer is None:
      loaded[path] = np.ascontiguousarray(value)
    else:  # its row of the stack (every row is read: a missing one is refused below)
      loaded.setdefault(path, np.zeros(shape, np.float32))[layer] = value
    used.add(name)
  backbone = [name for name in missing if name.startswith("vilt.")]
  if backbone:
    raise InputError(f"{weights}: {len(backbone)} backbone tensors missing ({_listed(backbone)})")
  out: dict = {}
  for path, value in targets.items():
    node = out
    for part in path[:-1]:
      node = node.setdefault(part, {})
    node[path[-1]] = loaded.get(path, value)
  initialised = sorted({path[0] for path in targets if path not in loaded})
  found = None if labels is None else len(set(labels) & set(hub_labels))
  return Loaded(out, tuple(initialised), tuple(sorted(set(tensors) - used)), found)


def _by_label(value: np.ndarray, initial: np.ndarray, have: Sequence[str], want: Sequence[str]) -> np.ndarray:
  """`initial` (last axis: the outputs of `want`) with each output whose label the checkpoint
  has (`value`'s last axis: `have`) taken from it."""
  index = {label: i for i, label in enumerate(have)}
  out = np.array(initial, dtype=value.dtype)
  for i, label in enumerate(want):
    if label in index:
      out[..., i] = value[..., index[label]]
  return out


class Tokenizer:
  """The folder's BERT WordPiece tokenizer, padded and truncated to `max_length` tokens
  ([CLS] ... [SEP] [PAD] ...), as HF's tokenizer with padding="max_length", truncation=True."""

  def __init__(self, tokenizer: tokenizers.Tokenizer, max_length: int, pad_token: str):
    pad_id = tokenizer.token_to_id(pad_token)
    tokenizer.enable_padding(length=max_length, pad_id=pad_id, pad_token=pad_token)
    tokenizer.enable_truncation(max_length)
    self.tokenizer, self.max_length = tokenizer, max_length

  def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """input_ids, attention_mask, token_type_ids: [len(texts), max_length] int32."""
    encoded = self.tokenizer.encode_batch(list(texts))
    return {name: np.array([getattr(e, attr) for e in encoded], np.int32).reshape(len(encoded), self.max_length)
            for name, attr in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                               ("token_type_ids", "type_ids"))}


def read_tokenizer(folder: str, max_length: int = 40) -> Tokenizer:
  """The tokenizer of a ViLT folder (ViLT reads 40 tokens): `tokenizer.json` when present, else
  `vocab.txt` with BERT's normalisation as `tokenizer_config.json` sets it (lower case by default)."""
  settings_path = os.path.join(folder, "tokenizer_config.json")
  settings = {}
  if os.path.exists(settings_path):
    try:
      with open(settings_path, encoding="utf-8") as f:
        settings = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
      raise InputError(f"{settings_path}: not a readable JSON file ({type(e).__name__}: {e})") from None
    if not isinstance(settings, dict):
      raise InputError(f"{settings_path}: expected a JSON object")
  special = {name: settings.get(name, default) for name, default in (
      ("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("cls_token", "[CLS]"), ("pad_token", "[PAD]"),
      ("mask_token", "[MASK]"))}
  if not all(isinstance(token, str) for token in special.values()):
    raise InputError(f"{settings_path}: special tokens must be strings ({special})")
  path, vocab = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "vocab.txt")
  if not os.path.exists(path) and not os.path.exists(vocab):
    raise InputError(f"{folder}: no tokenizer (expected tokenizer.json or vocab.txt)")
  try:
    if os.path.exists(path):
      tokenizer = tokenizers.Tokenizer.from_file(path)
    else:
      path = vocab
      tokenizer = tokenizers.implementations.BertWordPieceTokenizer(
          vocab, clean_text=True, handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
          strip_accents=settings.get("strip_accents"), lowercase=settings.get("do_lower_case", True),
          **special)._tokenizer
  except Exception as e:  # the tokenizers library raises plain Exceptions
    raise InputError(f"{path}: not a readable tokenizer file ({type(e).__name__}: {e})") from None
  if tokenizer.token_to_id(special["pad_token"]) is None:
    raise InputError(f"{path}: the padding token {special['pad_token']!r} is not in the vocabulary")
  return Tokenizer(tokenizer, max_length, special["pad_token"])


def pretrained(folder: str, model: ViltClassifier | ViltMask, *, head: bool = True, seed: int = 0) -> Loaded:
  """`model`'s parameters initialised from `seed`, then `init_from(folder, ..., head=head)`."""
  params = jax.jit(model.init)(jax.random.key(seed), **example_inputs(model.config))["params"]
  return init_from(folder, params, head=head)
