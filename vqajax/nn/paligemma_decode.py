"""Greedy decoding of a PaliGemma (`nn/paligemma.py`) under one `jax.jit`: a prefill of the prompt into
a key / value cache of static size (prompt + `max_decode_len`), then a `lax.while_loop` of one-token
steps that stops when every row has met an end-of-sequence token (rows that did are padded)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from vqajax.nn.paligemma import PaliGemma, attention_masks


def _left_align(input_ids, input_mask):
  """Each row's tokens moved to the end (HF's left padding): rows padded on the right -> on the left."""
  length = input_ids.shape[1]
  shift = length - jnp.sum(input_mask > 0, axis=1)
  index = (jnp.arange(length)[None] - shift[:, None]) % length
  return jnp.take_along_axis(input_ids, index, 1), jnp.take_along_axis(input_mask > 0, index, 1)


@functools.partial(jax.jit, static_argnames=("model", "max_decode_len", "cache"))
def generate(model: PaliGemma, variables, pixel_values, input_ids, input_mask, eos_ids, pad_id, *,
             max_decode_len: int, cache: bool = True):
  """Greedy tokens [B, max_decode_len] after each row's prompt (`input_ids` padded on the right, all
  of it the prefix): a row stops at its first token of `eos_ids` [E] (kept) and is `pad_id` after; the
  loop ends when every row has stopped. The prompt sits left-aligned in a sequence of prompt +
  `max_decode_len` slots (HF's layout for batched generation); `cache=False` recomputes the whole
  sequence at every step instead of keeping keys and values (the same tokens, for tests)."""
  t = model.config.text
  ids, valid = _left_align(input_ids, input_mask)
  batch, length = ids.shape
  size = length + max_decode_len
  slots = jnp.arange(size)
  prompt = jnp.zeros((batch, size), bool).at[:, :length].set(valid)
  count = jnp.sum(valid, axis=1)
  x = model.apply(variables, pixel_values, ids, method=PaliGemma.embed)

  def filled(step):  # slots holding the prompt or the generated tokens fed so far
    return prompt | ((slots >= length) & (slots < length + step))[None]

  if cache:
    shape = (t.num_hidden_layers, batch, t.num_key_value_heads, size, t.head_dim)
    kv = (jnp.zeros(shape, model.dtype), jnp.zeros(shape, model.dtype))
    masks = attention_masks(t, jnp.arange(length), valid, prompt, prompt)
    logits, kv = model.apply(variables, x, jnp.cumsum(valid, axis=1), masks, 0, kv, method=PaliGemma.decode)
    first, state = logits[:, -1], kv

    def step(i, token, kv):  # feeds generated token i at slot length + i
      masks = attention_masks(t, length + i[None], jnp.zeros((batch, 1), bool), filled(i + 1), prompt)
      x = model.apply(variables, token[:, None], method=PaliGemma.embed_text)
      logits, kv = model.apply(variables, x, (count + i + 1)[:, None], masks, length + i, kv, method=PaliGemma.decode)
      return logits[:, 0], kv
  else:
    sequence = jnp.zeros((batch, size, t.hidden_size), jnp.float32).at[:, :length].set(x)

    def logits_at(sequence, i):  # the whole sequence recomputed; the logits at slot length + i
      keys = filled(i + 1)
      masks = attention_masks(t, slots, prompt, keys, prompt)
      logits, _ = model.apply(variables, sequence, jnp.cumsum(keys, axis=1), masks, method=PaliGemma.decode)
      return jax.lax.dynamic_index_in_dim(logits, length + i, axis=1, keepdims=False)

    first, state = logits_at(sequence, jnp.int32(-1)), sequence

    def step(i, token, sequence):
      embedded = model.apply(variables, token[:, None], method=PaliGemma.embed_text)
      sequence = jax.lax.dynamic_update_slice(sequence, embedded, (0, length + i, 0))
      return logits_at(sequence, i), sequence

  token = jnp.argmax(first, axis=-1).astype(jnp.int32)
  tokens = jnp.full((batch, max_decode_len), pad_id, jnp.int32).at[:, 0].set(token)
  done = jnp.isin(token, eos_ids)

  def body(carry):
    i, tokens, done, state = carry
    logits, state = step(i - 1, tokens[:, i - 1], state)
    token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    tokens = tokens.at[:, i].set(jnp.where(done, pad_id, token))
    return i + 1, tokens, done | jnp.isin(token, eos_ids), state

  carry = (jnp.int32(1), tokens, done, state)
  _, tokens, _, _ = jax.lax.while_loop(lambda c: (c[0] < max_decode_len) & ~jnp.all(c[2]), body, carry)
  return tokens


def reply(model: PaliGemma, pixel_values, input_ids, input_mask, max_decode_len: int):
  """`generate` from a bound submodule `model`'s own parameters (a row that shares them, e.g. a
  zero-shot row's), stopping at the config's `<eos>`: the greedy tokens [B, max_decode_len]."""
  t = model.config.text
  return generate(model.clone(parent=None), {"params": model.variables["params"]}, pixel_values, input_ids,
                  input_mask, jnp.asarray(t.eos_token_id), t.pad_token_id, max_decode_len=max_decode_len)
