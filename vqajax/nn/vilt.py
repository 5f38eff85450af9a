"""ViLT (Kim et al. 2021) in Flax, as Hugging Face transformers' `ViltModel` defines it, with three heads.

`Vilt` is the backbone: BERT text embeddings (word + token type + position, LayerNorm), patch
embeddings (a `patch_size` convolution) plus position embeddings interpolated to each image's
valid patch extent, a modality embedding (0 text, 1 image), pre-LayerNorm transformer layers (one
`nn.scan`: their parameters stacked under `layers`, optionally rematerialised), a final LayerNorm
and the pooler (tanh dense on the first text token). Heads: `ViltClassifier`
(`ViltForQuestionAnswering`'s classifier, hidden -> 2 hidden, LayerNorm, GELU, -> labels: VQA's
answers or AnswerTherapy's two grounding classes) and `ViltMask` (one mask logit map per answer
slot from the patch tokens; which text is fed, I+Q, I+Q+A or I+A, is the caller's choice).
`vilt_hub.py` reads Hub folders (config, weights, tokenizer) into these.

Images are NHWC arrays of one fixed size per model (ViLT's processor normalises with mean and
std 0.5), padded at the bottom and right, with `pixel_mask` [B, H, W] marking the real pixels;
text is `input_ids` / `attention_mask` / `token_type_ids` [B, T] of a fixed length. Every patch
of the grid is a token, in row-major order after the image's CLS token; padded patches are
masked out of attention, so shapes are static.

HF's `visual_embed` also samples patches. With `max_image_length` -1 (HF's default) it keeps
every valid patch, only shuffling them and drawing masked padding patches, which changes no
output: the pooled output and each patch token's state are equal to this module's (whose
patch tokens stay in grid order). With a positive `max_image_length` below an image's valid
patch count, HF draws that many valid patches at random in every forward pass, in training
and inference alike (ViLT's pre-training thins long images so). This module never samples:
it keeps every patch, so it equals HF whenever HF keeps them all (`max_image_length` -1, or at
least the valid patches, e.g. 200 against a 384 x 384 image's 144), and is deterministic
otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vqajax.nn import multihead
from vqajax.nn.activations import ACTIVATIONS, gelu

HEAD_LAYER_NORM_EPS = 1e-5  # the classifier's nn.LayerNorm takes torch's default, not the config's


@dataclasses.dataclass(frozen=True)
class ViltConfig:
  """The architecture fields of HF's `ViltConfig` (defaults: ViLT-B/32, as HF's); `labels` are
  `id2label` in id order."""
  vocab_size: int = 30522
  type_vocab_size: int = 2
  modality_type_vocab_size: int = 2
  max_position_embeddings: int = 40
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.0
  attention_probs_dropout_prob: float = 0.0
  layer_norm_eps: float = 1e-12
  image_size: int = 384
  patch_size: int = 32
  num_channels: int = 3
  qkv_bias: bool = True
  max_image_length: int = -1
  num_images: int = -1
  labels: tuple[str, ...] = ("LABEL_0", "LABEL_1")

  @property
  def position_grid(self) -> int:
    """The side of the square grid of patch position embeddings (`image_size // patch_size`)."""
    return self.image_size // self.patch_size


class Encoded(NamedTuple):
  """What `Vilt` returns: the final states [B, T + 1 + h * w, D] (text, image CLS, patches in
  row-major order), the pooled output [B, D], the tokens attended to [B, T + 1 + h * w] and
  the patch tokens as a grid [B, h, w, D]."""
  states: jax.Array
  pooled: jax.Array
  mask: jax.Array
  patches: jax.Array


def _dense(features: int, dtype, name: str, use_bias: bool = True) -> nn.Dense:
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, kernel_init=nn.initializers.normal(0.02), name=name)


def _nearest_rows(size: int, out: int) -> np.ndarray:
  """torch's `interpolate(mode="nearest")` source index of each of `out` rows from `size` (float32 scale)."""
  scale = np.float32(size) / np.float32(out)
  return np.minimum(np.floor(np.arange(out, dtype=np.float32) * scale).astype(np.int64), size - 1)


def _bilinear_weights(valid: jax.Array, size: int, out: int) -> jax.Array:
  """[B, out, size] weights of torch's bilinear `align_corners=True` resizing of `size` rows to
  `valid[b]` rows, followed by zero rows up to `out` (the padding `visual_embed` adds)."""
  index = jnp.arange(out, dtype=jnp.float32)
  scale = jnp.where(valid > 1, (size - 1) / jnp.maximum(valid - 1, 1).astype(jnp.float32), 0.0)
  source = index[None, :] * scale[:, None]
  low = jnp.minimum(jnp.floor(source), size - 1)
  frac = jnp.clip(source - low, 0.0, 1.0)
  low = low.astype(jnp.int32)
  high = jnp.minimum(low + 1, size - 1)
  weights = (1 - frac)[..., None] * jax.nn.one_hot(low, size) + frac[..., None] * jax.nn.one_hot(high, size)
  return weights * (index[None, :] < valid[:, None])[..., None]


class _TextEmbeddings(nn.Module):
  config: ViltConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids, deterministic: bool):
    c, init = self.config, nn.initializers.normal(0.02)
    x = nn.Embed(c.vocab_size, c.hidden_size, embedding_init=init, name="word_embeddings")(input_ids)
    types = nn.Embed(c.type_vocab_size, c.hidden_size, embedding_init=init, name="token_type_embeddings")
    x = x + types(token_type_ids)
    positions = self.param("position_embeddings", init, (c.max_position_embeddings, c.hidden_size))
    x = nn.LayerNorm(c.layer_norm_eps, name="layer_norm")(x + positions[:input_ids.shape[1]])
    return nn.Dropout(c.hidden_dropout_prob)(x, deterministic)


class _PatchEmbeddings(nn.Module):
  """HF's patch projection, a `patch_size` convolution of stride `patch_size` (its kernel HWIO,
  as `nn.Conv` keeps it): computed as one matmul of the flattened patches [B, h, w, P * P * C],
  which XLA's CPU backend runs far faster than the strided convolution. Rows and columns the
  patches do not cover are dropped (a VALID convolution)."""
  config: ViltConfig
  dtype: Any

  @nn.compact
  def __call__(self, pixel_values):
    c, p = self.config, self.config.patch_size
    kernel = self.param("kernel", nn.initializers.normal(0.02), (p, p, c.num_channels, c.hidden_size))
    bias = self.param("bias", nn.initializers.zeros, (c.hidden_size,))
    batch, height, width, channels = pixel_values.shape
    rows, cols = height // p, width // p
    x = pixel_values[:, :rows * p, :cols * p].reshape(batch, rows, p, cols, p, channels)
    x = x.transpose(0, 1, 3, 2, 4, 5).reshape(batch, rows, cols, p * p * channels)
    return jnp.dot(x.astype(self.dtype), kernel.reshape(-1, c.hidden_size).astype(self.dtype)) + bias.astype(self.dtype)


class _Layer(nn.Module):
  """HF's `ViltLayer`: x + attention(LN(x)), then x + MLP(LN(x)); `(x, None)`, a scan's step."""
  config: ViltConfig
  dtype: Any
  deterministic: bool

  @nn.compact
  def __call__(self, x, valid):
    c, deterministic = self.config, self.deterministic
    batch, tokens, width = x.shape
    heads = c.num_attention_heads
    head = width // heads
    y = nn.LayerNorm(c.layer_norm_eps, name="layernorm_before")(x)
    # heads first (nn/multihead.py); ViLT's own products: HF divides by sqrt(head), drops out probabilities
    q, k, v = (multihead.heads_first(_dense(width, self.dtype, name, c.qkv_bias)(y), heads)
               for name in ("query", "key", "value"))
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) / np.float32(np.sqrt(head))
    logits = jnp.where(valid[:, None, None, :], logits, multihead.NEG)
    probs = nn.Dropout(c.attention_probs_dropout_prob)(jax.nn.softmax(logits, axis=-1), deterministic)
    y = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(self.dtype), v).transpose(0, 2, 1, 3).reshape(batch, tokens, width)
    drop = nn.Dropout(c.hidden_dropout_prob)
    x = x + drop(_dense(width, self.dtype, "attention_output")(y), deterministic)
    y = nn.LayerNorm(c.layer_norm_eps, name="layernorm_after")(x)
    y = ACTIVATIONS[c.hidden_act](_dense(c.intermediate_size, self.dtype, "intermediate")(y))
    return x + drop(_dense(width, self.dtype, "output")(y), deterministic), None


# config.model.remat: what the backward pass keeps of each layer's forward (the rest is recomputed):
# everything, nothing, or the outputs of its weight matmuls (not the attention's batched ones).
REMAT = {"none": None, "full": jax.checkpoint_policies.nothing_saveable,
         "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def _layers(config: ViltConfig, dtype, deterministic: bool, remat: str) -> nn.Module:
  """The `num_hidden_layers` layers as one `nn.scan`: each parameter stacked on a leading layer
  axis, `layers`; rematerialised by `REMAT[remat]`. Fully unrolled: a rolled loop zero-fills
  stacked buffers for the saved activations and the gradients and copies every layer's slice in
  and out of them, more work than the unrolled program's longer compile."""
  layer = _Layer if remat == "none" else nn.remat(_Layer, policy=REMAT[remat], prevent_cse=False)
  stack = nn.scan(layer, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                  in_axes=nn.broadcast, length=config.num_hidden_layers, unroll=config.num_hidden_layers)
  return stack(config, dtype, deterministic, name="layers")


class Vilt(nn.Module):
  """HF's `ViltModel` (see the module docstring). `dtype` is the matmul input type (bfloat16 on
  accelerators); parameters, LayerNorms, softmax and the residual stream stay float32. `remat`
  (`REMAT`) trades the backward pass's memory for recomputation; it changes no value."""
  config: ViltConfig
  dtype: Any = jnp.float32
  remat: str = "none"

  def _image(self, pixel_values, pixel_mask, deterministic: bool):
    """(image tokens [B, 1 + h * w, D] with position embeddings, their mask, grid (h, w))."""
    c = self.config
    batch, height, width, _ = pixel_values.shape
    x = _PatchEmbeddings(c, self.dtype, name="patch_embeddings")(pixel_values)
    rows, cols = x.shape[1:3]
    patch_mask = pixel_mask[:, _nearest_rows(height, rows)][:, :, _nearest_rows(width, cols)] > 0  # [B, h, w]
    valid_rows, valid_cols = patch_mask[:, :, 0].sum(1), patch_mask[:, 0, :].sum(1)  # HF: column 0, row 0
    grid = c.position_grid
    positions = self.param("position_embeddings", nn.initializers.normal(0.02), (1, grid * grid + 1, c.hidden_size))
    spatial = positions[0, 1:].reshape(grid, grid, c.hidden_size)
    spatial = jnp.einsum("bjl,kld->bkjd", _bilinear_weights(valid_cols, grid, cols), spatial)
    spatial = jnp.einsum("bik,bkjd->bijd", _bilinear_weights(valid_rows, grid, rows), spatial)
    x = (x + spatial).reshape(batch, rows * cols, c.hidden_size)
    cls = self.param("cls_token", nn.initializers.zeros, (1, 1, c.hidden_size)) + positions[:, :1]
    x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, c.hidden_size)), x], axis=1)
    mask = jnp.concatenate([jnp.ones((batch, 1), bool), patch_mask.reshape(batch, -1)], axis=1)
    return nn.Dropout(c.hidden_dropout_prob)(x, deterministic), mask, (rows, cols)

  @nn.compact
  def __call__(self, input_ids, attention_mask, pixel_values, pixel_mask=None, token_type_ids=None, *,
               train: bool = False) -> Encoded:
    c = self.config
    if input_ids.shape[1] > c.max_position_embeddings:
      raise ValueError(f"text of {input_ids.shape[1]} tokens; ViLT has {c.max_position_embeddings} positions")
    if pixel_mask is None:
      pixel_mask = jnp.ones(pixel_values.shape[:3], jnp.int32)
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    modality = nn.Embed(c.modality_type_vocab_size, c.hidden_size, embedding_init=nn.initializers.normal(0.02),
                        name="modality_embeddings")
    text = _TextEmbeddings(c, name="text_embeddings")(input_ids, token_type_ids, not train) + modality(
        jnp.zeros_like(input_ids))
    image, image_mask, (rows, cols) = self._image(pixel_values.astype(jnp.float32), pixel_mask, not train)
    image = image + modality(jnp.ones(image.shape[:2], jnp.int32))
    x = jnp.concatenate([text, image], axis=1)
    mask = jnp.concatenate([attention_mask > 0, image_mask], axis=1)
    x, _ = _layers(c, self.dtype, not train, self.remat)(x, mask)
    x = nn.LayerNorm(c.layer_norm_eps, name="layernorm")(x)
    pooled = jnp.tanh(_dense(c.hidden_size, self.dtype, "pooler")(x[:, 0]))
    patches = x[:, input_ids.shape[1] + 1:].reshape(x.shape[0], rows, cols, c.hidden_size)
    return Encoded(x, pooled.astype(jnp.float32), mask, patches)


class ClassifierHead(nn.Module):
  """`ViltForQuestionAnswering`'s classifier: dense to 2 x hidden, LayerNorm, GELU (erf), dense."""
  num_labels: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, pooled):
    x = _dense(2 * pooled.shape[-1], self.dtype, "dense_0")(pooled)
    x = gelu(nn.LayerNorm(HEAD_LAYER_NORM_EPS, name="layer_norm")(x))
    return _dense(self.num_labels, self.dtype, "dense_1")(x).astype(jnp.float32)


class ViltClassifier(nn.Module):
  """ViLT with the VQA classifier over `num_labels` classes ([B, num_labels] logits): VQA's
  answers, or AnswerTherapy's single vs multiple grounding (2)."""
  config: ViltConfig
  num_labels: int
  dtype: Any = jnp.float32
  remat: str = "none"

  @nn.compact
  def __call__(self, input_ids, attention_mask, pixel_values, pixel_mask=None, token_type_ids=None, *,
               train: bool = False):
    encoded = Vilt(self.config, self.dtype, self.remat, name="vilt")(
        input_ids, attention_mask, pixel_values, pixel_mask, token_type_ids, train=train)
    return ClassifierHead(self.num_labels, self.dtype, name="classifier")(encoded.pooled)


class ViltMask(nn.Module):
  """ViLT with a mask head for answer grounding: a dense map from each final patch token to
  `num_slots` logits, one map per answer slot over the patch grid, resized (bilinear) to
  `mask_size`: [B, num_slots, *mask_size] logits. Padded patches are part of the grid."""
  config: ViltConfig
  num_slots: int
  mask_size: tuple[int, int]
  dtype: Any = jnp.float32
  remat: str = "none"

  @nn.compact
  def __call__(self, input_ids, attention_mask, pixel_values, pixel_mask=None, token_type_ids=None, *,
               train: bool = False):
    patches = Vilt(self.config, self.dtype, self.remat, name="vilt")(
        input_ids, attention_mask, pixel_values, pixel_mask, token_type_ids, train=train).patches
    logits = _dense(self.num_slots, self.dtype, "mask_head")(patches).astype(jnp.float32).transpose(0, 3, 1, 2)
    return jax.image.resize(logits, (*logits.shape[:2], *self.mask_size), "bilinear")


def example_inputs(config: ViltConfig, batch: int = 1, text_length: int | None = None) -> dict[str, np.ndarray]:
  """Zero inputs of the shapes a model of `config` reads (square `image_size` images), for `init`."""
  length = text_length or config.max_position_embeddings
  return {"input_ids": np.zeros((batch, length), np.int32), "attention_mask": np.ones((batch, length), np.int32),
          "pixel_values": np.zeros((batch, config.image_size, config.image_size, config.num_channels), np.float32),
          "pixel_mask": np.ones((batch, config.image_size, config.image_size), np.int32)}
