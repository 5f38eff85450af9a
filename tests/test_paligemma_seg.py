"""PaliGemma's `detect` / `segment` replies as masks (vqajax/nn/paligemma_seg.py): the parser, big_vision's
box convention by hand, the masks in the grounding rows' forms, and the VQ-VAE mask decoder against the
numpy oracle of tests/paligemma_seg_reference.py on a random file with vae-oid.npz's array names and shapes.
"""

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from tests import paligemma_seg_reference as reference
from vqajax.answertherapy import dataset, iou, pixel_iou
from vqajax.answertherapy.files import Sample
from vqajax.core import errors
from vqajax.core.errors import InputError
from vqajax.nn import paligemma_seg as seg

CODES = tuple(range(1, 17))
SEGS = "".join(f"<seg{c:03d}>" for c in CODES)


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
  """(path, arrays) of a random vae-oid.npz (with an encoder array, which the decoder does not read)."""
  arrays = reference.random_arrays(0)
  path = tmp_path_factory.mktemp("vae") / "vae-oid.npz"
  np.savez(path, **arrays, **{"encoder.0.weight": np.ones((128, 1, 3, 3), np.float32)})
  return str(path), arrays


def test_parse_reads_each_object_of_a_reply():
  reply = f"<loc0100><loc0200><loc0300><loc0400> {SEGS} big cat ; <loc0000><loc0000><loc1023><loc1023> dog"
  assert seg.parse(reply) == (seg.Object((100, 200, 300, 400), CODES), seg.Object((0, 0, 1023, 1023), None))
  assert seg.parse("<loc0001><loc0002><loc0003><loc0004>") == (seg.Object((1, 2, 3, 4), None),)
  assert seg.parse(" ") == ()  # nothing found: no object, not malformed


@pytest.mark.parametrize("reply", [
    "yes",                                                          # free text
    "<loc0001><loc0002><loc0003> cat",                              # three locations
    "<loc0001><loc0002><loc1024><loc0004> cat",                     # a bin past 1023
    "<loc0003><loc0002><loc0003><loc0004> cat",                     # y_max not above y_min
    "<loc0001><loc0004><loc0003><loc0004> cat",                     # x_max not right of x_min
    "<loc0001><loc0002><loc0003><loc0004>" + SEGS[:-8] + " cat",     # 15 codes
    "<loc0001><loc0002><loc0003><loc0004>" + SEGS[:-8] + "<seg128>",  # a code past 127
    "<loc0001><loc0002><loc0003><loc0004> cat ; <loc0001><loc00",   # cut short
    "<loc0001><loc0002><loc0003><loc0004> cat ;",                   # an empty part
    "a cat <loc0001><loc0002><loc0003><loc0004>",                   # text before the box
])
def test_a_malformed_reply_has_empty_masks_and_says_so(reply):
  assert seg.parse(reply) is None
  (mask,) = seg.answer_masks([reply], [(30, 40)], 4)
  assert mask.malformed and mask.objects == 0
  assert not mask.grid.any() and coco_mask.area(mask.rle) == 0 and list(mask.rle["size"]) == [30, 40]


def test_boxes_in_pixels_follow_big_vision():
  # bin / 1023 * side, truncated: 100 / 1023 * 480 = 46.92, 200 / 1023 * 640 = 125.12, 140.76, 250.24
  assert seg.box_pixels((100, 200, 300, 400), 480, 640) == (46, 125, 140, 250)
  assert seg.box_pixels((0, 0, 1023, 1023), 480, 640) == (0, 0, 480, 640)


def test_box_replies_give_the_union_of_their_boxes():
  reply = "<loc0100><loc0200><loc0300><loc0400> a ; <loc0000><loc0000><loc0511><loc0767> b"
  (mask,) = seg.answer_masks([reply], [(480, 640)], 4)
  assert (mask.objects, mask.malformed) == (2, False)
  expected = np.zeros((480, 640), bool)
  expected[46:140, 125:250] = True
  expected[0:239, 0:479] = True  # 511 / 1023 * 480 = 239.76, 767 / 1023 * 640 = 479.84
  np.testing.assert_array_equal(coco_mask.decode(mask.rle).astype(bool), expected)
  # On the 32 x 32 raster of a 4 x 4 grid the second box covers rows 0..14 (511 / 1023 * 32 = 15.98) and
  # columns 0..22 (23.99); the first rows 3..8, columns 6..11, inside it. Cells of rows 8..15 are 7 / 8
  # covered, of columns 16..23 7 / 8: (1, 2) 49 / 64 >= 1 / 2; column 3 and row 2 on are empty.
  np.testing.assert_array_equal(mask.grid, [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])


def test_masks_score_as_the_grounding_rows_score_them():
  """A box reply on the very box an answer is grounded in: IoU 1 at the pixel level (`pixel_iou`, on the
  RLE) and at the grid level (`iou`, against the targets `dataset.grid_masks` draws)."""
  polygon = np.array([[0, 0], [479, 0], [479, 239], [0, 239]], np.float64)  # the box (0, 0, 511, 767) at 480 x 640
  sample = Sample("f", 0, "VizWiz", "i", None, "q", ("a",), (polygon,), 640, 480, "other", "single")
  (mask,) = seg.answer_masks(["<loc0000><loc0000><loc0511><loc0767> a"], [(480, 640)], 4)
  assert pixel_iou.answer_ious(sample, [mask.rle])[0] == [1.0]
  target = dataset.grid_masks(sample, 4, 1)[0] >= 0.5
  assert target.any() and iou.iou(mask.grid, target, np) == 1.0


def test_codes_decode_into_the_box():
  """Logits positive on the top-left quadrant only, in a 40 x 20 box: its top-left 20 x 10 pixels
  (the resize is symmetric about the middle)."""
  quadrant = np.where((np.arange(64)[:, None] < 32) & (np.arange(64)[None, :] < 32), 1.0, -1.0)
  (obj,) = seg.parse(f"<loc0010><loc0030><loc0050><loc0050> {SEGS}")
  expected = np.zeros((1023, 1023), bool)  # bin b is pixel row / column b at side 1023
  expected[10:30, 30:40] = True
  np.testing.assert_array_equal(seg.render([obj], [quadrant], 1023, 1023), expected)


def test_decoder_matches_the_reference(vae):
  path, arrays = vae
  codes = np.random.default_rng(1).integers(0, 128, (3, 16))
  decoder = seg.MaskDecoder.read(path)
  np.testing.assert_allclose(decoder(codes), reference.decode(arrays, codes), atol=1e-5, rtol=0)


def test_answer_masks_decode_the_codes(tmp_path):
  """A decoder whose logits are -1 everywhere (only the last bias set): a `segment` object is empty, a
  `detect` one keeps its box."""
  arrays = {name: np.zeros(shape, np.float32) for name, shape in reference.shapes().items()}
  arrays["decoder.12.bias"][:] = -1
  np.savez(tmp_path / "vae.npz", **arrays)
  decoder = seg.MaskDecoder.read(str(tmp_path / "vae.npz"))
  replies = [f"<loc0000><loc0000><loc1023><loc1023> {SEGS} a", "<loc0000><loc0000><loc1023><loc1023> b"]
  decoded, box = seg.answer_masks(replies, [(20, 30), (20, 30)], 2, decoder)
  assert coco_mask.area(decoded.rle) == 0 and not decoded.grid.any() and decoded.objects == 1
  assert coco_mask.area(box.rle) == 600 and box.grid.all()
  assert coco_mask.area(seg.answer_masks(replies[:1], [(20, 30)], 2)[0].rle) == 600  # no decoder: the box


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("decoder.6.bias"), "no array decoder.6.bias"),
    (lambda a: a.update({"decoder.4.weight": np.zeros((128, 64, 4, 4), np.float32)}),
     "array decoder.4.weight has shape (128, 64, 4, 4); the mask decoder expects (128, 128, 4, 4)"),
    (lambda a: a.update({"_vq_vae._embedding": np.zeros((128, 512), np.int64)}),
     "array _vq_vae._embedding is of dtype int64; expected floating point"),
    (lambda a: a.update({"decoder.12.bias": np.array([None])}),  # a pickle, never unpickled
     "array decoder.12.bias is of dtype object; expected floating point"),
])
def test_a_file_that_is_not_the_decoder_is_refused_in_one_line(tmp_path, capsys, change, message):
  arrays = reference.random_arrays(0)
  change(arrays)
  path = tmp_path / "vae.npz"
  np.savez(path, **arrays)
  with pytest.raises(InputError, match="^" + str(path) + ": ") as e:
    seg.MaskDecoder.read(str(path))
  assert message in str(e.value)
  assert errors.exit_status("vqajax", lambda: seg.MaskDecoder.read(str(path))) == errors.INPUT_ERROR
  assert capsys.readouterr().err.count("\n") == 1


def test_a_file_that_is_no_npz_is_refused(tmp_path):
  text, array = tmp_path / "vae.npz", tmp_path / "one.npy"
  text.write_text("not a zip")
  np.save(array, np.zeros(3))
  for path in (text, array):
    with pytest.raises(InputError, match=f"^{path}: not an .npz file"):
      seg.read_params(str(path))
  with pytest.raises(InputError, match="file not found"):
    seg.read_params(str(tmp_path / "absent.npz"))
