"""A random ViLT Hub folder for tests that start a run from a checkpoint (`config.model.init_from`)."""

import json
import os

import jax
import numpy as np
from safetensors import numpy as safetensors_numpy

from vqajax.nn import vilt, vilt_hub, vilt_run


def random_checkpoint(folder, config: vilt.ViltConfig, words: list[str]) -> dict[str, np.ndarray]:
  """A ViltModel Hub folder (no head) of random tensors in HF's names and layouts."""
  os.makedirs(folder)
  rng = np.random.default_rng(1)
  params = jax.eval_shape(vilt.ViltClassifier(config, 2).init, jax.random.key(0), **vilt.example_inputs(config))
  leaves = {tuple(k.key for k in path): leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params["params"])}
  shapes = {"dense": lambda s: s[::-1], "conv": lambda s: (s[3], s[2], s[0], s[1]), "same": lambda s: s}
  tensors = {name[len("vilt."):]: rng.standard_normal(shapes[p.layout](leaves[p.path].shape[p.layer is not None:]))
             .astype(np.float32)  # a stacked layer's tensor is one row of it
             for name, p in vilt_hub.parameter_table(config.num_hidden_layers).items() if p.path[0] == "vilt"}
  safetensors_numpy.save_file(tensors, os.path.join(folder, vilt_hub.WEIGHTS))
  fields = {k: v for k, v in vars(config).items() if k != "labels"}
  with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
    json.dump({"model_type": "vilt", **fields}, f)
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(list(vilt_run.SPECIAL) + words) + "\n")
  return tensors


def tiny_hub(folder, layers: int, words: list[str]) -> dict[str, np.ndarray]:
  """`random_checkpoint` of a tiny ViLT (16 wide, 32 px, 8 px patches, 12 tokens) of `layers` layers."""
  config = vilt.ViltConfig(vocab_size=30, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                           intermediate_size=24, image_size=32, patch_size=8, max_position_embeddings=12)
  return random_checkpoint(folder, config, words)
