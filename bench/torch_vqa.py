"""The PyTorch reference of bench_train.py: deeper LSTM Q + norm I, written the plain way.

Two variants of the question LSTM (`nn.LSTM`, 2 layers, encoding [c1, h1, c2, h2]):

- padded: every question right-aligned in 26 tokens and the LSTM run over all of them,
  as the paper's released code does (there the padding does reach the encoding);
- packed: `pack_padded_sequence`, so each question stops at its last word (the same
  encoding as vqajax's masked LSTM).

Same sizes, dropout, loss and optimiser as `experiments/vqa/deeper_lstm_norm_i.py`:
element-wise gradient clip, RMSprop (alpha = rmsprop_decay), per-step lr decay. Needs the
bench extra: `pip install -e '.[bench]'`.
"""

import numpy as np
import torch
from torch import nn


class DeeperLSTMNormI(nn.Module):

  def __init__(self, model_cfg, vocab: int, answers: int, image_dim: int = 4096):
    super().__init__()
    m = model_cfg
    self.embed = nn.Embedding(vocab, m.embed_dim)
    self.embed_bias = nn.Parameter(torch.zeros(m.embed_dim))
    self.lstm = nn.LSTM(m.embed_dim, m.lstm_dim, m.lstm_layers, batch_first=True)
    self.question_proj = nn.Linear(2 * m.lstm_layers * m.lstm_dim, m.fused_dim)
    self.image_proj = nn.Linear(image_dim, m.fused_dim)
    dims = (m.fused_dim,) + tuple(m.mlp_dims)
    self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
    self.classifier = nn.Linear(dims[-1], answers)
    self.dropout = nn.Dropout(m.dropout)

  def forward(self, tokens, lengths, image, packed: bool):
    x = torch.tanh(self.embed(tokens) + self.embed_bias)
    if packed:
      x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    _, (h, c) = self.lstm(x)
    question = torch.cat([t for layer in zip(c, h) for t in layer], dim=-1)
    x = torch.tanh(self.question_proj(question))
    x = x * torch.tanh(self.image_proj(nn.functional.normalize(image, dim=-1)))
    for layer in self.mlp:
      x = torch.tanh(layer(self.dropout(x)))
    return self.classifier(self.dropout(x))


def right_aligned(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """Right-padded token ids moved to the right end of their row (the paper's layout)."""
  shift = tokens.shape[1] - lengths
  cols = (np.arange(tokens.shape[1])[None, :] - shift[:, None]) % tokens.shape[1]
  return np.take_along_axis(tokens, cols, axis=1)


class Trainer:
  """One training step of the reference on numpy batches."""

  def __init__(self, config, vocab: int, answers: int, packed: bool, seed: int = 0):
    torch.manual_seed(seed)
    opt = config.optimizer
    self.model, self.packed, self.clip = DeeperLSTMNormI(config.model, vocab, answers), packed, opt.grad_clip
    self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=opt.learning_rate,
                                         alpha=opt.rmsprop_decay, eps=opt.eps)
    self.schedule = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, opt.lr_decay_per_step)

  def to_torch(self, batch: dict) -> tuple:
    """Torch tensors of a batch (tokens [B, 26], right-padded): done once, outside the timing."""
    tokens = batch["tokens"] if self.packed else right_aligned(batch["tokens"], batch["length"])
    return (torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(batch["length"].astype(np.int64)),
            torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"].astype(np.int64)))

  def step(self, tokens, lengths, image, labels) -> float:
    self.optimizer.zero_grad()
    loss = nn.functional.cross_entropy(self.model(tokens, lengths, image, self.packed), labels)
    loss.backward()
    if self.clip > 0:
      nn.utils.clip_grad_value_(self.model.parameters(), self.clip)
    self.optimizer.step()
    self.schedule.step()
    return loss.item()
