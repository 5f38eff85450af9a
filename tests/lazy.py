"""A module imported on first use: TensorFlow (~6 s of CPU) only in the pytest-xdist worker that
runs the tests needing it, not in every worker that collects them."""

import importlib


class Module:
  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attribute: str):
    if attribute.startswith("_"):  # pytest's collection looking for fixtures and marks: not the module's
      raise AttributeError(attribute)
    return getattr(importlib.import_module(self._name), attribute)
