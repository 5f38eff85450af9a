"""CLIPSeg (Lüddecke & Ecker, CVPR 2022) in Flax, as Hugging Face transformers'
`CLIPSegForImageSegmentation` defines it: masks from words (or from a prompt image).

CLIP's two towers, frozen in CLIPSeg's training: the text tower (token + position embeddings,
causal pre-LayerNorm layers, a final LayerNorm, the state at the first end-of-text token,
projected) and the vision tower (a `patch_size` convolution, a class token, position embeddings
resized bicubically as torch does when the image is not CLIP's size, a LayerNorm, pre-LayerNorm
layers; its class token, LayerNormed and projected, is a prompt image's embedding). The decoder
reads the vision tower's states after the layers `extract_layers` names, deepest first: each is
reduced to `reduce_dim` and added to the running state, which FiLM conditions on the prompt's
embedding at `conditional_layer`, and goes through one post-LayerNorm layer (ReLU MLP); the patch
tokens then become a logit map of the image's size through a transposed convolution (one, or
CLIPSeg-refined's 3x3 convolution and two). Layers are `nn.scan`ned (parameters stacked on a
leading layer axis). `clipseg_hub.py` reads Hub folders into these parameters.

Images are NHWC arrays normalised as CLIPSeg's processor does (ImageNet mean and std); text is
`input_ids` / `attention_mask` [B, T] padded on the right.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vqajax.nn import multihead
from vqajax.nn.activations import ACTIVATIONS

CUBIC_A = -0.75  # torch's bicubic kernel (jax.image's cubic uses -0.5)


@dataclasses.dataclass(frozen=True)
class Tower:
  """One CLIP tower's fields of HF's `CLIPSegTextConfig` / `CLIPSegVisionConfig`."""
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int
  num_attention_heads: int
  hidden_act: str = "quick_gelu"
  layer_norm_eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class CLIPSegConfig:
  """The architecture fields of HF's `CLIPSegConfig` (defaults: `CIDAS/clipseg-rd64-refined`)."""
  text: Tower = Tower(512, 2048, 12, 8)
  vision: Tower = Tower(768, 3072, 12, 12)
  vocab_size: int = 49408
  max_position_embeddings: int = 77
  eos_token_id: int = 49407
  image_size: int = 224
  patch_size: int = 16
  num_channels: int = 3
  projection_dim: int = 512
  extract_layers: tuple[int, ...] = (3, 6, 9)
  reduce_dim: int = 64
  decoder_num_attention_heads: int = 4
  decoder_intermediate_size: int = 2048
  conditional_layer: int = 0
  use_complex_transposed_convolution: bool = True

  @property
  def decoder(self) -> Tower:
    """The decoder layers' shape: HF copies the vision tower's config and sets ReLU."""
    return Tower(self.reduce_dim, self.decoder_intermediate_size, len(self.extract_layers),
                 self.decoder_num_attention_heads, "relu", self.vision.layer_norm_eps)


def _dense(features: int, dtype, name: str, use_bias: bool = True) -> nn.Dense:
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, kernel_init=nn.initializers.normal(0.02), name=name)


def _attention(tower: Tower, dtype, x, bias):
  """Multi-head self-attention of `x` [B, T, D] with an additive `bias` [B or 1, 1, T, T] (or None)."""
  heads = tower.num_attention_heads
  q, k, v = (multihead.heads_first(_dense(x.shape[-1], dtype, f"{name}_proj")(x), heads) for name in "qkv")
  y = multihead.attend(q, k, v, scale=(x.shape[-1] // heads) ** -0.5, bias=bias, dtype=dtype)
  return _dense(x.shape[-1], dtype, "out_proj")(y)


def _mlp(tower: Tower, dtype, x):
  return _dense(tower.hidden_size, dtype, "fc2")(ACTIVATIONS[tower.hidden_act](
      _dense(tower.intermediate_size, dtype, "fc1")(x)))


class _EncoderLayer(nn.Module):
  """HF's `CLIPSegEncoderLayer`: x + attention(LN(x)), then x + MLP(LN(x)); returns (x, x) so a
  scan over layers also yields every layer's output."""
  tower: Tower
  dtype: Any

  @nn.compact
  def __call__(self, x, bias):
    eps = self.tower.layer_norm_eps
    x = x + _attention(self.tower, self.dtype, nn.LayerNorm(eps, name="layer_norm1")(x), bias)
    x = x + _mlp(self.tower, self.dtype, nn.LayerNorm(eps, name="layer_norm2")(x))
    return x, x


class _DecoderLayer(nn.Module):
  """HF's `CLIPSegDecoderLayer`: LN(x + attention(x)), then LN(x + MLP(x))."""
  tower: Tower
  dtype: Any

  @nn.compact
  def __call__(self, x):
    eps = self.tower.layer_norm_eps
    x = nn.LayerNorm(eps, name="layer_norm1")(x + _attention(self.tower, self.dtype, x, None))
    return nn.LayerNorm(eps, name="layer_norm2")(x + _mlp(self.tower, self.dtype, x))


def _layers(tower: Tower, dtype, x, bias):
  """The tower's layers as one scan: (the final states, every layer's output [L, B, T, D])."""
  scan = nn.scan(_EncoderLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                 in_axes=nn.broadcast, length=tower.num_hidden_layers)
  return scan(tower, dtype, name="layers")(x, bias)


def cubic_resize_matrix(size: int, out: int) -> np.ndarray:
  """[out, size] weights of torch's bicubic `interpolate(align_corners=False)` from `size` to `out`
  samples: source (i + 0.5) * size / out - 0.5, four taps clamped to the edge, A = -0.75."""
  source = (np.arange(out, dtype=np.float64) + 0.5) * (size / out) - 0.5
  low = np.floor(source)
  t = source - low
  a = CUBIC_A
  near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # |x| <= 1
  far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # 1 < |x| < 2
  weights = np.zeros((out, size), np.float64)
  for offset, w in zip((-1, 0, 1, 2), (far(t + 1), near(t), near(1 - t), far(2 - t))):
    np.add.at(weights, (np.arange(out), np.clip(low + offset, 0, size - 1).astype(int)), w)
  return weights.astype(np.float32)


class TextTower(nn.Module):
  """HF's `CLIPSegTextModel` and the text projection: the prompts' embeddings [B, projection_dim]."""
  config: CLIPSegConfig
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, input_ids, attention_mask):
    c, init = self.config, nn.initializers.normal(0.02)
    length = input_ids.shape[1]
    if length > c.max_position_embeddings:
      raise ValueError(f"text of {length} tokens; CLIPSeg has {c.max_position_embeddings} positions")
    x = nn.Embed(c.vocab_size, c.text.hidden_size, embedding_init=init, name="token_embedding")(input_ids)
    x = x + self.param("position_embedding", init, (c.max_position_embeddings, c.text.hidden_size))[:length]
    visible = jnp.tril(jnp.ones((length, length), bool))[None] & (attention_mask[:, None, :] > 0)
    bias = jnp.where(visible, 0.0, jnp.finfo(jnp.float32).min)[:, None]
    x, _ = _layers(c.text, self.dtype, x, bias)
    x = nn.LayerNorm(c.text.layer_norm_eps, name="final_layer_norm")(x)
    # the first end-of-text token; configs from before HF fixed eos_token_id (2) take the highest id, as HF does
    end = jnp.argmax(input_ids if c.eos_token_id == 2 else input_ids == c.eos_token_id, axis=1)
    pooled = jnp.take_along_axis(x, end[:, None, None], axis=1)[:, 0]
    return _dense(c.projection_dim, self.dtype, "text_projection", use_bias=False)(pooled).astype(jnp.float32)


class VisionTower(nn.Module):
  """HF's `CLIPSegVisionModel` and the visual projection: (every layer's output [L, B, 1 + h * w, D],
  the image's embedding [B, projection_dim])."""
  config: CLIPSegConfig
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, pixel_values):
    c, init = self.config, nn.initializers.normal(0.02)
    width = c.vision.hidden_size
    x = nn.Conv(width, (c.patch_size,) * 2, strides=(c.patch_size,) * 2, padding="VALID", use_bias=False,
                dtype=self.dtype, kernel_init=init, name="patch_embedding")(pixel_values.astype(jnp.float32))
    batch, rows, cols, _ = x.shape
    grid = c.image_size // c.patch_size
    positions = self.param("position_embedding", init, (grid * grid + 1, width))
    spatial = positions[1:]
    if (rows, cols) != (grid, grid):  # HF resizes unless the grid is CLIP's own
      spatial = spatial.reshape(grid, grid, width)
      spatial = jnp.einsum("ik,jl,kld->ijd", cubic_resize_matrix(grid, rows), cubic_resize_matrix(grid, cols),
                           spatial).reshape(rows * cols, width)
    cls = self.param("class_embedding", init, (width,)) + positions[0]
    x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, width)), x.reshape(batch, rows * cols, width) + spatial], 1)
    x = nn.LayerNorm(c.vision.layer_norm_eps, name="pre_layrnorm")(x)
    x, states = _layers(c.vision, self.dtype, x, None)
    pooled = nn.LayerNorm(c.vision.layer_norm_eps, name="post_layernorm")(x[:, 0])
    embedding = _dense(c.projection_dim, self.dtype, "visual_projection", use_bias=False)(pooled)
    return states, embedding.astype(jnp.float32)


class _BlockUpsample(nn.Module):
  """torch's `ConvTranspose2d(kernel_size=stride, stride=stride)` on NHWC: each input pixel
  becomes a stride x stride block (kernel [in, stride, stride, out])."""
  features: int
  stride: int
  dtype: Any

  @nn.compact
  def __call__(self, x):
    batch, rows, cols, channels = x.shape
    s = self.stride
    kernel = self.param("kernel", nn.initializers.normal(0.02), (channels, s, s, self.features))
    bias = self.param("bias", nn.initializers.zeros, (self.features,))
    y = jnp.einsum("bhwc,cijo->bhiwjo", x.astype(self.dtype), kernel.astype(self.dtype),
                   preferred_element_type=jnp.float32)
    return y.reshape(batch, rows * s, cols * s, self.features) + bias


class Decoder(nn.Module):
  """HF's `CLIPSegDecoder`: logits [B, rows * k, cols * k] from the vision tower's chosen layer
  outputs (`states` [L, B, 1 + rows * cols, D]) and the prompts' embeddings; k is the patch size
  (the refined head: (patch // 4) ** 2, the same for CLIP's 16)."""
  config: CLIPSegConfig
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, states, conditional, rows: int, cols: int):
    c = self.config
    tower = c.decoder
    out = None
    for i, layer in enumerate(reversed(c.extract_layers)):
      reduced = _dense(c.reduce_dim, self.dtype, f"reduces_{i}")(states[layer])
      out = reduced if out is None else reduced + out
      if i == c.conditional_layer:
        scale = _dense(c.reduce_dim, self.dtype, "film_mul")(conditional)
        shift = _dense(c.reduce_dim, self.dtype, "film_add")(conditional)
        out = scale[:, None] * out + shift[:, None]
      out = _DecoderLayer(tower, self.dtype, name=f"layers_{i}")(out)
    grid = out[:, 1:].reshape(out.shape[0], rows, cols, c.reduce_dim)
    if c.use_complex_transposed_convolution:
      step = c.patch_size // 4
      grid = nn.relu(nn.Conv(c.reduce_dim, (3, 3), padding=1, dtype=self.dtype, name="conv")(grid))
      grid = nn.relu(_BlockUpsample(c.reduce_dim // 2, step, self.dtype, name="upsample_0")(grid))
      logits = _BlockUpsample(1, step, self.dtype, name="upsample_1")(grid)
    else:
      logits = _BlockUpsample(1, c.patch_size, self.dtype, name="upsample")(grid)
    return logits[..., 0].astype(jnp.float32)


class CLIPSeg(nn.Module):
  """HF's `CLIPSegForImageSegmentation`: mask logits [B, H', W'] (H' = H // patch * k, `Decoder`) of
  `pixel_values` [B, H, W, C] for text prompts (`input_ids`, `attention_mask`) or prompt images
  (`prompt_pixels`), one prompt per image."""
  config: CLIPSegConfig
  dtype: Any = jnp.float32

  def setup(self):
    self.text = TextTower(self.config, self.dtype)
    self.vision = VisionTower(self.config, self.dtype)
    self.decoder = Decoder(self.config, self.dtype)

  def prompt_embeddings(self, input_ids=None, attention_mask=None, prompt_pixels=None):
    if prompt_pixels is not None:
      return self.vision(prompt_pixels)[1]
    return self.text(input_ids, attention_mask)

  def __call__(self, pixel_values, input_ids=None, attention_mask=None, prompt_pixels=None):
    conditional = self.prompt_embeddings(input_ids, attention_mask, prompt_pixels)
    states, _ = self.vision(pixel_values)
    p = self.config.patch_size
    return self.decoder(states, conditional, pixel_values.shape[1] // p, pixel_values.shape[2] // p)


def example_inputs(config: CLIPSegConfig, batch: int = 1, text_length: int | None = None) -> dict[str, np.ndarray]:
  """Zero inputs of the shapes a model of `config` reads (square `image_size` images), for `init`."""
  length = text_length or config.max_position_embeddings
  return {"pixel_values": np.zeros((batch, config.image_size, config.image_size, config.num_channels), np.float32),
          "input_ids": np.zeros((batch, length), np.int32), "attention_mask": np.ones((batch, length), np.int32)}
