"""PaliGemma (Beyer et al. 2024) and PaliGemma 2 (Steiner et al. 2024) in Flax, as Hugging Face
transformers' `PaliGemmaForConditionalGeneration` defines them: text from an image and a prompt.

The SigLIP vision tower (a `patch_size` convolution, learned position embeddings for its one image
size, pre-LayerNorm layers with a tanh-GELU MLP, a final LayerNorm; no pooling head) gives one token
per patch; a linear projector maps them to the decoder's width and they take the place of the
`<image>` tokens of the prompt (unscaled: HF's text embeddings alone are multiplied by
sqrt(hidden_size), so older HF versions divide the image features by it before scaling every input
back). The decoder is Gemma (PaliGemma) or Gemma 2 (PaliGemma 2): RMSNorm with (1 + scale), rotary
position embeddings (rotate-half, positions counted from 1 over the real tokens), grouped-query
attention (one key / value head in PaliGemma), a GeGLU MLP with tanh GELU, the output projection
tied to the embedding. Gemma 2 adds norms after the attention and after the MLP, soft-capped
attention logits (tanh(x / cap) * cap) and final logits, `query_pre_attn_scalar` as the attention's
scale and layers of sliding-window (local) attention between the global ones (`layer_types`).

The mask is a prefix-LM's: the image and the prompt (`prefix_mask`) attend to each other both ways,
the suffix causally; padding is never attended to. A local layer sees the `sliding_window` previous
sequence slots, and the prefix sees all of the prefix (HF's blockwise mask overlays the window).
Layers are `nn.scan`ned (parameters stacked on a leading layer axis), optionally rematerialised
(`remat`: a `jax.checkpoint_policies` name); `dtype` is the matmul inputs' type (bfloat16 on
accelerators), while parameters, norms, the residual stream and the softmax stay float32.

`paligemma_decode.py` generates text from it (greedy, with a key / value cache); `paligemma_hub.py`
reads Hub folders into these parameters. Images are NHWC float arrays normalised as HF's processor does
(to [-1, 1]); text is `input_ids` with `input_mask` (padding on the right) and `prefix_mask`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vqajax.nn import multihead
from vqajax.nn.activations import ACTIVATIONS

LOCAL, GLOBAL = "sliding_attention", "full_attention"  # HF's names of the two kinds of layer


@dataclasses.dataclass(frozen=True)
class VisionConfig:
  """The fields of HF's `SiglipVisionConfig` that shape the tower (defaults: PaliGemma's So400m/14)."""
  hidden_size: int = 1152
  intermediate_size: int = 4304
  num_hidden_layers: int = 27
  num_attention_heads: int = 16
  image_size: int = 224
  patch_size: int = 14
  num_channels: int = 3
  hidden_act: str = "gelu_pytorch_tanh"
  layer_norm_eps: float = 1e-6

  @property
  def num_patches(self) -> int:
    return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class TextConfig:
  """The fields of HF's `GemmaConfig` / `Gemma2Config` that shape the decoder (defaults: PaliGemma's
  Gemma 2B). `layer_types` names each layer LOCAL or GLOBAL (Gemma: all GLOBAL); a soft cap of None
  is none; `query_pre_attn_scalar` is Gemma's head_dim."""
  model_type: str = "gemma"
  vocab_size: int = 257152
  hidden_size: int = 2048
  intermediate_size: int = 16384
  num_hidden_layers: int = 18
  num_attention_heads: int = 8
  num_key_value_heads: int = 1
  head_dim: int = 256
  hidden_act: str = "gelu_pytorch_tanh"
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  attention_bias: bool = False
  query_pre_attn_scalar: float = 256.0
  attn_logit_softcapping: float | None = None
  final_logit_softcapping: float | None = None
  sliding_window: int | None = None
  layer_types: tuple[str, ...] = (GLOBAL,) * 18
  bos_token_id: int = 2
  eos_token_id: tuple[int, ...] = (1,)
  pad_token_id: int = 0

  @property
  def gemma2(self) -> bool:
    return self.model_type == "gemma2"


@dataclasses.dataclass(frozen=True)
class PaliGemmaConfig:
  """HF's `PaliGemmaConfig`: the two towers, the `<image>` token's id and whether the output
  projection is the embedding (`tie_word_embeddings`)."""
  vision: VisionConfig = VisionConfig()
  text: TextConfig = TextConfig()
  image_token_index: int = 256000
  tie_word_embeddings: bool = True


def _dense(features: int, dtype, name: str | None = None, use_bias: bool = True) -> nn.Dense:
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, kernel_init=nn.initializers.normal(0.02), name=name)


def _scan(layer: type[nn.Module], length: int, remat: str | None, in_axes, name: str, **fields) -> nn.Module:
  """`layer` scanned `length` times, parameters stacked on axis 0, rematerialised under the
  `jax.checkpoint_policies` named `remat` (None: not rematerialised)."""
  if remat is not None:
    layer = nn.remat(layer, policy=getattr(jax.checkpoint_policies, remat), prevent_cse=False)
  scan = nn.scan(layer, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=in_axes, length=length)
  return scan(name=name, **fields)


def _layer_norm(config: VisionConfig, name: str) -> nn.LayerNorm:
  """torch's LayerNorm: the variance as the mean squared deviation (not E[x^2] - E[x]^2)."""
  return nn.LayerNorm(config.layer_norm_eps, use_fast_variance=False, name=name)


class _VisionLayer(nn.Module):
  """HF's `SiglipEncoderLayer`: x + attention(LN(x)), then x + MLP(LN(x))."""
  config: VisionConfig
  dtype: Any

  @nn.compact
  def __call__(self, x, _):
    c = self.config
    width = x.shape[-1]
    heads, depth = c.num_attention_heads, width // c.num_attention_heads
    y = _layer_norm(c, "layer_norm1")(x)
    q, k, v = (multihead.heads_first(_dense(width, self.dtype, f"{n}_proj")(y), heads) for n in "qkv")
    x = x + _dense(width, self.dtype, "out_proj")(multihead.attend(q, k, v, scale=depth ** -0.5, dtype=self.dtype))
    y = _layer_norm(c, "layer_norm2")(x)
    y = ACTIVATIONS[c.hidden_act](_dense(c.intermediate_size, self.dtype, "fc1")(y))
    return x + _dense(width, self.dtype, "fc2")(y), None


class SigLIP(nn.Module):
  """HF's `SiglipVisionModel` without its pooling head: one state per patch [B, patches, hidden] of
  `pixel_values` [B, image_size, image_size, channels]."""
  config: VisionConfig
  dtype: Any = jnp.float32
  remat: str | None = None

  @nn.compact
  def __call__(self, pixel_values):
    c = self.config
    if pixel_values.shape[1:] != (c.image_size, c.image_size, c.num_channels):
      raise ValueError(f"images of shape {pixel_values.shape[1:]}; this SigLIP reads "
                       f"{(c.image_size, c.image_size, c.num_channels)}")
    init = nn.initializers.normal(0.02)
    x = nn.Conv(c.hidden_size, (c.patch_size,) * 2, strides=(c.patch_size,) * 2, padding="VALID", dtype=self.dtype,
                kernel_init=init, name="patch_embedding")(pixel_values.astype(jnp.float32))
    x = x.reshape(x.shape[0], -1, c.hidden_size).astype(jnp.float32)
    x = x + self.param("position_embedding", init, (c.num_patches, c.hidden_size))
    x, _ = _scan(_VisionLayer, c.num_hidden_layers, self.remat, nn.broadcast, "layers", config=c, dtype=self.dtype)(
        x, None)
    return _layer_norm(c, "post_layernorm")(x)


class RMSNorm(nn.Module):
  """Gemma's RMSNorm in float32: x / sqrt(mean(x^2) + eps) * (1 + scale), the scale starting at 0."""
  eps: float

  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", nn.initializers.zeros, (x.shape[-1],))
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + np.float32(self.eps)) * (1 + scale)


def rotary(positions, depth: int, theta: float):
  """(cos, sin) [B, T, depth] of HF's rotate-half RoPE at integer `positions` [B, T]."""
  inverse = 1.0 / (np.float32(theta) ** (np.arange(0, depth, 2, dtype=np.float32) / np.float32(depth)))
  angles = positions[..., None].astype(jnp.float32) * inverse
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.cos(angles), jnp.sin(angles)


def _rotate(x, rope):
  cos, sin = rope
  half = x.shape[-1] // 2
  turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x.astype(jnp.float32) * cos[:, None] + turned * sin[:, None]  # x [B, heads, T, depth]


class _DecoderLayer(nn.Module):
  """HF's `GemmaDecoderLayer` / `Gemma2DecoderLayer` over x [B, T, hidden] at sequence slots `index` ..
  `index + T - 1`. `masks` [2, B, T, S] are the global and local layers' masks; `layer` is (whether
  this layer is local, its key / value cache [B, K, S, D] each or None). Returns (x, the cache with
  this input's keys and values written at `index`)."""
  config: TextConfig
  dtype: Any

  @nn.compact
  def __call__(self, x, rope, masks, index, layer):
    c = self.config
    local, cache = layer
    norm = functools.partial(RMSNorm, c.rms_norm_eps)
    y = norm(name="input_layernorm")(x)
    q = _dense(c.num_attention_heads * c.head_dim, self.dtype, "q_proj", c.attention_bias)(y)
    k, v = (_dense(c.num_key_value_heads * c.head_dim, self.dtype, f"{n}_proj", c.attention_bias)(y) for n in "kv")
    q = _rotate(multihead.heads_first(q, c.num_attention_heads), rope)
    k = _rotate(multihead.heads_first(k, c.num_key_value_heads), rope)
    v = multihead.heads_first(v, c.num_key_value_heads)
    if cache is not None:
      cache = tuple(jax.lax.dynamic_update_slice(stored, new.astype(stored.dtype), (0, 0, index, 0))
                    for stored, new in zip(cache, (k, v)))
      k, v = cache
    y = multihead.attend(q, k, v, scale=c.query_pre_attn_scalar ** -0.5, mask=masks[local.astype(jnp.int32)],
                         softcap=c.attn_logit_softcapping, dtype=self.dtype)
    y = _dense(c.hidden_size, self.dtype, "o_proj", c.attention_bias)(y)
    if c.gemma2:
      y = norm(name="post_attention_layernorm")(y)
    x = x + y
    y = norm(name="pre_feedforward_layernorm" if c.gemma2 else "post_attention_layernorm")(x)
    gate = ACTIVATIONS[c.hidden_act](_dense(c.intermediate_size, self.dtype, "gate_proj", False)(y))
    y = _dense(c.hidden_size, self.dtype, "down_proj", False)(gate * _dense(c.intermediate_size, self.dtype,
                                                                           "up_proj", False)(y))
    if c.gemma2:
      y = norm(name="post_feedforward_layernorm")(y)
    return x + y, cache


def attention_masks(config: TextConfig, query_slots, query_prefix, key_valid, key_prefix):
  """[2, B, T, S]: what queries at sequence slots `query_slots` [T] (in the prefix where
  `query_prefix` [B, T]) may attend to among S slots (`key_valid`, `key_prefix` [B, S]) in global
  layers (earlier or the same slot, or both in the prefix) and in local ones (as global, but only the
  `sliding_window` slots up to the query's, unless both are in the prefix)."""
  keys = jnp.arange(key_valid.shape[1])
  queries = query_slots[:, None]
  causal = keys <= queries
  both = query_prefix[:, :, None] & key_prefix[:, None, :]
  valid = key_valid[:, None, :]
  full = valid & (causal[None] | both)
  if config.sliding_window is None:
    return jnp.stack([full, full])
  window = causal & (keys > queries - config.sliding_window)
  return jnp.stack([full, valid & (window[None] | both)])


class PaliGemma(nn.Module):
  """HF's `PaliGemmaForConditionalGeneration`: logits [B, T, vocab] of `input_ids` [B, T] (padding
  off in `input_mask`, the bidirectional prefix in `prefix_mask`) whose `<image>` tokens (each row
  holds `vision.num_patches`) take the image features of `pixel_values` [B, H, W, C] in order; of
  the slots `keep` [B, K] alone when given."""
  config: PaliGemmaConfig
  dtype: Any = jnp.float32
  remat: str | None = None

  def setup(self):
    c, t = self.config, self.config.text
    self.vision = SigLIP(c.vision, self.dtype, self.remat)
    self.projector = _dense(t.hidden_size, self.dtype)
    self.embed_tokens = nn.Embed(t.vocab_size, t.hidden_size, embedding_init=nn.initializers.normal(0.02))
    self.layers = _scan(_DecoderLayer, t.num_hidden_layers, self.remat,
                        (nn.broadcast, nn.broadcast, nn.broadcast, 0), "layers", config=t, dtype=self.dtype)
    self.norm = RMSNorm(t.rms_norm_eps)
    if not c.tie_word_embeddings:
      self.lm_head = _dense(t.vocab_size, self.dtype, use_bias=False)

  def embed_text(self, input_ids):
    """Token embeddings times sqrt(hidden_size); ids past the vocabulary (an `<image>` token outside it) read row 0."""
    t = self.config.text
    ids = jnp.where(input_ids < t.vocab_size, input_ids, 0)
    return self.embed_tokens(ids) * np.float32(t.hidden_size ** 0.5)

  def embed(self, pixel_values, input_ids):
    """The decoder's inputs [B, T, hidden]: the projected image features in the `<image>` slots."""
    features = self.projector(self.vision(pixel_values)).astype(jnp.float32)
    image = input_ids == self.config.image_token_index
    which = jnp.clip(jnp.cumsum(image, axis=1) - 1, 0, features.shape[1] - 1)
    features = jnp.take_along_axis(features, which[..., None], axis=1)
    return jnp.where(image[..., None], features, self.embed_text(input_ids))

  def decode(self, x, positions, masks, index=0, cache=None, keep=None):
    """The decoder over x [B, T, hidden] at slots `index` .. (rotary `positions` [B, T], `masks` from
    `attention_masks`), with a key / value cache ([L, B, K, S, D] each) or None: (logits, cache);
    the logits [B, K, vocab] of the slots `keep` [B, K] alone when given (the output projection,
    vocabulary-wide, only where a loss reads it)."""
    t = self.config.text
    local = jnp.asarray([kind == LOCAL for kind in t.layer_types])
    x, cache = self.layers(x, rotary(positions, t.head_dim, t.rope_theta), masks, index, (local, cache))
    if keep is not None:
      x = jnp.take_along_axis(x, keep[..., None], axis=1)
    return self.logits(self.norm(x)), cache

  def logits(self, x):
    t = self.config.text
    if self.config.tie_word_embeddings:
      logits = jnp.einsum("btd,vd->btv", x.astype(self.dtype), self.embed_tokens.embedding.astype(self.dtype),
                          preferred_element_type=jnp.float32)
    else:
      logits = self.lm_head(x).astype(jnp.float32)
    cap = t.final_logit_softcapping
    return logits if cap is None else jnp.tanh(logits / np.float32(cap)) * np.float32(cap)

  def __call__(self, pixel_values, input_ids, input_mask, prefix_mask, keep=None):
    x = self.embed(pixel_values, input_ids)
    valid, prefix = input_mask > 0, (prefix_mask > 0) & (input_mask > 0)
    masks = attention_masks(self.config.text, jnp.arange(x.shape[1]), prefix, valid, prefix)
    return self.decode(x, jnp.cumsum(valid, axis=1), masks, keep=keep)[0]


def example_inputs(config: PaliGemmaConfig, batch: int = 1, text_length: int = 4) -> dict[str, np.ndarray]:
  """Inputs of the shapes a model of `config` reads (the image tokens, then `text_length` more), for `init`."""
  v = config.vision
  length = v.num_patches + text_length
  ids = np.zeros((batch, length), np.int32)
  ids[:, :v.num_patches] = config.image_token_index
  return {"pixel_values": np.zeros((batch, v.image_size, v.image_size, v.num_channels), np.float32),
          "input_ids": ids, "input_mask": np.ones((batch, length), np.int32),
          "prefix_mask": np.ones((batch, length), np.int32)}
