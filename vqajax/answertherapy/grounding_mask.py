"""Challenge 2 of VQA-AnswerTherapy (paper section 4.2): a mask for every answer's
grounding, over grid image features. (Task contract: `tasks/__init__.py`.)

Target: each answer's grid mask (`therapy_dataset`: the share of each cell its polygon
covers). Loss: per-cell binary cross-entropy of the predicted logit against that share,
averaged over the cells of the valid answers. Evaluation is on the grid: the predicted
mask is sigmoid >= 0.5, the ground truth is share >= 0.5, both [G, G]; IoU per answer
grounding (`metrics.iou`, empty vs empty = 1) and IoU-PQ (mean over a question's
groundings, then over questions) as masked sums under jit, overall, per source, per
grounding label (single / multiple) and per source x label (`VizWiz/multiple/iou_pq`).
The "whole image" baseline (every cell on, for every answer) is scored the same way
(`whole_image/...`). An I+Q model has one mask per question: every answer slot gets the
same text, so the same mask is compared with each answer's grounding.

Results per step: results.json, one record per val answer with its predicted mask
upsampled to the image (`masks.upsample`) as a COCO RLE (`counts` a str), metrics.json,
table5 (IoU-PQ and IoU overall / per source) and table6 (IoU-PQ by single / multiple).
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import optax

from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import groups as therapy_groups
from vqajax.answertherapy import iou, masks, submission
from vqajax.answertherapy import models as grounding
from vqajax.answertherapy.groups import BY_SOURCE, BY_SOURCE_AND_LABEL, LABELS, key
from vqajax.core import tables
from vqajax.core.files import write_atomic_many

BEST_METRIC = "iou_pq"
TEXT_KEYS = therapy_dataset.TEXT_KEYS
TRAIN_KEYS = TEXT_KEYS + ("grid_mask",)
METHODS = (("whole image", "whole_image/"),)


def load(config):
  return therapy_dataset.load(config, grid_targets=True)


sizes = therapy_dataset.sizes


def build_model(cfg, data):
  return grounding.build(cfg, data, "grounding_mask")


def loss(logits, batch):
  """Mean per-cell binary cross-entropy over the valid answers' cells."""
  bce = optax.sigmoid_binary_cross_entropy(logits, batch["grid_mask"]).mean(axis=(-2, -1))
  valid = batch["answer_valid"].astype(jnp.float32)
  return jnp.sum(valid * bce) / jnp.maximum(jnp.sum(valid), 1.0)


def make_loss(config):
  del config  # one loss
  return loss


def eval_keys(data) -> tuple[str, ...]:
  del data
  return TRAIN_KEYS + ("label", "source", "question_id")


def make_eval_step(model, data, mesh):
  """(params, batch) -> ({mask}, IoU sums of the model and the whole image), to be jitted."""
  del data, mesh

  def eval_step(params, batch):
    logits = model.apply({"params": params}, batch, train=False)
    pred, gt = logits >= 0.0, batch["grid_mask"] >= 0.5  # sigmoid >= 0.5
    valid = batch["answer_valid"] & batch["mask"][:, None]
    groups = therapy_groups.weights(batch, by_label=True)
    sums = {"model": iou.group_sums(pred, gt, valid, groups),
            "whole_image": iou.group_sums(jnp.ones_like(gt), gt, valid, groups)}
    return {"mask": pred}, sums

  return eval_step


def summarise(totals) -> dict[str, float]:
  """IoU-PQ and IoU in percent per group, of the model and the whole-image baseline."""
  metrics = {}
  for method, prefix in (("model", ""), ("whole_image", "whole_image/")):
    sums = totals[method]
    for g, group in enumerate(BY_SOURCE_AND_LABEL):
      for name, count in (("iou_pq", "questions"), ("iou", "groundings")):
        if sums[count][g] > 0:
          metrics[prefix + key(group, name)] = float(100 * sums[name][g] / sums[count][g])
  return metrics


def table5(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """IoU-PQ and IoU overall and per source (the paper's Table 5 shape)."""
  columns = ["method"] + [f"{g or 'all'} {m}" for g in BY_SOURCE for m in ("IoU-PQ", "IoU")]
  rows = [{"method": method, **{f"{g or 'all'} {m}": metrics.get(prefix + key(g, n))
                                for g in BY_SOURCE for m, n in (("IoU-PQ", "iou_pq"), ("IoU", "iou"))}}
          for method, prefix in METHODS + ((name, ""),)]
  return columns, rows


def table6(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """IoU-PQ by grounding label, overall and per source (the paper's Table 6 shape)."""
  groups = [key(g, label) for g in BY_SOURCE for label in LABELS]
  rows = [{"method": method, **{g: metrics.get(prefix + key(g, "iou_pq")) for g in groups}}
          for method, prefix in METHODS + ((name, ""),)]
  return ["method"] + groups, rows


def table(name: str, metrics: dict[str, float]) -> str:
  return tables.markdown(*table5(name, metrics)) + "\n" + tables.markdown(*table6(name, metrics))


def result_records(samples, predicted: np.ndarray) -> list[dict]:
  """One record per answer: ids, question, answer and its predicted mask as a COCO RLE
  at the image size; `predicted` [N, A, G, G] boolean."""
  records = []
  for sample, grids in zip(samples, predicted):
    ids = {"image_id": sample.image_id}
    if sample.question_id is not None:
      ids["question_id"] = sample.question_id
    for answer, mask in zip(sample.answers, answer_masks(sample, grids)):
      records.append({**ids, "source": sample.source, "question": sample.question, "answer": answer,
                      "label": sample.label, "mask": mask})
  return records


def answer_masks(sample, grids: np.ndarray) -> list[dict]:
  """The COCO RLE at the image size of each answer's predicted [G, G] grid mask."""
  return [masks.encode(masks.upsample(grid, sample.height, sample.width)) for _, grid in zip(sample.answers, grids)]


def write_results(out_dir: str, config, data, predictions: dict, metrics: dict) -> None:
  """results.json (RLE per answer), metrics.json, table5 and table6 .{md,csv,json}."""
  write_atomic_many({os.path.join(out_dir, "results.json"): result_records(data.val_samples, predictions["mask"]),
                     os.path.join(out_dir, "metrics.json"): metrics}, make_dirs=True)
  tables.write_table(out_dir, "table5", *table5(config.name, metrics))
  tables.write_table(out_dir, "table6", *table6(config.name, metrics))


def read_test(config, data, path: str) -> therapy_dataset.TestFile:
  test = therapy_dataset.read_test(config, data, path)
  test.keys = TEXT_KEYS + ("question_id",)
  return test


def make_predict_step(model, data, mesh):
  """(params, batch) -> {mask} (sigmoid >= 0.5 per cell), to be jitted."""
  del data, mesh
  return lambda params, batch: {"mask": model.apply({"params": params}, batch, train=False) >= 0.0}


def write_submission(out_dir: str, config, data, test, predictions: dict) -> list[str]:
  """Each test answer's mask as a COCO RLE at the image size (`answertherapy/submission.py`)."""
  del data
  return submission.write(out_dir, config.name, test, [
      {"grounding_masks": answer_masks(s, grids)}
      for s, grids in zip(test.samples, predictions["mask"])])
