"""CLIPSeg: vqajax's Flax CLIPSeg vs Hugging Face transformers' PyTorch `CLIPSegForImageSegmentation`.

    pip install -e '.[bench]'
    python bench/bench_clipseg.py [--sizes small,base] [--batch-small 8] [--batch-base 4] [--steps 2] [--rounds 3]

Two figures per size, each a ratio against PyTorch eager with the same weights and threads (target
>= 1.0x): zero-shot inference (images/s: the mask logits of a picture and a text prompt) and
fine-tuning the decoder as CLIPSeg trains (steps/s: CLIP frozen, per-pixel binary cross-entropy
against a mask, AdamW over the decoder's parameters only; PyTorch's CLIP parameters do not require
gradients, so neither side differentiates through CLIP). Sizes: `small` (two 4-layer 256-wide
towers, patch 16, 224 px pictures) and `base` (CIDAS/clipseg-rd64-refined's shape: CLIP ViT-B/16
and CLIP's text tower, reduce dim 64, the refined transposed convolution, 352 px pictures), random
weights saved by HF and read by `clipseg_hub`. Before timing both sides give the same logits
(asserted). Each round times every contender one after another; figures are medians over rounds,
ratios medians of the rounds' ratios. Also printed: the f32 matmul peak measured in the same rounds.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import contest  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from vqajax.nn import clipseg, clipseg_hub  # noqa: E402

TOWER = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
SIZES = {  # (CLIPSegConfig's arguments, the pictures' side)
    "small": (dict(text_config=TOWER, vision_config=dict(TOWER, patch_size=16), projection_dim=256,
                   extract_layers=[1, 2, 3], use_complex_transposed_convolution=True), 224),
    "base": (dict(vision_config=dict(patch_size=16), use_complex_transposed_convolution=True), 352),
}
TEXT = 16  # prompt tokens (padded); CLIP's own text ids: start 49406, end 49407
BOS, EOS = 49406, 49407
LR, WEIGHT_DECAY = 1e-4, 0.01


def make_batch(rng, side: int, batch: int) -> dict:
  """Pictures, prompts of 3..16 tokens (start, words, end; padded and masked), masks of the logits' size."""
  lengths = rng.integers(3, TEXT + 1, batch)
  ids = np.ones((batch, TEXT), np.int64)
  mask = (np.arange(TEXT)[None] < lengths[:, None]).astype(np.int64)
  for i, n in enumerate(lengths):
    ids[i, :n] = [BOS, *rng.integers(400, 40000, n - 2), EOS]
  return {"pixel_values": rng.normal(size=(batch, side, side, 3)).astype(np.float32), "input_ids": ids,
          "attention_mask": mask, "masks": (rng.random((batch, side, side)) < 0.3).astype(np.float32)}


class Flax:
  """The jitted forward, and the decoder's training step (donated decoder parameters and AdamW state)."""

  def __init__(self, config, params):
    model = clipseg.CLIPSeg(config)
    self.frozen = {k: v for k, v in params.items() if k != "decoder"}
    self.tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)
    self.state = (params["decoder"], self.tx.init(params["decoder"]))

    def logits(decoder, batch):
      return model.apply({"params": {**self.frozen, "decoder": decoder}}, batch["pixel_values"], batch["input_ids"],
                         batch["attention_mask"])

    def step(state, batch):
      decoder, opt_state = state
      loss, grads = jax.value_and_grad(
          lambda d: optax.sigmoid_binary_cross_entropy(logits(d, batch), batch["masks"]).mean())(decoder)
      updates, opt_state = self.tx.update(grads, opt_state, decoder)
      return (optax.apply_updates(decoder, updates), opt_state), loss

    self.forward = jax.jit(logits)
    self.step = jax.jit(step, donate_argnums=0)

  def infer(self, batches, steps: int) -> None:
    for i in range(steps):
      out = self.forward(self.state[0], batches[i % len(batches)])
    jax.block_until_ready(out)

  def train(self, batches, steps: int) -> None:
    for i in range(steps):
      self.state, loss = self.step(self.state, batches[i % len(batches)])
    jax.block_until_ready(loss)


class Torch:
  """HF's model, eager; CLIP frozen (no gradients), torch.optim.AdamW over the decoder."""

  def __init__(self, model, host_batches):
    self.model = model
    for p in model.clip.parameters():
      p.requires_grad_(False)
    self.opt = torch.optim.AdamW(model.decoder.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    self.batches = [{"pixel_values": torch.from_numpy(b["pixel_values"]).permute(0, 3, 1, 2).contiguous(),
                     "input_ids": torch.from_numpy(b["input_ids"]),
                     "attention_mask": torch.from_numpy(b["attention_mask"]),
                     "masks": torch.from_numpy(b["masks"])} for b in host_batches]

  def logits(self, batch):
    return self.model(pixel_values=batch["pixel_values"], input_ids=batch["input_ids"],
                      attention_mask=batch["attention_mask"]).logits.reshape(batch["masks"].shape)

  def infer(self, steps: int) -> None:
    with torch.no_grad():
      for i in range(steps):
        self.logits(self.batches[i % len(self.batches)])

  def train(self, steps: int) -> None:
    for i in range(steps):
      batch = self.batches[i % len(self.batches)]
      self.opt.zero_grad(set_to_none=True)
      torch.nn.functional.binary_cross_entropy_with_logits(self.logits(batch), batch["masks"]).backward()
      self.opt.step()


def bench(size: str, batch: int, args) -> tuple[list[str], list[dict], list[float]]:
  """(the printed lines, the record's rows, the rounds' matmul peaks) of one size."""
  arguments, side = SIZES[size]
  torch.manual_seed(0)
  model = transformers.CLIPSegForImageSegmentation(transformers.CLIPSegConfig(**arguments)).train()
  config, params = contest.through_hub(model, clipseg_hub)
  rng = np.random.default_rng(0)
  host = [make_batch(rng, side, batch) for _ in range(2)]
  batches = [jax.device_put({k: jnp.asarray(v, jnp.int32 if v.dtype == np.int64 else v.dtype) for k, v in b.items()})
             for b in host]
  ours, theirs = Flax(config, params), Torch(model, host)
  model.eval()  # CLIPSeg has no dropout at these settings; eval only for the comparison
  with torch.no_grad():
    expected = theirs.logits(theirs.batches[0]).numpy()
  model.train()
  got = np.asarray(ours.forward(ours.state[0], batches[0]))
  assert np.abs(got - expected).max() <= 1e-3 * max(1.0, np.abs(expected).max()), np.abs(got - expected).max()
  runs = {"vqajax inference": lambda n: ours.infer(batches, n), "torch inference": theirs.infer,
          "vqajax decoder step": lambda n: ours.train(batches, n), "torch decoder step": theirs.train}
  seconds, peaks = contest.rounds(size, runs, args.rounds, args.steps, "a batch")
  what = f"CLIPSeg {size} ({side} px, vision hidden {config.vision.hidden_size}, patch {config.patch_size}), batch {batch}"
  lines = [f"{what}; {args.rounds} rounds x {args.steps} batches; logits equal HF's within "
           f"{np.abs(got - expected).max():.1e} (the largest |logit| {np.abs(expected).max():.1e}); matmul peak {contest.median(peaks) / 1e9:.0f} GFLOP/s"]
  more, rows = contest.versus_torch(what, seconds, peaks, (("inference", "images/s", batch, None),
                                                           ("decoder step", "steps/s", 1, None)))
  lines += more
  return lines, rows, peaks


if __name__ == "__main__":
  contest.main("bench_clipseg", __doc__, bench, {"small": 8, "base": 4})
