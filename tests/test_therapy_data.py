"""VQA-AnswerTherapy reader and masks: hand-built records, polygons and hand-counted pixels."""

import json
import math

import ml_collections
import numpy as np
import pytest

from vqajax.answertherapy import dataset, masks
from vqajax.answertherapy import files as therapy_files
from vqajax.core import text
from vqajax.core.official_files import DataFileError
from vqajax.features.store import FeatureStoreError, write_store_blocks


def _points(*xy):
  return [{"x": x, "y": y} for x, y in xy]


def _record(label="same", qid=None, answers=("a", "b"), polygons=None, **changes):
  square = _points((0, 0), (4, 0), (4, 4), (0, 4))
  record = {"image_id": "img", "question": "What is this?", "answers": list(answers),
            "grounding_labels": polygons if polygons is not None else [square] * len(answers),
            "width": 8, "height": 6, "answer_type": "other", "binary_label": label}
  if qid is not None:
    record["question_id"] = qid
  record.update(changes)
  return record


def _write(tmp_path, obj, name="t.json"):
  path = tmp_path / name
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def test_reads_both_label_vocabularies_and_infers_the_source(tmp_path):
  triangle = _points((1, 1), (5.5, 1), (1, 4))
  path = _write(tmp_path, [
      _record("same", qid="55607011", image_id="55607"),
      _record("diff", answers=("x", "y", "z"), polygons=[triangle, triangle, _points((0, 0), (8, 6), (0, 6))]),
      _record("single"),
      _record("multiple", qid=7, image_id=3)])
  samples = therapy_files.read_therapy(path)
  assert [s.label for s in samples] == ["single", "multiple", "single", "multiple"]
  assert [s.source for s in samples] == ["VQAv2", "VizWiz", "VizWiz", "VQAv2"]
  assert [s.question_id for s in samples] == ["55607011", None, None, 7]
  second = samples[1]
  assert (second.path, second.index, second.answers, second.width, second.height) == (path, 1, ("x", "y", "z"), 8, 6)
  assert [p.tolist() for p in second.polygons] == [[[1, 1], [5.5, 1], [1, 4]]] * 2 + [[[0, 0], [8, 6], [0, 6]]]


@pytest.mark.parametrize("records,message", [
    ({"a": 1}, r"t\.json: expected a non-empty JSON list of VQA-AnswerTherapy samples"),
    ([], r"t\.json: expected a non-empty JSON list"),
    ([_record(), 5], r"t\.json: records\[1\]: expected an object, got 5"),
    ([_record(), _record(question=None)], r't\.json: records\[1\]: expected a string "question", got None'),
    ([_record(width=0)], r't\.json: records\[0\]: expected "width" from 1 to 10000 pixels, got 0'),
    ([_record(width=200000, height=200000)], r't\.json: records\[0\]: expected "width" from 1 to 10000 pixels, got 200000'),
    ([_record(), _record(height=65536)], r't\.json: records\[1\]: expected "height" from 1 to 10000 pixels, got 65536'),
    # 176 points between x = 0 and 8: 176 edges of 8 > 100 x (8 + 6) (rasterising costs the outline)
    ([_record(), _record(polygons=[_points((0, 0)), _points(*[(8 * (k % 2), 0) for k in range(176)])])],
     r"t\.json: records\[1\]: grounding_labels\[1\]: expected an outline of at most 100 x \(width \+ height\) = "
     r"1400 pixels \(edges by max\(\|dx\|, \|dy\|\), each at most the image's larger side\), got 1408"),
    ([_record(), _record(question="Why?"), _record(answers=("b", "a"))],
     r"t\.json: records\[2\]: repeats records\[0\] \(the same image_id, question_id, question and answers\)"),
    ([_record(height="6")], r"t\.json: records\[0\]: expected an integer \"height\", got '6'"),
    ([_record(), _record("maybe")], r't\.json: records\[1\]: expected "binary_label" one of \[.diff., .multiple., .same., .single.\], got .maybe.'),
    ([_record(answers=["a", 3], polygons=[[], []])], r"t\.json: records\[0\]: answers\[1\]: expected a string, got 3"),
    ([_record(), _record(polygons=[_points((0, 0), (1, 0), (0, 1))])],
     r"t\.json: records\[1\]: expected one polygon in grounding_labels per answer \(at least one\), got 1 polygons for 2 answers"),
    ([_record(answers=[], polygons=[])], r"records\[0\]: expected one polygon .* got 0 polygons for 0 answers"),
    ([_record(), _record(polygons=[_points((0, 0)), {"x": 1, "y": 2}])],
     r"t\.json: records\[1\]: grounding_labels\[1\]: expected a list of \{x, y\} points, got \{'x': 1, 'y': 2\}"),
    ([_record(), _record(polygons=[_points((0, 0), (1, 0)), [{"x": 1, "y": 1}, {"x": 2}]])],
     r't\.json: records\[1\]: grounding_labels\[1\]\[1\]: expected a number "y", got None'),
    ([_record(polygons=[_points((0, 0)), _points((True, 1))])],
     r't\.json: records\[0\]: grounding_labels\[1\]\[0\]: expected a number "x", got True'),
    ([_record(polygons=[[], _points((0, 0), (math.nan, 1))])],
     r"records\[0\]: grounding_labels\[1\]\[1\]: expected finite x and y, got \{'x': nan, 'y': 1\}"),
    ([_record(qid=1.5)], r't\.json: records\[0\]: expected a string or integer "question_id", got 1\.5'),
    ([_record(image_id=[1])], r't\.json: records\[0\]: expected a string or integer "image_id", got \[1\]'),
])
def test_malformed_files_name_the_record_and_the_expectation(tmp_path, records, message):
  with pytest.raises(DataFileError, match=message) as error:
    therapy_files.read_therapy(_write(tmp_path, records))
  assert "\n" not in str(error.value)


def test_an_image_id_without_a_store_key_names_its_record(tmp_path):
  samples = therapy_files.read_therapy(_write(tmp_path, [_record(image_id="VizWiz_val_00000007.jpg"),
                                                         _record(image_id=2**63 - 1), _record(image_id=2**63)]))
  assert therapy_files.feature_keys(samples[:2]) == [2_000_000_007, 2**63 - 1]
  with pytest.raises(DataFileError, match=r"^.*t\.json: records\[2\]: image_id 9223372036854775808: expected at most "
                                          r"2\*\*63 - 1 \(a feature store's ids are int64\)$"):
    therapy_files.feature_keys(samples)
  with pytest.raises(DataFileError, match=r"t\.json: records\[0\]: image_id 'img' has no feature key: expected a "):
    therapy_files.feature_keys(therapy_files.read_therapy(_write(tmp_path, [_record()])))


def test_the_largest_images_and_distinct_questions_are_accepted(tmp_path):
  # 10000 x 10000 is the bound; one image with two VQA questions of the same text (distinct
  # question_ids) is two questions, and so is a VizWiz record with the same text.
  # A zigzag of 175 points has 174 edges of 8 and a closing one of 0: 1392 <= 1400; edges far
  # outside the image count as the image's larger side (8): 4 * 8 = 32.
  zigzag, far = _points(*[(8 * (k % 2), 0) for k in range(175)]), _points(*_box(-1e9, -1e9, 1e9, 1e9))
  samples = therapy_files.read_therapy(_write(tmp_path, [
      _record(width=10000, height=10000, qid=1), _record(qid=2), _record(), _record(answers=("a", "c")),
      _record(question="Where?", polygons=[zigzag, far])]))
  assert [(s.width, s.height) for s in samples] == [(10000, 10000)] + [(8, 6)] * 4
  assert len(samples[4].polygons[0]) == 175


def test_unreadable_files(tmp_path):
  with pytest.raises(DataFileError, match=r"nope\.json: file not found"):
    therapy_files.read_therapy(str(tmp_path / "nope.json"))
  with pytest.raises(DataFileError, match=r"t\.json: not valid JSON"):
    therapy_files.read_therapy(_write(tmp_path, "[{"))


# ---------------------------------------------------------------------------- masks

def _mask(xy, height=6, width=8):
  return masks.polygon_mask(np.array(xy, np.float64).reshape(-1, 2), height, width)


def _box(x0, y0, x1, y1):
  return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def _filled(rows, cols, height=6, width=8):
  expected = np.zeros((height, width), bool)
  expected[rows[0]:rows[1] + 1, cols[0]:cols[1] + 1] = True
  return expected


def test_rectangles_cover_the_pixels_whose_centres_they_contain():
  # Integer corners: columns x0..x1-1, rows y0..y1-1 (area exactly 4 * 3 = 12).
  np.testing.assert_array_equal(_mask(_box(2, 1, 6, 4)), _filled((1, 3), (2, 5)))
  # Centres x = 2.5 .. 6.5 lie in [2.2, 6.8] (columns 2..6); y = 2.5, 3.5 in [1.7, 4.4] (rows 2..3).
  np.testing.assert_array_equal(_mask(_box(2.2, 1.7, 6.8, 4.4)), _filled((2, 3), (2, 6)))
  # Sharing the edge x = 4 shares no pixel.
  assert not (_mask(_box(0, 0, 4, 4)) & _mask(_box(4, 0, 8, 4))).any()


def test_triangle_and_concave_polygon():
  # x/10 + y/5 < 1 at centres (j + .5, i + .5) <=> j + 2i <= 8: rows of 9, 7, 5, 3, 1 pixels.
  mask = _mask([(0, 0), (10, 0), (0, 5)], height=7, width=12)
  assert mask.sum(axis=1).tolist() == [9, 7, 5, 3, 1, 0, 0]
  assert all(mask[i, :n].all() for i, n in enumerate([9, 7, 5, 3, 1]))
  # An L: the 6x2 bar plus the 2x4 leg below it = 12 + 8 pixels.
  l_shape = _mask([(0, 0), (6, 0), (6, 2), (2, 2), (2, 6), (0, 6)], height=8, width=8)
  np.testing.assert_array_equal(l_shape, _filled((0, 1), (0, 5), 8, 8) | _filled((2, 5), (0, 1), 8, 8))


@pytest.mark.parametrize("xy,problems,pixels", [
    (_box(-3, -2, 4, 3), (masks.OUTSIDE,), _filled((0, 2), (0, 3))),  # clipped to x 0..4, y 0..3
    (_box(5, 4, 12, 9), (masks.OUTSIDE,), _filled((4, 5), (5, 7))),  # clipped to x 5..8, y 4..6
    ([(1, 1), (5, 5)], (masks.FEW_POINTS, masks.EMPTY), None),  # pycocotools would read a box 1,1,5,5
    ([], (masks.FEW_POINTS, masks.EMPTY), None),
    ([(1, 1), (5, 5), (3, 3)], (masks.EMPTY,), None),  # collinear: zero area
    ([(1, 1.1), (7, 1.1), (7, 1.4), (1, 1.4)], (masks.EMPTY,), None),  # between centre rows 0.5 and 1.5
    ([(-1, 1), (2, 1), (2, 1.2)], (masks.OUTSIDE, masks.EMPTY), None),
])
def test_degenerate_polygons_are_named_and_handled(xy, problems, pixels):
  polygon = np.array(xy, np.float64).reshape(-1, 2)
  rle, found = masks.rasterize(polygon, 6, 8)
  assert found == problems
  mask = masks.polygon_mask(polygon, 6, 8)
  assert mask.shape == (6, 8) and mask.dtype == bool
  np.testing.assert_array_equal(mask, np.zeros((6, 8), bool) if pixels is None else pixels)


@pytest.mark.parametrize("far", [1e7, 1e9, 1e300])
def test_far_outside_points_are_clipped_before_rasterising(far):
  # The whole plane covers all 6 * 8 pixels.
  plane = np.array(_box(-far, -far, far, far), np.float64)
  np.testing.assert_array_equal(masks.clip(plane, 6, 8), [[8, 0], [8, 6], [0, 6], [0, 0]])
  assert masks.rasterize(plane, 6, 8)[1] == (masks.OUTSIDE,)
  assert masks.polygon_mask(plane, 6, 8).all()
  # A square clipped at the border: x 0..3, y 2..6 = 3 * 4 = 12 pixels.
  np.testing.assert_array_equal(_mask(_box(-far, 2, 3, far)), _filled((2, 5), (0, 2)))
  # Above the line y = x / 2: centres (j + .5, i + .5) with j <= 2 i, rows of 1, 3, 5, 7, 8, 8.
  mask = _mask([(-far, -far / 2), (far, far / 2), (-far, far / 2)])
  assert mask.sum(axis=1).tolist() == [1, 3, 5, 7, 8, 8]
  assert all(mask[i, :n].all() for i, n in enumerate([1, 3, 5, 7, 8, 8]))
  # Entirely outside: nothing inside, an empty mask.
  assert masks.rasterize(np.array(_box(far / 2, 0, far, 6), np.float64), 6, 8)[1] == (masks.OUTSIDE, masks.EMPTY)


def test_overlaps_count_areas_and_pairwise_intersections():
  rles = [masks.rasterize(np.array(b, np.float64), 6, 8)[0]
          for b in (_box(0, 0, 4, 4), _box(2, 2, 8, 6), _box(6, 0, 8, 2))]
  areas, inter = masks.overlaps(rles)
  # 16, 6 * 4 = 24, 4; first & second: x 2..4, y 2..4 = 4; second & third: none (y 0..2 vs 2..6).
  assert areas.tolist() == [16, 24, 4]
  assert inter.tolist() == [[16, 4, 0], [4, 24, 0], [0, 0, 4]]


def test_to_grid_gives_each_cell_its_covered_fraction():
  mask = np.zeros((28, 28), bool)
  mask[:14, :14] = True
  mask[14, 14] = True  # a quarter of cell (7, 7)
  grid = masks.to_grid(mask)
  expected = np.zeros((14, 14), np.float32)
  expected[:7, :7] = 1
  expected[7, 7] = 0.25
  np.testing.assert_allclose(grid, expected, atol=1e-6)
  # 3 x 1 pixels into 2 x 2 cells of 1.5 x 0.5 pixels: pixel row 1 is split half and half,
  # so the upper cells hold (0 + 0.5) / 1.5 = 1/3, the lower (0.5 + 1) / 1.5 = 1.
  thin = np.array([[False], [True], [True]])
  np.testing.assert_allclose(masks.to_grid(thin, 2), [[1 / 3, 1 / 3], [1, 1]], atol=1e-6)
  # Batched, and a mask smaller than the grid.
  batch = np.stack([mask, ~mask])
  np.testing.assert_allclose(masks.to_grid(batch), np.stack([expected, 1 - expected]), atol=1e-6)
  np.testing.assert_allclose(masks.to_grid(np.ones((3, 5), bool), 14), np.ones((14, 14)), atol=1e-6)


@pytest.mark.parametrize("pixels_run, dtype, says", [
    (True, np.float32, "holds float32 of shape (32, 32, 4) per image, while config.model.name 'm' reads pictures' "
                       "pixels, uint8 [S, S, 4] (vqajax features --model pixels)"),
    (False, np.uint8, "holds images' pixels (vqajax features --model pixels, for ViLT), while config.model.name 'm' "
                      "reads image features (vqajax features --model vgg16 --layer fc7, say)")],
    ids=["pixel run, float store", "features run, pixels"])
def test_an_evaluations_own_store_holds_what_its_run_read(tmp_path, pixels_run, dtype, says):
  """Of the run's shape, a store of the other kind (float [S, S, 4] for a pixel model, pixels for a
  features model) is refused by `with_val` before any row is read."""
  store = str(tmp_path / "eval.h5")
  write_store_blocks(store, np.arange(2), (32, 32, 4), dtype, [np.zeros((2, 32, 32, 4), dtype)])
  config = ml_collections.ConfigDict({"model": {"name": "m"}, "data": {
      "dir": str(tmp_path), "source": "raw", "val_files": _write(tmp_path, [_record(qid=1)]), "features": store,
      "feature_shape": ()}})
  encoders = dataset.Encoders(vocab=text.Vocab([]), image_shape=(32, 32, 4),
                              text=object() if pixels_run else None)  # a pixel model's own text encoder (any)
  run = dataset.TherapyData(train={}, val={}, store=None, encoders=encoders, val_samples=[])
  with pytest.raises(FeatureStoreError) as refused:
    dataset.with_val(config, run)
  assert str(refused.value) == f"{store}: {says}"
