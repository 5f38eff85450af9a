"""The model contract: one record per model family (big_vision's `models/` + `config.model_name`).

A `Model` holds everything the suite asks of a model: its config group (`config.model`: each
field's default and rule in one place; the rule table is derived from it), how it is built for
each task it serves (with that task's own fields of it), its own text encoder where it has one
(a Hub tokenizer; None: the task's word vocabulary), where its parameters start from
(`initial_params`, None: they stay initialised), what the optimizer leaves as it is (`frozen`, e.g.
a pretrained backbone; None: everything trains) and its parameters' sharding rules (None: the
generic rule). `config.model` holds only the chosen model's group, `name` first.

A paper's registry (`vqa/models.MODELS`, `answertherapy/models.MODELS`, with the pretrained
architectures any task fine-tunes, `nn/pretrained.MODELS`, spread in) maps `config.model.name` to
its entry; the tasks ask the entry (`entry`), never branch on a model's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import ml_collections

from vqajax.core.config import Rule, check_value, one_of
from vqajax.core.errors import InputError

# The arrays a model's own text encoder gives (`TextEncoding`; a Hub tokenizer's), each [N, T]
TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class Field(NamedTuple):
  """A config field: its default and what it may hold."""
  default: Any
  rule: Rule


class Builder(NamedTuple):
  """How a model is built for one task: `build(config.model, encoders) -> flax module` (its
  outputs what the task's loss and eval step read), that task's own fields of the model, and,
  for a model with its own text encoder, how the task's text is laid out for it (`texts`: the
  task's own signature, e.g. AnswerTherapy's `(questions, answers, config) -> (texts, pairs)`);
  `trains` False for a zero-shot row (no gradient reaches its parameters: `check_trains`)."""
  build: Callable
  fields: Mapping[str, Field] = {}
  texts: Callable | None = None
  trains: bool = True


class TextEncoding(NamedTuple):
  """A model's own text encoder: `make(model_cfg, training texts, image shape)` -> an encoder with
  `encode(texts, pairs=None)` -> {array name: [N, T]} and `tables()`; `from_tables(tables)` -> it again."""
  make: Callable
  from_tables: Callable


class Text(NamedTuple):
  """A run's text encoder, of the model registered as `model`, recorded with the run's encoders."""
  model: str
  encoder: Any

  def encode(self, texts, pairs=None) -> dict:
    return self.encoder.encode(texts, pairs)

  def tables(self) -> dict:
    return {"model": self.model, **self.encoder.tables()}


@dataclasses.dataclass(frozen=True)
class Model:
  group: Mapping[str, Field]            # config.model's fields for every task it serves (besides name)
  tasks: Mapping[str, Builder]          # config.task -> how it is built for it
  text: TextEncoding | None = None      # its own text encoder (None: the task's word vocabulary)
  initial_params: Callable | None = None  # (model_cfg, params, encoders) -> params or None
  frozen: Callable | None = None          # (model_cfg) -> the top-level parameter groups left as they are
  sharding: Any = None                  # its parameters' sharding rules (None: the generic rule)
  label: str = ""                       # before a run's row name in a report ("" for a paper's own models)

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


def rules(models: Mapping[str, Model], config) -> dict[str, Rule]:
  """{`model.FIELD`: its rule} of `config.model`: `name` one of `models` that serve `config.task`
  (InputError naming it otherwise), then the named entry's fields for that task."""
  name = one_of(*(name for name, model in models.items() if config.task in model.tasks))
  check_value("config.model.name", config.model.get("name"), name)
  return {"model.name": name, **models[config.model.name].rules(config.task)}


def check_trains(models: Mapping[str, Model], config) -> None:
  """InputError for a training budget given to a zero-shot row (its builder's `trains` False): a
  step would only let the optimizer's weight decay move the checkpoint's parameters."""
  if not models[config.model.name].tasks[config.task].trains:
    steps, epochs = config.get("num_train_steps", 0), config.get("num_epochs", 0)
    if steps or epochs:
      raise InputError(f"config.num_train_steps: config.model.name '{config.model.name}' is zero-shot for "
                       f"config.task '{config.task}' (nothing trains): expected 0 steps and 0 epochs, got {steps} "
                       f"steps and {epochs} epochs")


def entry(models: Mapping[str, Model], model_cfg) -> Model:
  """The entry of `models` that `config.model.name` names (checked with the config)."""
  return models[model_cfg.name]


def text_encoder(models: Mapping[str, Model], model_cfg) -> Callable | None:
  """(training texts, image shape) -> the run's `Text` of the model `config.model` names; None
  where it has no text encoder of its own."""
  text = entry(models, model_cfg).text
  if text is None:
    return None
  return lambda texts, image_shape: Text(model_cfg.name, text.make(model_cfg, texts, image_shape))


def text_from_tables(models: Mapping[str, Model], tables: dict | None) -> Text | None:
  """A run's `Text` from its recorded tables (`Text.tables()`; None: the run has none)."""
  if tables is None:
    return None
  return Text(tables["model"], models[tables["model"]].text.from_tables(tables))


def initial_params(models: Mapping[str, Model], model_cfg, params, encoders):
  """Where the model `config.model` names starts from (None: `params` stay)."""
  start = entry(models, model_cfg).initial_params
  return None if start is None else start(model_cfg, params, encoders)


def frozen(models: Mapping[str, Model], model_cfg) -> tuple[str, ...]:
  """The top-level parameter groups of the model `config.model` names that do not train."""
  keep = entry(models, model_cfg).frozen
  return () if keep is None else tuple(keep(model_cfg))
