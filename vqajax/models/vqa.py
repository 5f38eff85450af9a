"""Late-fusion VQA classifiers (the paper's Table II family) and their registry."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax.numpy as jnp

from vqajax.models.question import LSTMEncoder


class LateFusionVQA(nn.Module):
  """question / image encodings -> fusion -> MLP -> logits over the K answers.

  With both inputs, each is projected by fully-connected + tanh to `fused_dim` and the two
  are combined element-wise ('mul') or concatenated ('concat'). The MLP has `mlp_dims`
  tanh layers, each followed by dropout.
  """
  num_answers: int
  question: Optional[nn.Module] = None
  use_image: bool = True
  image_norm: bool = True
  fusion: str = "mul"
  fused_dim: int = 1024
  mlp_dims: tuple[int, ...] = (1000, 1000)
  dropout: float = 0.5

  @nn.compact
  def __call__(self, batch, *, train: bool):
    parts = []
    if self.question is not None:
      q = self.question(batch["tokens"], batch["length"])
      parts.append(jnp.tanh(nn.Dense(self.fused_dim, name="question_proj")(q)))
    if self.use_image:
      image = batch["image"].reshape(batch["image"].shape[0], -1)
      if self.image_norm:
        image = image / jnp.maximum(jnp.linalg.norm(image, axis=-1, keepdims=True), 1e-12)
      parts.append(jnp.tanh(nn.Dense(self.fused_dim, name="image_proj")(image)))
    if not parts:
      raise ValueError("a VQA model needs a question encoder, the image, or both")
    if len(parts) == 2 and self.fusion == "mul":
      x = parts[0] * parts[1]
    elif len(parts) == 1 or self.fusion == "concat":
      x = jnp.concatenate(parts, axis=-1)
    else:
      raise ValueError(f"unknown fusion '{self.fusion}' (expected 'mul' or 'concat')")
    for i, dim in enumerate(self.mlp_dims):
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
      x = jnp.tanh(nn.Dense(dim, name=f"mlp_{i}")(x))
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return nn.Dense(self.num_answers, name="classifier")(x)


def _lstm(cfg, vocab_size):
  return LSTMEncoder(vocab_size, cfg.embed_dim, cfg.lstm_dim, cfg.lstm_layers)


QUESTION_ENCODERS = {
    "lstm": _lstm,
    "none": lambda cfg, vocab_size: None,
}


def build(cfg, vocab_size: int, num_answers: int) -> LateFusionVQA:
  """The model described by `config.model`."""
  if cfg.question not in QUESTION_ENCODERS:
    raise ValueError(f"config.model.question '{cfg.question}' is not one of {sorted(QUESTION_ENCODERS)}")
  return LateFusionVQA(
      num_answers=num_answers,
      question=QUESTION_ENCODERS[cfg.question](cfg, vocab_size),
      use_image=cfg.use_image, image_norm=cfg.image_norm, fusion=cfg.fusion,
      fused_dim=cfg.fused_dim, mlp_dims=tuple(cfg.mlp_dims), dropout=cfg.dropout)
