"""Challenge 1 of VQA-AnswerTherapy (paper section 4.1): is a visual question's answer
grounding single (all answers on one region) or multiple? (Task contract: `core/task.py`.)

Loss: softmax cross-entropy weighted by the class weight of each example's label
(`therapy_dataset.class_weights`, from the train frequencies; ~16% multiple), normalised
by the batch's total weight. Metrics (percent), from masked confusion sums on device:
precision and recall with "single" and with "multiple" as the positive class, overall
and per source (e.g. `VizWiz/precision/multiple`), accuracy and balanced accuracy (the
mean recall of the classes present), and the same for the naive baselines "always
single" / "always multiple" (`always_single/...`; undefined precision -> absent, shown
as "-" in Table 4). A model whose outputs have a third class (a zero-shot reply that is neither yes
nor no, `nn/paligemma_models.py`) leaves those questions out of its precision, recall and accuracy
and counts them (`left_out`, per source; 0 for a classifier).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import optax

from vqajax.answertherapy import configs, submission, table4
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import groups as therapy_groups
from vqajax.answertherapy import models as grounding
from vqajax.answertherapy import precision_recall as pr
from vqajax.answertherapy.groups import LABELS
from vqajax.core import tables

PIPELINE_TAG = "visual-question-answering"  # the Hub's pipeline tag of its runs (an exported bundle's model card)
TABLE4 = ("", "")  # Table 4 across runs (`report.py`): its metrics' prefix, its row name's suffix
BEST_METRIC = "balanced_accuracy"
METRICS = table4.metric_pattern("") + "|accuracy|balanced_accuracy"  # summarise's names
FIELDS = configs.FIELDS
rules = configs.rules
CHECKS = configs.CHECKS
EVAL_DATA = configs.EVAL_DATA
LENGTHS = therapy_dataset.LENGTHS
TEXT_KEYS = therapy_dataset.TEXT_KEYS
TRAIN_KEYS = TEXT_KEYS + ("label", "weight")
PREDICTED = (*LABELS, "left out")  # a prediction's class names (the third: neither, left out)

load = therapy_dataset.load
load_eval = therapy_dataset.with_val
sizes = therapy_dataset.sizes


initial_params = grounding.initial_params
frozen = grounding.frozen


def build_model(cfg, enc):
  return grounding.build(cfg, enc, "grounding_class")


encoders_from_tables = therapy_dataset.Encoders.from_tables
open_store = therapy_dataset.open_store


def loss(logits, batch):
  """Class-weighted mean softmax cross-entropy."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
  return jnp.sum(batch["weight"] * ce) / jnp.maximum(jnp.sum(batch["weight"]), 1e-12)


def make_loss(config):
  del config  # one loss
  return loss


def eval_keys(data) -> tuple[str, ...]:
  del data
  return TEXT_KEYS + ("label", "source")


def make_eval_step(model, data, mesh):
  """(params, batch) -> ({predicted, p_multiple}, confusion sums per source), to be jitted."""
  del data, mesh

  def eval_step(params, batch):
    predictions = _predictions(model.apply({"params": params}, batch, train=False))
    weights, answered = therapy_groups.weights(batch), (predictions["predicted"] < len(LABELS))[:, None]
    sums = pr.confusion_sums(predictions["predicted"], batch["label"], weights * answered)
    sums[table4.LEFT_OUT] = pr.confusion_sums(predictions["predicted"], batch["label"], weights * ~answered)["actual"]
    return predictions, sums

  return eval_step


def _predictions(logits):
  return {"predicted": jnp.argmax(logits, axis=-1), "p_multiple": jax.nn.softmax(logits)[:, 1]}


def summarise(totals) -> dict[str, float]:
  """Percent metrics of the model and of the naive baselines (module docstring)."""
  metrics = table4.with_baselines(totals)
  actual = totals["actual"][0]
  metrics["accuracy"] = pr.ratio(totals["true_positive"][0].sum(), actual.sum())
  recalls = [metrics[f"recall/{label}"] for c, label in enumerate(LABELS) if actual[c] > 0]
  metrics["balanced_accuracy"] = sum(recalls) / max(len(recalls), 1)
  return metrics


def table4_rows(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """The paper's Table 4 of the naive baselines and the model (`table4.table`)."""
  return table4.table(table4.baseline_rows(metrics) + [(name, metrics, "")])


def table(name: str, metrics: dict[str, float]) -> str:
  return tables.markdown(*table4_rows(name, metrics))


def write_results(out_dir: str, config, data, predictions: dict, metrics: dict) -> None:
  """predictions.json (one record per val question), metrics.json and table4.{md,csv,json}."""
  records = []
  for sample, predicted, p in zip(data.val_samples, predictions["predicted"], predictions["p_multiple"]):
    ids = {"image_id": sample.image_id}
    if sample.question_id is not None:
      ids["question_id"] = sample.question_id
    records.append({**ids, "source": sample.source, "question": sample.question, "answers": list(sample.answers),
                    "label": sample.label, "predicted": PREDICTED[int(predicted)], "p_multiple": float(p)})
  tables.write_tables(out_dir, {"table4": table4_rows(config.name, metrics)},
                      beside={os.path.join(out_dir, "predictions.json"): records,
                              os.path.join(out_dir, "metrics.json"): metrics})


read_test = therapy_dataset.read_test


def make_predict_step(model):
  """(params, batch) -> {predicted, p_multiple}, to be jitted."""
  return lambda params, batch: _predictions(model.apply({"params": params}, batch, train=False))


def write_submission(out_dir: str, config, enc, test, predictions: dict) -> list[str]:
  """Each test question's predicted `binary_label` and `p_multiple` (`answertherapy/submission.py`)."""
  del enc
  return submission.write(out_dir, config.name, test, [
      {"binary_label": PREDICTED[int(c)], "p_multiple": float(p)}
      for c, p in zip(predictions["predicted"], predictions["p_multiple"])])
