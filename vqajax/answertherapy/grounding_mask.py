"""Challenge 2 of VQA-AnswerTherapy (paper section 4.2): a mask for every answer's
grounding, over grid image features. (Task contract: `core/task.py`.)

Target: each answer's grid mask (`therapy_dataset`: the share of each cell its polygon
covers). Loss: per-cell binary cross-entropy of the predicted logit against that share,
averaged over the cells of the valid answers. Evaluation on the device is on the grid:
the predicted mask is sigmoid >= 0.5, the ground truth is share >= 0.5, both [G, G]; IoU
per answer grounding (`iou.iou`, empty vs empty = 1) and IoU-PQ (mean over a question's
groundings, then over questions) as masked sums under jit, overall, per source, per
grounding label (single / multiple) and per source x label (`VizWiz/multiple/iou_pq`).
The "whole image" baseline (every cell on, for every answer) is scored the same way
(`whole_image/...`). An I+Q model has one mask per question: every answer slot gets the
same text, so the same mask is compared with each answer's grounding.
A generative model (PaliGemma, `nn/paligemma_ground.py`) outputs its replies' tokens instead: the
device sums the whole image's alone, and the host reads the replies as masks and scores them as
the device would (`reply_metrics`, in `write_results`), with `malformed` (replies scored empty).

Pixel level (`pixel/iou_pq`, `whole_image/pixel/...`), when the results are written: each
predicted grid mask upsampled to its image against the polygon rasterised at the image
size (`pixel_iou`), as a user scoring results.json would; the unprefixed names are the
grid level. Single vs multiple from the masks (`from_masks`, under jit on the grid masks:
single when every pair of a question's valid answers' masks has IoU > 0.9), scored as
Table 4 (`from_masks/precision/multiple`, ..., with the naive baselines `always_single/...`;
an I+Q model, one mask per question, always answers single).

Results per step: results.json, one record per val answer with its predicted mask
upsampled to the image (`masks.upsample_rle`) as a COCO RLE (`counts` a str),
metrics.json, table5 (IoU-PQ and IoU overall / per source), table6 (IoU-PQ by single /
multiple), both with a row per level (`masks` grid | pixel), and table4 (from masks).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vqajax.answertherapy import configs, from_masks, iou, masks, pixel_iou, submission, table4
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import groups as therapy_groups
from vqajax.answertherapy import models as grounding
from vqajax.answertherapy import precision_recall as pr
from vqajax.answertherapy.groups import BY_SOURCE, BY_SOURCE_AND_LABEL, LABELS, key
from vqajax.core import tables
from vqajax.nn import paligemma_ground

PIPELINE_TAG = "image-segmentation"  # the Hub's pipeline tag of its runs (an exported bundle's model card)
BEST_METRIC = "iou_pq"
FIELDS = configs.FIELDS
rules = configs.rules
CHECKS = configs.CHECKS
EVAL_DATA = configs.EVAL_DATA
LENGTHS = therapy_dataset.LENGTHS
TEXT_KEYS = therapy_dataset.TEXT_KEYS
TRAIN_KEYS = TEXT_KEYS + ("grid_mask",)
# (row name, sums, metric prefix) of Tables 5 and 6; the model's metrics have no prefix.
METHODS = (("whole image", "whole_image", "whole_image/"), ("model", "model", ""))
PIXEL = "pixel/"
LEVELS = (("grid", ""), ("pixel", PIXEL))  # grid-level metrics keep the unprefixed names
FROM_MASKS = "from_masks/"
TABLE4 = (FROM_MASKS, " from masks")  # Table 4 across runs (`report.py`): its metrics' prefix, its row name's suffix
GROUNDING = PIXEL + "iou_pq"  # the grounding table across runs (`report.py`): what a run's written results hold
BASELINE = "whole_image/"  # the whole image's metrics, which runs on the same questions share
_GROUPS = "|".join(re.escape(g + "/") for g in BY_SOURCE_AND_LABEL if g)
METRICS = (rf"({'|'.join(re.escape(p) for _, _, p in METHODS)})({'|'.join(re.escape(p) for _, p in LEVELS)})"
           rf"({_GROUPS})?(iou_pq|iou)|{table4.metric_pattern(FROM_MASKS)}|malformed")  # summarise's and the host's names


def load(config):
  return therapy_dataset.load(config, grid_targets=True)


def load_eval(config, data):
  return therapy_dataset.with_val(config, data, grid_targets=True)


sizes = therapy_dataset.sizes


initial_params = grounding.initial_params
frozen = grounding.frozen


def build_model(cfg, enc):
  return grounding.build(cfg, enc, "grounding_mask")


encoders_from_tables = therapy_dataset.Encoders.from_tables
open_store = therapy_dataset.open_store


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
  return TRAIN_KEYS + ("label", "source")


def _model_sums(pred, batch) -> dict:
  """IoU sums of predicted grid masks `pred` [B, A, G, G] and Table 4's sums of the decision from them."""
  gt, valid = batch["grid_mask"] >= 0.5, batch["answer_valid"] & batch["mask"][:, None]
  decided = from_masks.multiple(pred, valid).astype(jnp.int32)
  return {"model": iou.group_sums(pred, gt, valid, therapy_groups.weights(batch, by_label=True)),
          "from_masks": pr.confusion_sums(decided, batch["label"], therapy_groups.weights(batch))}


def make_eval_step(model, data, mesh):
  """(params, batch) -> ({mask}, IoU sums of the model and the whole image), to be jitted; a generative
  model's outputs ({tokens}, its replies) are read into masks and scored on the host (`write_results`)."""
  del data, mesh

  def eval_step(params, batch):
    outputs = model.apply({"params": params}, batch, train=False)
    gt, valid = batch["grid_mask"] >= 0.5, batch["answer_valid"] & batch["mask"][:, None]
    sums = {"whole_image": iou.group_sums(jnp.ones_like(gt), gt, valid, therapy_groups.weights(batch, by_label=True))}
    if isinstance(outputs, dict):
      return {"tokens": outputs["tokens"]}, sums
    pred = outputs >= 0.0  # sigmoid >= 0.5
    return {"mask": pred}, {**sums, **_model_sums(pred, batch)}

  return eval_step


def _named(sums, prefix: str) -> dict[str, float]:
  """IoU-PQ and IoU in percent per group (BY_SOURCE_AND_LABEL) of `iou.group_sums`."""
  metrics = {}
  for g, group in enumerate(BY_SOURCE_AND_LABEL):
    for name, count in (("iou_pq", "questions"), ("iou", "groundings")):
      if sums[count][g] > 0:
        metrics[prefix + key(group, name)] = float(100 * sums[name][g] / sums[count][g])
  return metrics


def summarise(totals) -> dict[str, float]:
  """Grid-level IoU-PQ and IoU of the model and the whole-image baseline, and Table 4 of
  the decision from the masks with the naive baselines (module docstring)."""
  metrics = {}
  for _, sums, prefix in METHODS:
    if sums in totals:  # a generative model's are the host's (`write_results`)
      metrics.update(_named(totals[sums], prefix))
  if "from_masks" in totals:
    metrics.update(table4.with_baselines(totals["from_masks"], FROM_MASKS))
  return metrics


def _levels(name: str) -> list[tuple[str, str, str]]:
  """(method, level, metric prefix) of the rows of Tables 5 and 6."""
  return [(method if method != "model" else name, level, prefix + level_prefix)
          for method, _, prefix in METHODS for level, level_prefix in LEVELS]


def table5(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """IoU-PQ and IoU overall and per source, grid and pixel level (the paper's Table 5 shape)."""
  columns = ["method", "masks"] + [f"{g or 'all'} {m}" for g in BY_SOURCE for m in ("IoU-PQ", "IoU")]
  rows = [{"method": method, "masks": level,
           **{f"{g or 'all'} {m}": metrics.get(prefix + key(g, n))
              for g in BY_SOURCE for m, n in (("IoU-PQ", "iou_pq"), ("IoU", "iou"))}}
          for method, level, prefix in _levels(name)]
  return columns, rows


def table6(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """IoU-PQ by grounding label, overall and per source, grid and pixel level (Table 6 shape)."""
  groups = [key(g, label) for g in BY_SOURCE for label in LABELS]
  rows = [{"method": method, "masks": level, **{g: metrics.get(prefix + key(g, "iou_pq")) for g in groups}}
          for method, level, prefix in _levels(name)]
  return ["method", "masks"] + groups, rows


def grounding_table(methods: Sequence[tuple[str, Mapping[str, float], str]]) -> tuple[list[str], list[dict]]:
  """One table of every grounding row (`vqajax therapy grounding`): per (method name, metrics, metric
  prefix), a row per level (grid, pixel) with IoU-PQ and IoU overall, IoU-PQ per source and per label."""
  groups = [(f"{g or 'all'} IoU-PQ", key(g, "iou_pq")) for g in BY_SOURCE] + [("all IoU", "iou")]
  groups += [(f"{label} IoU-PQ", key(label, "iou_pq")) for label in LABELS]
  rows = [{"method": method, "masks": level, **{column: metrics.get(prefix + level_prefix + name)
                                                 for column, name in groups}}
          for method, metrics, prefix in methods for level, level_prefix in LEVELS]
  return ["method", "masks"] + [column for column, _ in groups], rows


def table4_rows(name: str, metrics: dict[str, float]) -> tuple[list[str], list[dict]]:
  """Table 4 of the naive baselines and the decision from the masks (`table4.table`)."""
  return table4.table(table4.baseline_rows(metrics) + [(f"{name} from masks", metrics, FROM_MASKS)])


def table(name: str, metrics: dict[str, float]) -> str:
  return "\n".join(tables.markdown(*t(name, metrics)) for t in (table5, table6, table4_rows))


def predicted_rles(samples, predicted: np.ndarray) -> list[list[dict]]:
  """Per sample, its answers' predicted grid masks ([N, A, G, G] boolean) upsampled to the
  image as COCO RLEs (`masks.upsample_rle`)."""
  return [[masks.upsample_rle(grid, s.height, s.width) for grid in grids[:len(s.answers)]]
          for s, grids in zip(samples, predicted)]


def result_records(samples, rles: list[list[dict]]) -> list[dict]:
  """One record per answer: ids, question, answer and its predicted mask as a COCO RLE at
  the image size (`predicted_rles`; `counts` a str)."""
  records = []
  for sample, answer_rles in zip(samples, rles):
    ids = {"image_id": sample.image_id}
    if sample.question_id is not None:
      ids["question_id"] = sample.question_id
    for answer, rle in zip(sample.answers, answer_rles):
      records.append({**ids, "source": sample.source, "question": sample.question, "answer": answer,
                      "label": sample.label, "mask": masks.to_json(rle)})
  return records


def pixel_metrics(data, rles: list[list[dict]], max_answers: int) -> dict[str, float]:
  """The pixel-level IoU-PQ and IoU of the model and the whole image (`pixel_iou`), per group."""
  val = data.val
  groups = therapy_groups.weights({"mask": np.ones(len(val["label"]), bool), "source": val["source"],
                                   "label": val["label"]}, by_label=True)
  sums = pixel_iou.group_sums(data.val_samples, rles, np.asarray(groups), max_answers)
  return {k: v for _, method, prefix in METHODS for k, v in _named(sums[method], prefix + PIXEL).items()}


def reply_metrics(config, data, tokens) -> tuple[list[list[dict]], dict[str, float]]:
  """(per sample its answers' pixel RLEs, metrics) of a generative model's replies [N, A, L] read as
  masks (`nn/paligemma_ground.reply_masks`): the grid level's as the device's, Table 4 from the masks,
  and `malformed`, the answer slots whose reply is not a list of objects (scored as empty masks)."""
  grid, rles, malformed = paligemma_ground.reply_masks(data.encoders.text.encoder, np.asarray(tokens),
                                                       data.val_samples, config.model.mask_grid,
                                                       paligemma_ground.decoder(config.model))
  batch = {k: data.val[k] for k in ("grid_mask", "answer_valid", "label", "source")}
  totals = jax.device_get(_model_sums(grid, {**batch, "mask": np.ones(len(grid), bool)}))
  return rles, {**summarise(totals), "malformed": float(malformed)}


def write_results(out_dir: str, config, data, predictions: dict, metrics: dict) -> dict[str, float]:
  """Scores the masks at the pixel level (a generative model's replies read as masks first,
  `reply_metrics`), then writes results.json (RLE per answer), metrics.json, table4, table5 and
  table6 .{md,csv,json}; returns the metrics computed here."""
  host = {}
  if "tokens" in predictions:
    rles, host = reply_metrics(config, data, predictions["tokens"])
  else:
    rles = predicted_rles(data.val_samples, predictions["mask"])
  pixel = {**host, **pixel_metrics(data, rles, config.data.max_answers)}
  metrics = {**metrics, **pixel}
  tables.write_tables(out_dir, {name: rows(config.name, metrics) for name, rows in
                                (("table4", table4_rows), ("table5", table5), ("table6", table6))},
                      beside={os.path.join(out_dir, "results.json"): result_records(data.val_samples, rles),
                              os.path.join(out_dir, "metrics.json"): metrics})
  return pixel


read_test = therapy_dataset.read_test


def make_predict_step(model):
  """(params, batch) -> {mask} (sigmoid >= 0.5 per cell), or a generative model's {tokens}, to be jitted."""

  def predict_step(params, batch):
    outputs = model.apply({"params": params}, batch, train=False)
    return {"tokens": outputs["tokens"]} if isinstance(outputs, dict) else {"mask": outputs >= 0.0}

  return predict_step


def write_submission(out_dir: str, config, enc, test, predictions: dict) -> list[str]:
  """Each test answer's mask as a COCO RLE at the image size (`answertherapy/submission.py`); a
  generative model's replies read as masks (`nn/paligemma_ground.reply_masks`)."""
  if "tokens" in predictions:
    _, rles, _ = paligemma_ground.reply_masks(enc.text.encoder, np.asarray(predictions["tokens"]), test.records,
                                              config.model.mask_grid, paligemma_ground.decoder(config.model))
  else:
    rles = predicted_rles(test.records, predictions["mask"])
  return submission.write(out_dir, config.name, test, [{"grounding_masks": [masks.to_json(r) for r in answer_rles]}
                                                      for answer_rles in rles])
