"""A masked LSTM layer over time-major sequences, with a hand-written backward pass.

`masked_lstm(x, lengths, w_i, w_h, b)` runs one layer over x [T, B, E]: row b is updated
for its first lengths[b] steps, then its state is frozen, so padding never changes the
final state. What makes it fast (bench/bench_train.py measures it):

- the input-to-hidden matmul is hoisted out of the recurrence: one [T*B, E] x [E, 4H]
  matmul; inside the loop only h x [H, 4H] remains (the four gates fused);
- the loops stop at the batch's longest sequence (a dynamic trip count, which autodiff
  of `lax.scan` cannot do: hence the custom VJP);
- the backward loop computes only the gate gradients and dh; the weight gradients are
  two large matmuls after it, instead of one small matmul per step.

`dtype` is the matmul input type (bfloat16: f32 accumulation, state and gate math in f32).
Gate order i, f, g, o as in flax's LSTM cells.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def _dot(a, b, dtype):
  return jnp.dot(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def _activations(pre):
  """sigmoid(i, f, o) and tanh(g) of [..., 4H] pre-activations in one elementwise pass
  (tanh(x) = 2 sigmoid(2x) - 1), so the gates need no concatenation."""
  is_g = (jnp.arange(pre.shape[-1]) // (pre.shape[-1] // 4)) == 2
  s = jax.nn.sigmoid(jnp.where(is_g, 2 * pre, pre))
  return jnp.where(is_g, 2 * s - 1, s)


def _forward(x, lengths, w_i, w_h, b, dtype):
  steps, batch, _ = x.shape
  hidden = w_h.shape[0]
  num = jnp.minimum(jnp.max(lengths), steps)

  def body(t, carry):
    h, c, hs, cs, acts = carry  # acts holds x w_i until step t overwrites it with the gates
    a = _activations(acts[t] + b + _dot(h, w_h, dtype))
    i, f, g, o = jnp.split(a, 4, axis=-1)
    c_new = f * c + i * g
    h_new = o * jnp.tanh(c_new)
    keep = (t < lengths)[:, None]
    h, c = jnp.where(keep, h_new, h), jnp.where(keep, c_new, c)
    return h, c, hs.at[t + 1].set(h), cs.at[t + 1].set(c), acts.at[t].set(a)

  zeros = jnp.zeros((steps + 1, batch, hidden), jnp.float32)
  init = zeros[0], zeros[0], zeros, zeros, _dot(x, w_i, dtype)
  h, c, hs, cs, acts = jax.lax.fori_loop(0, num, body, init)
  keep = (jnp.arange(steps)[:, None] < lengths[None, :])[..., None]
  return (jnp.where(keep, hs[1:], 0.0), c, h), (x, lengths, w_i, w_h, hs, cs, acts, num)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def masked_lstm(x, lengths, w_i, w_h, b, dtype=jnp.float32):
  """(outputs [T, B, H] (zero past each length), last cell [B, H], last hidden [B, H])."""
  return _forward(x, lengths, w_i, w_h, b, dtype)[0]


def _masked_lstm_fwd(x, lengths, w_i, w_h, b, dtype):
  return _forward(x, lengths, w_i, w_h, b, dtype)


def _masked_lstm_bwd(dtype, residuals, cotangents):
  x, lengths, w_i, w_h, hs, cs, acts, num = residuals
  dy, dc_last, dh_last = cotangents

  def body(j, carry):
    t = num - 1 - j
    # grads: the gates' activations, replaced step by step by their gradients. Step t's
    # gates come in the carry, read after the previous write: the writes stay in place.
    dh, dc, gates, grads = carry
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c_prev = cs[t]
    tanh_c = jnp.tanh(cs[t + 1])  # c_new where keep
    keep = (t < lengths)[:, None]
    dh_new = jnp.where(keep, dh + dy[t], 0.0)
    dc_new = jnp.where(keep, dc, 0.0) + dh_new * o * (1 - tanh_c ** 2)
    dpre = jnp.concatenate([dc_new * g * i * (1 - i), dc_new * c_prev * f * (1 - f),
                            dc_new * i * (1 - g ** 2), dh_new * tanh_c * o * (1 - o)], axis=-1)
    dh = jnp.where(keep, _dot(dpre, w_h.T, dtype), dh)
    dc = jnp.where(keep, dc_new * f, dc)
    grads = grads.at[t].set(dpre)
    return dh, dc, grads[jnp.maximum(t - 1, 0)], grads

  first = acts[jnp.maximum(num - 1, 0)]
  _, _, _, dgates = jax.lax.fori_loop(0, num, body, (dh_last, dc_last, first, acts))
  # Steps from num on were not run: no gradient (their rows still hold x w_i).
  dgates = jax.lax.fori_loop(num, x.shape[0], lambda t, d: d.at[t].set(0.0), dgates)
  # Contracting over (T, B) as they are: a reshape to [T * B, .] would gather a sharded B.
  over_steps = lambda a, d: jax.lax.dot_general(a.astype(dtype), d.astype(dtype), (((0, 1), (0, 1)), ((), ())),
                                                preferred_element_type=jnp.float32)
  dw_h = over_steps(hs[:-1], dgates)
  dw_i = over_steps(x, dgates)
  dx = _dot(dgates, w_i.T, dtype).astype(x.dtype)
  return dx, None, dw_i.astype(w_i.dtype), dw_h.astype(w_h.dtype), dgates.sum((0, 1))


masked_lstm.defvjp(_masked_lstm_fwd, _masked_lstm_bwd)
