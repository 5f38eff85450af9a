"""The embedded datasets' pictures: drawn from the same latent records as their questions.

Every colour comes from the 6x6x6 colour cube that `features.models.ColourCells` reads,
and each kind of thing has a colour of its own, so that a colour histogram per cell tells
what is where: the named colours of the world (`COLOURS`), a background per scene
(`SCENES`), a sky per weather (`SKIES`), and a marker colour per label (`marker`): a
category, a secondary object, a kind of person, or any other word (hashed). The pictures
are JPEGs (4:4:4, quality 92: the snapped colours survive) with the official file names.
The features are computed from the files by the extractor (`features`), as `vqajax ask`
computes those of an upload.
"""

from __future__ import annotations

import functools
import os
import threading
import zlib
from concurrent import futures
from typing import Callable, TypeVar

import jax
import numpy as np
from absl import logging
from PIL import Image, ImageDraw, ImageFont

from vqajax.features import forward, models, recorded
from vqajax.features.store import FeatureStore, write_store
from vqajax.features.weights import IMAGE_SIZE  # the extractor's input side
from vqajax.synthetic.vqa import world as W

T = TypeVar("T")
STEP = 255 // (models.PALETTE_LEVELS - 1)
RGB = tuple[int, int, int]


def _cube(r: int, g: int, b: int) -> RGB:
  return r * STEP, g * STEP, b * STEP


# cube levels (0..5) of the world's colours ("black and white" is drawn in stripes of both)
COLOURS = {"white": _cube(5, 5, 5), "black": _cube(0, 0, 0), "brown": _cube(3, 2, 1), "gray": _cube(3, 3, 3),
           "red": _cube(4, 0, 0), "blue": _cube(0, 1, 4), "green": _cube(1, 3, 1), "yellow": _cube(5, 4, 0),
           "orange": _cube(5, 2, 0), "pink": _cube(5, 3, 4), "purple": _cube(2, 1, 3), "silver": _cube(4, 4, 4),
           "tan": _cube(4, 3, 2)}
SCENES = {"kitchen": _cube(5, 5, 4), "living room": _cube(4, 3, 3), "bedroom": _cube(4, 4, 5),
          "bathroom": _cube(3, 4, 4), "office": _cube(3, 3, 2), "restaurant": _cube(3, 1, 1),
          "street": _cube(2, 2, 2), "city": _cube(2, 2, 3), "parking lot": _cube(1, 1, 1),
          "train station": _cube(2, 1, 1), "airport": _cube(2, 3, 3), "park": _cube(2, 4, 2),
          "field": _cube(3, 4, 1), "beach": _cube(5, 5, 3), "ocean": _cube(0, 2, 4), "harbor": _cube(1, 2, 3),
          "zoo": _cube(2, 3, 1), "forest": _cube(0, 2, 0), "snow": _cube(4, 5, 5), "tennis court": _cube(1, 3, 2),
          "baseball field": _cube(4, 3, 1), "skate park": _cube(3, 2, 2)}
SKIES = {"sunny": _cube(2, 4, 5), "cloudy": _cube(3, 3, 4), "rainy": _cube(1, 1, 2), "snowy": _cube(3, 4, 5),
         "night": _cube(0, 0, 1)}
# the marker colours: the rest of the cube, in a fixed order (a secondary object named as a category shares its)
_MARKERS = sorted({_cube(r, g, b) for r in range(6) for g in range(6) for b in range(6)}
                  - set(COLOURS.values()) - set(SCENES.values()) - set(SKIES.values()),
                  key=lambda c: zlib.crc32(bytes(c)))
_LABELS = W.CATEGORY_NAMES + W.SECONDARY_NAMES + W.PERSONS
_MARKER_OF = {label: _MARKERS[i] for i, label in enumerate(_LABELS)}
_TEXT_LOCK = threading.Lock()


def colours(name: str) -> list[RGB]:
  """The cube colours a thing of colour `name` is painted in: one, or black and white; another
  name (grey, navy, ...) gets a marker."""
  if name == "black and white":
    return [COLOURS["black"], COLOURS["white"]]
  return [COLOURS.get(name) or marker("colour:" + name)]


def marker(label: str) -> RGB:
  """The colour that tells a label: the world's labels one each, any other word hashed."""
  return _MARKER_OF.get(label) or _MARKERS[len(_LABELS) + zlib.crc32(label.encode()) % (len(_MARKERS) - len(_LABELS))]


@functools.lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
  return ImageFont.load_default(size=max(8, size))


def tag(image: Image.Image, centre: tuple[float, float], width: float, height: float, text: str, fill: RGB) -> None:
  """A `fill` label of a fixed size centred at `centre`, `text` written in it (black or white)."""
  with _TEXT_LOCK:  # one FreeType face is not for two threads at once
    label = _tag(text, round(width), round(height), fill)
  image.paste(label, (round(centre[0] - label.width / 2), round(centre[1] - label.height / 2)))


@functools.lru_cache(maxsize=4096)
def _tag(text: str, width: int, height: int, fill: RGB) -> Image.Image:
  label = Image.new("RGB", (max(1, width), max(1, height)), fill)
  ink = (255, 255, 255) if sum(fill) < 3 * 128 else (0, 0, 0)
  ImageDraw.Draw(label).text((width / 2, height / 2), text, fill=ink, anchor="mm", font=_font(int(height * 0.75)))
  return label


def striped(image: Image.Image, shape: Image.Image, colours: list[RGB], stripe: int) -> None:
  """Paints `shape` (a mode-L mask of the image's size) with diagonal stripes of `colours`."""
  box = shape.getbbox()
  if box is None:
    return
  x0, y0, x1, y1 = box
  yy, xx = np.mgrid[y0:y1, x0:x1]
  which = ((xx + yy) // max(1, stripe)) % len(colours)
  pattern = np.asarray(colours, np.uint8)[which]
  image.paste(Image.fromarray(pattern, "RGB"), (x0, y0), shape.crop(box))


def write(draw: Callable[[T], Image.Image], things: list[T], paths: list[str]) -> None:
  """Saves `draw(thing)` at each path (a thread pool: PIL's encoder frees the interpreter)."""
  def save(thing: T, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    draw(thing).save(path, "JPEG", quality=92, subsampling=0)

  progress = _progress(len(things), "pictures drawn")
  with futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for done in [pool.submit(save, thing, path) for thing, path in zip(things, paths)]:
      done.result()
      progress.add(1)


def _progress(total: int, what: str) -> forward.Progress:
  """About ten progress lines (count, rate, ETA) over `total` images."""
  return forward.Progress(total, max(64, total // 10), 0, lambda line: logging.info("%s: %s", what, line))


def extract_stores(paths: list[str], keys: np.ndarray, stores: dict[str, str], batch: int = 64) -> None:
  """Writes {layer: store path} of `colour_cells` features of the pictures at `paths` (each
  decoded once, as `forward.feature_batches` does; the image paths recorded relative to each
  store's folder, the extractor's settings, with no weights file)."""
  forwards = {layer: forward.Forward(models.MODELS["colour_cells"](layer=layer), {}, batch) for layer in stores}
  rows: dict[str, list[np.ndarray]] = {layer: [] for layer in stores}
  progress = _progress(len(paths), "features extracted")
  for n, inputs in forward.input_batches(paths, batch, "vqa", IMAGE_SIZE):
    for layer, apply in forwards.items():
      rows[layer].append(np.asarray(jax.device_get(apply(inputs)))[:n].astype(np.float16))
    progress.add(n)
  for layer, store in stores.items():
    settings = recorded.settings("colour_cells", layer, "vqa", IMAGE_SIZE, "float16", None)
    folder = os.path.dirname(store)
    write_store(store, keys, np.concatenate(rows[layer]), settings, [os.path.relpath(p, folder) for p in paths])


def pixel_store(source: str, out: str, size: int, batch: int = 64) -> None:
  """Writes the `pixels` store (`vqajax features --model pixels`: the 'vilt' preprocessing at
  `size`, uint8) of the pictures whose ids and files the store `source` records."""
  store = FeatureStore(source)
  folder = os.path.dirname(source)
  paths = [os.path.join(folder, p) for p in store.image_paths]
  forward_pixels = forward.Forward(models.MODELS["pixels"](), {}, batch)
  progress = _progress(len(paths), "pixels")
  rows = []
  for n, inputs in forward.input_batches(paths, batch, "vilt", size):
    rows.append(np.asarray(jax.device_get(forward_pixels(inputs)))[:n].astype(np.uint8))
    progress.add(n)
  settings = recorded.settings("pixels", "pixels", "vilt", size, "uint8", None)
  out_folder = os.path.dirname(out)
  write_store(out, store.image_ids, np.concatenate(rows), settings, [os.path.relpath(p, out_folder) for p in paths])
