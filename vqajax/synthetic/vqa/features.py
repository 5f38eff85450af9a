"""Synthetic image features: fc7-like global vectors and a spatial grid, from latents."""

from __future__ import annotations

import numpy as np

from vqajax.synthetic.vqa import world as W

FC7_DIM = 4096
GRID_CHANNELS = 64


def _latent_matrix(images: list[W.Image]) -> np.ndarray:
  """One row per image: gain-weighted one-hot groups of its latent attributes."""
  groups = [("category", W.CATEGORY_NAMES, 1.5), ("kind", tuple(W.KIND_WEIGHT), 0.8), ("colour", W.COLOURS, 0.8),
            ("count", tuple(range(1, 11)), 0.6), ("scene", W.SCENES, 1.0), ("sport", W.SPORTS, 0.7),
            ("person", W.PERSONS, 0.7), ("weather", W.WEATHERS, 0.5), ("secondary", W.SECONDARY_NAMES, 0.5)]
  offset, index = 0, {}
  for name, values, gain in groups:
    index[name] = ({v: offset + i for i, v in enumerate(values)}, gain)
    offset += len(values)
  z = np.zeros((len(images), offset + 2), np.float32)
  for row, img in enumerate(images):
    for name, value in (("category", img.name), ("kind", img.kind), ("colour", img.colour), ("count", img.count),
                        ("scene", img.scene), ("sport", img.sport), ("person", img.person), ("weather", img.weather)):
      cols, gain = index[name]
      if value in cols:
        z[row, cols[value]] = gain
    cols, gain = index["secondary"]
    for sec in img.secondaries:
      z[row, cols[sec]] = gain
    z[row, offset] = 0.5 * min(img.people, 8) / 8
    z[row, offset + 1] = 0.6 * img.night
  return z


def fc7_features(images: list[W.Image], seed: int, chunk: int = 4096, latent_noise: float = 0.35) -> np.ndarray:
  """fc7-like [N, 4096] float16: ReLU(fixed random projection of the latents + noise).

  Noise enters twice: in the latent space (the "camera" misses or confuses attributes,
  so no readout is perfect: counts and colours are harder to read than categories) and
  per output unit.
  """
  z = _latent_matrix(images)
  rng = np.random.default_rng([seed, 1])
  proj = rng.standard_normal((z.shape[1], FC7_DIM), dtype=np.float32)
  bias = rng.normal(-1.0, 0.5, FC7_DIM).astype(np.float32)
  out = np.empty((len(images), FC7_DIM), np.float16)
  for s in range(0, len(images), chunk):
    zc = z[s:s + chunk] + latent_noise * rng.standard_normal(z[s:s + chunk].shape, dtype=np.float32)
    pre = zc @ proj
    noise = rng.standard_normal(pre.shape, dtype=np.float32)
    noise *= 1.5
    pre += noise
    pre += bias
    np.maximum(pre, 0.0, out=pre)
    pre *= 0.5
    out[s:s + chunk] = pre
  return out


def grid_features(images: list[W.Image], seed: int, chunk: int = 4096) -> np.ndarray:
  """[N, 7, 7, 64] float16: each object's embedding fills its box, over a scene background."""
  rng = np.random.default_rng([seed, 2])
  label_emb = rng.standard_normal((len(W.BOX_LABELS), GRID_CHANNELS), dtype=np.float32)
  colour_emb = 0.7 * rng.standard_normal((len(W.COLOURS), GRID_CHANNELS), dtype=np.float32)
  scene_emb = 0.6 * rng.standard_normal((len(W.SCENES), GRID_CHANNELS), dtype=np.float32)
  label_of = {l: i for i, l in enumerate(W.BOX_LABELS)}
  k = max(len(img.boxes) for img in images)
  n = len(images)
  emb = np.zeros((n, k, GRID_CHANNELS), np.float32)
  boxes = np.zeros((n, k, 4), np.int32)
  for row, img in enumerate(images):
    for j, (label, *box) in enumerate(img.boxes):
      emb[row, j] = label_emb[label_of[label]]
      if label == img.name:
        emb[row, j] += colour_emb[W.COLOURS.index(img.colour)]
      boxes[row, j] = box
  background = scene_emb[[W.SCENES.index(img.scene) for img in images]]
  cells = np.arange(W.GRID)
  out = np.empty((n, W.GRID, W.GRID, GRID_CHANNELS), np.float16)
  for s in range(0, n, chunk):
    b = boxes[s:s + chunk]
    in_x = (cells >= b[..., 0, None]) & (cells < b[..., 2, None])   # [n, k, 7]
    in_y = (cells >= b[..., 1, None]) & (cells < b[..., 3, None])
    mask = (in_y[..., :, None] & in_x[..., None, :]).astype(np.float32)  # [n, k, y, x]
    g = np.einsum("nkyx,nkc->nyxc", mask, emb[s:s + chunk]) + background[s:s + chunk, None, None, :]
    g += 0.5 * rng.standard_normal(g.shape, dtype=np.float32)
    out[s:s + chunk] = np.maximum(g, 0.0)
  return out
