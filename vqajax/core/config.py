"""Configs: loading `FILE.py[:ARG]`, dotted overrides and their values from the command line.

A config file is plain Python with `get_config(arg) -> ml_collections.ConfigDict` (locked).
A relative FILE that is not found from the current folder is looked up inside the vqajax
package (an install ships experiments/ there: setup.py), then beside it (a checkout), so
`--config=experiments/vqa/bow_q.py` works from any folder; a config file may import the
shipped configs as `experiments.*` (`import_shipped`).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import math
import os
import re
import sys
from typing import Any, Callable, NamedTuple

import ml_collections

from vqajax.core import fs
from vqajax.core.errors import InputError
from vqajax.core.files import SAFE_NAME

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # vqajax/


def _shipped(path: str) -> list[str]:
  """Where a repository path that ships inside the installed vqajax (setup.py) is: inside the
  vqajax package (an install), else beside it (a checkout); those that exist."""
  return [p for p in (os.path.join(_PACKAGE, path), os.path.join(os.path.dirname(_PACKAGE), path))
          if os.path.exists(p)]


def import_shipped(name: str):
  """The package `name` (data_pipeline, experiments: repository folders shipped inside vqajax),
  imported from its folder (`_shipped`) under its own top-level name: only vqajax is installed
  at the top level, so no package of the same generic name elsewhere is picked up."""
  if name in sys.modules:
    return sys.modules[name]
  init, *_ = _shipped(os.path.join(name, "__init__.py"))
  spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[os.path.dirname(init)])
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def load_module(path: str, what: str):
  """The Python file `path` as a module (`what` names it in errors); it may import the
  shipped configs as `experiments.*`."""
  if not os.path.isfile(path) and not os.path.isabs(path):
    path = next(iter(_shipped(path)), path)
  import_shipped("experiments")
  if not os.path.isfile(path):
    raise InputError(f"{path}: " + (f"a folder; a {what} file is a Python file (FILE.py)" if os.path.isdir(path)
                                     else f"{what} file not found"))
  spec = importlib.util.spec_from_file_location(f"_vqajax_{what}", path)
  if spec is None or not path.endswith(".py"):
    raise InputError(f"{path}: a {what} file is a Python file (FILE.py)")
  module = importlib.util.module_from_spec(spec)
  run_user_code(lambda: spec.loader.exec_module(module), f"{path}: cannot load the {what} file")
  return module


def run_user_code(fn: Callable[[], Any], where: str) -> Any:
  """`fn()`, code of a config or sweep file: whatever it raises (sys.exit too) is the file's
  error, one line `where (Type: message)`; a ValueError is its own check of its argument."""
  try:
    return fn()
  except ValueError as e:
    raise InputError(f"{where}: {e}") from None
  except (Exception, SystemExit) as e:  # the user's code, not ours
    raise InputError(f"{where} ({type(e).__name__}: {e})") from None


_SPEC = re.compile(r"(.*?\.py)(?::(.*))?", re.S)


def split_spec(spec: str) -> tuple[str, str]:
  """(FILE.py, ARG) of `FILE.py[:ARG]`, split after the `.py` that ends the file's name (a ':' before
  it is the name's: `a:b.py`), else at the first ':'."""
  match = _SPEC.fullmatch(spec)
  if match:
    return match[1], match[2] or ""
  path, _, arg = spec.partition(":")
  return path, arg


def load_config(spec: str) -> ml_collections.ConfigDict:
  """The config of `FILE.py[:ARG]`."""
  path, arg = split_spec(spec)
  if not path:
    raise InputError("--config: expected FILE.py[:ARG], got an empty name")
  module = load_module(path, "config")
  if not callable(getattr(module, "get_config", None)):
    raise InputError(f"{path}: expected a function get_config(arg) returning a ConfigDict")
  config = run_user_code(lambda: module.get_config(arg), spec)
  if not isinstance(config, ml_collections.ConfigDict):
    raise InputError(f"{path}: get_config returned a {type(config).__name__}, expected a ConfigDict")
  return config


def override(config: ml_collections.ConfigDict, changes: dict[str, Any]) -> ml_collections.ConfigDict:
  """Sets dotted fields (`{"model.fusion": "concat"}`) of `config` and returns it; on a
  locked config an unknown field raises (KeyError / AttributeError)."""
  for key, value in changes.items():
    *parents, field = key.split(".")
    target = config
    for parent in parents:
      target = target[parent]
    target[field] = value
  return config


def _field(config: ml_collections.ConfigDict, key: str) -> Any:
  """The current value of dotted `key`; InputError naming the closest field if absent."""
  node = config
  for depth, part in enumerate(key.split(".")):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      known = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
      close = difflib.get_close_matches(part, known, n=1)
      prefix = ".".join(key.split(".")[:depth])
      hint = f' (did you mean "{".".join(filter(None, [prefix, close[0]]))}"?)' if close else ""
      raise InputError(f"the config has no field '{key}'{hint}")
    node = node[part]
  return node


def parse_value(key: str, current: Any, text: str) -> Any:
  """`text` as a value of the field's type: bools are true/false, numbers as such,
  sequences as Python literals (a single value is a one-element tuple), strings as given."""
  def bad(expected: str):
    return InputError(f"config.{key}: expected {expected}, got {text!r}")
  if isinstance(current, ml_collections.ConfigDict):
    raise InputError(f"config.{key} is a group of fields; set one of {sorted(current.keys())}")
  if isinstance(current, bool):
    if text.lower() in ("true", "1", "yes"):
      return True
    if text.lower() in ("false", "0", "no"):
      return False
    raise bad("true or false")
  if isinstance(current, (int, float)):
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      raise bad("an integer" if isinstance(current, int) else "a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
        isinstance(current, int) and not isinstance(value, int)):
      raise bad("an integer" if isinstance(current, int) else "a number")
    return value
  if isinstance(current, (tuple, list)):
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      value = text
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)
  if current is None:
    try:
      return ast.literal_eval(text)
    except (ValueError, SyntaxError):
      return text
  return text


def apply_overrides(config: ml_collections.ConfigDict, items: list[tuple[str, str]]
                    ) -> ml_collections.ConfigDict:
  """Sets each (dotted field, text) of the command line, parsed by the field's type."""
  for key, text in items:
    value = parse_value(key, _field(config, key), text)
    try:
      override(config, {key: value})
    except (TypeError, ValueError) as e:
      raise InputError(f"config.{key}: cannot be set to {text!r} ({e})") from None
  return config


def to_text(config: ml_collections.ConfigDict) -> list[str]:
  """Every field as `name = value`, one per line, in the config's order."""
  return [f"{key} = {value!r}" for key, value in leaves(config).items()]


def file_names(value: Any) -> list[str]:
  """The file names of a `config.data` file field: one name, several comma-separated
  (official names hold no commas), or a list of names."""
  names = value.split(",") if isinstance(value, str) else list(value)
  return [name for name in names if isinstance(name, str) and name]


class Rule(NamedTuple):
  """What a config field holds: `expected` (said in the error) and its test."""
  expected: str
  ok: Callable[[Any], bool]


MAX_STEPS = 2**31 - 1  # the train state's int32 step counter


def integer(lo: int = 1, hi: int = MAX_STEPS) -> Rule:
  what = f"a positive integer <= {hi}" if lo == 1 else f"an integer from {lo} to {hi}"
  return Rule(what, lambda v: type(v) is int and lo <= v <= hi)


def number(lo: float, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False) -> Rule:
  """A number in the interval (an infinite bound is open and excludes nothing else; NaN fails)."""
  if hi == math.inf:
    what = f"a number {'>' if lo_open else '>='} {lo:g}"
  else:
    what = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
  above = (lambda v: v > lo) if lo_open else (lambda v: v >= lo)
  below = (lambda v: v < hi) if hi_open else (lambda v: v <= hi)
  return Rule(what, lambda v: type(v) in (int, float) and above(v) and below(v))


def one_of(*choices: str) -> Rule:
  return Rule(f"one of {choices}", lambda v: v in choices)


def dims(lo: int = 1) -> Rule:
  """A tuple of integers >= `lo` (sizes of layers or of a feature array)."""
  return Rule(f"a tuple of integers >= {lo}, e.g. (512, 512)",
              lambda v: isinstance(v, (tuple, list)) and all(type(d) is int and d >= lo for d in v))


def path() -> Rule:
  """A local path, "" (none) or a URL of a file system `core/fs` reads."""
  return Rule(f"a local path or a URL ({', '.join(s + '://' for s in fs.SCHEMES)})", fs.known_scheme)


# One file name, several comma-separated, or a list of names (`file_names`).
FILE_LIST = Rule("a file name, comma-separated names or a list of names",
                 lambda v: isinstance(v, str) or (isinstance(v, (tuple, list)) and all(isinstance(n, str) for n in v)))


def names() -> Rule:
  return Rule("a tuple of names", lambda v: isinstance(v, (tuple, list)) and all(isinstance(n, str) for n in v))


TEXT = Rule("a string", lambda v: isinstance(v, str))
FLAG = Rule("true or false", lambda v: isinstance(v, bool))
PLAIN_NAME = Rule("a plain name (letters, digits, '.', '-', '_', '+')",
                  lambda v: isinstance(v, str) and SAFE_NAME.fullmatch(v) is not None and v not in (".", ".."))
NAME_PREFIX = Rule("\"\" or the start of a plain name (letters, digits, '.', '-', '_', '+')",
                   lambda v: isinstance(v, str) and (v == "" or SAFE_NAME.fullmatch(v) is not None))

# The fields the core reads (train, experiment); each paper's configs add their own.
TRAINING = {
    "name": PLAIN_NAME,  # it names the results files
    "task": TEXT,  # the front door's registry checks the name
    "seed": integer(0, 2**32 - 1),
    "batch_size": integer(), "eval_batch_size": integer(),
    "num_train_steps": integer(0),  # 0: the initial parameters evaluated and kept as step 0 (a zero-shot row)
    "num_epochs": number(0, 1e6), "log_every_steps": integer(), "eval_every_steps": integer(),
    "keep_checkpoints": integer(), "checkpoint_every_steps": integer(0),
    "profile_steps": Rule("() or a pair of steps (first, last), 1 <= first <= last",
                          lambda v: isinstance(v, (tuple, list)) and (len(v) == 0 or (
                              len(v) == 2 and all(type(x) is int for x in v) and 1 <= v[0] <= v[1]))),
    "best_metric": TEXT, "best_mode": one_of("max", "min"),  # and config.evals: core/evals.py
    "optimizer.name": one_of("rmsprop", "adam", "adamw"),
    "optimizer.weight_decay": number(0), "optimizer.warmup": number(0, 1, hi_open=True),
    "optimizer.learning_rate": number(0, lo_open=True),
    "optimizer.lr_decay_per_step": number(0, 1, lo_open=True),
    "optimizer.rmsprop_decay": number(0, 1, hi_open=True),
    "optimizer.eps": number(0, lo_open=True),  # 0: a parameter of no gradient divides 0 by 0
    "optimizer.grad_clip": number(0),
    "mesh.fsdp": integer(1, 4096), "mesh.min_shard_bytes": integer(0, 2**40),  # and dividing the devices: core/sharding
}


def mesh_config() -> ml_collections.ConfigDict:
  """The config.mesh group every task's config has (`core/sharding.py`)."""
  mesh = ml_collections.ConfigDict()
  mesh.fsdp = 1                         # devices per parameter shard; 1: data parallelism, all replicated
  mesh.min_shard_bytes = 1 << 20        # arrays smaller than this stay replicated
  return mesh


def leaves(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """{dotted field: value} of every field that is not a group."""
  out = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      out.update(leaves(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def check(config: ml_collections.ConfigDict, rules: dict[str, Rule]) -> None:
  """InputError naming the first field of `config` that breaks its rule (fields without a
  rule, or rules without a field, are another config's: not checked here)."""
  for key, value in leaves(config).items():
    if key in rules:
      check_value(f"config.{key}", value, rules[key])


def check_value(what: str, value: Any, rule: Rule) -> None:
  """InputError `what: expected ..., got value` unless `value` keeps `rule` (config fields, flags)."""
  if not rule.ok(value):
    raise InputError(f"{what}: expected {rule.expected}, got {value!r}")
