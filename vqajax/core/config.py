"""Configs: loading `FILE.py[:ARG]`, dotted overrides and their values from the command line.

A config file is plain Python with `get_config(arg) -> ml_collections.ConfigDict` (locked).
A relative FILE that is not found from the current folder is looked up in the installed
`experiments` package, so `--config=experiments/vqa/bow_q.py` works outside a checkout.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from typing import Any

import ml_collections

from vqajax.core.errors import InputError

_INSTALLED = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_module(path: str, what: str):
  """The Python file `path` as a module (`what` names it in errors)."""
  if not os.path.isfile(path) and not os.path.isabs(path):
    installed = os.path.join(_INSTALLED, path)
    path = installed if os.path.isfile(installed) else path
  if not os.path.isfile(path):
    raise InputError(f"{path}: {what} file not found")
  spec = importlib.util.spec_from_file_location(f"_vqajax_{what}", path)
  if spec is None or not path.endswith(".py"):
    raise InputError(f"{path}: a {what} file is a Python file (FILE.py)")
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except (SyntaxError, ImportError) as e:
    raise InputError(f"{path}: cannot load the {what} file ({type(e).__name__}: {e})") from None
  return module


def load_config(spec: str) -> ml_collections.ConfigDict:
  """The config of `FILE.py[:ARG]`."""
  path, _, arg = spec.partition(":")
  module = load_module(path, "config")
  if not callable(getattr(module, "get_config", None)):
    raise InputError(f"{path}: expected a function get_config(arg) returning a ConfigDict")
  try:
    config = module.get_config(arg)
  except ValueError as e:  # get_config's own check of its argument
    raise InputError(f"{spec}: {e}") from None
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


def to_text(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  """Every field as `name = value`, one per line, in the config's order."""
  lines = []
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      lines += to_text(value, f"{prefix}{key}.")
    else:
      lines.append(f"{prefix}{key} = {value!r}")
  return lines


def file_names(value: Any) -> list[str]:
  """The file names of a `config.data` file field: one name, several comma-separated
  (official names hold no commas), or a list of names."""
  names = value.split(",") if isinstance(value, str) else list(value)
  return [name for name in names if isinstance(name, str) and name]
