"""Tasks by `config.task`: each module is what train and eval need to know about one problem.

A task module provides
  BEST_METRIC                       the val metric that picks the best checkpoint
  TRAIN_KEYS                        the split arrays the train step reads (those present)
  load(config) -> data              `data.train` / `data.val`: dicts of numpy arrays, one row
                                    per example (`label`, `question_id`, `image_row` when
                                    `data.store` is a FeatureStore, else None)
  sizes(data) -> dict               data sizes for run.json
  build_model(config.model, data)   a flax module: model.apply(vars, batch, train=...) -> outputs
  loss(outputs, batch) -> scalar    jittable
  eval_keys(data)                   the split arrays the eval step reads
  make_eval_step(model, data, mesh) (params, batch) -> (predictions, masked metric sums)
  summarise(totals) -> {name: float}
  write_results(out_dir, config, data, predictions, metrics)   host; predictions: numpy, val order
  table(name, metrics) -> str       a Markdown table for the console
"""

from __future__ import annotations

from types import ModuleType

from vqajax.core.errors import InputError
from vqajax.answertherapy import grounding_class, grounding_mask
from vqajax.vqa import task as vqa

TASKS: dict[str, ModuleType] = {"vqa": vqa, "grounding_class": grounding_class,
                                 "grounding_mask": grounding_mask}


def get(name: str) -> ModuleType:
  if name not in TASKS:
    raise InputError(f"config.task '{name}' is not one of {sorted(TASKS)}")
  return TASKS[name]
