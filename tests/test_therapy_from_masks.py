"""Single vs multiple from predicted masks (the dataset's rule: single when every pair of
answers' masks has IoU > 0.9) on hand-made masks, the pixel-level IoU of upsampled grid
masks by hand, and both on a mask run over the tiny therapy set, re-counted from its
results.json with an independent rasteriser; `vqajax therapy table4` across runs."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.therapy import grounding_class, grounding_mask
from vqajax import cli
from vqajax.answertherapy import analysis, from_masks, masks, pixel_iou
from vqajax.answertherapy import files as therapy_files
from vqajax.core import config as config_lib
from vqajax.core import run_record, train

STEPS = 2


def _rectangle(x0, y0, x1, y1):
  return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)


def _masks(*boxes):
  """Boolean masks [len(boxes), 4, 12], each on over rows y0..y1-1, columns x0..x1-1 (None: empty)."""
  out = np.zeros((len(boxes), 4, 12), bool)
  for k, box in enumerate(boxes):
    if box is not None:
      x0, y0, x1, y1 = box
      out[k, y0:y1, x0:x1] = True
  return out


# (masks, valid answers, multiple?) with the IoUs worked out by hand
CASES = {
    "IoU 9 / 10, exactly 0.9, is multiple": (_masks((0, 0, 10, 1), (0, 0, 9, 1)), [1, 1], True),
    "IoU 10 / 11 > 0.9 is single": (_masks((0, 0, 10, 1), (0, 0, 11, 1)), [1, 1], False),
    "three answers, one pair at 10 / 20": (_masks((0, 0, 10, 2), (0, 0, 10, 2), (0, 0, 10, 1)), [1, 1, 1], True),
    "three answers, every pair above": (_masks((0, 0, 11, 1), (0, 0, 10, 1), (0, 0, 11, 1)), [1, 1, 1], False),
    "two empty masks are one grounding": (_masks(None, None), [1, 1], False),
    "an empty and a non-empty mask differ": (_masks(None, (0, 0, 1, 1)), [1, 1], True),
    "a padded answer is ignored": (_masks((0, 0, 5, 2), (0, 0, 5, 2), (5, 2, 10, 4)), [1, 1, 0], False),
    "one valid answer has no pair": (_masks((0, 0, 5, 2), (5, 2, 10, 4)), [1, 0], False),
}


@pytest.mark.parametrize("case", CASES)
def test_decision_from_hand_made_masks(case):
  stack, valid, expected = CASES[case]
  valid = np.array(valid, bool)
  assert bool(from_masks.multiple(stack, valid, xp=np)) is expected
  assert bool(jax.jit(from_masks.multiple)(jnp.asarray(stack), jnp.asarray(valid))) is expected
  assert from_masks.grounding(list(stack[valid])) == ("multiple" if expected else "single")


def test_batched_decisions_under_jit():
  names = ["IoU 9 / 10, exactly 0.9, is multiple", "IoU 10 / 11 > 0.9 is single", "two empty masks are one grounding"]
  batch = np.stack([CASES[n][0] for n in names])
  decided = jax.jit(from_masks.multiple)(jnp.asarray(batch), jnp.ones((3, 2), bool))
  np.testing.assert_array_equal(decided, [True, False, False])


def test_the_analysis_applies_the_same_rule_to_polygons():
  # 100 vs 90 pixels (IoU 0.9: multiple), 100 vs 91 (single), an empty polygon with a non-empty one
  def sample(*polygons):
    return therapy_files.Sample(path="f", index=0, source="VizWiz", image_id="i", question_id=None, question="q?",
                                answers=tuple("abc"[:len(polygons)]), polygons=polygons, width=20, height=20,
                                answer_type="other", label="single")
  square, short = _rectangle(0, 0, 10, 10), _rectangle(0, 0, 10, 9)
  plus_one = np.array([[0, 0], [10, 0], [10, 9], [1, 9], [1, 10], [0, 10]], np.float64)  # 91 pixels
  empty = _rectangle(3, 3, 3, 3)
  for polygons, expected in (((square, short), "multiple"), ((square, plus_one), "single"),
                             ((empty, empty), "single"), ((empty, square), "multiple")):
    assert analysis.ground(sample(*polygons)).grounding == expected
    assert from_masks.grounding([masks.polygon_mask(p, 20, 20) for p in polygons]) == expected


def test_pixel_iou_of_an_upsampled_grid_by_hand():
  # 2 x 2 grid, top-left cell on, in a 5 x 7 image: pixel (i, j) takes cell (i * 2 // 5, j * 2 // 7),
  # so the cell holds rows 0-2 and columns 0-3 (12 pixels). The rectangle x 0..2, y 0..5 covers
  # columns 0-1 of every row (10 pixels): intersection 6, union 16.
  grid = np.array([[True, False], [False, False]])
  sample = therapy_files.Sample(path="f", index=0, source="VizWiz", image_id="i", question_id=None, question="q?",
                                answers=("a", "b"), polygons=(_rectangle(0, 0, 2, 5), _rectangle(4, 3, 7, 5)),
                                width=7, height=5, answer_type="other", label="multiple")
  rles = [masks.upsample_rle(grid, 5, 7), masks.upsample_rle(~grid, 5, 7)]
  model, whole = pixel_iou.answer_ious(sample, rles)
  # answer b: the other three cells (23 pixels) hold all 6 pixels of x 4..7, y 3..5
  assert model == pytest.approx([6 / 16, 6 / 23]) and whole == pytest.approx([10 / 35, 6 / 35])
  sums = pixel_iou.group_sums([sample], [rles], np.ones((1, 1)), max_answers=3)
  assert sums["model"]["iou_pq"][0] == pytest.approx((6 / 16 + 6 / 23) / 2)
  assert sums["model"]["groundings"][0] == 2 and sums["whole_image"]["questions"][0] == 1


def test_pixel_iou_at_the_largest_image_side_without_image_size_masks():
  # 10,000 x 10,000: the cell is 5,000 x 5,000; the left half of the image holds it: IoU 1 / 2
  grid = np.array([[True, False], [False, False]])
  rle = masks.upsample_rle(grid, 10_000, 10_000)
  sample = therapy_files.Sample(path="f", index=0, source="VQAv2", image_id=1, question_id=1, question="q?",
                                answers=("a",), polygons=(_rectangle(0, 0, 5_000, 10_000),), width=10_000,
                                height=10_000, answer_type="other", label="single")
  assert pixel_iou.answer_ious(sample, [rle]) == ([0.5], [0.5])


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (13, 30), (75, 101)])
def test_upsampled_rle_decodes_to_each_pixels_cell(shape):
  from pycocotools import mask as coco_mask
  rng = np.random.default_rng(sum(shape))
  for p in (0.0, 0.5, 1.0):
    grid = rng.random((14, 14)) < p
    decoded = coco_mask.decode(masks.upsample_rle(grid, *shape)).astype(bool)
    rows = [min(r, 13) for r in (np.arange(shape[0]) * 14 // shape[0])]
    cols = [min(c, 13) for c in (np.arange(shape[1]) * 14 // shape[1])]
    np.testing.assert_array_equal(decoded, grid[np.ix_(rows, cols)])


@pytest.fixture(scope="module")
def mask_run(tiny_therapy, tmp_path_factory):
  config = config_lib.override(grounding_mask.get_config("runlocal"), {
      "data.dir": tiny_therapy, **{k: STEPS for k in ("num_train_steps", "eval_every_steps", "log_every_steps")}})
  workdir = str(tmp_path_factory.mktemp("mask_run"))
  metrics = train.train_and_evaluate(cli.task_of(config), config, workdir)["val"]  # the steps test_therapy_train compiles
  return workdir, metrics


def _read(path):
  with open(path) as f:
    return json.load(f)


def _centres(decoded, n=14):
  """The grid mask back from an upsampled one: the pixel at each cell's centre."""
  centre = lambda side: (2 * np.arange(n) + 1) * side // (2 * n)  # noqa: E731
  h, w = decoded.shape
  return decoded[centre(h)][:, centre(w)] > 0


def _iou(a, b):
  union = (a | b).sum()
  return 1.0 if union == 0 else (a & b).sum() / union


def _rasterised(polygon, height, width):
  """Pixel centres inside the polygon by the even-odd rule, row by row within its bounding
  box: an edge spans a row's centre line when exactly one end is at or below it; a centre
  is inside when an odd number of those crossings lie left of it."""
  (left, top), (right, bottom) = np.floor(polygon.min(0)).astype(int), np.ceil(polygon.max(0)).astype(int)
  rows, cols = np.arange(max(top, 0), min(bottom, height)), np.arange(max(left, 0), min(right, width))
  x0, y0 = polygon.T
  x1, y1 = np.roll(polygon, -1, axis=0).T
  yc = rows[:, None] + 0.5
  spans = (y0 <= yc) != (y1 <= yc)  # [rows, E]
  xs = np.where(spans, x0 + (yc - y0) * (x1 - x0) / np.where(y1 != y0, y1 - y0, 1), np.inf)
  inside = np.zeros((height, width), bool)
  inside[np.ix_(rows, cols)] = (xs[:, None, :] < cols[None, :, None] + 0.5).sum(-1) % 2 == 1
  return inside

@pytest.mark.slow
def test_mask_run_scores_table4_from_its_masks_and_the_pixel_level(mask_run, tiny_therapy):
  from pycocotools import mask as coco_mask
  workdir, metrics = mask_run
  out = os.path.join(workdir, "results", f"step_{STEPS}")
  records = iter(_read(os.path.join(out, "results.json")))
  val = [s for name in ("VQA_val.json", "VizWiz_val.json")
         for s in therapy_files.read_therapy(os.path.join(tiny_therapy, name))]
  decided, pixel, whole = [], [], []
  for s in val:
    decoded = [coco_mask.decode({"size": r["mask"]["size"], "counts": r["mask"]["counts"].encode()})
               for r in (next(records) for _ in s.answers)]
    grids = [_centres(d) for d in decoded]  # the grid masks back, decided by the rule
    same = all(_iou(grids[a], grids[b]) > 0.9 for a in range(len(grids)) for b in range(a + 1, len(grids)))
    decided.append("single" if same else "multiple")
    truths = [_rasterised(p, s.height, s.width) for p in s.polygons]
    pixel.append(np.mean([_iou(d > 0, t) for d, t in zip(decoded, truths)]))
    whole.append(np.mean([t.sum() / t.size for t in truths]))
  for source in ("", "VQAv2", "VizWiz"):
    rows = [(d, s.label) for d, s in zip(decided, val) if source in ("", s.source)]
    for label in ("single", "multiple"):
      tp = sum(d == t == label for d, t in rows)
      predicted, actual = sum(d == label for d, _ in rows), sum(t == label for _, t in rows)
      prefix = f"from_masks/{source}/" if source else "from_masks/"
      assert metrics.get(f"{prefix}precision/{label}") == (pytest.approx(100 * tp / predicted) if predicted else None)
      assert metrics.get(f"{prefix}recall/{label}") == (pytest.approx(100 * tp / actual) if actual else None)
  # the two rasterisers may disagree on centres lying exactly on an edge: a few pixels
  assert metrics["pixel/iou_pq"] == pytest.approx(100 * np.mean(pixel), abs=0.05)
  assert metrics["whole_image/pixel/iou_pq"] == pytest.approx(100 * np.mean(whole), abs=0.05)
  assert metrics["pixel/iou_pq"] != metrics["iou_pq"]  # the grid level is another score
  assert _read(os.path.join(out, "metrics.json")) == {"step": STEPS, **metrics}
  table5 = _read(os.path.join(out, "table5.json"))
  assert [(r["method"], r["masks"]) for r in table5] == [
      ("whole image", "grid"), ("whole image", "pixel"), ("grounding_mask", "grid"), ("grounding_mask", "pixel")]
  assert table5[3]["all IoU-PQ"] == metrics["pixel/iou_pq"] and table5[2]["all IoU-PQ"] == metrics["iou_pq"]
  table4 = open(os.path.join(out, "table4.md")).read()
  assert table4.count("| all | grounding_mask from masks |") == 1 and "| VizWiz | always multiple |" in table4


def _classifier_run(path, mask_metrics, **metrics):
  """A classifier workdir as training leaves it (run.json, results/step_5/metrics.json)."""
  config = config_lib.override(grounding_class.get_config("runlocal"), {"model.inputs": "q+a"})
  run_record.write_run_file(str(path), config, {"val_questions": 0})
  baselines = {k: v for k, v in mask_metrics.items() if k.startswith("always_")}
  metrics = {"recall/single": 75.0, **metrics}
  os.makedirs(path / "results" / "step_5")
  (path / "results" / "step_5" / "metrics.json").write_text(json.dumps({"step": 5, **baselines, **metrics}))
  return str(path)


@pytest.mark.slow
def test_table4_across_runs_evaluates_a_mask_run_without_results(mask_run, tmp_path, capsys):
  workdir, metrics = mask_run
  classifier = _classifier_run(tmp_path / "gc", metrics, **{"precision/single": 90.0, "recall/single": 80.0,
                                                           "VizWiz/recall/multiple": 50.0})
  shutil.rmtree(os.path.join(workdir, "results"))  # from its checkpoint
  assert cli.main(["therapy", "table4", workdir, classifier, "--out", str(tmp_path / "t4")]) == 0
  assert "no Table 4 results yet, evaluating the newest checkpoint" in capsys.readouterr().out
  assert _read(os.path.join(workdir, "results", f"step_{STEPS}", "metrics.json")) == pytest.approx(
      {"step": STEPS, **metrics}, abs=1e-4)
  rows = _read(tmp_path / "t4" / "table4.json")
  assert [(r["source"], r["method"]) for r in rows[:4]] == [
      ("all", "always single"), ("all", "always multiple"), ("all", "I+Q+A from masks"), ("all", "Q+A")]
  assert rows[2]["multiple recall"] == metrics.get("from_masks/recall/multiple")
  assert (rows[3]["single precision"], rows[3]["single recall"], rows[3]["multiple precision"]) == (90.0, 80.0, None)
  assert rows[1]["multiple precision"] == metrics["always_multiple/precision/multiple"]
  assert [r["multiple recall"] for r in rows if r["source"] == "VizWiz" and r["method"] == "Q+A"] == [50.0]


@pytest.mark.slow
def test_table4_refuses_runs_on_other_questions_and_repeated_names(mask_run, tmp_path, capsys):
  workdir, metrics = mask_run
  other = _classifier_run(tmp_path / "other", {**metrics, "always_single/recall/single": 1.0})
  assert cli.main(["therapy", "table4", workdir, other, "--out", str(tmp_path / "t4")]) == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err and "was evaluated on other questions" in err and "naive baselines differ" in err
  same = _classifier_run(tmp_path / "same", metrics)
  assert cli.main(["therapy", "table4", f"A={workdir}", f"A={same}", "--out", str(tmp_path / "t4")]) == 2
  assert "row name(s) ['A'] given to several runs" in capsys.readouterr().err
  out = os.path.join(workdir, "results", f"step_{STEPS}")
  assert cli.main(["therapy", "table4", workdir, "--out", out]) == 2  # never over a run's results
  assert "an input of this command" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "t4")
