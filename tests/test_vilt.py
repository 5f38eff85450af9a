"""ViLT (vqajax/nn/vilt.py) and its Hub folders (vilt_hub.py) against Hugging Face transformers.

The reference is HF's PyTorch ViLT and BERT tokenizer on a tiny random checkpoint that
tests/vilt_reference.py writes in a subprocess (torch next to TensorFlow can crash a process).
"""

import dataclasses
import functools
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from safetensors import numpy as safetensors_numpy

from tests import vilt_reference
from vqajax.core.errors import InputError
from vqajax.nn import vilt, vilt_hub

pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
                                reason="torch and transformers (the test extra) are the reference")
HERE = os.path.dirname(os.path.abspath(__file__))
LABELS = vilt_reference.CONFIG["num_labels"]


def _questions(n: int = 1000) -> list[str]:
  """Questions with mixed case, punctuation, digits, accents, emoji, CJK, odd spaces; some run past 40 tokens."""
  rng = random.Random(0)
  words = ["What", "is", "the", "colour", "of", "this", "Café", "naïve", "RÉSUMÉ", "Ünïcödé", "São", "Paulo", "dog's",
           "don't", "x-ray", "well-known", "1,000", "3.5", "42", "2023", "#1", "$20", "50%", "🐶", "😀🎉", "狗", "東京",
           "man", "wearing", "HATS", "trees", "grass", "e-mail", "U.S.A.", "...", "?!", "(left)", '"quoted"', "a/b",
           "über", "Ångström", "ﬁsh", "x²", "Ⅻ", "ñandú", "Zürich", "—", "…"]
  out = []
  for _ in range(n):
    text = " ".join(rng.choice(words) for _ in range(rng.choice([1, 2, 4, 7, 12, 30])))
    text += rng.choice(["?", "", " ?", "!", "  ", "\t?"])
    out.append(text if rng.random() > 0.1 else text.upper())
  return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """(the HF checkpoint folder, its reference outputs, the questions they encoded)."""
  root = tmp_path_factory.mktemp("vilt")
  questions = _questions()
  (root / "questions.json").write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")
  folder = root / "checkpoint"
  subprocess.run([sys.executable, os.path.join(HERE, "vilt_reference.py"), str(folder), str(root / "questions.json")],
                 check=True, capture_output=True)
  with np.load(folder / "reference.npz") as reference:
    return str(folder), dict(reference), questions


@pytest.fixture(scope="module")
def classifier(checkpoint):
  """(config, the VQA model of the checkpoint's labels, its parameters from the checkpoint)."""
  config = vilt_hub.read_config(checkpoint[0])
  model = vilt.ViltClassifier(config, LABELS)
  return config, model, vilt_hub.pretrained(checkpoint[0], model)


def _inputs(reference: dict, b: int) -> dict:
  names = ("input_ids", "attention_mask", "token_type_ids", "pixel_values", "pixel_mask")
  inputs = {name: reference[f"{b}/{name}"] for name in names}
  inputs["pixel_values"] = inputs["pixel_values"].transpose(0, 2, 3, 1)  # NCHW -> NHWC
  return inputs


def _copy(folder: str, tmp_path, tensors: dict | None = None, **config) -> str:
  """A copy of the checkpoint folder, with other tensors or config fields."""
  out = shutil.copytree(folder, str(tmp_path / "copy"))
  if tensors is not None:
    safetensors_numpy.save_file(tensors, os.path.join(out, "model.safetensors"))
  if config:
    path = os.path.join(out, "config.json")
    with open(path) as f:
      raw = json.load(f)
    with open(path, "w") as f:
      json.dump({**raw, **config}, f)
  return out


def _shapes(model) -> dict:
  """The shapes of `model`'s parameters (all that a refusal reads), without computing them."""
  return jax.eval_shape(model.init, jax.random.key(0), **vilt.example_inputs(model.config))["params"]


def test_config_is_read_as_written(checkpoint):
  config = vilt_hub.read_config(checkpoint[0])
  expected = {**vilt_reference.CONFIG, "vocab_size": len(vilt_reference.vocabulary()), "layer_norm_eps": 1e-12,
              "max_image_length": -1, "hidden_act": "gelu"}
  expected.pop("num_labels")
  assert {name: getattr(config, name) for name in expected} == expected
  assert config.labels == tuple(f"LABEL_{i}" for i in range(LABELS))


def test_outputs_equal_hf_on_padded_images_and_texts(checkpoint, classifier):
  reference = checkpoint[1]
  _, model, loaded = classifier
  assert loaded.initialised == () and loaded.unused == ()
  forward = jax.jit(lambda x: model.apply({"params": loaded.params}, **x, capture_intermediates=True,
                                         mutable="intermediates"))
  diffs = {}
  for b, (_, _, valid, length) in enumerate(vilt_reference.BATCHES):
    inputs = _inputs(reference, b)
    logits, intermediates = forward(inputs)
    encoded = intermediates["intermediates"]["vilt"]["__call__"][0]
    states = reference[f"{b}/states"]
    # HF shuffles the image tokens (visual_embed): put each where its patch is in our grid
    index = reference[f"{b}/patch_index"]
    rows = np.arange(len(valid))[:, None]
    patches = np.asarray(encoded.patches)[rows, index[..., 0], index[..., 1]]
    grid_mask = np.asarray(encoded.mask[:, length + 1:]).reshape(encoded.patches.shape[:3])
    np.testing.assert_array_equal(grid_mask[rows, index[..., 0], index[..., 1]], reference[f"{b}/image_mask"][:, 1:])
    for (h, w), patch_mask in zip(valid, grid_mask):  # the valid patches: those whose top-left pixel is valid
      rows_, cols_ = patch_mask.shape
      hand = (np.floor(np.arange(rows_) * np.float32(inputs["pixel_mask"].shape[1] / rows_)) < h)[:, None] & (
          np.floor(np.arange(cols_) * np.float32(inputs["pixel_mask"].shape[2] / cols_)) < w)
      np.testing.assert_array_equal(patch_mask, hand)
    for name, ours, theirs in (("pooled", encoded.pooled, reference[f"{b}/pooled"]),
                               ("logits", logits, reference[f"{b}/logits"]),
                               ("text and image CLS", encoded.states[:, :length + 1], states[:, :length + 1]),
                               ("patches", patches, states[:, length + 1:])):
      assert np.shape(ours) == theirs.shape, name
      diffs[f"{b} {name}"] = float(np.abs(np.asarray(ours) - theirs).max())
  assert max(diffs.values()) <= 1e-4, diffs


def test_tokenizer_equals_hf(checkpoint, tmp_path):
  folder, reference, questions = checkpoint
  vocab = tmp_path / "vocab"
  vocab.mkdir()
  (vocab / "vocab.txt").write_text("".join(f"{token}\n" for token in vilt_reference.vocabulary()), encoding="utf-8")
  for source, case in ((folder, "uncased"), (str(vocab), "uncased"), (str(vocab), "cased")):
    (vocab / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": case == "uncased"}))
    encoded = vilt_hub.read_tokenizer(source)(questions)
    for name in ("input_ids", "attention_mask", "token_type_ids"):
      assert encoded[name].dtype == np.int32 and encoded[name].shape == (len(questions), 40)
      np.testing.assert_array_equal(encoded[name], reference[f"{case}/{name}"], err_msg=f"{source} {case} {name}")
  lengths = reference["uncased/attention_mask"].sum(1)
  assert lengths.max() == 40 and lengths.min() < 10  # truncated and padded questions both
  assert (reference["uncased/input_ids"] == 1).any()  # [UNK]: the emoji


def test_folders_that_are_not_vilt_checkpoints_are_refused(checkpoint, tmp_path):
  folder = checkpoint[0]
  with pytest.raises(InputError, match=re.escape(f"{tmp_path}: not a ViLT checkpoint folder (no config.json)")):
    vilt_hub.read_config(str(tmp_path))
  bert = _copy(folder, tmp_path, model_type="bert")
  with pytest.raises(InputError, match=re.escape(f"{bert}/config.json: not a ViLT checkpoint (model_type 'bert'")):
    vilt_hub.read_config(bert)
  os.rename(os.path.join(bert, "model.safetensors"), os.path.join(bert, "pytorch_model.bin"))
  with open(os.path.join(bert, "config.json"), "w") as f:
    json.dump({"model_type": "vilt", "architectures": ["ViltForQuestionAnswering"]}, f)
  converting = re.escape(f"{bert}: has pytorch_model.bin only; convert it to model.safetensors once: ")
  with pytest.raises(InputError, match=converting + ".*transformers.ViltForQuestionAnswering.from_pretrained"):
    vilt_hub.headers(bert)
  with pytest.raises(InputError, match="field hidden_size: expected a positive integer <= 16384, got '32'"):
    vilt_hub.read_config(_copy(folder, tmp_path / "b", hidden_size="32"))


def test_a_tensor_of_another_shape_is_refused_naming_it(checkpoint):
  folder = checkpoint[0]
  config = dataclasses.replace(vilt_hub.read_config(folder), intermediate_size=40)
  with pytest.raises(InputError, match=re.escape(f"{folder}/model.safetensors: tensor vilt.encoder.layer.0.intermediate"
                                                 ".dense.weight has shape (37, 32); the model expects (40, 32)")):
    vilt_hub.init_from(folder, _shapes(vilt.ViltClassifier(config, LABELS)))


def test_unexpected_and_missing_tensors_are_refused(checkpoint, tmp_path):
  folder = checkpoint[0]
  tensors = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
  shapes = _shapes(vilt.ViltClassifier(vilt_hub.read_config(folder), LABELS))
  extra = _copy(folder, tmp_path / "extra", {**tensors, "vilt.encoder.layer.2.output.dense.bias": np.zeros(32, "f4")})
  with pytest.raises(InputError, match="1 tensors that no ViLT model here has \\(vilt.encoder.layer.2.output"):
    vilt_hub.init_from(extra, shapes)
  del tensors["vilt.pooler.dense.bias"]
  with pytest.raises(InputError, match="1 backbone tensors missing \\(vilt.pooler.dense.bias\\)"):
    vilt_hub.init_from(_copy(folder, tmp_path / "missing", tensors), shapes)


def test_heads_the_checkpoint_lacks_are_initialised_and_reported(checkpoint, tmp_path):
  folder = checkpoint[0]
  config = vilt_hub.read_config(folder)
  tensors = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
  backbone = {name[len("vilt."):]: t for name, t in tensors.items() if name.startswith("vilt.")}  # a ViltModel's
  backbone["embeddings.text_embeddings.position_ids"] = np.arange(16)[None]  # a buffer older checkpoints hold
  model = vilt.ViltClassifier(config, LABELS)
  fresh = jax.jit(model.init)(jax.random.key(0), **vilt.example_inputs(config))["params"]
  loaded = vilt_hub.init_from(_copy(folder, tmp_path, backbone), fresh)
  assert loaded.initialised == ("classifier",) and loaded.unused == ()
  jax.tree.map(np.testing.assert_array_equal, loaded.params["classifier"], fresh["classifier"])
  np.testing.assert_array_equal(loaded.params["vilt"]["pooler"]["kernel"], tensors["vilt.pooler.dense.weight"].T)
  # a VQA checkpoint for another label set (head=False), and the mask head: the classifier is not read
  two = vilt_hub.pretrained(folder, vilt.ViltClassifier(config, 2), head=False)
  assert two.initialised == ("classifier",) and two.params["classifier"]["dense_1"]["kernel"].shape == (64, 2)
  assert two.unused == tuple(sorted(name for name in tensors if name.startswith("classifier.")))
  masks = vilt_hub.pretrained(folder, vilt.ViltMask(config, 3, (8, 8)))
  assert masks.initialised == ("mask_head",) and masks.unused == two.unused


def test_init_from_gives_exactly_the_checkpoints_parameters(checkpoint):
  folder = checkpoint[0]
  config = vilt_hub.read_config(folder)
  tensors = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
  init = jax.jit(vilt.ViltClassifier(config, LABELS).init)
  example = vilt.example_inputs(config)
  loaded = [vilt_hub.init_from(folder, init(jax.random.key(seed), **example)["params"])
            for seed in (0, 1)]
  jax.tree.map(np.testing.assert_array_equal, loaded[0].params, loaded[1].params)  # nothing of the init is left
  leaves = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(loaded[0].params):
    name, leaf = jax.tree_util.keystr(path), np.asarray(leaf)
    stacked = path[1].key == "layers"  # one row per layer, each an HF tensor
    leaves.update({f"{name}[{i}]": row for i, row in enumerate(leaf)} if stacked else {name: leaf})
  assert len(leaves) == len(tensors) and sum(leaf.size for leaf in leaves.values()) == sum(
      t.size for t in tensors.values())
  by_values = {}
  for name, leaf in leaves.items():
    by_values.setdefault(np.sort(leaf, axis=None).tobytes(), []).append(name)
  for name, tensor in tensors.items():  # every tensor's values are one parameter's (as a multiset)
    assert by_values.get(np.sort(tensor, axis=None).tobytes()), name
  p = loaded[0].params["vilt"]
  conv = tensors["vilt.embeddings.patch_embeddings.projection.weight"]  # [out, in, h, w]
  assert p["patch_embeddings"]["kernel"][2, 5, 1, 7] == conv[7, 1, 2, 5]
  np.testing.assert_array_equal(p["layers"]["query"]["kernel"][1], tensors["vilt.encoder.layer.1.attention.attention"
                                                                            ".query.weight"].T)
  np.testing.assert_array_equal(p["modality_embeddings"]["embedding"], tensors["vilt.embeddings.token_type_embeddings"
                                                                                ".weight"])


def test_hub_tensors_map_the_parameters_back_to_the_checkpoint(checkpoint, classifier):
  tensors = safetensors_numpy.load_file(os.path.join(checkpoint[0], "model.safetensors"))
  back = vilt_hub.hub_tensors(classifier[2].params)
  assert sorted(back) == sorted(tensors)
  for name, tensor in tensors.items():
    np.testing.assert_array_equal(back[name], tensor, err_msg=name)


def test_mask_head_maps_each_patch_token_to_slot_logits(checkpoint, classifier):
  reference = checkpoint[1]
  config, _, loaded = classifier
  inputs = _inputs(reference, 1)  # a 5 x 7 patch grid
  kernel, bias = np.linspace(-1, 1, 96, dtype="f4").reshape(32, 3), np.array([0.5, -1, 2], "f4")
  params = {"vilt": loaded.params["vilt"], "mask_head": {"kernel": kernel, "bias": bias}}
  grid, larger = jax.jit(lambda p, x: [vilt.ViltMask(config, 3, size).apply({"params": p}, **x)
                                       for size in ((5, 7), (20, 28))])(params, inputs)
  assert grid.shape == (4, 3, 5, 7) and larger.shape == (4, 3, 20, 28)
  index = reference["1/patch_index"]  # HF's patch tokens, where they are in the grid
  hand = reference["1/states"][:, 17:] @ kernel + bias
  np.testing.assert_allclose(np.asarray(grid)[np.arange(4)[:, None], :, index[..., 0], index[..., 1]], hand, atol=1e-4)


def test_bfloat16_matmuls_and_dropout(checkpoint, classifier):
  reference = checkpoint[1]
  config, _, loaded = classifier
  inputs = _inputs(reference, 0)

  @jax.jit
  def half_and_dropped(key):
    half = vilt.ViltClassifier(config, LABELS, jnp.bfloat16).apply({"params": loaded.params}, **inputs)
    return half, vilt.ViltClassifier(config, LABELS).apply({"params": loaded.params}, **inputs, train=True,
                                                            rngs={"dropout": key})

  half, dropped = half_and_dropped(jax.random.key(0))
  assert half.dtype == jnp.float32
  np.testing.assert_allclose(half, reference["0/logits"], atol=0.15 * np.abs(reference["0/logits"]).max())
  np.testing.assert_array_equal(dropped, half_and_dropped(jax.random.key(0))[1])
  assert np.abs(dropped - reference["0/logits"]).max() > 1e-3  # the config's 0.1 dropout acts in training


def test_bfloat16_matmuls_keep_the_training_loss_and_its_gradient(checkpoint, classifier):
  reference = checkpoint[1]
  config, _, loaded = classifier
  inputs = _inputs(reference, 1)
  targets = np.random.default_rng(0).choice([0.0, 0.3, 0.6, 1.0], (len(inputs["input_ids"]), LABELS))

  def loss(params, dtype):  # VQA's training loss: binary cross-entropy over soft targets, times the labels
    logits = vilt.ViltClassifier(config, LABELS, dtype).apply({"params": params}, **inputs)
    return optax.sigmoid_binary_cross_entropy(logits, targets).mean() * LABELS

  (full, full_grad), (half, half_grad) = (jax.jit(jax.value_and_grad(functools.partial(loss, dtype=dtype)))(
      loaded.params) for dtype in (jnp.float32, jnp.bfloat16))
  assert 0 < abs(float(half) - float(full)) <= 0.01 * abs(float(full))  # bfloat16 acts, within 1%
  full_grad, half_grad = (np.asarray(jax.flatten_util.ravel_pytree(g)[0]) for g in (full_grad, half_grad))
  assert full_grad @ half_grad / np.linalg.norm(full_grad) / np.linalg.norm(half_grad) > 0.99


def test_a_vqa_head_is_matched_to_the_runs_answers_by_label(checkpoint, tmp_path):
  folder = shutil.copytree(checkpoint[0], tmp_path / "labelled")
  hub = json.loads((folder / "config.json").read_text())
  hub["id2label"] = dict(enumerate(["yes", "no", "2", "red", "blue"]))
  hub["label2id"] = {label: i for i, label in hub["id2label"].items()}
  (folder / "config.json").write_text(json.dumps(hub))
  tensors = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
  config = vilt_hub.read_config(str(folder))
  fresh = jax.jit(vilt.ViltClassifier(config, 3).init)(jax.random.key(0), **vilt.example_inputs(config))["params"]
  loaded = vilt_hub.init_from(str(folder), fresh, labels=["red", "cat", "yes"])
  assert loaded.answers_found == 2 and loaded.initialised == ()
  head, initial = loaded.params["classifier"]["dense_1"], fresh["classifier"]["dense_1"]
  weight, bias = tensors["classifier.3.weight"], tensors["classifier.3.bias"]  # [5 labels, 2H], [5]
  np.testing.assert_array_equal(head["kernel"], np.stack([weight[3], initial["kernel"][:, 1], weight[0]], axis=1))
  np.testing.assert_array_equal(head["bias"], [bias[3], initial["bias"][1], bias[0]])
  np.testing.assert_array_equal(loaded.params["classifier"]["dense_0"]["kernel"], tensors["classifier.0.weight"].T)
