"""PaliGemma: vqajax's Flax PaliGemma vs Hugging Face transformers' PyTorch `PaliGemmaForConditionalGeneration`.

    pip install -e '.[bench]'
    python bench/bench_paligemma.py [--sizes gemma,gemma2] [--batch-gemma 4] [--batch-gemma2 4] [--steps 2]
        [--rounds 3] [--new-tokens 16]

Two figures per size, each a ratio against PyTorch eager with the same weights and threads (target
>= 1.0x): fine-tuning (steps/s: every parameter trained with AdamW, the loss the mean cross-entropy
of the suffix's tokens after a bidirectional prefix of the image and the prompt, as HF's `labels`
and `token_type_ids` give it; vqajax's as its VQA row computes it, the vocabulary-wide output
projection at the suffix's slots alone, HF's at every slot) and greedy decoding (tokens/s: `--new-tokens` generated after each
row's prompt with a key / value cache, the prompt's prefill included, from the initial weights and
with no end-of-sequence id, so that every row makes them all; vqajax's `generate` from rows padded
on the right, HF's `generate(do_sample=False)` from the same rows padded on the left, as it
expects). Sizes: `gemma` (PaliGemma: SigLIP 4 layers 256 wide at 224 px in 16 px patches, 196 image
tokens; Gemma 4 layers 256 wide, 4 query heads and 1 key / value head of 64; a 16,384-token
vocabulary, not Gemma's 257,152, whose output projection would be most of a small model's time) and
`gemma2` (the same widths with PaliGemma 2's Gemma 2 layers: grouped heads, alternating local /
global attention, soft caps), random weights saved by HF and read by `paligemma_hub`. Before timing
both sides give the same logits (asserted); the share of greedy tokens they agree on is printed.
Each round times every contender one after another; figures are medians over rounds, ratios medians
of the rounds' ratios. Also printed: the fine-tuning step's useful matmul FLOP/s (counted from the
layer sizes) as a share of the f32 matmul peak measured in the same rounds.
"""

import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import contest  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import record  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from vqajax.nn import paligemma, paligemma_decode, paligemma_hub, paligemma_models  # noqa: E402
from vqajax.vqa import task as vqa_task  # noqa: E402

VISION = dict(model_type="siglip_vision_model", hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
              num_attention_heads=4, image_size=224, patch_size=16, vision_use_head=False)
TEXT = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=1, head_dim=64, vocab_size=16384)
SIZES = {"gemma": dict(TEXT, model_type="gemma"),
         "gemma2": dict(TEXT, model_type="gemma2", num_key_value_heads=2, query_pre_attn_scalar=64, sliding_window=64,
                        attn_logit_softcapping=50.0, final_logit_softcapping=30.0)}
PAD, EOS, BOS, IMAGE, NEWLINE = 0, 1, 2, 4, 5  # ids as Gemma's (pad, eos, bos); <image> and "\n" chosen here
PROMPT, SUFFIX = (4, 12), (1, 4)  # words in a prompt and in a suffix (its answer), drawn
LR, WEIGHT_DECAY = 1e-4, 0.01


def make_batch(rng, config, batch: int) -> dict:
  """Rows [image tokens, <bos>, prompt, "\\n", suffix, <eos>] padded on the right; token_type_ids 1 on
  the suffix; pictures in [-1, 1] as PaliGemma's processor gives them."""
  image = config.vision.num_patches
  rows = []
  for _ in range(batch):
    prompt = rng.integers(16, config.text.vocab_size, rng.integers(*PROMPT, endpoint=True))
    suffix = rng.integers(16, config.text.vocab_size, rng.integers(*SUFFIX, endpoint=True))
    rows.append(([IMAGE] * image + [BOS, *prompt, NEWLINE], [*suffix, EOS]))
  length = max(len(p) + len(s) for p, s in rows)
  ids, mask, types = (np.zeros((batch, length), np.int32) for _ in range(3))
  for i, (prefix, suffix) in enumerate(rows):
    ids[i, :len(prefix) + len(suffix)] = prefix + suffix
    mask[i, :len(prefix) + len(suffix)] = 1
    types[i, len(prefix):len(prefix) + len(suffix)] = 1
  side = config.vision.image_size
  return {"pixel_values": rng.uniform(-1, 1, (batch, side, side, 3)).astype(np.float32), "input_ids": ids,
          "attention_mask": mask, "token_type_ids": types}


def prompts(batch: dict) -> dict:
  """The rows' prefixes alone (padded on the right, all of each the bidirectional prefix): what decoding
  starts from."""
  prefix = batch["attention_mask"] * (1 - batch["token_type_ids"])
  length = int(prefix.sum(1).max())
  return {"pixel_values": batch["pixel_values"], "input_ids": (batch["input_ids"] * prefix)[:, :length],
          "attention_mask": prefix[:, :length], "token_type_ids": np.zeros_like(prefix[:, :length])}


def train_flops(config, batch: dict) -> float:
  """Useful matmul FLOPs of one step: 3 x forward (the patch projection's input is data: no input gradient),
  the output projection at the suffix's slots (the loss reads no other)."""
  v, t = config.vision, config.text
  rows, tokens = batch["input_ids"].shape
  p = v.num_patches
  vision = v.num_hidden_layers * (2 * p * (4 * v.hidden_size ** 2 + 2 * v.hidden_size * v.intermediate_size)
                                  + 4 * p * p * v.hidden_size) + 2 * p * v.hidden_size * t.hidden_size
  heads = t.num_attention_heads * t.head_dim
  layer = (2 * tokens * t.hidden_size * (2 * heads + 2 * t.num_key_value_heads * t.head_dim + 3 * t.intermediate_size)
           + 4 * tokens * tokens * heads)
  head = 2 * int(batch["token_type_ids"].sum()) * t.hidden_size * t.vocab_size
  patch = 2 * p * v.patch_size ** 2 * v.num_channels * v.hidden_size
  return rows * (3 * (vision + t.num_hidden_layers * layer) + 2 * patch) + 3 * head


class Flax:
  """The jitted fine-tuning step (donated parameters and AdamW state) and greedy decoding."""

  def __init__(self, config, params, new_tokens: int):
    model = paligemma.PaliGemma(config)
    self.tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)
    self.state = (params, self.tx.init(params))

    def logits(params, batch):
      return model.apply({"params": params}, batch["pixel_values"], batch["input_ids"], batch["attention_mask"],
                         batch["token_type_ids"] == 0)

    def loss(params, batch):  # as the VQA row trains: the output projection at the suffix's slots alone
      prefix = batch["attention_mask"] * (1 - batch["token_type_ids"])
      suffix = jnp.where(batch["token_type_ids"] > 0, batch["input_ids"], -1)
      suffix = jnp.take_along_axis(suffix, jnp.argsort(suffix < 0, axis=1, stable=True), axis=1)[:, :SUFFIX[1] + 1]
      out, targets, placed = paligemma_models.suffix_logits(model.bind({"params": params}), batch["pixel_values"],
                                                            batch["input_ids"] * prefix, prefix, suffix)
      return vqa_task.token_loss({"logits": out, "targets": targets, "weights": placed.astype(jnp.float32)}, batch)

    def step(state, batch):
      params, opt_state = state
      value, grads = jax.value_and_grad(loss)(params, batch)
      updates, opt_state = self.tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), value

    self.logits = jax.jit(logits)
    self.step = jax.jit(step, donate_argnums=0)
    initial, never = {"params": jax.tree.map(jnp.copy, params)}, jnp.asarray([config.text.vocab_size])
    self.generate = lambda batch: paligemma_decode.generate(
        model, initial, batch["pixel_values"], batch["input_ids"], batch["attention_mask"], never, PAD,
        max_decode_len=new_tokens)

  def train(self, batches, steps: int) -> None:
    for i in range(steps):
      self.state, loss = self.step(self.state, batches[i % len(batches)])
    jax.block_until_ready(loss)

  def decode(self, batches, steps: int):
    for i in range(steps):
      tokens = self.generate(batches[i % len(batches)])
    return np.asarray(tokens)


class Torch:
  """HF's model, eager, and torch.optim.AdamW; `generate` from the prompts padded on the left."""

  def __init__(self, model, host_batches, new_tokens: int):
    self.model, self.initial, self.new_tokens = model, copy.deepcopy(model).eval(), new_tokens
    self.opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    self.batches = [self.to_torch(b) for b in host_batches]
    for b in self.batches:  # HF's loss: the suffix's tokens
      b["labels"] = torch.where(b["token_type_ids"] > 0, b["input_ids"], -100)
    self.prompts = [self.to_torch(self.left(prompts(b))) for b in host_batches]

  @staticmethod
  def to_torch(batch) -> dict:
    out = {k: torch.from_numpy(v).long() for k, v in batch.items() if k != "pixel_values"}
    out["pixel_values"] = torch.from_numpy(batch["pixel_values"]).permute(0, 3, 1, 2).contiguous()
    return out

  @staticmethod
  def left(batch) -> dict:
    """Rows padded on the right -> on the left."""
    mask = batch["attention_mask"]
    shift = mask.shape[1] - mask.sum(1)
    index = (np.arange(mask.shape[1])[None] - shift[:, None]) % mask.shape[1]
    return {**batch, **{k: np.take_along_axis(batch[k], index, 1) for k in ("input_ids", "attention_mask")}}

  def train(self, steps: int) -> None:
    for i in range(steps):
      self.opt.zero_grad(set_to_none=True)
      self.model(**self.batches[i % len(self.batches)]).loss.backward()
      self.opt.step()

  def decode(self, steps: int):
    never = self.model.config.text_config.vocab_size
    with torch.no_grad():
      for i in range(steps):
        batch = self.prompts[i % len(self.prompts)]
        tokens = self.initial.generate(**batch, max_new_tokens=self.new_tokens, do_sample=False, eos_token_id=never,
                                       pad_token_id=PAD)
    return tokens[:, batch["input_ids"].shape[1]:].numpy()


def bench(size: str, batch: int, args) -> tuple[list[str], list[dict], list[float]]:
  """(the printed lines, the record's rows, the rounds' matmul peaks) of one size."""
  hf = transformers.PaliGemmaConfig(vision_config=VISION, text_config=SIZES[size], image_token_index=IMAGE,
                                    vocab_size=TEXT["vocab_size"], projection_dim=TEXT["hidden_size"])
  torch.manual_seed(0)
  model = transformers.PaliGemmaForConditionalGeneration(hf)
  config, params = contest.through_hub(model, paligemma_hub)
  rng = np.random.default_rng(0)
  host = [make_batch(rng, config, batch) for _ in range(2)]
  batches = [jax.device_put(b) for b in host]
  starts = [jax.device_put(prompts(b)) for b in host]
  ours, theirs = Flax(config, params, args.new_tokens), Torch(model, host, args.new_tokens)
  with torch.no_grad():
    expected = theirs.initial(**{k: v for k, v in theirs.batches[0].items() if k != "labels"}).logits.numpy()
  got = np.asarray(ours.logits(params, batches[0]))
  real = host[0]["attention_mask"].astype(bool)
  gap = np.abs(got - expected)[real].max()
  assert gap <= 1e-3 * max(1.0, np.abs(expected).max()), gap
  agree = float(np.mean(ours.decode(starts, 1) == theirs.decode(1)))
  runs = {"vqajax fine-tuning": lambda n: ours.train(batches, n), "torch fine-tuning": theirs.train,
          "vqajax decoding": lambda n: ours.decode(starts, n), "torch decoding": theirs.decode}
  seconds, peaks = contest.rounds(size, runs, args.rounds, args.steps, "a batch")
  t = config.text
  what = (f"PaliGemma {size} ({config.vision.image_size} px, {config.vision.num_patches} image tokens, "
          f"{t.model_type} {t.num_hidden_layers} layers {t.hidden_size} wide, vocabulary {t.vocab_size}), batch {batch}")
  flops = np.mean([train_flops(config, b) for b in host])
  lines = [f"{what}; {args.rounds} rounds x {args.steps} batches; logits equal HF's within {gap:.1e}; greedy tokens "
           f"equal HF's: {agree:.0%}; useful {flops / 1e9:.0f} GFLOP a fine-tuning step"]
  more, rows = contest.versus_torch(what, seconds, peaks, (("fine-tuning", "steps/s", 1, flops),
                                                           ("decoding", "tokens/s", batch * args.new_tokens, None)))
  lines += more
  return lines, rows, peaks


def arguments(parser) -> None:
  parser.add_argument("--new-tokens", type=record.count, default=16, help="greedy tokens generated per row")


if __name__ == "__main__":
  contest.main("bench_paligemma", __doc__, bench, {"gemma": 4, "gemma2": 4}, arguments)
