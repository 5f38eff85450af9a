"""ViLT's and PaliGemma's training step at fsdp 1 / 2 / 4 / 8 (`config.mesh.fsdp`): memory per device and steps/s.

    python bench/bench_fsdp.py [--model vilt|paligemma] [--size base|small|tiny|paper] [--layers N] [--batch 32]
        [--steps 3] [--fsdp 1,2,4,8] [--remat none|full|dots] [--bf16] [--cpu-devices N] [--compile-only]

For each fsdp that divides the device count, vqajax's training step (`core/train.make_train_step`)
of a ViLT VQA classifier (3129 answers, AdamW, softmax cross-entropy on random tokens and images),
or of the VQA row's PaliGemma (`paligemma_step`: the loss on a 3129-entry answer table's tokens), is
compiled with its train state on the FSDP shardings (`core/sharding.py`, every array of at
least 1 MiB split). Printed per fsdp: the train state's bytes per device counted from its
shardings; XLA's memory per device (`compiled.memory_analysis()`: the arguments, i.e. state and
batch, and the temporaries); whether the step all-gathers; and, unless `--compile-only`, the
steps/s over `--steps` steps after the first (the state created on its shardings, donated).
ViLT's sizes: `base` (ViLT-B/32 at 384 px: `ViltConfig()`'s defaults), `small` (hidden 192, 4
layers, 128 px), `tiny` (hidden 64, 1 layer, 32 px: the suite's); PaliGemma's: `paper` (3B at 224
px, HF's vocabulary of 257,216) and `tiny`. `--cpu-devices N` fakes N CPU devices (set before JAX
starts; no effect on an accelerator).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/'s own modules, also when tests import it

import record  # noqa: E402

SIZES = {"base": {},  # ViltConfig()'s defaults: ViLT-B/32 at 384 px
         "small": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768,
                       image_size=128),
         "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=128, image_size=32, patch_size=8)}
ANSWERS, TEXT, MIN_SHARD_BYTES = 3129, 40, 1 << 20


def _paligemma_sizes() -> dict:
  from vqajax.nn import paligemma as pg
  return {"paper": pg.PaliGemmaConfig(text=pg.TextConfig(vocab_size=257216), image_token_index=257152),  # HF's 3B
          "tiny": pg.PaliGemmaConfig(
              vision=pg.VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     image_size=32, patch_size=8),
              text=pg.TextConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, head_dim=16, layer_types=(pg.GLOBAL,)), image_token_index=999)}


def vilt_step(size: str, fsdp: int, batch: int, *, layers: int | None = None, remat: str = "none",
              dtype: str = "float32", min_shard_bytes: int = MIN_SHARD_BYTES, devices=None):
  """(the jitted step, the abstract train state and batch on their shardings, the state's
  shardings, `init(rng)`) of a ViLT classifier of `size` on a (devices / fsdp, fsdp) mesh."""
  import jax.numpy as jnp
  import numpy as np
  import optax

  from vqajax.nn import vilt, vilt_run

  config = vilt.ViltConfig(**SIZES[size])
  if layers:
    config = dataclasses.replace(config, num_hidden_layers=layers)
  model = vilt_run.ViltOnBatch(vilt.ViltClassifier(config, ANSWERS, jnp.dtype(dtype), remat))
  s = config.image_size
  shapes = {"input_ids": ((batch, TEXT), np.int32), "attention_mask": ((batch, TEXT), np.int32),
            "token_type_ids": ((batch, TEXT), np.int32), "image": ((batch, s, s, 4), np.uint8),
            "label": ((batch,), np.int32)}
  loss = lambda logits, b: optax.softmax_cross_entropy_with_integer_labels(logits, b["label"]).mean()
  return _step(model, shapes, loss, fsdp, min_shard_bytes, devices)


def paligemma_step(size: str, fsdp: int, batch: int, *, layers: int | None = None, remat: str = "none",
                   dtype: str = "float32", min_shard_bytes: int = MIN_SHARD_BYTES, devices=None):
  """`vilt_step`'s of the VQA row's PaliGemma (`AnswerVQA`: the prompt's TEXT tokens after the
  image's, a 3129-answer table of 4 tokens each, the loss on the answer's tokens alone) of `size`:
  "paper" (PaliGemma 3B at 224 px: So400m/14 and Gemma 2B) or "tiny"."""
  import jax.numpy as jnp
  import numpy as np

  from vqajax.nn import paligemma, paligemma_models
  from vqajax.vqa import task as vqa_task

  config = _paligemma_sizes()[size]
  if layers:
    config = dataclasses.replace(config, text=dataclasses.replace(config.text, num_hidden_layers=layers,
                                                                  layer_types=(paligemma.GLOBAL,) * layers))
  answers = np.random.default_rng(0).integers(5, config.text.vocab_size, (ANSWERS, 4)).astype(np.int32)
  model = paligemma_models.AnswerVQA(config, jnp.dtype(dtype), paligemma_models.REMAT[remat], answers, 8)
  s, length = config.vision.image_size, config.vision.num_patches + TEXT
  shapes = {"input_ids": ((batch, length), np.int32), "attention_mask": ((batch, length), np.int32),
            "token_type_ids": ((batch, length), np.int32), "image": ((batch, s, s, 4), np.uint8),
            "label": ((batch,), np.int32)}
  return _step(model, shapes, vqa_task.token_loss, fsdp, min_shard_bytes, devices)


def _step(model, shapes: dict, loss, fsdp: int, min_shard_bytes: int, devices):
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  from vqajax.core import sharding, train
  from vqajax.core.experiment import TrainState

  mesh = sharding.data_mesh(devices, fsdp)
  tx = optax.adamw(1e-4, weight_decay=0.01)
  data = sharding.data_sharding(mesh)
  abstract_batch = {k: jax.ShapeDtypeStruct(shape, dt, sharding=data) for k, (shape, dt) in shapes.items()}
  example = {k: np.zeros((1,) + shape[1:], dt) for k, (shape, dt) in shapes.items()}

  def init(rng):
    params = model.init(rng, example, train=False)["params"]
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), rng=rng)

  state_sharding = sharding.state_sharding(jax.eval_shape(init, jax.random.PRNGKey(0)), mesh, min_shard_bytes)
  abstract_state = jax.eval_shape(jax.jit(init, out_shardings=state_sharding), jax.random.PRNGKey(0))
  step = train.make_train_step(model, tx, mesh, loss, None, state_sharding)
  return step, abstract_state, abstract_batch, state_sharding, init


def state_bytes_per_device(abstract_state) -> int:
  """The bytes one device holds of the state: each array's shard (its shardings' shard shape)."""
  import jax
  import numpy as np
  return sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize for x in jax.tree.leaves(abstract_state))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", choices=("vilt", "paligemma"), default="vilt")
  parser.add_argument("--size", default="base", help="vilt: base, small or tiny; paligemma: paper or tiny")
  parser.add_argument("--layers", type=int, default=0, help="layers instead of the size's (0: the size's)")
  parser.add_argument("--batch", type=record.count, default=32, help="global batch (a multiple of the device count)")
  parser.add_argument("--steps", type=record.count, default=3)
  parser.add_argument("--fsdp", default="1,2,4,8", help="the fsdp sizes to try (those dividing the device count)")
  parser.add_argument("--remat", choices=("none", "full", "dots"), default="none")
  parser.add_argument("--bf16", action="store_true", help="bfloat16 matmul inputs")
  parser.add_argument("--cpu-devices", type=int, default=0, help="fake this many CPU devices")
  parser.add_argument("--compile-only", action="store_true", help="memory only: compile, never run")
  args = parser.parse_args()
  sizes = {"vilt": sorted(SIZES), "paligemma": ["paper", "tiny"]}[args.model]
  if args.size not in sizes:
    parser.error(f"--size {args.size!r}: expected one of {sizes} for --model {args.model}")
  record.begin("")
  if args.cpu_devices:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.cpu_devices}").strip()
  import jax
  import numpy as np

  from vqajax.core import sharding

  count = jax.device_count()
  make_step = {"vilt": vilt_step, "paligemma": paligemma_step}[args.model]
  print(f"{args.model} {args.size}{f' {args.layers} layers' if args.layers else ''}, batch {args.batch}, remat {args.remat}, "
        f"{'bf16' if args.bf16 else 'f32'}; {count} x {jax.devices()[0].device_kind}")
  for fsdp in (int(f) for f in args.fsdp.split(",")):
    if count % fsdp:
      print(f"fsdp {fsdp}: skipped ({count} devices)")
      continue
    began = time.perf_counter()
    step, state, batch, shardings, init = make_step(args.size, fsdp, args.batch, layers=args.layers or None,
                                                    remat=args.remat, dtype="bfloat16" if args.bf16 else "float32")
    compiled = step.lower(state, batch).compile()
    memory = compiled.memory_analysis()
    gathers = "all-gather" in compiled.as_text()
    line = (f"fsdp {fsdp}: state {state_bytes_per_device(state) / 2**20:.1f} MiB/device; XLA: arguments "
            f"{memory.argument_size_in_bytes / 2**20:.1f} MiB, temporaries {memory.temp_size_in_bytes / 2**20:.1f} MiB"
            f" per device; all-gather {'yes' if gathers else 'no'}; compiled in {time.perf_counter() - began:.1f} s")
    if not args.compile_only:
      rng = np.random.default_rng(0)
      s, text = batch["image"].shape[1], batch["input_ids"].shape
      host = {"input_ids": rng.integers(5, 1000, text, dtype=np.int32), "attention_mask": np.ones(text, np.int32),
              "token_type_ids": np.zeros(text, np.int32), "label": rng.integers(0, ANSWERS, args.batch, dtype=np.int32),
              "image": rng.integers(0, 256, (args.batch, s, s, 4), dtype=np.uint8)}
      if args.model == "paligemma":  # the image's tokens first; room for the answer (4 tokens) at the end
        config = _paligemma_sizes()[args.size]
        host["input_ids"][:, :config.vision.num_patches] = config.image_token_index
        host["attention_mask"][:, -8:] = 0
      on_devices = sharding.to_global(host, sharding.data_mesh(None, fsdp))
      live = jax.jit(init, out_shardings=shardings)(jax.random.PRNGKey(0))
      live, metrics = step(live, on_devices)  # compiles
      jax.block_until_ready(metrics)
      start = time.perf_counter()
      for _ in range(args.steps):
        live, metrics = step(live, on_devices)
      jax.block_until_ready(metrics)
      rate = args.steps / (time.perf_counter() - start)
      peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
      line += f"; {rate:.2f} steps/s, loss {float(metrics['loss']):.3f}"
      line += f", peak {peak / 2**30:.2f} GiB on device 0" if peak else ""
      del live
    print(line, flush=True)
  record.write("", "bench_fsdp", [])  # the load during the run (no record: its figures are per host)


if __name__ == "__main__":
  main()
