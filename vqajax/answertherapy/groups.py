"""The groups the AnswerTherapy metrics are summed over: all, each source, and (for the
masks) each grounding label and each source x label, as [B, S] weights (0 for padding)."""

from __future__ import annotations

import jax.numpy as jnp

from vqajax.answertherapy.files import SOURCES

LABELS = ("single", "multiple")
BY_SOURCE = ("",) + SOURCES
BY_SOURCE_AND_LABEL = BY_SOURCE + LABELS + tuple(f"{s}/{l}" for s in SOURCES for l in LABELS)


def weights(batch, by_label: bool = False):
  """[B, S] group weights of the batch, in the order of BY_SOURCE(_AND_LABEL); '' is all."""
  mask = batch["mask"].astype(jnp.float32)[:, None]
  source = (batch["source"][:, None] == jnp.arange(len(SOURCES))).astype(jnp.float32)
  columns = [jnp.ones_like(mask), source]
  if by_label:
    label = (batch["label"][:, None] == jnp.arange(len(LABELS))).astype(jnp.float32)
    columns += [label, (source[:, :, None] * label[:, None, :]).reshape(source.shape[0], -1)]
  return jnp.concatenate(columns, axis=1) * mask


def key(group: str, name: str) -> str:
  """The metric name of `name` in `group` ('' -> overall)."""
  return f"{group}/{name}" if group else name
