"""PaliGemma on the AnswerTherapy grounding challenge (`grounding_mask`), zero-shot: per answer slot
a `segment` prompt, the greedy reply, read as a mask on the host (`nn/paligemma_seg.py`).

The prompts are ours (the paper fed its referring-segmentation models the same inputs, in their own
form; PaliGemma's referring-segmentation prompt is `segment X`), per `config.model.inputs`:

  i+q    "segment {question}"           one prompt per question, its mask serves every answer
  i+q+a  "segment {question} {answer}"  one per answer slot
  i+a    "segment {answer}"             one per answer slot

On the device (`Slots`) each prompt's greedy reply, `max_decode_len` tokens (20 fit the 4 `<loc>`
and 16 `<seg>` tokens of one object), is the model's output {tokens [B, A, L]}; the task reads
the replies on the host (`reply_masks`): the tokens decoded by the run's tokenizer, each reply's
`<loc>` box as its mask, or its `<seg>` mask when `config.model.mask_decoder` names a vae-oid.npz
(`paligemma_seg.answer_masks`), at the grid level and as a pixel RLE. A malformed reply (not a list
of objects: free text, or cut by `max_decode_len` inside an object) counts as an empty mask and is
counted (the run's `malformed` metric: answer slots whose reply is malformed).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vqajax.core.config import TEXT, integer, one_of
from vqajax.core.model import Field
from vqajax.nn import paligemma_seg, vilt_run
from vqajax.nn.paligemma import PaliGemma, PaliGemmaConfig
from vqajax.nn.paligemma_decode import reply

PROMPTS = {"i+q": "segment {question}", "i+q+a": "segment {question} {answer}", "i+a": "segment {answer}"}
FIELDS = {
    "inputs": Field("i+q+a", one_of(*PROMPTS)),  # what the prompt holds (PROMPTS)
    "mask_grid": Field(14, integer(1, 1024)),    # the side of the predicted and target grid masks
    "mask_decoder": Field("", TEXT),             # big_vision's vae-oid.npz: <seg> masks; "" the <loc> boxes
}


def prompt(inputs: str, question: str, answer: str) -> str:
  return PROMPTS[inputs].replace("{question}", question).replace("{answer}", answer)


def texts(questions: list[str], answers: list[tuple[str, ...]], config) -> tuple[list[str], None]:
  """The prompts (PROMPTS): one per question (I+Q) or one per answer slot (`max_answers`, padding
  slots an empty answer)."""
  inputs, width = config.model.inputs, config.data.max_answers
  if inputs == "i+q":
    return [prompt(inputs, q, "") for q in questions], None
  return [prompt(inputs, q, a) for q, group in zip(questions, answers)
          for a in tuple(group) + ("",) * (width - len(group))], None


class Slots(nn.Module):
  """Each slot's prompt ([B, S, T]) with the question's picture -> {tokens [B, A, max_decode_len]}, the
  greedy replies (S = 1, I+Q: the question's reply in every answer slot). Its parameters are
  `PaliGemma`'s, so a Hub checkpoint's table maps them; nothing trains."""
  config: PaliGemmaConfig
  dtype: jnp.dtype
  remat: str | None
  max_decode_len: int

  def setup(self):
    self.model = PaliGemma(self.config, self.dtype, self.remat)
    nn.share_scope(self, self.model)

  def __call__(self, batch, *, train: bool):
    b, slots, length = batch["input_ids"].shape
    flat = lambda k: batch[k].reshape(b * slots, length)
    pixels = jnp.repeat(vilt_run.pixel_inputs(batch["image"])[0], slots, axis=0)
    ids, mask = flat("input_ids"), flat("attention_mask")
    answers = batch["answer_valid"].shape[1]
    if self.is_initializing() or train:  # the parameters' shapes; a zero-shot row has no training step
      logits = self.model(pixels, ids, mask, 1 - flat("token_type_ids"))
      return jnp.zeros((b, answers, 1, 1)) + 0 * logits[:, :1, :1].sum()
    tokens = reply(self.model, pixels, ids, mask, self.max_decode_len).reshape(b, slots, -1)
    return {"tokens": jnp.broadcast_to(tokens, (b, answers, tokens.shape[-1])) if slots == 1 else tokens}


def decoder(model_cfg) -> paligemma_seg.MaskDecoder | None:
  """`config.model.mask_decoder`'s VQ-VAE decoder, or None (the boxes)."""
  return paligemma_seg.MaskDecoder.read(model_cfg.mask_decoder) if model_cfg.mask_decoder else None


def reply_masks(spec, tokens: np.ndarray, samples: Sequence, grid: int,
                mask_decoder: paligemma_seg.MaskDecoder | None) -> tuple[np.ndarray, list[list[dict]], int]:
  """(grid masks [N, A, G, G] bool, per sample its answers' pixel RLEs, malformed replies) of the replies
  `tokens` [N, A, L] (`spec.decode`) to the samples' answer slots; padding slots' masks are empty."""
  n, width = tokens.shape[:2]
  slots = [(q, j) for q, s in enumerate(samples) for j in range(len(s.answers))]
  replies = spec.decode(np.stack([tokens[q, j] for q, j in slots])) if slots else []
  sizes = [(samples[q].height, samples[q].width) for q, _ in slots]
  found = paligemma_seg.answer_masks(replies, sizes, grid, mask_decoder)
  masks = np.zeros((n, width, grid, grid), bool)
  rles: list[list[dict]] = [[] for _ in samples]
  for (q, j), answer in zip(slots, found):
    masks[q, j] = answer.grid
    rles[q].append(answer.rle)
  return masks, rles, sum(answer.malformed for answer in found)
