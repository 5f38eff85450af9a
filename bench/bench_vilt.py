"""ViLT fine-tuning steps/s: vqajax's Flax ViLT vs Hugging Face transformers' PyTorch ViLT.

    pip install -e '.[bench]'
    python bench/bench_vilt.py [--sizes small,base] [--batch-small 16] [--batch-base 4] [--steps 2] [--rounds 3]
        [--labels 3129] [--bf16]

The VQA fine-tuning step as ViLT trains it: `ViltForQuestionAnswering` on 40 text tokens and
padded images (each image's real size drawn, the rest masked), binary cross-entropy over soft
targets times the number of labels (HF's loss), AdamW. Sizes: `small` (hidden 192, 4 layers,
128 px, patch 32) and `base` (ViLT-B/32 at 384 x 384: `ViltConfig()`'s defaults, random
weights). Both sides start from the same weights (HF's random model saved as a Hub folder and
read by `vilt_hub`) and, before timing, give the same loss on one batch (asserted). Each round
times every contender one after another on the same batches; the figures are medians over
rounds, and the ratios medians of the rounds' ratios. Also printed: each side's useful matmul
FLOP/s (counted from the layer sizes: forward, and backward for weights and activations) as a
share of the f32 matmul peak measured in the same rounds (a 2048^3 matmul), and where vqajax's
step spends XLA:CPU's thunk time (`contest.thunk_shares`: matmuls, moving data, the rest). Both
sides run on the same `--threads` cores and threads (bench_train.pin_threads).
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import contest  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import record  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from vqajax.nn import vilt, vilt_hub  # noqa: E402

SIZES = {"small": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768,
                       image_size=128),
         "base": {}}  # ViltConfig()'s defaults: ViLT-B/32 at 384 px
TEXT = 40
LR, WEIGHT_DECAY = 1e-4, 0.01


def make_batch(rng, config, batch: int, labels: int) -> dict:
  """Random tokens of 5..40 words, images padded at the bottom / right, soft VQA targets."""
  size = config.image_size
  lengths = rng.integers(5, TEXT + 1, batch)
  ids = rng.integers(1000, config.vocab_size, (batch, TEXT)).astype(np.int32)
  text_mask = (np.arange(TEXT)[None] < lengths[:, None]).astype(np.int32)
  pixel_mask = np.zeros((batch, size, size), np.int32)
  for i, (h, w) in enumerate(rng.integers(size // 2, size + 1, (batch, 2))):
    pixel_mask[i, :h, :w] = 1
  pixels = rng.normal(size=(batch, size, size, 3)).astype(np.float32) * pixel_mask[..., None]
  targets = np.zeros((batch, labels), np.float32)
  for row in targets:
    row[rng.choice(labels, 3, replace=False)] = rng.choice([0.3, 0.6, 0.9, 1.0], 3)
  return {"input_ids": ids * text_mask, "attention_mask": text_mask, "token_type_ids": np.zeros_like(ids),
          "pixel_values": pixels, "pixel_mask": pixel_mask, "targets": targets}


def train_flops(config, batch: int, labels: int) -> float:
  """Useful matmul FLOPs of one step: 3 x forward (the patch projection's input is data: no input gradient)."""
  d, tokens = config.hidden_size, TEXT + 1 + config.position_grid ** 2
  layer = 2 * tokens * (4 * d * d + 2 * d * config.intermediate_size) + 2 * 2 * tokens * tokens * d
  patch = 2 * config.position_grid ** 2 * config.patch_size ** 2 * config.num_channels * d
  head = 2 * (d * d + d * 2 * d + 2 * d * labels)
  return batch * (3 * (config.num_hidden_layers * layer + head) + 2 * patch)


class Flax:
  """The jitted Flax step (donated parameters and optimizer state)."""

  def __init__(self, config, params, labels: int, dtype):
    model = vilt.ViltClassifier(config, labels, dtype)
    self.tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)
    self.state = (params, self.tx.init(params))

    def loss_fn(params, batch, train):
      inputs = {k: v for k, v in batch.items() if k != "targets"}
      logits = model.apply({"params": params}, **inputs, train=train, rngs={"dropout": jax.random.key(0)})
      return optax.sigmoid_binary_cross_entropy(logits, batch["targets"]).mean() * labels

    def step(state, batch):
      params, opt_state = state
      loss, grads = jax.value_and_grad(loss_fn)(params, batch, True)
      updates, opt_state = self.tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss

    self.loss = jax.jit(lambda params, batch: loss_fn(params, batch, False))
    self.step = jax.jit(step, donate_argnums=0)

  def run(self, batches, steps: int) -> None:
    for i in range(steps):
      self.state, loss = self.step(self.state, batches[i % len(batches)])
    jax.block_until_ready(loss)


class Torch:
  """HF's model and torch.optim.AdamW, eager."""

  def __init__(self, model, host_batches):
    self.model = model.train()
    self.opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    self.batches = [self.to_torch(b) for b in host_batches]

  @staticmethod
  def to_torch(batch) -> dict:
    out = {k: torch.from_numpy(v) for k, v in batch.items() if k != "targets"}
    out["pixel_values"] = out["pixel_values"].permute(0, 3, 1, 2).contiguous()
    out["labels"] = torch.from_numpy(batch["targets"])
    return out

  def run(self, steps: int) -> None:
    for i in range(steps):
      self.opt.zero_grad(set_to_none=True)
      self.model(**self.batches[i % len(self.batches)]).loss.backward()
      self.opt.step()


def bench(size: str, batch: int, args) -> tuple[list[str], list[dict], list[float]]:
  """(the printed lines, the record's rows, the rounds' matmul peaks) of one size."""
  config = transformers.ViltConfig(num_labels=args.labels, **SIZES[size])
  torch.manual_seed(0)
  model = transformers.ViltForQuestionAnswering(config)
  with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    ours = vilt_hub.read_config(folder)
    params = vilt_hub.pretrained(folder, vilt.ViltClassifier(ours, args.labels)).params
  rng = np.random.default_rng(0)
  host = [make_batch(rng, ours, batch, args.labels) for _ in range(2)]
  batches = [jax.device_put(b) for b in host]
  contenders = {"vqajax f32": Flax(ours, params, args.labels, jnp.float32)}
  if args.bf16:
    contenders["vqajax bf16"] = Flax(ours, jax.tree.map(jnp.copy, params), args.labels, jnp.bfloat16)
  reference = Torch(model, host)
  model.eval()
  with torch.no_grad():
    theirs = float(model(**reference.batches[0]).loss)
  model.train()
  flax_loss = float(contenders["vqajax f32"].loss(params, batches[0]))
  assert abs(flax_loss - theirs) <= 1e-4 * max(1.0, abs(theirs)), (flax_loss, theirs)
  runs = {**{name: (lambda n, f=f: f.run(batches, n)) for name, f in contenders.items()}, "torch eager": reference.run}
  seconds, peaks = contest.rounds(size, runs, args.rounds, args.steps)
  flops = train_flops(ours, batch, args.labels)
  lines = [f"{size}: hidden {ours.hidden_size}, {ours.num_hidden_layers} layers, {ours.image_size} px / patch "
           f"{ours.patch_size} ({ours.position_grid ** 2} patches), {TEXT} text tokens, {args.labels} labels, batch "
           f"{batch}; {args.rounds} rounds x {args.steps} steps; loss on one batch, dropout off: vqajax "
           f"{flax_loss:.6f}, torch {theirs:.6f} (close); useful {flops / 1e9:.0f} GFLOP a step"]
  for name in runs:
    share = contest.median(flops / np.array(seconds[name]) / np.array(peaks))
    lines.append(f"  {name:12s} {1 / contest.median(seconds[name]):7.2f} steps/s (median step {contest.median(seconds[name]) * 1e3:.0f}"
                 f" ms), {share:4.0%} of the f32 matmul peak ({contest.median(peaks) / 1e9:.0f} GFLOP/s)")
  what = f"ViLT {size} (hidden {ours.hidden_size}, {ours.image_size} px), batch {batch}"
  rows = [record.row(f"{what}: {name}", 1 / contest.median(seconds[name]), "steps/s", rounds=1 / np.array(seconds[name]))
          for name in runs]
  for name, contender in contenders.items():
    shares = contest.thunk_shares(lambda c=contender: c.run(batches, 1))
    if shares:
      lines.append(f"  {name} step on XLA:CPU's thunks: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
      rows += [record.row(f"{what}: {name} step, share of XLA:CPU's thunk time in {k}", 100 * v, "%")
               for k, v in shares.items()]
    ratios = np.array(seconds["torch eager"]) / np.array(seconds[name])
    lines.append(f"  {name} vs torch eager: {contest.median(ratios):5.2f}x steps/s (reported)")
    rows.append(record.row(f"{what}: {name} vs PyTorch eager, the same weights and threads", contest.median(ratios), "x",
                           rounds=ratios))
  return lines, rows, peaks


def arguments(parser) -> None:
  parser.add_argument("--labels", type=record.count, default=3129, help="VQA v2's answer classes")
  parser.add_argument("--bf16", action="store_true", help="also time bfloat16 matmul inputs (reported)")


if __name__ == "__main__":
  contest.main("bench_vilt", __doc__, bench, {"small": 16, "base": 4}, arguments)
