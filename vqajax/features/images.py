"""Image files -> ids and preprocessed float32 arrays (PIL, on the host).

Decoding honours the EXIF orientation; every mode becomes RGB: greyscale, CMYK and
palette images are converted, and images with transparency (RGBA, LA, palette with a
transparent colour) are composited on white first (transparent parts read as a white
page, not as whatever colour the hidden pixels hold). A file PIL cannot decode (not an
image, truncated, too large) raises `UnreadableImage` with the reason.

Image ids: `COCO_<split>_<digits>.<ext>` is the number; a VizWiz name
`VizWiz_<split>_<n>.jpg` is `vqajax.features.keys.feature_key` (the key the
AnswerTherapy reader asks for); any other name is the trailing digits of its stem
(`000123.png` -> 123, `img_42.jpg` -> 42); a name without trailing digits is an error.
"""

from __future__ import annotations

import os
import re
import stat
import warnings

import numpy as np
from PIL import Image, ImageOps

from vqajax.core.errors import InputError
from vqajax.features.keys import feature_key

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
CAFFE_BGR_MEAN = np.array([103.939, 116.779, 123.68], np.float32)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
_COCO_NAME = re.compile(r"COCO_[\w-]+?_(\d+)")
_TRAILING_DIGITS = re.compile(r".*?(\d+)")


MAX_PIXELS = 40_000_000  # a larger picture is refused before it is decoded (a 13000 x 13000 PNG: 1.7 GB)


class UnreadableImage(Exception):
  """An image file that cannot be decoded; the message is the reason."""


def list_images(source: str) -> list[str]:
  """The image files of a directory (by extension, sorted, not recursive; anything but a
  folder, so a broken link or a fifo is listed and then counted unreadable by `decode`) or of
  a list file (one path a line, relative to the list's directory; blank and # lines skipped)."""
  if os.path.isdir(source):
    return sorted(os.path.join(source, name) for name in os.listdir(source)
                  if name.lower().endswith(EXTENSIONS) and not os.path.isdir(os.path.join(source, name)))
  try:
    with open(source, encoding="utf-8") as f:
      lines = [line.strip() for line in f]
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f"{source}: not a directory or a readable list of image paths ({e})") from None
  base = os.path.dirname(source)
  return [os.path.join(base, line) for line in lines if line and not line.startswith("#")]


def image_id(path: str) -> int:
  """The feature-store key of an image file (module docstring)."""
  key = named_id(path)
  if key is None:
    raise InputError(f"{path}: no image id in the file name (expected COCO_<split>_<id>.jpg, "
                     "VizWiz_<split>_<n>.jpg or a name ending in digits)")
  return key


def named_id(path: str) -> int | None:
  """`image_id`, None for a name that gives none; InputError for one a store cannot hold."""
  name = os.path.basename(path)
  stem = os.path.splitext(name)[0]
  vizwiz = name.startswith("VizWiz_")
  digits = _COCO_NAME.fullmatch(stem) or (None if vizwiz else _TRAILING_DIGITS.fullmatch(stem))
  if digits is None and not vizwiz:
    return None
  try:
    return feature_key(digits[1] if digits else name)
  except ValueError as e:
    raise InputError(f"{path}: {e}") from None


def decode(path: str) -> Image.Image:
  """The image upright (EXIF orientation applied) in RGB; a path that is not a regular file
  (a fifo would block the read forever, a broken link) is unreadable."""
  try:
    if not stat.S_ISREG(os.stat(path).st_mode):
      raise UnreadableImage("not a regular file")
    with warnings.catch_warnings():  # PIL's bomb warning: the size is checked here
      warnings.simplefilter("ignore", Image.DecompressionBombWarning)
      with Image.open(path) as image:
        if image.width * image.height > MAX_PIXELS:
          raise UnreadableImage(f"{image.width} x {image.height} pixels, more than the {MAX_PIXELS // 10**6} "
                                "million a picture may have")
        image.load()
        image = ImageOps.exif_transpose(image)
  except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
    raise UnreadableImage(f"{type(e).__name__}: {e}") from None
  if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    image = Image.alpha_composite(white, image.convert("RGBA"))
  return image.convert("RGB")


def vqa(image: Image.Image, size: int) -> np.ndarray:
  """The VQA paper's (caffe VGG): size x size without crop, BGR, 0..255 minus the BGR mean."""
  pixels = np.asarray(image.resize((size, size), Image.BILINEAR), np.float32)
  return pixels[:, :, ::-1] - CAFFE_BGR_MEAN


def torchvision(image: Image.Image, size: int) -> np.ndarray:
  """torchvision's: shorter side to size * 8/7 (256 for 224), centre crop size x size,
  RGB in 0..1 normalised by the ImageNet mean and std."""
  short = size * 8 // 7
  width, height = image.size
  long = int(short * max(width, height) / min(width, height))
  resized = (short, long) if width <= height else (long, short)
  image = image.resize(resized, Image.BILINEAR)
  top, left = int(round((resized[1] - size) / 2)), int(round((resized[0] - size) / 2))
  pixels = np.asarray(image.crop((left, top, left + size, top + size)), np.float32) / 255
  return (pixels - IMAGENET_MEAN) / IMAGENET_STD


def vilt(image: Image.Image, size: int) -> np.ndarray:
  """ViLT's pixels: the image resized (bicubic, aspect kept) to fit size x size, padded at the
  bottom and right; RGB 0..255 and a fourth channel 1 on the image's pixels, 0 on the padding
  (the pixel mask). Stored as uint8 (`vqajax features --model pixels`); the model normalises
  them on the device (`nn/vilt_run.pixel_inputs`)."""
  width, height = image.size
  scale = size / max(width, height)
  resized = (max(1, round(width * scale)), max(1, round(height * scale)))
  pixels = np.zeros((size, size, 4), np.float32)
  pixels[:resized[1], :resized[0], :3] = np.asarray(image.resize(resized, Image.BICUBIC), np.float32)
  pixels[:resized[1], :resized[0], 3] = 1
  return pixels


PREPROCESS = {"vqa": vqa, "torchvision": torchvision, "vilt": vilt}
CHANNELS = {"vilt": 4}  # the input's channels where not 3


def input_shape(preprocess: str, size: int) -> tuple[int, int, int]:
  """The shape of one preprocessed image."""
  return size, size, CHANNELS.get(preprocess, 3)


def load(path: str, preprocess: str, size: int) -> np.ndarray:
  """`input_shape` float32 input of the model; raises UnreadableImage."""
  return PREPROCESS[preprocess](decode(path), size)
