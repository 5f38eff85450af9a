"""A masked LSTM layer that only computes the steps of words, with a hand-written backward.

`masked_lstm(x, lengths, w, b)` runs one layer over x [T, B, E] (time-major) whose rows
are sorted by length, longest first (`encode` sorts them): row b is updated for its
first lengths[b] steps, then its state is frozen, so padding never changes the final
state. What makes it fast (bench/bench_train.py measures it):

- the rows form chunks of `chunk` rows; step t runs on the chunks that still hold a
  question longer than t, a prefix of the batch since it is sorted, as ONE matmul
  [active rows, E + H] x [E + H, 4H] (input and hidden, four gates fused; `lax.switch`
  picks the static prefix size). On VQA-like lengths (mean ~6 words, a tail to 26)
  chunks of 32 do 1.08x the words' work (64: 1.18x; 16 adds compile time), where looping
  over the padded batch to its longest question does 2.4x. The input's projection stays
  inside the step: projecting every step at once, outside the recurrence, computes it for
  the padded [T, B] too, and ran the paper's LSTM (fwd + bwd, batch 500) at 0.4-0.6x on
  VQA-like lengths (interleaved, 2 runs at a load of 5-11 on 2 cores); chunks of 16 / 32 /
  64 were within that noise of each other;
- the loops stop at the longest question (a dynamic trip count, which autodiff of
  `lax.scan` cannot do: hence the custom VJP), and the backward accumulates the weight
  gradients inside its loop, so it too only touches active rows.

That shape suits a CPU, where a step costs its FLOPs. On accelerators (WORKSPACE.md, "The
LSTM on accelerators") `scan_lstm` is the plain one: every step on the whole batch, the
input's projection for all steps as one matmul before the recurrence (nothing is padding
there that the steps would skip), the four gates' recurrent matmul fused, `lax.scan` over
all T steps, autodiff's backward
(`config.model.lstm_impl = "scan"`; the outputs and gradients are the same). The default,
"auto", takes the chunked one on the CPU and the scan on GPU / TPU (`resolve`).

`dtype` is the matmul input type (bfloat16: f32 accumulation, state and gate math in f32).
Gate order i, f, g, o as in flax's LSTM cells.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

CHUNK_ROWS = 32
IMPLS = ("chunked", "scan")  # config.model.lstm_impl, or "auto"


def resolve(impl: str) -> str:
  """`impl`, with "auto" made the backend's: "chunked" on the CPU, "scan" on accelerators."""
  if impl != "auto":
    return impl
  return "chunked" if jax.default_backend() == "cpu" else "scan"


def _dot(a, b, dtype):
  return jnp.dot(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def _activations(pre):
  """sigmoid(i, f, o) and tanh(g) of [..., 4H] pre-activations in one elementwise pass
  (tanh(x) = 2 sigmoid(2x) - 1), so the gates need no concatenation."""
  is_g = (jnp.arange(pre.shape[-1]) // (pre.shape[-1] // 4)) == 2
  s = jax.nn.sigmoid(jnp.where(is_g, 2 * pre, pre))
  return jnp.where(is_g, 2 * s - 1, s)


def _chunk_steps(lengths, chunk: int):
  """Per chunk of sorted rows, its longest length (its first row's): [rows // chunk]."""
  return lengths[::chunk]


def _over_active(t, chunk_steps, chunk: int, fn, *args):
  """fn(rows, *args) for the static prefix `rows` of the chunks still running at step t.
  Branches take and return only [B, .] states and small arrays: the [T, B, .] buffers
  are written outside `lax.switch`, which would otherwise copy them at every step."""
  active = jnp.sum(chunk_steps > t)
  branches = [functools.partial(fn, (m + 1) * chunk) for m in range(len(chunk_steps))]
  return jax.lax.switch(active - 1, branches, *args)


def _cell(pre, c):
  """One step's (h, c, gate activations) from its fused-gate pre-activations [B, 4H]."""
  a = _activations(pre)
  i, f, g, o = jnp.split(a, 4, axis=-1)
  c_new = f * c + i * g
  return o * jnp.tanh(c_new), c_new, a


def _pad_rows(a, batch):
  return jnp.concatenate([a, jnp.zeros((batch - a.shape[0],) + a.shape[1:], a.dtype)])


def _forward(x, lengths, w, b, dtype, chunk):
  steps, batch, _ = x.shape
  hidden = w.shape[1] // 4
  chunk_steps = _chunk_steps(lengths, chunk)
  num = jnp.minimum(chunk_steps[0], steps)

  def body(t, carry):
    def step(rows, h, c):
      h_new, c_new, a = _cell(_dot(jnp.concatenate([x[t, :rows], h[:rows]], axis=-1), w, dtype) + b, c[:rows])
      keep = (t < lengths[:rows])[:, None]
      h = h.at[:rows].set(jnp.where(keep, h_new, h[:rows]))
      return h, c.at[:rows].set(jnp.where(keep, c_new, c[:rows])), _pad_rows(a, batch)

    h, c, ys, cs, acts = carry
    h, c, a = _over_active(t, chunk_steps, chunk, step, h, c)
    y = jnp.where((t < lengths)[:, None], h, 0.0)
    return h, c, ys.at[t].set(y), cs.at[t + 1].set(c), acts.at[t].set(a)

  zeros = jnp.zeros((batch, hidden), jnp.float32)
  init = (zeros, zeros, jnp.zeros((steps, batch, hidden), jnp.float32),
          jnp.zeros((steps + 1, batch, hidden), jnp.float32), jnp.zeros((steps, batch, 4 * hidden), jnp.float32))
  h, c, ys, cs, acts = jax.lax.fori_loop(0, num, body, init)
  return (ys, c, h), (x, lengths, w, ys, cs, acts, num)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def masked_lstm(x, lengths, w, b, dtype=jnp.float32, chunk: int = CHUNK_ROWS):
  """(outputs [T, B, H] (zero past each length), last cell [B, H], last hidden [B, H]).

  x [T, B, E] with B a multiple of `chunk` and rows sorted by length, longest first;
  w [E + H, 4H] (input then hidden kernel), b [4H].
  """
  return _forward(x, lengths, w, b, dtype, chunk)[0]


def _masked_lstm_fwd(x, lengths, w, b, dtype, chunk):
  return _forward(x, lengths, w, b, dtype, chunk)


def _masked_lstm_bwd(dtype, chunk, residuals, cotangents):
  x, lengths, w, ys, cs, acts, num = residuals
  dy, dc_last, dh_last = cotangents
  batch, embed = x.shape[1], x.shape[2]
  chunk_steps = _chunk_steps(lengths, chunk)
  # dpre x w^T below: XLA:CPU's f32 kernels are fastest reading w^T in place, its bf16
  # ones on a converted copy laid out once before the loop.
  w_t = None if dtype == jnp.float32 else w.T.astype(dtype)

  def body(j, carry):
    t = num - 1 - j

    def step(rows, dh, dc):
      i, f, g, o = jnp.split(acts[t, :rows], 4, axis=-1)
      c_prev, tanh_c = cs[t, :rows], jnp.tanh(cs[t + 1, :rows])  # c_new where keep
      h_prev = jnp.where(t > 0, ys[jnp.maximum(t - 1, 0), :rows], 0.0)  # rows running at t ran at t - 1
      keep = (t < lengths[:rows])[:, None]
      dh_new = jnp.where(keep, dh[:rows] + dy[t, :rows], 0.0)
      dc_new = jnp.where(keep, dc[:rows], 0.0) + dh_new * o * (1 - tanh_c ** 2)
      dpre = jnp.concatenate([dc_new * g * i * (1 - i), dc_new * c_prev * f * (1 - f),
                              dc_new * i * (1 - g ** 2), dh_new * tanh_c * o * (1 - o)], axis=-1)
      dxh = _dot(dpre, w.T if w_t is None else w_t, dtype)
      # [E + H, rows] laid out as such: XLA:CPU runs a dot contracting its left operand's rows
      # on a slower kernel (~100 against ~150 GFLOP/s here) than a transpose and a plain dot
      inputs_t = jax.lax.optimization_barrier(jnp.concatenate([x[t, :rows], h_prev], axis=-1).T)
      dw = _dot(inputs_t, dpre, dtype)
      return (dh.at[:rows].set(jnp.where(keep, dxh[:, embed:], dh[:rows])),
              dc.at[:rows].set(jnp.where(keep, dc_new * f, dc[:rows])),
              _pad_rows(dxh[:, :embed], batch), dw, dpre.sum(0))

    dh, dc, dw, db, dx = carry
    dh, dc, dx_t, dw_t, db_t = _over_active(t, chunk_steps, chunk, step, dh, dc)
    return dh, dc, dw + dw_t, db + db_t, dx.at[t].set(dx_t.astype(dx.dtype))

  init = dh_last, dc_last, jnp.zeros(w.shape, jnp.float32), jnp.zeros(w.shape[1], jnp.float32), jnp.zeros_like(x)
  _, _, dw, db, dx = jax.lax.fori_loop(0, num, body, init)
  return dx, None, dw.astype(w.dtype), db


masked_lstm.defvjp(_masked_lstm_fwd, _masked_lstm_bwd)


def scan_lstm(x, lengths, w, b, dtype=jnp.float32):
  """`masked_lstm`'s outputs for x [T, B, E] in any row order: all T steps on all B rows
  (each row's state frozen past its length), differentiated by JAX. Every step's input
  projection is ONE matmul [T * B, E] x [E, 4H] before the recurrence, whose steps then
  only multiply the hidden state [B, H] x [H, 4H]."""
  steps, batch, embed = x.shape
  xw = (_dot(x.reshape(steps * batch, embed), w[:embed], dtype) + b).reshape(steps, batch, -1)

  def step(carry, inputs):
    h, c = carry
    xw_t, t = inputs
    h_new, c_new, _ = _cell(xw_t + _dot(h, w[embed:], dtype), c)
    keep = (t < lengths)[:, None]
    h, c = jnp.where(keep, h_new, h), jnp.where(keep, c_new, c)
    return (h, c), jnp.where(keep, h, 0.0)

  zeros = jnp.zeros((batch, w.shape[1] // 4), jnp.float32)
  (h, c), ys = jax.lax.scan(step, (zeros, zeros), (xw, jnp.arange(steps)))
  return ys, c, h


def encode(x, lengths, weights, dtype=jnp.float32, chunk: int = CHUNK_ROWS, impl: str = "chunked"):
  """Stacked masked LSTM over x [T, B, E] in any row order: the last (cell, hidden) of
  every layer, concatenated, [B, 2 * layers * H]. `weights`: (w, b) per layer.

  `impl` "chunked": the rows are sorted by length, longest first, and padded with empty
  rows to a multiple of `chunk` for `masked_lstm`; the encodings come back in the input
  order. "scan": `scan_lstm` on the rows as they are. Under `shard_map` this is per
  device: nothing crosses devices.
  """
  if impl == "scan":
    states = []
    for w, b in weights:
      x, c, h = scan_lstm(x, lengths, w, b, dtype)
      states += [c, h]
    return jnp.concatenate(states, axis=-1)
  batch = x.shape[1]
  rows = -(-batch // chunk) * chunk
  order = jnp.argsort(-lengths, stable=True)
  order = jnp.concatenate([order, jnp.full(rows - batch, batch, order.dtype)])  # index batch: empty
  x = jnp.concatenate([x, jnp.zeros_like(x[:, :1])], axis=1)[:, order]
  lengths = jnp.concatenate([lengths, jnp.zeros_like(lengths[:1])])[order]
  states = []
  for w, b in weights:
    x, c, h = masked_lstm(x, lengths, w, b, dtype, chunk)
    states += [c, h]
  return jnp.concatenate(states, axis=-1)[jnp.argsort(order)[:batch]]
