"""Multi-head dot-product attention as CLIP (CLIPSeg's towers and decoder), SigLIP and Gemma compute
it, heads first: queries, keys and values [B, heads, tokens, depth], so that both products batch
over the leading axes. XLA's CPU matmuls run that 1.4-2x faster than with the heads between the
tokens and the depth (CLIPSeg's shapes, forward; WORKSPACE.md, "Benchmarks")."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NEG = float(jnp.finfo(jnp.float32).min)  # a masked logit


def heads_first(x, heads: int):
  """[B, T, heads * depth] -> [B, heads, T, depth]."""
  batch, length, width = x.shape
  return x.reshape(batch, length, heads, width // heads).transpose(0, 2, 1, 3)


def attend(q, k, v, *, scale: float, mask=None, bias=None, softcap: float | None = None, dtype=jnp.float32):
  """Softmax attention of q [B, H, T, D] over k, v [B, K, S, D] (H a multiple of K: each key / value
  head serves H / K consecutive query heads): [B, T, H * D]. The logits (q . k times `scale`, then
  `softcap` * tanh(logits / `softcap`) where given, plus `bias` [B or 1, 1, T, S] where given) and
  the softmax are float32; `mask` [B, T, S] (True: attended) sets the others to NEG. The products'
  inputs are `dtype`."""
  batch, heads, length, depth = q.shape
  kv_heads, keys = k.shape[1], k.shape[2]
  q = q.reshape(batch, kv_heads, heads // kv_heads * length, depth)  # a key head's query heads as rows
  logits = jnp.einsum("bkqd,bksd->bkqs", q.astype(dtype), k.astype(dtype), preferred_element_type=jnp.float32)
  logits = logits.reshape(batch, heads, length, keys) * np.float32(scale)
  if softcap is not None:
    logits = jnp.tanh(logits / np.float32(softcap)) * np.float32(softcap)
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = jnp.where(mask[:, None], logits, NEG)
  probs = jax.nn.softmax(logits, axis=-1).astype(dtype).reshape(batch, kv_heads, -1, keys)
  out = jnp.einsum("bkqs,bksd->bkqd", probs, v.astype(dtype), preferred_element_type=jnp.float32)
  return out.reshape(batch, heads, length, depth).transpose(0, 2, 1, 3).reshape(batch, length, heads * depth)
