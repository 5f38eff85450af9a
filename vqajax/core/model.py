"""The model contract: one record per model family (big_vision's `models/` + `config.model_name`).

A `Model` holds everything the suite asks of a model: its config group (`config.model`: each
field's default and rule in one place; the rule table is derived from it), how it is built for
each task it serves (with that task's own fields of it), its own text encoder where it has one
(a Hub tokenizer; None: the task's word vocabulary), where its parameters start from
(`initial_params`, None: they stay initialised) and its parameters' sharding rules (None: the
generic rule). `config.model` holds only the chosen model's group, `name` first.

A paper's registry (`vqa/models.MODELS`, `answertherapy/models.MODELS`, with the pretrained
architectures any task fine-tunes, `nn/pretrained.MODELS`) maps `config.model.name` to its entry.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import ml_collections

from vqajax.core.config import Rule


class Field(NamedTuple):
  """A config field: its default and what it may hold."""
  default: Any
  rule: Rule


class Builder(NamedTuple):
  """How a model is built for one task: `build(config.model, encoders) -> flax module` (its
  outputs what the task's loss and eval step read), and that task's own fields of the model."""
  build: Callable
  fields: Mapping[str, Field] = {}


@dataclasses.dataclass(frozen=True)
class Model:
  group: Mapping[str, Field]            # config.model's fields for every task it serves (besides name)
  tasks: Mapping[str, Builder]          # config.task -> how it is built for it
  text: Any = None                      # its text encoder: `spec(model_cfg, texts, image_shape)` -> an encoder
                                        # with `encode(texts, pairs=None)` and `tables()`; `from_tables`
  initial_params: Callable | None = None  # (model_cfg, params, encoders) -> params or None
  sharding: Any = None                  # its parameters' sharding rules (None: the generic rule)

  def fields(self, task: str) -> dict[str, Field]:
    return {**self.group, **self.tasks[task].fields}

  def config(self, name: str, task: str, **overrides) -> ml_collections.ConfigDict:
    """`config.model` of this model (registered as `name`) for `task`: its defaults, `overrides` set;
    ValueError naming an unknown field (a config file's own check of its arguments)."""
    fields = self.fields(task)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
      raise ValueError(f"config.model.name '{name}' has no fields {unknown} (its fields: {sorted(fields)})")
    group = ml_collections.ConfigDict({"name": name})
    for key, field in fields.items():
      group[key] = overrides.get(key, field.default)
    return group

  def rules(self, task: str) -> dict[str, Rule]:
    """{`model.FIELD`: its rule} for `task`."""
    return {f"model.{key}": field.rule for key, field in self.fields(task).items()}
