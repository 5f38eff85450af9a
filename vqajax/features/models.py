"""Flax image encoders for feature extraction: VGG16 / VGG19 and ViT-B/16 (NHWC, inference).

The architectures are torchvision's (`weights.py` maps its state dicts onto these
parameters); `layer` picks the output:

* VGG `fc7`: the second fully connected layer after its ReLU ([B, hidden], 4096 for the
  paper's VGG, as the VQA paper's code); `conv5`: the last convolution after its ReLU,
  before the last max-pool ([B, 14, 14, 512] on 224x224 input).
* ViT `cls`: the CLS token after the final LayerNorm ([B, 768]); `patches`: the patch
  tokens after the final LayerNorm as a grid ([B, 14, 14, 768] on 224x224 input).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

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
    y = nn.gelu(nn.Dense(self.mlp, name="mlp_1")(y), approximate=False)
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


MODELS = {
    "vgg16": functools.partial(VGG, VGG16_STAGES),
    "vgg19": functools.partial(VGG, VGG19_STAGES),
    "vit_b16": ViT,
}
LAYERS = {"vgg16": ("fc7", "conv5"), "vgg19": ("fc7", "conv5"), "vit_b16": ("cls", "patches")}
