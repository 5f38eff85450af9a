"""Docstrings name real places: every module path (`core/task.py`, `vqa/configs.py:vqa_config`) and dotted
name (`vqajax.cli.main`) that a docstring or a comment points at exists, so a reader
following one never lands nowhere."""

import ast
import importlib
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("vqajax", "data_pipeline", "experiments", "bench", "tests")
SLASHED = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.py)(?::(\w+))?")
DOTTED = re.compile(r"(?<![\w.])((?:vqajax|data_pipeline)(?:\.\w+)+)")
FILE_NAMES = (".json", ".py", ".md", ".h5", ".npy", ".npz")  # `vqajax.json` is a file, not a module


def _sources():
  for folder in FOLDERS:
    for parent, _, names in os.walk(os.path.join(ROOT, folder)):
      for name in sorted(names):
        if name.endswith(".py"):
          yield os.path.join(parent, name)


def _docstrings(path):
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False)
      if doc:
        yield doc


def _comments(path):
  with open(path, encoding="utf-8") as f:
    return [line.split("#", 1)[1] for line in f if "#" in line]


def _path_exists(name, source, attribute=""):
  bases = (ROOT, os.path.join(ROOT, "vqajax"), os.path.dirname(source))
  found = [os.path.join(base, name) for base in bases if os.path.isfile(os.path.join(base, name))]
  if not found or not attribute or name.startswith("experiments/"):  # a config's `FILE.py:ARG`
    return bool(found)
  tree = ast.parse(open(found[0], encoding="utf-8").read())
  return any(getattr(node, "name", None) == attribute or attribute in [getattr(t, "id", None) for t in getattr(
      node, "targets", [])] for node in tree.body)


def _dotted_exists(name):
  parts = name.split(".")
  for cut in range(len(parts), 0, -1):
    try:
      target = importlib.import_module(".".join(parts[:cut]))
    except ImportError:
      continue
    for attribute in parts[cut:]:
      if not hasattr(target, attribute):
        return False
      target = getattr(target, attribute)
    return True
  return False


def _references():
  for path in _sources():
    for text in [*_docstrings(path), *_comments(path)]:
      for name, attribute in SLASHED.findall(text):
        yield path, "path", (name, attribute)
      for name in DOTTED.findall(text):
        if not name.endswith(FILE_NAMES):
          yield path, "name", name


def test_every_path_and_name_in_a_docstring_exists():
  missing = sorted({f"{os.path.relpath(path, ROOT)}: {name}" for path, kind, name in _references()
                    if not (_path_exists(*name[:1], path, name[1]) if kind == "path" else _dotted_exists(name))})
  assert missing == []


@pytest.mark.parametrize("text, found", [
    ("see `vqajax/core/nowhere.py` for it", ("vqajax/core/nowhere.py", "")),
    ("the registry `models/vqa.py`", ("models/vqa.py", "")),
    ("built by `vqa/configs.py:therapy_config`", ("vqa/configs.py", "therapy_config")),
])
def test_the_check_finds_a_dangling_path(text, found, tmp_path):
  assert SLASHED.findall(text) == [found] and not _path_exists(found[0], str(tmp_path / "x.py"), found[1])
  assert _path_exists("vqa/configs.py", str(tmp_path / "x.py"), "vqa_config")
  assert not _dotted_exists("vqajax.cli.NO_SUCH_THING") and _dotted_exists("vqajax.cli.main")
