"""The VQA classification task: loss, predictions and masked metric sums (all jittable)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from vqajax.data.pipeline import INPUT_KEYS
from vqajax.metrics import vqa_accuracy

EVAL_KEYS = INPUT_KEYS + ("label", "question_id", "answer_type", "question_type",
                          "gt_ids", "gt_dup", "gt_valid", "unanimous")
MC_KEYS = ("choice_index", "choice_raw", "choice_norm")


def loss(logits, labels):
  """Mean softmax cross-entropy over examples whose answer is in the table (label >= 0)."""
  valid = labels >= 0
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
  return jnp.sum(jnp.where(valid, ce, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


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


def predict(logits, batch, table_ids):
  """Per-question predictions and official accuracies, open-ended and multiple-choice."""
  answer = jnp.argmax(logits, axis=-1)
  out = {"answer": answer, "accuracy": _accuracy(
      vqa_accuracy.pred_ids_from_table(answer, batch["unanimous"], table_ids["raw_ids"],
                                       table_ids["norm_ids"], xp=jnp), batch)}
  if "choice_index" in batch:
    choice = multiple_choice(logits, batch["choice_index"])
    pick = lambda ids: jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
    mc_ids = jnp.where(batch["unanimous"], pick(batch["choice_raw"]), pick(batch["choice_norm"]))
    out.update(mc_choice=choice, mc_accuracy=_accuracy(mc_ids, batch))
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
