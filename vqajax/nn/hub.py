"""Pretrained checkpoints (`config.model.init_from` of every model that starts from one): a local
folder, or a Hugging Face Hub model id resolved as `from_pretrained` resolves one, and the
files of either read as hostile input.

`resolve("ORG/NAME")` (or `ORG/NAME@REVISION`: a branch, tag or commit, as `from_pretrained`'s
`revision=`) goes through `huggingface_hub.snapshot_download`: the user's cache (`HF_HOME`,
`HF_HUB_CACHE`), `HF_HUB_OFFLINE=1` for the cache alone, the user's token (`hf auth login`,
`HF_TOKEN`) for gated repositories, only the files the model reads (`files`, its
`allow_patterns`). Its `name`, what a run records, is `ORG/NAME@COMMIT`: the commit the
revision was, never the cache's path, so a rerun or evaluation reads the same files. An
existing folder is taken as it is (first, as `from_pretrained` does).

`check` and `read_json` read a checkpoint's files as every input is read (`core/official_files`):
regular files only (a fifo or device could block or never end) of a bounded size. `headers` reads
the weights' safetensors headers (one file or a sharded index) without a byte of the tensors;
a model's `Table` maps HF's tensor names to its Flax parameters (a layer's tensor to a row of a
scanned stack), and `load` reads the tensors a plan chose into their places.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from safetensors import SafetensorError, safe_open

from vqajax.core.errors import InputError
from vqajax.core.official_files import check_file, load_json, read_bytes

WEIGHTS, INDEX, TORCH_WEIGHTS = "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
MAX_JSON_BYTES = 16 * 2**20  # config.json, tokenizer_config.json, a shard index
FLOATS = {"F16": np.float16, "BF16": "bfloat16", "F32": np.float32, "F64": np.float64}  # the dtypes read (as float32)
# huggingface_hub's rule for a repo id (letters, digits, "-", "_", "."; 96 characters)
REPO_ID = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}", re.ASCII)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  folder: str  # its files on this machine
  name: str    # what a run records: the folder as given, or ORG/NAME@COMMIT


_RESOLVED: dict[tuple[str, tuple[str, ...]], Checkpoint] = {}  # an id and its pinned name: one download a process


def resolve(value: str, files: Sequence[str], field: str) -> Checkpoint:
  """The checkpoint `value` names (`field`: the config field, for messages): an existing folder,
  else a Hub id downloaded (or found in the cache) with the files matching `files`."""
  if os.path.isdir(value):
    return Checkpoint(value, value)
  key = (value, tuple(files))
  if key not in _RESOLVED:
    checkpoint = _download(value, tuple(files), field)
    _RESOLVED[key] = _RESOLVED[(checkpoint.name, key[1])] = checkpoint
  return _RESOLVED[key]


def _download(value: str, files: tuple[str, ...], field: str) -> Checkpoint:
  import huggingface_hub  # only where an id is named
  from huggingface_hub import constants, errors
  repo, at, revision = value.partition("@")
  not_an_id = InputError(f"{field} {value!r:.200}: no such folder, nor a Hugging Face Hub model id "
                         "(ORG/NAME or ORG/NAME@REVISION)")
  if not REPO_ID.fullmatch(repo) or (at and not revision):
    raise not_an_id
  where = f"{field} {value}"
  try:
    folder = huggingface_hub.snapshot_download(repo, revision=revision or None, allow_patterns=list(files))
  except errors.HFValidationError:  # huggingface_hub's finer rules ("--", "..", a leading "-")
    raise not_an_id from None
  except errors.LocalEntryNotFoundError:
    reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
    raise InputError(f"{where}: no such folder, and the Hub model is not in the Hugging Face cache "
                     f"({constants.HF_HUB_CACHE}) while {reason}; download it where the Hub can be reached "
                     f"(hf download {repo}{f' --revision {revision}' if revision else ''}), or name a folder") from None
  except errors.GatedRepoError:
    raise InputError(f"{where}: a gated model: accept its terms on https://huggingface.co/{repo} and log in "
                     "(hf auth login, or HF_TOKEN)") from None
  except errors.RepositoryNotFoundError:
    raise InputError(f"{where}: no such folder, nor a Hub model (a private one needs hf auth login or HF_TOKEN)"
                     ) from None
  except errors.RevisionNotFoundError:
    raise InputError(f"{where}: the Hub model has no revision {revision!r}") from None
  except (errors.HfHubHTTPError, OSError) as e:
    raise InputError(f"{where}: cannot download it ({type(e).__name__}: {str(e).splitlines()[0]:.200})") from None
  return Checkpoint(folder, f"{repo}@{os.path.basename(folder)}")  # the cache's snapshots/COMMIT


def check(folder: str, name: str, max_bytes: int | None = None) -> str:
  """The path of the checkpoint file `folder/name`, a regular file (of at most `max_bytes`), for
  a library that opens it itself."""
  path = os.path.join(folder, name)
  check_file(path, max_bytes)
  return path


def read_json(folder: str, name: str, max_bytes: int) -> Any:
  """The JSON of the checkpoint file `folder/name`, a regular file of at most `max_bytes`."""
  path = os.path.join(folder, name)
  return load_json(path, read_bytes(path, max_bytes))


def read_object(folder: str, name: str, what: str, max_bytes: int = MAX_JSON_BYTES) -> dict:
  """The JSON object of the checkpoint file `folder/name` (`what`: the checkpoint's kind, for messages)."""
  path = os.path.join(folder, name)
  if not os.path.lexists(path):
    raise InputError(f"{folder}: not a {what} folder (no {name})")
  raw = read_json(folder, name, max_bytes)
  if not isinstance(raw, dict):
    raise InputError(f"{path}: expected a JSON object, got {type(raw).__name__}")
  return raw


def read_config(folder: str, model_type: str, what: str) -> tuple[str, dict]:
  """(its path, the object) of the folder's `config.json`, whose `model_type` must be `model_type`."""
  if not os.path.isdir(folder):
    raise InputError(f"{folder}: not a folder (expected a {what} folder with config.json)")
  path = os.path.join(folder, "config.json")
  raw = read_object(folder, "config.json", what)
  if raw.get("model_type") != model_type:
    raise InputError(f"{path}: not a {what} (model_type {raw.get('model_type')!r:.80}, expected {model_type!r})")
  return path, raw


@dataclasses.dataclass(frozen=True)
class Tensor:
  """A tensor as a safetensors header gives it."""
  file: str
  name: str
  dtype: str
  shape: tuple[int, ...]


def headers(folder: str, name: str | None = None, convert: Callable[[str, str], str] | None = None,
            what: str = "checkpoint") -> tuple[str, dict[str, Tensor]]:
  """(the weights file or shard index, for messages; tensor name as stored -> `Tensor`) of the folder's
  safetensors headers, checked by safetensors (offsets within the file, covering it); no tensor
  is read. `name`: the checkpoint's name (`Checkpoint.name`); `convert(folder, name)`: the command
  that writes a `pytorch_model.bin`-only checkpoint as safetensors, for the message; `what` the
  checkpoint's kind, for messages."""
  single, index = os.path.join(folder, WEIGHTS), os.path.join(folder, INDEX)
  command = lambda source: f"{convert(folder, source)} (needs torch and transformers)" if convert else "with transformers"
  if os.path.lexists(single):
    where, files = single, [WEIGHTS]
  elif os.path.lexists(index):
    weight_map = read_json(folder, INDEX, MAX_JSON_BYTES)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) and file and os.path.basename(file) == file and file != ".."
        for file in weight_map.values()):
      raise InputError(f'{index}: expected a safetensors index, {{"weight_map": {{tensor: a file in the folder}}}}')
    where, files = index, sorted(set(weight_map.values()))
  elif name not in (None, folder):  # a Hub id, whose download skips pytorch_model.bin
    raise InputError(f"{name}: has no {WEIGHTS} (nor {INDEX}); if it has {TORCH_WEIGHTS} only, convert it once: "
                     f"{command(name)}, and start from that folder")
  elif os.path.lexists(os.path.join(folder, TORCH_WEIGHTS)):
    raise InputError(f"{folder}: has {TORCH_WEIGHTS} only; convert it to {WEIGHTS} once: {command(folder)}")
  else:
    raise InputError(f"{folder}: not a {what} (no {WEIGHTS} nor {INDEX})")
  tensors: dict[str, Tensor] = {}
  for file in files:
    path = check(folder, file)  # a regular file; its size is checked against its header
    try:
      with safe_open(path, framework="numpy") as f:
        for key in f.keys():
          if key in tensors:
            raise InputError(f"{path}: tensor {key} is in {tensors[key].file} too")
          piece = f.get_slice(key)
          tensors[key] = Tensor(path, key, piece.get_dtype(), tuple(piece.get_shape()))
    except (OSError, SafetensorError) as e:
      raise InputError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
  return where, tensors


@dataclasses.dataclass(frozen=True)
class Place:
  """Where an HF tensor goes: the Flax parameter `path`, its `layout` (`LAYOUTS`), and `layer`, the
  row of a stacked (scanned) parameter that HF keeps one tensor a layer of, else None."""
  path: tuple[str, ...]
  layout: str = "same"
  layer: int | None = None


Table = dict[str, Place]  # HF tensor name -> its place


@dataclasses.dataclass(frozen=True)
class Layout:
  to_flax: Callable[[np.ndarray], np.ndarray]
  to_hf: Callable[[np.ndarray], np.ndarray]
  hf_shape: Callable[[tuple[int, ...]], tuple[int, ...]]  # the HF shape of a Flax one


LAYOUTS = {  # "dense" [out, in] <-> [in, out]; "conv" [out, in, h, w] <-> [h, w, in, out];
  # "convT" (ConvTranspose2d) [in, out, h, w] <-> [in, h, w, out]
  "same": Layout(lambda w: w, lambda w: w, lambda s: s),
  "dense": Layout(lambda w: w.T, lambda w: w.T, lambda s: s[::-1]),
  "conv": Layout(lambda w: w.transpose(2, 3, 1, 0), lambda w: w.transpose(3, 2, 0, 1), lambda s: (s[3], s[2], s[0], s[1])),
  "convT": Layout(lambda w: w.transpose(0, 2, 3, 1), lambda w: w.transpose(0, 3, 1, 2), lambda s: (s[0], s[3], s[1], s[2])),
}


def linear(table: Table, hf: str, path: tuple[str, ...], layer: int | None = None, bias: bool = True) -> None:
  table[f"{hf}.weight"] = Place(path + ("kernel",), "dense", layer)
  if bias:
    table[f"{hf}.bias"] = Place(path + ("bias",), "same", layer)


def layer_norm(table: Table, hf: str, path: tuple[str, ...], layer: int | None = None) -> None:
  table[f"{hf}.weight"] = Place(path + ("scale",), "same", layer)
  table[f"{hf}.bias"] = Place(path + ("bias",), "same", layer)


def leaves(params: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
  """{path: leaf} of a nested dict of parameters."""
  out = {}
  for key, value in params.items():
    if isinstance(value, Mapping):
      out.update(leaves(value, prefix + (key,)))
    else:
      out[prefix + (key,)] = value
  return out


def nested(flat: Mapping[tuple[str, ...], Any]) -> dict:
  """The nested dict of {path: leaf}."""
  out: dict = {}
  for path, value in flat.items():
    node = out
    for part in path[:-1]:
      node = node.setdefault(part, {})
    node[path[-1]] = value
  return out


def hf_shape(place: Place, flax_shape: tuple[int, ...]) -> tuple[int, ...]:
  """The shape HF keeps the tensor of `place` in, for a Flax parameter of `flax_shape`."""
  return LAYOUTS[place.layout].hf_shape(flax_shape if place.layer is None else flax_shape[1:])


def check_tensor(where: str, key: str, tensor: Tensor, expected: tuple[int, ...]) -> None:
  """InputError unless the header's tensor is of floating point and of the `expected` HF shape."""
  if tensor.shape != tuple(expected):
    raise InputError(f"{where}: tensor {key} has shape {tensor.shape}; the model expects {tuple(expected)}")
  if tensor.dtype not in FLOATS:
    raise InputError(f"{tensor.file}: tensor {key} is of dtype {tensor.dtype}; expected one of {sorted(FLOATS)}")


def read_tensor(tensor: Tensor) -> np.ndarray:
  """One tensor of a checked header, as float32."""
  try:
    with safe_open(tensor.file, framework="numpy") as f:
      return np.asarray(f.get_tensor(tensor.name), np.float32)
  except (OSError, SafetensorError) as e:  # changed since its header was read
    raise InputError(f"{tensor.file}: not a readable safetensors file ({type(e).__name__}: {e})") from None


def load(reads: Mapping[str, Place], tensors: Mapping[str, Tensor], initial: Mapping,
         adjust: Callable[[str, np.ndarray, np.ndarray], np.ndarray] | None = None) -> dict:
  """`initial` (nested parameters, or their shapes) with each tensor of `reads` (HF name -> place;
  `tensors` their checked headers) read in its place as float32; a stacked parameter gets each row
  from its layer's tensor (every row is read: a plan leaves none out). `adjust(name, value, initial
  leaf)` may change a value as it is read."""
  flat = leaves(initial)
  by_file: dict[str, list[str]] = {}
  for key in reads:
    by_file.setdefault(tensors[key].file, []).append(key)
  loaded: dict[tuple[str, ...], np.ndarray] = {}
  for file, keys in by_file.items():
    try:
      with safe_open(file, framework="numpy") as f:
        for key in keys:
          place = reads[key]
          value = LAYOUTS[place.layout].to_flax(np.asarray(f.get_tensor(tensors[key].name), np.float32))
          if adjust is not None:
            value = adjust(key, value, flat[place.path])
          if place.layer is None:
            loaded[place.path] = np.ascontiguousarray(value)
          else:
            loaded.setdefault(place.path, np.zeros(np.shape(flat[place.path]), np.float32))[place.layer] = value
    except (OSError, SafetensorError) as e:  # changed since its header was read
      raise InputError(f"{file}: not a readable safetensors file ({type(e).__name__}: {e})") from None
  return nested({path: loaded.get(path, value) for path, value in flat.items()})


def hf_tensors(table: Table, params: Mapping) -> dict[str, np.ndarray]:
  """The inverse of `table`: HF's tensors (its names and layouts, one per layer) of `params`, for
  every name whose parameter `params` has."""
  flat = leaves(params)
  return {key: np.ascontiguousarray(LAYOUTS[p.layout].to_hf(np.asarray(
      flat[p.path] if p.layer is None else flat[p.path][p.layer]))) for key, p in table.items() if p.path in flat}
