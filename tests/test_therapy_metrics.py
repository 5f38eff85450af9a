"""AnswerTherapy challenge metrics against hand-computed and independently computed
values: precision / recall with undefined cases, class weights, IoU / IoU-PQ sums on
device, the RLE export."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pycocotools import mask as coco_mask

from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import files as therapy_files
from vqajax.answertherapy import grounding_class, grounding_mask, iou, masks
from vqajax.answertherapy import groups as therapy_groups
from vqajax.answertherapy import precision_recall as pr


def test_precision_recall_by_hand_with_undefined_cases():
  # labels:    s s s s m m   (source 0 0 0 1 1 1), last row padding
  # predicted: s m s m m s
  actual = jnp.array([0, 0, 0, 0, 1, 1, 1])
  predicted = jnp.array([0, 1, 0, 1, 1, 0, 1])
  batch = {"mask": jnp.array([1, 1, 1, 1, 1, 1, 0], bool), "source": jnp.array([0, 0, 0, 1, 1, 1, 1]),
           "label": actual}
  sums = jax.jit(pr.confusion_sums)(predicted, actual, therapy_groups.weights(batch))
  np.testing.assert_array_equal(sums["true_positive"], [[2, 1], [2, 0], [0, 1]])
  np.testing.assert_array_equal(sums["predicted"], [[3, 3], [2, 1], [1, 2]])
  np.testing.assert_array_equal(sums["actual"], [[4, 2], [3, 0], [1, 2]])
  metrics = grounding_class.summarise(jax.device_get(sums))
  assert metrics["precision/single"] == pytest.approx(100 * 2 / 3)
  assert metrics["recall/single"] == pytest.approx(50.0)
  assert metrics["precision/multiple"] == pytest.approx(100 / 3)
  assert metrics["recall/multiple"] == pytest.approx(50.0)
  assert metrics["accuracy"] == pytest.approx(50.0)
  assert metrics["balanced_accuracy"] == pytest.approx(50.0)
  assert metrics["VQAv2/precision/multiple"] == 0.0  # one predicted, none right
  assert "VQAv2/recall/multiple" not in metrics      # no multiple in VQAv2: undefined
  assert metrics["VizWiz/precision/single"] == 0.0 and metrics["VizWiz/recall/single"] == 0.0
  # the naive baselines: always single never predicts multiple (precision undefined)
  assert metrics["always_single/precision/single"] == pytest.approx(100 * 4 / 6)
  assert metrics["always_single/recall/single"] == 100.0
  assert "always_single/precision/multiple" not in metrics
  assert metrics["always_single/recall/multiple"] == 0.0
  assert metrics["always_multiple/precision/multiple"] == pytest.approx(100 * 2 / 6)
  assert "always_multiple/precision/single" not in metrics
  text = grounding_class.table("model", metrics)
  assert "| all | always single | 66.67 | 100.00 | - | 0.00 |" in text
  assert "| all | always multiple | - | 0.00 | 33.33 | 100.00 |" in text
  assert "| VQAv2 | model | 100.00 | 66.67 | 0.00 | - |" in text


def test_class_weights_from_train_frequencies():
  np.testing.assert_allclose(therapy_dataset.class_weights(np.array([0, 0, 0, 1])), [4 / 6, 2.0])
  np.testing.assert_allclose(therapy_dataset.class_weights(np.array([0, 0])), [0.5, 0.0])
  labels = np.array([0] * 84 + [1] * 16)
  weights = therapy_dataset.class_weights(labels)[labels]
  assert weights[labels == 0].sum() == pytest.approx(weights[labels == 1].sum())


def test_weighted_loss_by_hand():
  logits = jnp.array([[0.0, 0.0], [2.0, 0.0]])
  batch = {"label": jnp.array([1, 0]), "weight": jnp.array([3.0, 1.0])}
  ce = [np.log(2), np.log(1 + np.exp(-2.0))]
  assert float(grounding_class.loss(logits, batch)) == pytest.approx((3 * ce[0] + ce[1]) / 4, rel=1e-6)


def test_iou_sums_on_device_equal_a_numpy_loop():
  rng = np.random.default_rng(0)
  b, a, g = 16, 4, 5
  pred = rng.random((b, a, g, g)) < 0.4
  gt = rng.random((b, a, g, g)) < 0.3
  gt[0, 0] = pred[0, 0] = False  # empty vs empty counts 1
  valid = np.arange(a)[None] < rng.integers(2, 5, b)[:, None]
  batch = {"mask": np.arange(b) < 13, "source": rng.integers(0, 2, b), "label": rng.integers(0, 2, b)}
  valid = valid & batch["mask"][:, None]
  groups = therapy_groups.weights({k: jnp.asarray(v) for k, v in batch.items()}, by_label=True)
  sums = jax.device_get(jax.jit(iou.group_sums)(pred, gt, valid, groups))
  for s, name in enumerate(therapy_groups.BY_SOURCE_AND_LABEL):
    member = []
    for q in range(b):
      parts = name.split("/") if name else []
      member.append(batch["mask"][q] and all(
          p == therapy_files.SOURCES[batch["source"][q]] or p == therapy_groups.LABELS[batch["label"][q]]
          for p in parts))
    per_question, per_answer = [], []
    for q in np.flatnonzero(member):
      ious = []
      for j in np.flatnonzero(valid[q]):
        union = (pred[q, j] | gt[q, j]).sum()
        ious.append(1.0 if union == 0 else (pred[q, j] & gt[q, j]).sum() / union)
      per_question.append(np.mean(ious))
      per_answer += ious
    assert sums["questions"][s] == len(per_question)
    assert sums["iou_pq"][s] == pytest.approx(sum(per_question), rel=1e-5)
    assert sums["iou"][s] == pytest.approx(sum(per_answer), rel=1e-5)
    if member and any(member):
      keep = np.array(member)
      assert sums["iou_pq"][s] / sums["questions"][s] == pytest.approx(
          iou.iou_pq(pred[keep], gt[keep], valid[keep], xp=np), rel=1e-5)


# a byte a pixel, 4 to a word: 1 pixel (padded), a 14x14 grid, the most pixels whose counts fill a 10-bit field
# (1023, padded; every pixel set in row 1); a bit a pixel: at iou.PACKED_PIXELS, and with padding
@pytest.mark.parametrize("shape", [(1, 1), (14, 14), (31, 33), (32, 32), (33, 40)])
def test_jitted_iou_equals_pixel_counts(shape):
  rng = np.random.default_rng(sum(shape))
  pred, gt = rng.random((6,) + shape) < 0.5, rng.random((6,) + shape) < 0.3
  pred[0], gt[0] = False, False  # empty vs empty: 1
  pred[1], gt[1] = True, True
  pred[2], gt[2] = True, False  # every pixel predicted, none true: 0
  inter, union = (pred & gt).sum((1, 2)), (pred | gt).sum((1, 2))
  expected = np.where(union > 0, inter / np.maximum(union, 1), 1.0)
  np.testing.assert_allclose(jax.jit(iou.iou)(pred, gt), expected, rtol=1e-6)
  np.testing.assert_allclose(iou.iou(pred, gt, xp=np), expected, rtol=1e-6)


def test_rle_export_decodes_to_the_predicted_mask():
  rng = np.random.default_rng(1)
  grid = rng.random((2, 4, 14, 14)) < 0.5
  polygon = np.array([[0, 0], [10, 0], [10, 10]], np.float64)
  sample = therapy_files.Sample(path="f", index=0, source="VizWiz", image_id="VizWiz_val_00000001.jpg",
                                question_id=None, question="q?", answers=("a", "b"), polygons=(polygon,) * 2,
                                width=101, height=75, answer_type="other", label="multiple")
  records = grounding_mask.result_records([sample], grounding_mask.predicted_rles([sample], grid[:1]))
  assert [r["answer"] for r in records] == ["a", "b"]
  for j, record in enumerate(records):
    assert isinstance(record["mask"]["counts"], str) and record["mask"]["size"] == [75, 101]
    decoded = coco_mask.decode({"size": record["mask"]["size"], "counts": record["mask"]["counts"].encode()})
    assert decoded.shape == (75, 101)
    # every pixel has its cell's value; cell (r, c) holds rows with r = i * 14 // 75
    rows, cols = np.arange(75) * 14 // 75, np.arange(101) * 14 // 101
    np.testing.assert_array_equal(decoded.astype(bool), grid[0, j][rows][:, cols])
    centres = decoded[(np.arange(14) * 75 + 37) // 14][:, (np.arange(14) * 101 + 50) // 14]
    np.testing.assert_array_equal(centres.astype(bool), grid[0, j])
  np.testing.assert_array_equal(masks.upsample(grid[0, 0], 14, 14), grid[0, 0])


def test_task_registry_names_its_tasks_and_rejects_others():
  from vqajax import cli
  from vqajax.core.errors import InputError
  from vqajax.core.task import Task
  assert sorted(cli.tasks()) == ["grounding_class", "grounding_mask", "vqa"]
  assert all(isinstance(task, Task) for task in cli.tasks().values())  # the contract's members
  assert cli.task_of(types.SimpleNamespace(task="grounding_mask")) is grounding_mask
  with pytest.raises(InputError, match="config.task 'grounding' is not one of"):
    cli.task_of(types.SimpleNamespace(task="grounding"))
