"""One code style for the whole tree: ruff's checks (pyproject.toml) and 2-space blocks."""

import ast
import io
import os
import shutil
import subprocess
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("vqajax", "data_pipeline", "tests", "bench", "experiments")


def _python_files():
  for folder in FOLDERS:
    for parent, _, names in os.walk(os.path.join(ROOT, folder)):
      yield from (os.path.join(parent, n) for n in sorted(names) if n.endswith(".py"))


def block_indent_errors(source: str) -> list[int]:
  """Lines where a block is indented by other than 2 spaces more than its parent."""
  depths, errors = [0], []
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.INDENT:
      width = len(token.string.expandtabs(8))
      if "\t" in token.string or width - depths[-1] != 2:
        errors.append(token.start[0])
      depths.append(width)
    elif token.type == tokenize.DEDENT:
      depths.pop()
  return errors


def test_block_indent_rule_on_hand_made_sources():
  assert block_indent_errors("def f():\n  if x:\n    return 1\n  return 2\n") == []
  assert block_indent_errors("def f():\n    return 1\n") == [2]
  assert block_indent_errors("def f():\n  x = (1,\n           2)\n  return x\n") == []  # continuation
  assert block_indent_errors("if a:\n\tb = 1\n") == [2]


def test_every_block_is_indented_by_two_spaces():
  bad = {}
  for path in _python_files():
    with open(path, encoding="utf-8") as f:
      errors = block_indent_errors(f.read())
    if errors:
      bad[os.path.relpath(path, ROOT)] = errors[:5]
  assert bad == {}


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the test extra")
def test_ruff_finds_nothing():
  done = subprocess.run(["ruff", "check", "--no-cache", *FOLDERS], cwd=ROOT, capture_output=True, text=True)
  assert done.returncode == 0, done.stdout[-3000:]


def test_no_function_in_core_is_over_60_lines():
  """vqajax/core stays readable a function at a time (decorators and docstrings counted)."""
  long = {}
  for parent, _, names in os.walk(os.path.join(ROOT, "vqajax", "core")):
    for name in (n for n in names if n.endswith(".py")):
      path = os.path.join(parent, name)
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
          first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
          if node.end_lineno - first + 1 > 60:
            long[f"{os.path.relpath(path, ROOT)}:{node.name}"] = node.end_lineno - first + 1
  assert long == {}
