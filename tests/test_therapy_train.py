"""Both AnswerTherapy challenges end to end through train_and_evaluate / evaluate_checkpoints
on the tiny synthetic set (every variant), and the text-only classifier on the released
train files; the written results are re-scored independently on the host."""

import json
import os
import re

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from experiments.therapy import grounding_class, grounding_mask
from vqajax import cli
from vqajax.answertherapy import configs as therapy_configs
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import files as therapy_files
from vqajax.core import config as config_lib
from vqajax.core import evals, train

pytestmark = pytest.mark.slow  # every test trains

STEPS = 2


def _config(module, arg, **changes):
  steps = {k: STEPS for k in ("num_train_steps", "eval_every_steps", "log_every_steps")}
  return config_lib.override(module.get_config(arg), {**steps, **changes})


def _read(path):
  with open(path) as f:
    return json.load(f)


@pytest.mark.parametrize("inputs", ["q", "q+a", "i+q", "i+q+a"])
def test_classifier_variant_trains_and_writes_table4(tiny_therapy, tmp_path, inputs):
  config = _config(grounding_class, "runlocal", **{"data.dir": tiny_therapy, "model.inputs": inputs})
  metrics = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path))["val"]
  out = tmp_path / "results" / f"step_{STEPS}"
  assert _read(out / "metrics.json") == {"step": STEPS, **metrics}
  assert all(re.fullmatch(cli.task_of(config).METRICS, name) for name in metrics)  # what best_metric may name
  predictions = _read(out / "predictions.json")
  val = [s for name in ("VQA_val.json", "VizWiz_val.json")
         for s in therapy_files.read_therapy(os.path.join(tiny_therapy, name))]
  assert [(p["image_id"], p["label"]) for p in predictions] == [(s.image_id, s.label) for s in val]
  for source in ("", "VizWiz"):  # precision / recall re-counted from the predictions file
    rows = [p for p in predictions if source in ("", p["source"])]
    for label in ("single", "multiple"):
      tp = sum(p["predicted"] == p["label"] == label for p in rows)
      predicted = sum(p["predicted"] == label for p in rows)
      actual = sum(p["label"] == label for p in rows)
      prefix = f"{source}/" if source else ""
      assert metrics.get(f"{prefix}precision/{label}") == (
          pytest.approx(100 * tp / predicted) if predicted else None)
      assert metrics[f"{prefix}recall/{label}"] == pytest.approx(100 * tp / actual)
  table = (out / "table4.md").read_text()
  assert table.count("\n") == 2 + 9 and "| all | always single |" in table
  assert _read(out / "table4.json")[0]["multiple precision"] is None  # always single: "-"


@pytest.mark.parametrize("inputs", ["i+q", "i+q+a", "i+a"])
def test_mask_variant_trains_and_its_rle_results_rescore_to_its_metrics(tiny_therapy, tmp_path, inputs):
  config = _config(grounding_mask, "runlocal", **{"data.dir": tiny_therapy, "model.inputs": inputs})
  metrics = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path))["val"]
  out = tmp_path / "results" / f"step_{STEPS}"
  assert {"table5.md", "table6.md", "table5.csv", "results.json"} <= set(os.listdir(out))
  assert {"pixel/iou_pq", "whole_image/pixel/VizWiz/iou_pq", "from_masks/recall/single"} <= set(metrics)
  assert all(re.fullmatch(cli.task_of(config).METRICS, name) for name in metrics)  # what best_metric may name
  records = _read(out / "results.json")
  val = [s for name in ("VQA_val.json", "VizWiz_val.json")
         for s in therapy_files.read_therapy(os.path.join(tiny_therapy, name))]
  assert len(records) == sum(len(s.answers) for s in val)
  per_question, k = [], 0
  for s in val:  # decode each RLE, read the grid back at cell centres, IoU against the gt grid
    gt = therapy_dataset.grid_masks(s, 14, len(s.answers)) >= 0.5
    ious = []
    for j in range(len(s.answers)):
      decoded = coco_mask.decode({"size": records[k]["mask"]["size"], "counts": records[k]["mask"]["counts"].encode()})
      assert records[k]["answer"] == s.answers[j] and decoded.shape == (s.height, s.width)
      centres = lambda side: (2 * np.arange(14) + 1) * side // 28  # noqa: E731  # the pixel at each cell's centre
      pred = decoded[centres(s.height)][:, centres(s.width)] > 0
      union = (pred | gt[j]).sum()
      ious.append(1.0 if union == 0 else (pred & gt[j]).sum() / union)
      k += 1
    if inputs == "i+q":  # one mask per question
      assert len({records[k - 1 - j]["mask"]["counts"] for j in range(len(s.answers))}) == 1
    per_question.append(np.mean(ious))
  assert metrics["iou_pq"] == pytest.approx(100 * np.mean(per_question), abs=1e-3)
  assert metrics["whole_image/iou_pq"] < 100 and "single/iou_pq" in metrics


def test_eval_entry_reproduces_the_train_metrics(tiny_therapy, tmp_path):
  config = _config(grounding_mask, "runlocal", **{"data.dir": tiny_therapy})
  metrics = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path))["val"]
  assert evals.evaluate_checkpoints(cli.task_of(config), config, str(tmp_path))[STEPS]["val"] == pytest.approx(metrics, abs=1e-4)


@pytest.mark.skipif(not os.path.exists(os.path.join(therapy_configs.THERAPY_DIR, "VizWiz_train.json")),
                    reason="released AnswerTherapy train files not found ($VQAJAX_THERAPY_DIR)")
def test_text_only_classifier_on_the_released_files(tmp_path):
  config = _config(grounding_class, "real,runlocal", **{"data.dir": os.path.abspath(therapy_configs.THERAPY_DIR)})
  metrics = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path))["val"]
  run = _read(tmp_path / "run.json")["data"]
  assert run["train_questions"] + run["val_questions"] == 1648 + 2146
  assert run["val_questions"] == round(0.2 * 3794)
  assert metrics["always_multiple/precision/multiple"] == pytest.approx(100 * run["val_multiple"] / run["val_questions"])
  assert (tmp_path / "results" / f"step_{STEPS}" / "table4.md").exists()
