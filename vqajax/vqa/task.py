"""The VQA classification task: data, model, loss, predictions and masked metric sums
(jittable), and the official results files (the task contract: `vqajax/core/task.py`)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vqajax.core import model as model_lib
from vqajax.core import sharding
from vqajax.core.errors import InputError
from vqajax.core.task import TestFile
from vqajax.vqa import configs, formats, reports, results
from vqajax.vqa import dataset as vqa_dataset
from vqajax.vqa import models as vqa_models
from vqajax.vqa.accuracy import kernel as vqa_accuracy
from vqajax.vqa.files import ANSWER_TYPES

PIPELINE_TAG = "visual-question-answering"  # the Hub's pipeline tag of its runs (an exported bundle's model card)
BEST_METRIC = "accuracy"
METRICS = rf"(mc_)?accuracy(/({'|'.join(map(re.escape, ANSWER_TYPES))}))?"  # summarise's names
FIELDS = configs.FIELDS
rules = configs.rules
CHECKS = configs.CHECKS
# The config.data fields an evaluation may set for its own split (config.evals.NAME.data).
EVAL_DATA = ("val_questions", "val_annotations", "val_mc_questions", "val_captions", "format", "features",
             "feature_shape", "results_prefix")
LENGTHS = {"tokens": "length"}  # token ids cut to the length bucket of the batch (core/pipeline.py)
INPUT_KEYS = ("tokens", "length", "question_bow", "caption_bow",  # those the split has
              "input_ids", "attention_mask", "token_type_ids")
TRAIN_KEYS = INPUT_KEYS + ("label", "answer_index")
EVAL_KEYS = INPUT_KEYS + ("label", "question_id", "answer_type", "question_type",
                          "gt_ids", "gt_dup", "gt_valid", "unanimous")
MC_KEYS = ("choice_index", "choice_raw", "choice_norm")


def load(config) -> vqa_dataset.VQAData:
  """Reads config.data (the embedded dataset is written beforehand by the front door)."""
  return vqa_dataset.load(config.data, model_lib.text_encoder(vqa_models.MODELS, config.model))


def load_eval(config, data: vqa_dataset.VQAData) -> vqa_dataset.VQAData:
  """`data` with the val split of an evaluation's `config.data` (`core/evals.py`)."""
  return vqa_dataset.with_val(config.data, data)


def sizes(data: vqa_dataset.VQAData) -> dict[str, int]:
  """The data sizes recorded in run.json."""
  return {"train_questions": len(data.train["label"]), "val_questions": len(data.val["question_id"]),
          "vocab_size": len(data.vocab), "num_answers": len(data.answers)}


build_model = vqa_models.build
initial_params = vqa_models.initial_params
frozen = vqa_models.frozen


def open_store(config):
  return vqa_dataset.open_store(config.data)


encoders_from_tables = vqa_dataset.Encoders.from_tables


def loss(logits, batch):
  """Mean softmax cross-entropy over examples whose answer is in the table (label >= 0)."""
  labels = batch["label"]
  valid = labels >= 0
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
  return jnp.sum(jnp.where(valid, ce, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def soft_loss(logits, batch):
  """Softmax cross-entropy against the distribution of the annotators' answers that are in
  the table, averaged over examples with at least one."""
  index = batch["answer_index"]  # -1 padding, OUT_OF_TABLE (-2): one_hot gives zeros for both
  counts = jax.nn.one_hot(index, logits.shape[-1], dtype=jnp.float32).sum(axis=1)
  total = counts.sum(axis=-1)
  ce = optax.softmax_cross_entropy(logits, counts / jnp.maximum(total, 1.0)[:, None])
  valid = total > 0
  return jnp.sum(jnp.where(valid, ce, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


VQA_SCORES = (0.0, 0.3, 0.6, 0.9, 1.0)  # the soft target of an answer given by 0, 1, 2, 3, 4+ annotators


def bce_loss(logits, batch):
  """The VQA loss of the pretrained transformers: binary cross-entropy of every answer of the table against its soft
  score (`VQA_SCORES` of its annotator count), summed over the answers, averaged over the
  examples."""
  counts = jax.nn.one_hot(batch["answer_index"], logits.shape[-1], dtype=jnp.int32).sum(axis=1)
  targets = jnp.asarray(VQA_SCORES)[jnp.minimum(counts, len(VQA_SCORES) - 1)]
  return optax.sigmoid_binary_cross_entropy(logits, targets).sum(-1).mean()


def token_loss(outputs, batch):
  """A generative model's loss: softmax cross-entropy of its `logits` [B, T, V] against the `targets`
  [B, T] where `weights` [B, T] (its answers' tokens) are 1, averaged over those tokens."""
  del batch
  ce = optax.softmax_cross_entropy_with_integer_labels(outputs["logits"], outputs["targets"])
  return jnp.sum(outputs["weights"] * ce) / jnp.maximum(jnp.sum(outputs["weights"]), 1.0)


LOSSES = {"answer": loss, "soft": soft_loss, "bce": bce_loss, "tokens": token_loss}  # config.model.targets


def make_loss(config):
  """The loss `config.model.targets` names; "answer" (the paper's) for a model without the field."""
  targets = getattr(config.model, "targets", "answer")
  if targets not in LOSSES:
    raise InputError(f"config.model.targets '{targets}' is not one of {tuple(LOSSES)}")
  return LOSSES[targets]


def multiple_choice(logits, choice_index):
  """Index of the best-scoring choice among those in the answer table.

  When none of a question's choices is in the table the model has no score for any of
  them and the first choice (file order) is answered.
  """
  scores = jnp.take_along_axis(logits, jnp.maximum(choice_index, 0), axis=-1)
  scores = jnp.where(choice_index >= 0, scores, -jnp.inf)
  return jnp.argmax(scores, axis=-1)  # all -inf -> 0, the first choice


def _accuracy(pred_ids, batch):
  return vqa_accuracy.question_accuracy(pred_ids, batch["gt_ids"], batch["gt_dup"], batch["gt_valid"])


def answers(outputs, batch):
  """The answer-table index of each question's answer, and its choice's index when the
  questions have multiple choices; a generative model's outputs (`tokens`, its replies, and
  `choice_scores` [B, C]: each choice's likelihood) give its replies and the likeliest choice."""
  if isinstance(outputs, dict):
    out = {"tokens": outputs["tokens"]}
    if "choice_index" in batch:
      out["mc_choice"] = jnp.argmax(outputs["choice_scores"], axis=-1)  # all -inf -> 0, the first choice
    return out
  out = {"answer": jnp.argmax(outputs, axis=-1)}
  if "choice_index" in batch:
    out["mc_choice"] = multiple_choice(outputs, batch["choice_index"])
  return out


def predict(outputs, batch, table_ids):
  """Per-question predictions and official accuracies, open-ended (a generative model's: scored on the
  host, `write_results`) and multiple-choice."""
  out = answers(outputs, batch)
  if "answer" in out:
    out["accuracy"] = _accuracy(vqa_accuracy.pred_ids_from_table(
        out["answer"], batch["unanimous"], table_ids["raw_ids"], table_ids["norm_ids"], xp=jnp), batch)
  if "choice_index" in batch:
    choice = out["mc_choice"]
    pick = lambda ids: jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
    mc_ids = jnp.where(batch["unanimous"], pick(batch["choice_raw"]), pick(batch["choice_norm"]))
    out["mc_accuracy"] = _accuracy(mc_ids, batch)
  return out


def metric_sums(predictions, batch, num_answer_types: int, num_question_types: int):
  """Masked (sum, count) pairs: overall, per answer type and per question type."""
  mask = batch["mask"].astype(jnp.float32)
  by_answer_type = jax.nn.one_hot(batch["answer_type"], num_answer_types) * mask[:, None]
  by_question_type = jax.nn.one_hot(batch["question_type"], num_question_types) * mask[:, None]
  sums = {"count": mask.sum(), "count_per_answer_type": by_answer_type.sum(0),
          "count_per_question_type": by_question_type.sum(0)}
  for name in ("accuracy", "mc_accuracy"):
    if name in predictions:
      acc = predictions[name]
      sums[name] = (acc * mask).sum()
      sums[f"{name}_per_answer_type"] = acc @ by_answer_type
      sums[f"{name}_per_question_type"] = acc @ by_question_type
  return sums


# ---------------------------------------------------------------------------- evaluation

def eval_keys(data: vqa_dataset.VQAData) -> tuple[str, ...]:
  return EVAL_KEYS + (MC_KEYS if "choice_index" in data.val else ())


def make_eval_step(model, data: vqa_dataset.VQAData, mesh):
  """(params, batch) -> (predictions, metric sums), to be jitted."""
  table_ids = jax.device_put(data.table_ids, sharding.replicated(mesh))
  num_types = (len(ANSWER_TYPES), len(data.question_types))

  def eval_step(params, batch):
    logits = model.apply({"params": params}, batch, train=False)
    predictions = predict(logits, batch, table_ids)
    return predictions, metric_sums(predictions, batch, *num_types)

  return eval_step


def summarise(totals) -> dict[str, float]:
  """Accuracies in percent, overall and per answer type."""
  metrics = {}
  for name in ("accuracy", "mc_accuracy"):
    if name not in totals:
      continue
    metrics[name] = 100 * totals[name] / totals["count"]
    for i, answer_type in enumerate(ANSWER_TYPES):
      count = totals["count_per_answer_type"][i]
      if count:
        metrics[f"{name}/{answer_type}"] = 100 * totals[f"{name}_per_answer_type"][i] / count
  return {k: float(v) for k, v in metrics.items()}


def replies(enc: vqa_dataset.Encoders, tokens) -> list[str]:
  """A generative model's replies in words: its tokens decoded by the run's text encoder, stripped."""
  return [reply.strip() for reply in enc.text.encoder.decode(tokens)]


def reply_metrics(data: vqa_dataset.VQAData, answered: list[str]) -> dict[str, float]:
  """The official open-ended accuracy (percent, overall and per answer type) of replies in words, one
  per val question in split order (cleaned, or normalised where the annotators disagree, as `vqaEval.py`)."""
  val = data.val
  pred_ids = vqa_accuracy.encode_predictions(answered, val["unanimous"], data.encoders.interner)
  accuracy = vqa_accuracy.question_accuracy(pred_ids, val["gt_ids"], val["gt_dup"], val["gt_valid"], xp=np)
  metrics = {"accuracy": 100 * float(accuracy.mean())}
  for i, answer_type in enumerate(ANSWER_TYPES):
    of_type = val["answer_type"] == i
    if of_type.any():
      metrics[f"accuracy/{answer_type}"] = 100 * float(accuracy[of_type].mean())
  return metrics


def write_results(out_dir: str, config, data, predictions: dict, metrics: dict) -> dict[str, float]:
  """The official results files of the val predictions (host arrays in split order); a generative
  model's replies scored here (`reply_metrics`), returned."""
  questions = [q for q, _ in data.val_records]
  host = {}
  if "tokens" in predictions:
    answered = replies(data.encoders, predictions["tokens"])
    host = reply_metrics(data, answered)
    metrics = {**metrics, **host}
  else:
    answered = [data.answers.answers[i] for i in predictions["answer"]]
  predicted = {"OpenEnded": {q["question_id"]: a for q, a in zip(questions, answered)}}
  if "mc_choice" in predictions:
    predicted["MultipleChoice"] = {q["question_id"]: q["multiple_choices"][c]
                                   for q, c in zip(questions, predictions["mc_choice"])}
  results.write_official(out_dir, config, data, config.name, predicted, metrics)
  return host


def table(name: str, metrics: dict[str, float]) -> str:
  return reports.accuracy_table({name: metrics})


# ---------------------------------------------------------------------------- test files

def read_test(config, enc: vqa_dataset.Encoders, store, path: str) -> TestFile:
  test = vqa_dataset.read_test(config, enc, store, path)
  test.keys = INPUT_KEYS + ("question_id",) + (("choice_index",) if "choice_index" in test.arrays else ())
  return test


def make_predict_step(model):
  """(params, batch) -> {answer[, mc_choice]}, to be jitted."""
  return lambda params, batch: answers(model.apply({"params": params}, batch, train=False), batch)


def write_submission(out_dir: str, config, enc: vqa_dataset.Encoders, test: TestFile,
                     predictions: dict) -> list[str]:
  """The server's results files of a test split: every question once, in file order."""
  answered = (replies(enc, predictions["tokens"]) if "tokens" in predictions
              else [enc.answers.answers[i] for i in predictions["answer"]])
  data_format = formats.FORMATS[test.info["format"]]
  key = data_format.result_key
  predicted = {"OpenEnded": [{key: q[key], "answer": a} for q, a in zip(test.records, answered)]}
  if "mc_choice" in predictions:
    predicted["MultipleChoice"] = [{key: q[key], "answer": q["multiple_choices"][c]}
                                   for q, c in zip(test.records, predictions["mc_choice"])]
  return results.write_submission(out_dir, data_format, config.name, test.info, predicted)
