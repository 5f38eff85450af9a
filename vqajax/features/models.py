"""Flax image encoders for feature extraction: VGG16 / VGG19 and ViT-B/16 (NHWC, inference).

The architectures are torchvision's (`weights.py` maps its state dicts onto these
parameters); `layer` picks the output:

* VGG `fc7`: the second fully connected layer after its ReLU ([B, hidden], 4096 for the
  paper's VGG, as the VQA paper's code); `conv5`: the last convolution after its ReLU,
  before the last max-pool ([B, 14, 14, 512] on 224x224 input).
* ViT `cls`: the CLS token after the final LayerNorm ([B, 768]); `patches`: the patch
  tokens after the final LayerNorm as a grid ([B, 14, 14, 768] on 224x224 input).

and, needing no weights file, `colour_cells` (the embedded datasets' extractor: `ColourCells`)
and `pixels` (the images themselves, for models that read pixels: ViLT).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vqajax.features.images import CAFFE_BGR_MEAN
from vqajax.nn.activations import gelu

VGG16_STAGES = ((64, 64), (128, 128), (256,) * 3, (512,) * 3, (512,) * 3)
VGG19_STAGES = ((64, 64), (128, 128), (256,) * 4, (512,) * 4, (512,) * 4)
POOLED = 7  # torchvision's AdaptiveAvgPool2d((7, 7)) before the classifier


def adaptive_pool_matrix(size: int, out: int) -> np.ndarray:
  """[out, size] weights of torch's adaptive average pooling along one axis (bin i covers
  floor(i * size / out) .. ceil((i + 1) * size / out))."""
  weights = np.zeros((out, size), np.float32)
  for i in range(out):
    start, stop = i * size // out, -(-(i + 1) * size // out)
    weights[i, start:stop] = 1 / (stop - start)
  return weights


class VGG(nn.Module):
  """VGG with 3x3 convolutions in `stages` (a 2x2 max-pool after each) and two ReLU
  fully connected layers of `hidden` units (the 1000-way logits are not computed)."""
  stages: tuple[tuple[int, ...], ...]
  layer: str = "fc7"  # fc7 | conv5
  hidden: int = 4096

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for s, widths in enumerate(self.stages, 1):
      for i, width in enumerate(widths, 1):
        x = nn.relu(nn.Conv(width, (3, 3), padding=1, name=f"conv{s}_{i}")(x))
      if self.layer == "conv5" and s == len(self.stages):
        return x
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    rows, cols = (adaptive_pool_matrix(n, POOLED) for n in x.shape[1:3])
    x = jnp.einsum("ih,jw,bhwc->bcij", rows, cols, x).reshape(x.shape[0], -1)  # torch's [C, 7, 7] order
    x = nn.relu(nn.Dense(self.hidden, name="fc6")(x))
    return nn.relu(nn.Dense(self.hidden, name="fc7")(x))


class EncoderBlock(nn.Module):
  """Pre-LayerNorm transformer block: self-attention, then a GELU MLP, each residual."""
  heads: int
  mlp: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    batch, tokens, width = x.shape
    head = width // self.heads
    y = nn.LayerNorm(1e-6, name="ln_1")(x)
    qkv = nn.Dense(3 * width, name="qkv")(y).reshape(batch, tokens, 3, self.heads, head)
    logits = jnp.einsum("bqhd,bkhd->bhqk", qkv[:, :, 0], qkv[:, :, 1]) / np.sqrt(head)
    y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), qkv[:, :, 2])
    x = x + nn.Dense(width, name="out")(y.reshape(batch, tokens, width))
    y = nn.LayerNorm(1e-6, name="ln_2")(x)
    y = gelu(nn.Dense(self.mlp, name="mlp_1")(y))
    return x + nn.Dense(width, name="mlp_2")(y)


class ViT(nn.Module):
  """Vision transformer (torchvision's `VisionTransformer`; defaults: ViT-B/16)."""
  layer: str = "cls"  # cls | patches
  patch: int = 16
  width: int = 768
  depth: int = 12
  heads: int = 12
  mlp: int = 3072

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.Conv(self.width, (self.patch,) * 2, strides=(self.patch,) * 2, padding="VALID",
                name="conv_proj")(x)
    batch, rows, cols, width = x.shape
    cls = self.param("class_token", nn.initializers.zeros, (1, 1, width))
    x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, width)), x.reshape(batch, -1, width)], 1)
    x = x + self.param("pos_embedding", nn.initializers.normal(0.02), (1, rows * cols + 1, width))
    for i in range(self.depth):
      x = EncoderBlock(self.heads, self.mlp, name=f"encoder_layer_{i}")(x)
    x = nn.LayerNorm(1e-6, name="ln")(x)
    return x[:, 0] if self.layer == "cls" else x[:, 1:].reshape(batch, rows, cols, width)


PALETTE_LEVELS = 6  # the colour cube of `ColourCells`: 0, 51, ..., 255 per channel, 216 colours
GRADIENT_GAIN = 10.0  # of the two gradient channels (mean |step| of the 0..1 grey level to the next pixel)
# layer: (cells per side, channels, gain, bias mean, output scale); the projection is drawn from a fixed seed
_COLOUR_LAYERS = {"global": (1, 4096, 3.0, -1.0, 0.5), "grid7": (7, 64, 2.0, 0.0, 1.0),
                  "grid14": (14, 32, 2.0, 0.0, 1.0)}


@functools.lru_cache(maxsize=None)
def colour_projection(layer: str) -> tuple[np.ndarray, np.ndarray]:
  """The fixed [216, channels - 2] projection and bias of a `ColourCells` layer."""
  _, channels, gain, bias_mean, _ = _COLOUR_LAYERS[layer]
  rng = np.random.default_rng([20261201, list(_COLOUR_LAYERS).index(layer)])
  proj = gain * rng.standard_normal((PALETTE_LEVELS ** 3, channels - 2), dtype=np.float32)
  bias = rng.normal(bias_mean, 0.5 if bias_mean else 0.0, channels - 2).astype(np.float32)
  return proj, bias


class ColourCells(nn.Module):
  """A hand-defined extractor with no weights file (the embedded datasets' pixels -> features).

  Reads the 'vqa' preprocessed input (BGR minus the caffe mean) and describes each cell
  (one for `global`, a 7x7 or 14x14 grid for `grid7` / `grid14`) by its colours and its
  edges: each pixel is snapped to the nearest colour of a 6x6x6 colour cube, the square
  roots of the cell's shares of each colour go through a fixed random projection drawn
  from a constant seed and a ReLU, and the last two channels are the cell's mean
  horizontal and vertical grey-level steps (x `GRADIENT_GAIN`): `global` [B, 4096] (an fc7
  stand-in), `grid7` [B, 7, 7, 64], `grid14` [B, 14, 14, 32]. Shapes and text it sees only
  as edges: the embedded pictures show each kind of thing by a colour of its own.
  """
  layer: str = "global"  # global | grid7 | grid14

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cells, _, _, _, scale = _COLOUR_LAYERS[self.layer]
    batch, height, width, _ = x.shape
    rgb = x[..., ::-1] + CAFFE_BGR_MEAN
    levels = jnp.clip(jnp.round(rgb * ((PALETTE_LEVELS - 1) / 255)), 0, PALETTE_LEVELS - 1).astype(jnp.int32)
    index = (levels[..., 0] * PALETTE_LEVELS + levels[..., 1]) * PALETTE_LEVELS + levels[..., 2]
    rows, cols = jnp.arange(height) * cells // height, jnp.arange(width) * cells // width
    cell = (jnp.arange(batch)[:, None, None] * cells + rows[:, None]) * cells + cols  # [B, H, W]
    colours = PALETTE_LEVELS ** 3
    counts = jnp.bincount((cell * colours + index).reshape(-1), length=batch * cells * cells * colours)
    shares = counts.reshape(batch, cells, cells, colours) * (cells * cells / (height * width))
    proj, bias = colour_projection(self.layer)
    grey = rgb.mean(-1) / 255
    steps = jnp.stack([jnp.abs(jnp.diff(grey, axis=2, append=grey[:, :, -1:])),
                       jnp.abs(jnp.diff(grey, axis=1, append=grey[:, -1:]))], -1)
    edges = steps.reshape(batch, cells, height // cells, cells, width // cells, 2).mean((2, 4))
    out = jnp.concatenate([scale * nn.relu(jnp.sqrt(shares) @ proj + bias), GRADIENT_GAIN * edges], -1)
    return out.reshape(batch, -1) if cells == 1 else out


class Pixels(nn.Module):
  """The 'vilt' preprocessed image as it is ([B, S, S, 4]: RGB 0..255 and the pixel mask),
  stored as uint8: the store of a model that reads pixels (ViLT)."""
  layer: str = "pixels"

  def __call__(self, x: jax.Array) -> jax.Array:
    return x


MODELS = {
    "vgg16": functools.partial(VGG, VGG16_STAGES),
    "vgg19": functools.partial(VGG, VGG19_STAGES),
    "vit_b16": ViT,
    "colour_cells": ColourCells,
    "pixels": Pixels,
}
LAYERS = {"vgg16": ("fc7", "conv5"), "vgg19": ("fc7", "conv5"), "vit_b16": ("cls", "patches"),
          "colour_cells": tuple(_COLOUR_LAYERS), "pixels": ("pixels",)}
NO_WEIGHTS = frozenset({"colour_cells", "pixels"})  # defined by their code alone: no weights file, no params
PREPROCESS = {"colour_cells": "vqa", "pixels": "vilt"}  # the preprocessing a model reads, where it has one
DTYPES = {"pixels": "uint8"}  # the store's dtype, where not float16 / float32
