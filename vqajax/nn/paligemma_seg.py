"""PaliGemma's `detect X` / `segment X` replies as masks: `<loc>` boxes, and `<seg>` codes through the
VQ-VAE mask decoder of big_vision's PaliGemma release (`vae-oid.npz`).

A reply is objects separated by ";", each four `<loc####>` tokens (y_min, x_min, y_max, x_max), then,
from `segment`, sixteen `<seg###>` tokens, then its name. The box's convention is big_vision's: its
PaliGemma preprocessing op `refcoco_mask2str` writes a coordinate v in [0, 1] as bin round(v * 1023),
its segmentation evaluator reads bin b back as b / 1023 and `int(b / 1023 * side)` in pixels, so on a
height x width raster an object covers rows int(y_min / 1023 * height) .. int(y_max / 1023 * height) - 1
and the columns likewise (`box_pixels`; the PaliGemma demos' parser, b / 1024 rounded, lands at most
side / 1024 + 1 pixels away). Its `<seg>` codes decode to 64 x 64 mask logits
(`MaskDecoder`), resized into that box as the evaluator does (PIL's bilinear resize, > 0 in the mask);
without a decoder (or codes) the object is its box. A reply's mask is the union of its objects'.

`parse` reads a reply strictly: every ";"-separated part must be an object (bins 0..1023 with
y_max > y_min and x_max > x_min, codes 0..127, sixteen or none), else the reply is malformed (a
truncated or free-text reply): `answer_masks` gives it empty masks and says so, for the caller to
count; nothing raises. An empty reply is no object (an empty mask), not malformed.

`answer_masks` gives each reply's mask in the two forms the AnswerTherapy grounding rows score
(`answertherapy/grounding_mask.py`): at the grid level a boolean [G, G] mask, by the rule its targets
follow (`answertherapy/dataset.py`'s `grid_masks`: drawn on a raster of 8 x 8 pixels a cell, a cell
on where at least half of it is covered), and at the pixel level a COCO RLE at the image size in
pycocotools' form (what `answertherapy/pixel_iou.py` scores and `answertherapy/masks.py`'s
`to_json` writes). The pixel mask is drawn whole (one byte a pixel), one image at a time.

The decoder (`Decoder`) is the one big_vision's PaliGemma segmentation evaluator runs (after Ning et
al. 2023): the 16 codes' codebook vectors as a 4 x 4 grid, a 1 x 1 convolution to 128
channels, two residual blocks, four transposed convolutions (4 x 4, stride 2) doubling the side to
64 with 128, 64, 32, 16 channels, and a 1 x 1 convolution to one channel. `read_params` reads the
PyTorch tensors of vae-oid.npz under their names there (`TABLE`; the file's encoder is not read),
each array's header checked before its bytes are read; anything else is an InputError naming the
file and the array.
"""

from __future__ import annotations

import dataclasses
import re
import zipfile
import zlib
from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
from pycocotools import mask as coco_mask

from vqajax.core.errors import InputError
from vqajax.core.official_files import check_file
from vqajax.nn import hub

LAST_BIN = 1023        # <loc0000>..<loc1023>: bin b is the coordinate b / 1023 of the side
NUM_CODES = 128        # <seg000>..<seg127>: the codebook's entries
CODE_SIDE = 4          # a mask's codes: a 4 x 4 grid of them
CODE_TOKENS = CODE_SIDE ** 2
CODE_DIM = 512         # a codebook vector's width
WIDTH = 128            # the decoder's channels before its upsampling
RASTER = 8             # pixels a grid cell side when a grid mask is drawn (the grid targets')
_PART = re.compile(r"\s*" + r"<loc(\d{4})>\s*" * 4 + "(?:" + r"<seg(\d{3})>\s*" * CODE_TOKENS + r")?[^<>;]*")


@dataclasses.dataclass(frozen=True)
class Object:
  """One object of a reply: its box's bins (y_min, x_min, y_max, x_max) and its 16 codes (None
  for a box alone)."""
  box: tuple[int, int, int, int]
  codes: tuple[int, ...] | None


def parse(reply: str) -> tuple[Object, ...] | None:
  """The objects of a reply, the generated text without its end-of-sequence or padding tokens (module
  docstring); None when it is malformed."""
  if not reply.strip():
    return ()
  objects = []
  for part in reply.split(";"):
    m = _PART.fullmatch(part)
    if m is None:
      return None
    numbers = [int(g) for g in m.groups() if g is not None]
    box, codes = tuple(numbers[:4]), tuple(numbers[4:]) or None
    if max(box) > LAST_BIN or box[2] <= box[0] or box[3] <= box[1] or (codes and max(codes) >= NUM_CODES):
      return None
    objects.append(Object(box, codes))
  return tuple(objects)


def box_pixels(box: tuple[int, int, int, int], height: int, width: int) -> tuple[int, int, int, int]:
  """(top, left, bottom, right) of a box's bins on a height x width raster: it covers rows
  top..bottom-1 and columns left..right-1 (big_vision's evaluator's `int(b / 1023 * side)`)."""
  y0, x0, y1, x1 = box
  return int(y0 / LAST_BIN * height), int(x0 / LAST_BIN * width), int(y1 / LAST_BIN * height), int(x1 / LAST_BIN * width)


def render(objects: Sequence[Object], logits: Sequence[np.ndarray | None], height: int, width: int) -> np.ndarray:
  """The boolean [height, width] union of the objects' masks: each its box, or where its `logits`
  ([64, 64] decoded, None for none) are given those resized into the box (PIL's bilinear) > 0."""
  out = np.zeros((height, width), bool)
  for obj, mask_logits in zip(objects, logits):
    top, left, bottom, right = box_pixels(obj.box, height, width)
    if bottom <= top or right <= left:  # a box thinner than a pixel of this raster covers none
      continue
    if mask_logits is None:
      out[top:bottom, left:right] = True
    else:
      resized = Image.fromarray(np.asarray(mask_logits, np.float32)).resize((right - left, bottom - top),
                                                                             Image.Resampling.BILINEAR)
      out[top:bottom, left:right] |= np.asarray(resized) > 0
  return out


class AnswerMask(NamedTuple):
  """A reply's mask in the grounding rows' two forms (module docstring)."""
  grid: np.ndarray   # bool [G, G]
  rle: dict          # pycocotools' RLE at the image size (`counts` bytes)
  objects: int       # the reply's objects
  malformed: bool    # the reply is not a list of objects: both masks are empty


def answer_masks(replies: Sequence[str], sizes: Sequence[tuple[int, int]], grid: int,
                 decoder: MaskDecoder | None = None) -> list[AnswerMask]:
  """Each reply's `AnswerMask` for its image's (height, width) and a grid of `grid` x `grid` cells;
  with a `decoder` the `<seg>` codes of every reply are decoded in one batch."""
  parsed = [parse(reply) for reply in replies]
  objects = [found or () for found in parsed]
  logits: list[list[np.ndarray | None]] = [[None] * len(found) for found in objects]
  coded = [(r, o) for r, found in enumerate(objects) for o, obj in enumerate(found) if obj.codes]
  if decoder is not None and coded:
    for (r, o), value in zip(coded, decoder(np.array([objects[r][o].codes for r, o in coded], np.int32))):
      logits[r][o] = value
  out = []
  side = RASTER * grid
  for found, found_logits, (height, width), parsed_reply in zip(objects, logits, sizes, parsed, strict=True):
    cells = render(found, found_logits, side, side).reshape(grid, RASTER, grid, RASTER).mean(axis=(1, 3))
    pixels = render(found, found_logits, height, width)
    out.append(AnswerMask(cells >= 0.5, coco_mask.encode(np.asfortranarray(pixels, np.uint8)), len(found),
                          parsed_reply is None))
  return out


class ResBlock(nn.Module):
  """x + conv1x1(relu(conv3x3(relu(conv3x3(x)))))."""
  features: int

  @nn.compact
  def __call__(self, x):
    y = nn.relu(nn.Conv(self.features, (3, 3), padding=1, name="conv_0")(x))
    y = nn.relu(nn.Conv(self.features, (3, 3), padding=1, name="conv_1")(y))
    return x + nn.Conv(self.features, (1, 1), name="conv_2")(y)


class Decoder(nn.Module):
  """[N, 16] codes -> [N, 64, 64] mask logits (module docstring)."""

  @nn.compact
  def __call__(self, codes):
    codebook = self.param("codebook", nn.initializers.normal(1.0), (NUM_CODES, CODE_DIM))
    x = jnp.take(codebook, codes, axis=0).reshape(codes.shape[0], CODE_SIDE, CODE_SIDE, CODE_DIM)
    x = nn.relu(nn.Conv(WIDTH, (1, 1), name="conv_in")(x))
    x = ResBlock(WIDTH, name="res_0")(x)
    x = ResBlock(WIDTH, name="res_1")(x)
    for i, features in enumerate((WIDTH, WIDTH // 2, WIDTH // 4, WIDTH // 8)):
      # torch's ConvTranspose2d(kernel 4, stride 2, padding 1): a [in, out, 4, 4] kernel, flipped and
      # transposed to [4, 4, out, in] (hub's "conv" layout), the input padded by 4 - 1 - 1 = 2
      x = nn.relu(nn.ConvTranspose(features, (4, 4), strides=(2, 2), padding=2, transpose_kernel=True,
                                   name=f"up_{i}")(x))
    return nn.Conv(1, (1, 1), name="conv_out")(x)[..., 0]


def _conv(table: hub.Table, key: str, path: tuple[str, ...]) -> None:
  table[f"{key}.weight"] = hub.Place(path + ("kernel",), "conv")
  table[f"{key}.bias"] = hub.Place(path + ("bias",))


def parameter_table() -> hub.Table:
  """vae-oid.npz's array names (PyTorch's module names: `decoder` a Sequential whose ReLUs hold the
  odd places) -> the Flax paths of `Decoder`."""
  table: hub.Table = {"_vq_vae._embedding": hub.Place(("codebook",))}
  _conv(table, "decoder.0", ("conv_in",))
  for block in range(2):
    for conv in range(3):
      _conv(table, f"decoder.{2 + block}.net.{2 * conv}", (f"res_{block}", f"conv_{conv}"))
  for i in range(4):
    _conv(table, f"decoder.{4 + 2 * i}", (f"up_{i}",))
  _conv(table, "decoder.12", ("conv_out",))
  return table


TABLE = parameter_table()


def _shapes() -> dict[tuple[str, ...], tuple[int, ...]]:
  shapes = jax.eval_shape(lambda: Decoder().init(jax.random.key(0), jnp.zeros((1, CODE_TOKENS), jnp.int32)))
  return {path: tuple(leaf.shape) for path, leaf in hub.leaves(shapes["params"]).items()}


def _array(archive: zipfile.ZipFile, path: str, key: str, expected: tuple[int, ...]) -> np.ndarray:
  """The npz's array `key` as float32, its header checked (shape `expected`, floating point) first."""
  member = f"{key}.npy"
  if member not in archive.namelist():
    raise InputError(f"{path}: no array {key}; expected the VQ-VAE of big_vision's vae-oid.npz")
  value = None
  try:
    with archive.open(member) as f:
      version = np.lib.format.read_magic(f)
      shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                         else np.lib.format.read_array_header_2_0(f))
      if shape == expected and dtype.kind == "f":
        f.seek(0)
        value = np.lib.format.read_array(f, allow_pickle=False)
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # damaged member or header
    raise InputError(f"{path}: array {key} cannot be read ({type(e).__name__}: {e})") from None
  if shape != expected:
    raise InputError(f"{path}: array {key} has shape {shape}; the mask decoder expects {expected}")
  if value is None:
    raise InputError(f"{path}: array {key} is of dtype {dtype}; expected floating point")
  return value.astype(np.float32)


def read_params(path: str) -> dict:
  """`Decoder`'s parameters from a vae-oid.npz file (module docstring)."""
  check_file(path, None)
  shapes = _shapes()
  try:
    archive = zipfile.ZipFile(path)
  except (OSError, zipfile.BadZipFile) as e:
    raise InputError(f"{path}: not an .npz file ({type(e).__name__}: {e})") from None
  with archive:
    flat = {}
    for key, place in TABLE.items():
      layout = hub.LAYOUTS[place.layout]
      flat[place.path] = layout.to_flax(_array(archive, path, key, layout.hf_shape(shapes[place.path])))
  return hub.nested(flat)


@jax.jit
def _decode(params, codes):
  return Decoder().apply({"params": params}, codes)


class MaskDecoder:
  """The VQ-VAE mask decoder with given weights: [N, 16] codes (0..127) -> [N, 64, 64] float32 mask
  logits, jitted, in batches padded to a power of two (a compilation per batch size)."""

  def __init__(self, params: dict):
    self.params = jax.device_put(params)

  @classmethod
  def read(cls, path: str) -> MaskDecoder:
    """The decoder of a vae-oid.npz file (`read_params`)."""
    return cls(read_params(path))

  def __call__(self, codes: np.ndarray) -> np.ndarray:
    n = len(codes)
    padded = np.zeros((1 << max(n - 1, 0).bit_length(), CODE_TOKENS), np.int32)
    padded[:n] = codes
    return np.asarray(_decode(self.params, padded))[:n]
