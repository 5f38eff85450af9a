"""The builders by name, and a builder of a named config (with a feature store joined)."""

from __future__ import annotations

from data_pipeline.tfds import base
from data_pipeline.tfds.answer_therapy import AnswerTherapy
from data_pipeline.tfds.vizwiz import VizwizVqa
from data_pipeline.tfds.vqa import Vqa
from vqajax.core.errors import InputError

BUILDERS = {"vqa": Vqa, "vizwiz_vqa": VizwizVqa, "answer_therapy": AnswerTherapy}


def make(name: str, config: str, data_dir: str, features: str = "") -> base.ManualBuilder:
  """Builder `name` with config `config` ("" its first) writing under `data_dir`; with
  `features`, that store's rows joined by image id."""
  if name not in BUILDERS:
    raise InputError(f"unknown dataset '{name}' (expected one of {', '.join(BUILDERS)})")
  cls = BUILDERS[name]
  configs = {c.name: c for c in cls.BUILDER_CONFIGS}
  chosen = configs.get(config or cls.BUILDER_CONFIGS[0].name)
  if chosen is None:
    raise InputError(f"{name} has no config '{config}' (expected one of {', '.join(configs)})")
  return cls(config=base.with_features(chosen, features) if features else chosen, data_dir=data_dir)
