"""The PyTorch reference of bench_train.py: deeper LSTM Q + norm I, written the plain way.

Two variants of the question LSTM (`nn.LSTM`, 2 layers, encoding [c1, h1, c2, h2]):

- padded: every question right-aligned in 26 tokens and the LSTM run over all of them,
  as the paper's released code does (there the padding does reach the encoding);
- packed: `pack_padded_sequence`, so each question stops at its last word (the same
  encoding as vqajax's masked LSTM).

Same sizes, dropout, loss and optimiser as `experiments/vqa/deeper_lstm_norm_i.py`:
element-wise gradient clip, RMSprop (alpha = rmsprop_decay), per-step lr decay.
`Trainer(compiled=True)` runs the model under `torch.compile`; `load_flax_params` copies
vqajax's parameters in (the same layers: bench_train checks the two losses agree). Needs
the bench extra: `pip install -e '.[bench]'`.
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


def load_flax_params(model: DeeperLSTMNormI, params: dict) -> None:
  """Copies vqajax's LateFusionVQA parameters (numpy, flax names) into `model`: Dense
  kernels [in, out] are Linear weights transposed; each LSTM layer's per-gate kernels
  (gates i, f, g, o, as torch orders them) stack into weight_ih / weight_hh, the hidden
  biases are bias_ih and bias_hh is zero."""
  q = params["question"]
  pairs = [(model.embed.weight, q["WordEmbedding_0"]["Embed_0"]["embedding"]),
           (model.embed_bias, q["WordEmbedding_0"]["bias"])]
  for layer in range(model.lstm.num_layers):
    cell = q[f"lstm_{layer}"]["cell"]
    pairs += [(getattr(model.lstm, f"weight_ih_l{layer}"), np.concatenate([cell[f"i{g}"]["kernel"] for g in "ifgo"], 1).T),
              (getattr(model.lstm, f"weight_hh_l{layer}"), np.concatenate([cell[f"h{g}"]["kernel"] for g in "ifgo"], 1).T),
              (getattr(model.lstm, f"bias_ih_l{layer}"), np.concatenate([cell[f"h{g}"]["bias"] for g in "ifgo"])),
              (getattr(model.lstm, f"bias_hh_l{layer}"), np.zeros(4 * model.lstm.hidden_size, np.float32))]
  dense = [(model.question_proj, "question_proj"), (model.image_proj, "image_proj"), (model.classifier, "classifier")]
  for linear, name in dense + [(layer, f"mlp_{i}") for i, layer in enumerate(model.mlp)]:
    pairs += [(linear.weight, params[name]["kernel"].T), (linear.bias, params[name]["bias"])]
  with torch.no_grad():
    for tensor, value in pairs:
      assert tensor.shape == value.shape, (tensor.shape, value.shape)
      tensor.copy_(torch.from_numpy(np.array(value, np.float32)))  # a writable copy


class Trainer:
  """One training step of the reference on numpy batches."""

  def __init__(self, config, vocab: int, answers: int, packed: bool, seed: int = 0, compiled: bool = False):
    torch.manual_seed(seed)
    opt = config.optimizer
    self.model, self.packed, self.clip = DeeperLSTMNormI(config.model, vocab, answers), packed, opt.grad_clip
    self.forward = torch.compile(self.model) if compiled else self.model
    self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=opt.learning_rate,
                                         alpha=opt.rmsprop_decay, eps=opt.eps)
    self.schedule = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, opt.lr_decay_per_step)

  def to_torch(self, batch: dict) -> tuple:
    """Torch tensors of a batch (tokens [B, 26], right-padded): done once, outside the timing."""
    tokens = batch["tokens"] if self.packed else right_aligned(batch["tokens"], batch["length"])
    return (torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(batch["length"].astype(np.int64)),
            torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"].astype(np.int64)))

  def loss(self, tokens, lengths, image, labels):
    return nn.functional.cross_entropy(self.forward(tokens, lengths, image, self.packed), labels)

  def step(self, tokens, lengths, image, labels) -> float:
    self.optimizer.zero_grad()
    loss = self.loss(tokens, lengths, image, labels)
    loss.backward()
    if self.clip > 0:
      nn.utils.clip_grad_value_(self.model.parameters(), self.clip)
    self.optimizer.step()
    self.schedule.step()
    return loss.item()
