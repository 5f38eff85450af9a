"""A ViLT checkpoint as it comes from the Hugging Face Hub (a folder, or a Hub id through
`nn/hub.py`), read as it is (no torch) and as hostile input: every file regular and bounded, every
config.json field checked against a bound (`CONFIG_FIELDS`), the weights' safetensors headers
(names, dtypes, shapes, offsets) checked against the model before a byte of them is read.

`config.json` (model_type "vilt") -> `vilt.ViltConfig`; `model.safetensors` (or its sharded
index) through safetensors (`plan`, then `Plan.load`); `tokenizer.json`, or `vocab.txt` with the
lower-casing `tokenizer_config.json` names, through the `tokenizers` library. `parameter_table`
is the one map from HF's tensor names to the Flax parameters of `vilt.py`, for `ViltModel`
checkpoints (names without the `vilt.` prefix) and `ViltForQuestionAnswering` ones (`vilt.*`,
`classifier.*`). A folder with only `pytorch_model.bin` is refused with the command that
converts it. Anything that does not fit is an InputError naming the file, the field or tensor
and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import Mapping, Sequence

import jax
import numpy as np
import tokenizers

from vqajax.core.config import FLAG, Rule, integer, number, one_of
from vqajax.core.errors import InputError
from vqajax.nn import hub
from vqajax.nn.activations import ACTIVATIONS
from vqajax.nn.vilt import ViltClassifier, ViltConfig, ViltMask, example_inputs

WEIGHTS, INDEX = hub.WEIGHTS, hub.INDEX
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
FILES = ("config.json", "*.safetensors", INDEX, *TOKENIZER_FILES)  # what a ViLT checkpoint is read from
OTHER_HEADS = ("mlm_score.", "itm_score.", "rank_output.")  # HF's pre-training / retrieval heads: read by no model here
BUFFERS = ("vilt.embeddings.text_embeddings.position_ids", "vilt.embeddings.text_embeddings.token_type_ids")
ANSWER_LAYER = "classifier.3."  # the VQA head's last layer: one output per label (`id2label`)
ARCHITECTURES = ("ViltModel", "ViltForQuestionAnswering", "ViltForMaskedLM", "ViltForImagesAndTextClassification",
                 "ViltForImageAndTextRetrieval", "ViltForTokenClassification")  # transformers' ViLT classes
MAX_JSON_BYTES = hub.MAX_JSON_BYTES
MAX_TOKENIZER_BYTES = 64 * 2**20  # tokenizer.json, vocab.txt
MAX_LABELS = 100_000              # id2label / num_labels (VQA v2's head: 3129)
# config.json's fields and their bounds: ViLT-B/32 is 30522 words, 40 tokens, 768 wide, 12 layers of 12 heads,
# 3072 inner, 384 px in 32 px patches; the bounds let in far bigger models and nothing that cannot be built.
CONFIG_FIELDS: dict[str, Rule] = {
    "vocab_size": integer(1, 1_000_000), "type_vocab_size": integer(1, 1024),
    "modality_type_vocab_size": integer(1, 1024), "max_position_embeddings": integer(1, 4096),
    "hidden_size": integer(1, 16384), "num_hidden_layers": integer(1, 256), "num_attention_heads": integer(1, 256),
    "intermediate_size": integer(1, 65536), "hidden_act": one_of(*ACTIVATIONS),
    "hidden_dropout_prob": number(0, 1, hi_open=True), "attention_probs_dropout_prob": number(0, 1, hi_open=True),
    "layer_norm_eps": number(0, 1, lo_open=True, hi_open=True), "image_size": integer(1, 8192),
    "patch_size": integer(1, 8192), "num_channels": Rule("3 (RGB pictures)", lambda v: type(v) is int and v == 3),
    "qkv_bias": FLAG, "max_image_length": integer(-1, 1_000_000), "num_images": integer(-1, 1_000_000),
}
NUM_LABELS = integer(1, MAX_LABELS)


@dataclasses.dataclass(frozen=True)
class Loaded:
  """`init_from`'s result: the parameters, the top-level modules left as initialised (heads the
  checkpoint lacks), and the checkpoint's tensors no module read (other tasks' heads)."""
  params: dict
  initialised: tuple[str, ...]
  unused: tuple[str, ...]
  answers_found: int | None = None  # with `labels`: how many have an output in the checkpoint


def checkpoint(init_from: str) -> hub.Checkpoint:
  """The ViLT checkpoint `config.model.init_from` names: a folder, or a Hub id (`nn/hub.py`)."""
  return hub.resolve(init_from, FILES, "config.model.init_from")


def read_config(folder: str) -> ViltConfig:
  """The architecture of a ViLT folder's `config.json`; HF's defaults fill the fields it omits."""
  path = os.path.join(folder, "config.json")
  if not os.path.isdir(folder):
    raise InputError(f"{folder}: not a folder (expected a ViLT checkpoint folder with config.json and {WEIGHTS})")
  if not os.path.lexists(path):
    raise InputError(f"{folder}: not a ViLT checkpoint folder (no config.json)")
  raw = hub.read_json(folder, "config.json", MAX_JSON_BYTES)
  if not isinstance(raw, dict) or raw.get("model_type") != "vilt":
    found = raw.get("model_type") if isinstance(raw, dict) else type(raw).__name__
    raise InputError(f"{path}: not a ViLT checkpoint (model_type {found!r:.80}, expected 'vilt')")
  values = {}
  for name, rule in CONFIG_FIELDS.items():
    if name in raw:
      _check(path, name, raw[name], rule)
      values[name] = type(getattr(ViltConfig, name))(raw[name])  # an integer where a float goes: as a float
  config = ViltConfig(**values, labels=_labels(path, raw))
  problem = misfit(config)
  if problem:
    raise InputError(f"{path}: {problem}")
  return config


def _check(path: str, name: str, value, rule: Rule) -> None:
  if not rule.ok(value):
    raise InputError(f"{path}: field {name}: expected {rule.expected}, got {value!r:.80}")


def _labels(path: str, raw: dict) -> tuple[str, ...]:
  """`id2label` in id order; without it, num_labels "LABEL_i" (HF's)."""
  labels = raw.get("id2label")
  if labels is None:
    count = raw.get("num_labels", 2)
    _check(path, "num_labels", count, NUM_LABELS)
    return tuple(f"LABEL_{i}" for i in range(count))
  if (not isinstance(labels, dict) or not 0 < len(labels) <= MAX_LABELS
      or set(labels) != {str(i) for i in range(len(labels))} or not all(isinstance(v, str) for v in labels.values())):
    raise InputError(f"{path}: field id2label: expected an object mapping every id 0..n-1 (n from 1 to {MAX_LABELS}) "
                     "to a string label")
  return tuple(labels[str(i)] for i in range(len(labels)))


def misfit(config: ViltConfig) -> str | None:
  """What in `config`'s sizes cannot be built together, or None."""
  if config.hidden_size % config.num_attention_heads:
    return (f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
            f"{config.num_attention_heads} (each head reads an equal share)")
  if config.patch_size > config.image_size:
    return f"patch_size {config.patch_size} is larger than image_size {config.image_size} (no whole patch)"
  return None


def _convert_command(folder: str, name: str) -> str:
  """The shell command (its values quoted) that writes `name`'s weights as safetensors: into the
  folder itself, or for a Hub id (`ORG/NAME@COMMIT`) into a new folder NAME here."""
  try:
    architecture = (hub.read_json(folder, "config.json", MAX_JSON_BYTES).get("architectures") or ["ViltModel"])[0]
  except (InputError, AttributeError, IndexError, KeyError, TypeError):
    architecture = "ViltModel"
  if architecture not in ARCHITECTURES:  # a name from the file goes into code only if it is one of these
    architecture = "ViltModel"
  if name == folder:
    source, out = json.dumps(folder), json.dumps(folder)
  else:
    repo, _, revision = name.partition("@")
    source, out = f"{json.dumps(repo)}, revision={json.dumps(revision)}", json.dumps(repo.split("/")[1])
  code = f"import transformers; transformers.{architecture}.from_pretrained({source}).save_pretrained({out})"
  return f"python -c {shlex.quote(code)}"


def headers(folder: str, name: str | None = None) -> tuple[str, dict[str, hub.Tensor]]:
  """The folder's safetensors headers (`hub.headers`), a `pytorch_model.bin`-only one refused with
  the command that converts it."""
  return hub.headers(folder, name, _convert_command, "ViLT checkpoint")


def parameter_table(num_layers: int) -> hub.Table:
  """HF `ViltForQuestionAnswering` names (`vilt.*` and `classifier.*`) -> Flax paths of
  `ViltClassifier` (`vilt` and `classifier`); HF's `vilt.encoder.layer.{i}.*` tensors are row i of
  the stacked `vilt/layers/*` arrays. A `ViltModel` checkpoint's names are the `vilt.*` ones
  without the prefix."""
  e, v, Place = "vilt.embeddings", ("vilt",), hub.Place
  table: hub.Table = {
      f"{e}.text_embeddings.word_embeddings.weight": Place(v + ("text_embeddings", "word_embeddings", "embedding")),
      f"{e}.text_embeddings.position_embeddings.weight": Place(v + ("text_embeddings", "position_embeddings")),
      f"{e}.text_embeddings.token_type_embeddings.weight": Place(
          v + ("text_embeddings", "token_type_embeddings", "embedding")),
      f"{e}.cls_token": Place(v + ("cls_token",)),
      f"{e}.position_embeddings": Place(v + ("position_embeddings",)),
      f"{e}.patch_embeddings.projection.weight": Place(v + ("patch_embeddings", "kernel"), "conv"),
      f"{e}.patch_embeddings.projection.bias": Place(v + ("patch_embeddings", "bias")),
      f"{e}.token_type_embeddings.weight": Place(v + ("modality_embeddings", "embedding")),
  }
  hub.layer_norm(table, f"{e}.text_embeddings.LayerNorm", v + ("text_embeddings", "layer_norm"))
  path = v + ("layers",)
  for i in range(num_layers):
    hf = f"vilt.encoder.layer.{i}"
    hub.layer_norm(table, f"{hf}.layernorm_before", path + ("layernorm_before",), i)
    for name in ("query", "key", "value"):
      hub.linear(table, f"{hf}.attention.attention.{name}", path + (name,), i)
    hub.linear(table, f"{hf}.attention.output.dense", path + ("attention_output",), i)
    hub.layer_norm(table, f"{hf}.layernorm_after", path + ("layernorm_after",), i)
    hub.linear(table, f"{hf}.intermediate.dense", path + ("intermediate",), i)
    hub.linear(table, f"{hf}.output.dense", path + ("output",), i)
  hub.layer_norm(table, "vilt.layernorm", v + ("layernorm",))
  hub.linear(table, "vilt.pooler.dense", v + ("pooler",))
  hub.linear(table, "classifier.0", ("classifier", "dense_0"))
  hub.layer_norm(table, "classifier.1", ("classifier", "layer_norm"))
  hub.linear(table, "classifier.3", ("classifier", "dense_1"))
  return table


def _num_layers(params: Mapping) -> int:
  """The depth of `params`' stacked layers (their leading axis)."""
  return int(np.shape(params["vilt"]["layers"]["query"]["kernel"])[0])


def hub_tensors(params: Mapping) -> dict[str, np.ndarray]:
  """The inverse of the table: HF's tensors (names with the `vilt.` prefix, HF's layouts, one per
  layer) of a `ViltClassifier`'s or `ViltMask`'s parameters, for every name the model has."""
  return hub.hf_tensors(parameter_table(_num_layers(params)), params)


def _listed(names: Sequence[str], limit: int = 4) -> str:
  more = f", ... {len(names) - limit} more" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


@dataclasses.dataclass(frozen=True)
class Plan:
  """Where each tensor of a checkpoint goes in a model's parameters, checked against their
  shapes from the headers alone (`plan`); `load` reads the tensors."""
  reads: dict[str, hub.Place]      # HF name -> where it goes
  tensors: dict[str, hub.Tensor]   # HF name -> its header (the name as stored there)
  hub_labels: tuple[str, ...]
  labels: tuple[str, ...] | None
  initialised: tuple[str, ...]
  unused: tuple[str, ...]
  answers_found: int | None

  def load(self, params: Mapping) -> dict:
    """`params` with the checkpoint's tensors in their places (float32)."""
    def by_label(key, value, initial):
      if self.labels is None or not key.startswith(ANSWER_LAYER):
        return value
      return _by_label(value, np.asarray(initial), self.hub_labels, self.labels)
    return hub.load(self.reads, self.tensors, params, by_label)


def plan(folder: str, params: Mapping, *, head: bool = True, labels: Sequence[str] | None = None,
         name: str | None = None) -> Plan:
  """Where the checkpoint in `folder` goes in `params` (of a `ViltClassifier` or `ViltMask`;
  their shapes are enough: `jax.eval_shape`'s), every file it will read checked. With `labels`
  (the run's answers, one per output), the VQA head's last layer is matched by label: an answer
  the checkpoint's `id2label` has gets that output's weights, any other keeps its initial ones.

  The backbone must be complete; a head the checkpoint lacks (or every head with `head=False`,
  to fine-tune a VQA checkpoint for other labels) keeps its initial values and is named in
  `initialised`. Tensors of HF's other heads (masked LM, ITM, retrieval; the classifier with
  `head=False` or for a model without one) are named in `unused`; a tensor no ViLT model has,
  one whose shape differs from the model's or one not of floating point is an InputError
  naming it. `name`: what the user named the checkpoint (a Hub id), for messages.
  """
  if "vilt" not in params:
    raise ValueError("plan takes a ViltClassifier's or ViltMask's parameters (the backbone under 'vilt')")
  hub_labels = read_config(folder).labels
  weights, stored = headers(folder, name)
  prefix = "" if any(key.startswith("vilt.") for key in stored) else "vilt."  # "": a ViltModel checkpoint
  tensors = {prefix + key: tensor for key, tensor in stored.items() if prefix + key not in BUFFERS}  # by HF name
  table = parameter_table(_num_layers(params))
  targets = {path: tuple(np.shape(value)) for path, value in hub.leaves(params).items()}
  unexpected = [key for key in tensors if key not in table and not key.startswith(OTHER_HEADS)]
  if unexpected:
    raise InputError(f"{weights}: {len(unexpected)} tensors that no ViLT model here has ({_listed(unexpected)})")
  reads, missing = {}, []
  for key, place in table.items():
    if place.path not in targets or (not head and place.path[0] != "vilt"):
      continue
    if key not in tensors:
      missing.append(key)
      continue
    expected = targets[place.path]
    if labels is not None and key.startswith(ANSWER_LAYER):  # the label axis: the checkpoint's labels
      expected = expected[:-1] + (len(hub_labels),)
    hub.check_tensor(weights, key, tensors[key], hub.hf_shape(place, expected))
    reads[key] = place
  backbone = [key for key in missing if key.startswith("vilt.")]
  if backbone:
    raise InputError(f"{weights}: {len(backbone)} backbone tensors missing ({_listed(backbone)})")
  read_paths = {place.path for place in reads.values()}
  return Plan(reads, {key: tensors[key] for key in reads}, hub_labels, None if labels is None else tuple(labels),
              initialised=tuple(sorted({path[0] for path in targets if path not in read_paths})),
              unused=tuple(sorted(set(tensors) - set(reads))),
              answers_found=None if labels is None else len(set(labels) & set(hub_labels)))


def init_from(folder: str, params: Mapping, *, head: bool = True, labels: Sequence[str] | None = None) -> Loaded:
  """`params` (freshly initialised) with the checkpoint in `folder` in its place (`plan`)."""
  found = plan(folder, params, head=head, labels=labels)
  return Loaded(found.load(params), found.initialised, found.unused, found.answers_found)


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


def read_tokenizer(folder: str, max_length: int = 40, vocab_size: int | None = None) -> Tokenizer:
  """The tokenizer of a ViLT folder (ViLT reads 40 tokens): `tokenizer.json` when present, else
  `vocab.txt` with BERT's normalisation as `tokenizer_config.json` sets it (lower case by default).
  With `vocab_size` (config.json's: the word embedding table's rows), every id must be below it."""
  settings = {}
  if os.path.lexists(os.path.join(folder, "tokenizer_config.json")):
    settings = hub.read_json(folder, "tokenizer_config.json", MAX_JSON_BYTES)
    if not isinstance(settings, dict):
      raise InputError(f"{os.path.join(folder, 'tokenizer_config.json')}: expected a JSON object")
  special = {name: settings.get(name, default) for name, default in (
      ("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("cls_token", "[CLS]"), ("pad_token", "[PAD]"),
      ("mask_token", "[MASK]"))}
  if not all(isinstance(token, str) for token in special.values()):
    raise InputError(f"{os.path.join(folder, 'tokenizer_config.json')}: special tokens must be strings "
                     f"({special!r:.200})")
  name = next((name for name in ("tokenizer.json", "vocab.txt") if os.path.lexists(os.path.join(folder, name))), None)
  if name is None:
    raise InputError(f"{folder}: no tokenizer (expected tokenizer.json or vocab.txt)")
  path = hub.check(folder, name, MAX_TOKENIZER_BYTES)
  try:
    if name == "tokenizer.json":
      tokenizer = tokenizers.Tokenizer.from_file(path)
    else:
      tokenizer = tokenizers.implementations.BertWordPieceTokenizer(
          path, clean_text=True, handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
          strip_accents=settings.get("strip_accents"), lowercase=settings.get("do_lower_case", True),
          **special)._tokenizer
  except Exception as e:  # the tokenizers library raises plain Exceptions
    raise InputError(f"{path}: not a readable tokenizer file ({type(e).__name__}: {str(e):.200})") from None
  if tokenizer.token_to_id(special["pad_token"]) is None:
    raise InputError(f"{path}: the padding token {special['pad_token']!r:.80} is not in the vocabulary")
  top = max(tokenizer.get_vocab(with_added_tokens=True).values())
  if vocab_size is not None and top >= vocab_size:
    raise InputError(f"{path}: token id {top} is past config.json's vocab_size {vocab_size} (the word embedding "
                     "table's rows); expected a tokenizer of that checkpoint")
  return Tokenizer(tokenizer, max_length, special["pad_token"])


def pretrained(folder: str, model: ViltClassifier | ViltMask, *, head: bool = True, seed: int = 0) -> Loaded:
  """`model`'s parameters initialised from `seed`, then `init_from(folder, ..., head=head)`."""
  params = jax.jit(model.init)(jax.random.key(seed), **example_inputs(model.config))["params"]
  return init_from(folder, params, head=head)
