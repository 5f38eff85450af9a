"""PaliGemma (vqajax/nn/paligemma.py) and its Hub folders (paligemma_hub.py) against Hugging Face transformers.

The reference is HF's PyTorch `PaliGemmaForConditionalGeneration` and `PaliGemmaProcessor` on tiny
random checkpoints of both generations that tests/paligemma_reference.py writes in a subprocess
(torch next to TensorFlow can crash a process).
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import PIL.Image
import pytest
import tokenizers
from safetensors import numpy as safetensors_numpy

from tests import paligemma_reference as reference
from vqajax import cli
from vqajax.core.errors import InputError
from vqajax.nn import paligemma, paligemma_decode, paligemma_hub

HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch and transformers (the test extra) are the reference")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """The folder holding one checkpoint folder per reference.ARCHITECTURES and encodings.npz."""
  root = tmp_path_factory.mktemp("paligemma")
  subprocess.run([sys.executable, os.path.join(HERE, "paligemma_reference.py"), str(root)], check=True,
                 capture_output=True)
  return root


def _load(folder):
  config = paligemma_hub.read_config(str(folder))
  with np.load(folder / "reference.npz") as stored:
    return config, {"params": paligemma_hub.read_params(str(folder), config)}, dict(stored)


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(reference.ARCHITECTURES))
def test_logits_equal_hf(checkpoints, name):
  """Prefix + suffix rows of several lengths (padded on the right), read from a sharded checkpoint:
  the logits of every real token within 1e-4 of HF's."""
  folder = checkpoints / name
  assert os.path.exists(folder / "model.safetensors.index.json") and not os.path.exists(folder / "model.safetensors")
  config, variables, ref = _load(folder)
  text, vision, top = reference.ARCHITECTURES[name]
  assert (config.text.model_type, config.vision.image_size, config.tie_word_embeddings) == (
      text["model_type"], vision["image_size"], top.get("tie_word_embeddings", True))
  apply = jax.jit(paligemma.PaliGemma(config).apply)  # as runs apply it: one compile a shape, not one an op
  for b in range(len(reference.LOGITS)):
    mask = ref[f"{b}/attention_mask"]
    logits = apply(variables, ref[f"{b}/pixels"], ref[f"{b}/input_ids"], mask, ref[f"{b}/token_type_ids"] == 0)
    real = mask.astype(bool)
    assert len(set(real.sum(1))) == len(real)  # rows of different lengths
    np.testing.assert_allclose(np.asarray(logits)[real], ref[f"{b}/logits"][real], atol=1e-4, rtol=0)


@needs_torch
@pytest.mark.slow
def test_ask_replies_as_hf_generate_on_the_same_checkpoint(checkpoints, tmp_path, capsys):
  """A VQA run of no step from a Gemma 2 checkpoint (`paligemma.py:runlocal`'s 32 px pictures), asked
  about a new picture through `vqajax ask`, replies with the text of HF's greedy `generate` (the
  prompt `answer en {question}`, the picture through PaliGemmaProcessor; 8 tokens, `<loc>` ones kept)."""
  picture, run = tmp_path / "picture.png", tmp_path / "run"
  PIL.Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8)).save(picture)
  config = os.path.join(HERE, "..", "experiments", "vqa", "paligemma.py:runlocal")
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", f"--config.model.init_from={checkpoints / 'gemma2'}",
                   "--config.num_train_steps=0", "--config.model.max_decode_len=8"]) == 0
  capsys.readouterr()
  assert cli.main(["ask", f"--workdir={run}", f"--image={picture}", "--question=what is it?", "--json"]) == 0
  asked = json.loads(capsys.readouterr().out)[0]["answers"][0]["answer"]
  done = subprocess.run([sys.executable, os.path.join(HERE, "paligemma_reference.py"), "--reply",
                         str(checkpoints / "gemma2"), str(picture), "answer en what is it?", "8"],
                        check=True, capture_output=True, text=True)
  expected = json.loads(done.stdout.splitlines()[-1])
  assert len(expected["tokens"]) == 8 and "<loc" in expected["text"]
  assert asked == expected["text"].strip()


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(reference.ARCHITECTURES))
def test_greedy_tokens_equal_hf_with_and_without_the_cache(checkpoints, name):
  """16 greedy steps for three prompts of different lengths: the tokens of HF's `generate` (which
  pads on the left) from the rows padded on the right, with the key / value cache and by recomputing
  the sequence; with an end-of-sequence id only the first row meets (within its first 10 tokens), that
  row stops there and is padding after while the others go on."""
  config, variables, ref = _load(checkpoints / name)
  model = paligemma.PaliGemma(config)
  for key in ("tokens", "tokens_early_eos"):
    expected = np.full((3, reference.STEPS), config.text.pad_token_id)
    expected[:, :ref[f"generate/{key}"].shape[1]] = ref[f"generate/{key}"]
    for cache in (True, False):
      tokens = paligemma_decode.generate(model, variables, ref["generate/pixels"], ref["generate/input_ids"],
                                  ref["generate/attention_mask"], jnp.atleast_1d(ref[f"generate/{key}_eos"]),
                                  config.text.pad_token_id, max_decode_len=reference.STEPS, cache=cache)
      np.testing.assert_array_equal(tokens, expected, err_msg=f"{key}, cache={cache}")
  stop = list(expected[0]).index(ref["generate/tokens_early_eos_eos"])
  assert stop < 10 and (expected[0, stop + 1:] == config.text.pad_token_id).all()
  assert (expected[1:] != config.text.pad_token_id).all()


@needs_torch
@pytest.mark.slow
def test_prompts_encode_as_the_hf_processor(checkpoints):
  """Prompts (empty, one letter, <loc> / <seg> tokens written out, newlines) with suffixes: the
  token rows, padding and prefix of HF's PaliGemmaProcessor."""
  folder = str(checkpoints / "gemma")
  config = paligemma_hub.read_config(folder)
  encoded = paligemma_hub.encode(paligemma_hub.read_tokenizer(folder, config), config, reference.PROMPTS,
                                 reference.SUFFIXES)
  with np.load(checkpoints / "encodings.npz") as expected:
    np.testing.assert_array_equal(encoded["input_ids"], expected["input_ids"])
    np.testing.assert_array_equal(encoded["input_mask"], expected["attention_mask"])
    np.testing.assert_array_equal(encoded["prefix_mask"], (expected["token_type_ids"] == 0) & (expected["attention_mask"] > 0))


@needs_torch
@pytest.mark.slow
def test_the_hubs_names_in_one_file_read_the_same(checkpoints, tmp_path):
  """The Hub's own layout (`vision_tower.vision_model.*`, one model.safetensors) gives the parameters
  the sharded `save_pretrained` folder gives."""
  source = checkpoints / "gemma"
  folder = tmp_path / "hub"
  folder.mkdir()
  shutil.copy(source / "config.json", folder / "config.json")
  tensors = {}
  for name in sorted(set(json.loads((source / "model.safetensors.index.json").read_text())["weight_map"].values())):
    tensors.update(safetensors_numpy.load_file(str(source / name)))
  hub = {name.replace("vision_tower.", "vision_tower.vision_model.", 1): value for name, value in tensors.items()}
  assert any(name.startswith("vision_tower.vision_model.") for name in hub)
  safetensors_numpy.save_file(hub, str(folder / "model.safetensors"))
  jax.tree.map(np.testing.assert_array_equal, paligemma_hub.read_params(str(folder)),
               paligemma_hub.read_params(str(source)))


def _rewrite(folder, change):
  """Every shard of `folder` with `change(name, tensor)` applied (None drops the tensor)."""
  for name in set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values()):
    tensors = {key: change(key, value) for key, value in safetensors_numpy.load_file(str(folder / name)).items()}
    safetensors_numpy.save_file({k: v for k, v in tensors.items() if v is not None}, str(folder / name))


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("source, change, message", [
    ("gemma", lambda k, v: v[:, :-1] if k.endswith("layers.1.mlp.up_proj.weight") else v,
     "tensor model.language_model.layers.1.mlp.up_proj.weight has shape (48, 31)"),
    ("gemma", lambda k, v: None if k == "language_model.model.layers.0.self_attn.k_proj.weight" else v,
     "0 tensors that PaliGemma has not, 1 missing (e.g. model.language_model.layers.0.self_attn.k_proj.weight)"),
    ("gemma2_untied", lambda k, v: None if k == "language_model.lm_head.weight" else v, "1 missing (e.g. lm_head.weight)"),
], ids=["shape", "missing", "untied-head"])
def test_weights_that_do_not_fit_are_one_line(checkpoints, tmp_path, source, change, message):
  folder = tmp_path / "bad"
  shutil.copytree(checkpoints / source, folder)
  _rewrite(folder, change)
  with pytest.raises(InputError, match=r"model.safetensors(\.index\.json)?: ") as raised:
    paligemma_hub.read_params(str(folder))
  assert message in str(raised.value) and "\n" not in str(raised.value)


@needs_torch
@pytest.mark.slow
def test_another_generations_weights_are_one_line(checkpoints, tmp_path):
  """Gemma weights under a Gemma 2 config.json: named, not a traceback."""
  folder = tmp_path / "mixed"
  shutil.copytree(checkpoints / "gemma", folder)
  shutil.copy(checkpoints / "gemma2" / "config.json", folder / "config.json")
  with pytest.raises(InputError, match=r"model.safetensors(\.index\.json)?: 0 tensors that PaliGemma has not, \d+ missing"):
    paligemma_hub.read_params(str(folder))


CONFIG = {"model_type": "paligemma", "projection_dim": 32, "image_token_index": 4,
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 40,
                            "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 28, "patch_size": 14},
          "text_config": {"model_type": "gemma2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
                          "sliding_window": 4}}


def _config(tmp_path, change=lambda c: None):
  config = json.loads(json.dumps(CONFIG))
  change(config)
  (tmp_path / "config.json").write_text(json.dumps(config))
  return paligemma_hub.read_config(str(tmp_path))


def test_a_config_reads_with_hfs_defaults(tmp_path):
  """Fields config.json omits take the model's own defaults (Gemma 2: alternating local / global layers,
  soft caps 50 / 30, query_pre_attn_scalar 256); an absent vision_config takes PaliGemma's."""
  config = _config(tmp_path)
  assert config.text.layer_types == (paligemma.LOCAL, paligemma.GLOBAL, paligemma.LOCAL)
  assert (config.text.attn_logit_softcapping, config.text.final_logit_softcapping) == (50.0, 30.0)
  assert (config.text.query_pre_attn_scalar, config.text.rope_theta, config.tie_word_embeddings) == (256.0, 1e4, True)
  assert config.vision.hidden_act == "gelu_pytorch_tanh" and config.vision.num_patches == 4
  config = _config(tmp_path, lambda c: (c.pop("vision_config"), c["text_config"].update(
      model_type="gemma", hidden_act="gelu"), c.update(projection_dim=32)))
  assert config.vision == paligemma.VisionConfig(intermediate_size=4096)  # PaliGemma's own tower
  assert config.text.hidden_act == "gelu_pytorch_tanh" and config.text.sliding_window is None  # HF reads "gelu" so
  assert config.text.query_pre_attn_scalar == 8.0 and set(config.text.layer_types) == {paligemma.GLOBAL}


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(model_type="llava"), "not a PaliGemma checkpoint (model_type 'llava'"),
    (lambda c: c["vision_config"].update(model_type="clip_vision_model"), "field vision_config.model_type is 'clip"),
    (lambda c: c["text_config"].update(model_type="llama"), "field text_config.model_type is 'llama'"),
    (lambda c: c.update(projection_dim=64), "field projection_dim is '64'; expected text_config.hidden_size (32)"),
    (lambda c: c["text_config"].update(num_key_value_heads=3), "text_config sizes do not fit"),
    (lambda c: c["vision_config"].update(num_attention_heads=5), "vision_config sizes do not fit"),
    (lambda c: c["text_config"].update(num_hidden_layers=10 ** 6), "field text_config.num_hidden_layers is"),
    (lambda c: c["text_config"].update(layer_types=["full_attention"]), "field text_config.layer_types is"),
    (lambda c: c["text_config"].update(sliding_window=None), "field text_config.sliding_window is 'None'"),
    (lambda c: c["text_config"].update(rope_parameters={"rope_type": "linear"}),
     "field text_config.rope_parameters.rope_type is 'linear'"),
    (lambda c: c["text_config"].update(hidden_activation="tanh"), "field text_config.hidden_activation is 'tanh'"),
    (lambda c: c["vision_config"].update(image_size="224"), "field vision_config.image_size is '224'; expected an "),
    (lambda c: c.update(tie_word_embeddings=1), "field tie_word_embeddings is '1'; expected true or false"),
    (lambda c: c.update(text_config=[]), "field text_config is '[]'; expected an object"),
], ids=["model_type", "vision", "text", "projection", "kv-heads", "heads", "huge", "layer_types", "window", "rope",
        "activation", "type", "tie", "object"])
def test_a_config_that_does_not_fit_is_one_line(tmp_path, change, message):
  with pytest.raises(InputError, match="config.json: ") as raised:
    _config(tmp_path, change)
  assert message in str(raised.value) and "\n" not in str(raised.value)


def test_prefix_lm_masks_by_hand():
  """Slots 0-2 the prefix, 3 the suffix's only real token, 4 padding; a window of 2 slots: the prefix
  sees all of the prefix both ways, the suffix token its window (and, globally, everything before
  it), nobody the padding."""
  config = paligemma.TextConfig(sliding_window=2)
  valid = jnp.array([[1, 1, 1, 1, 0]], bool)
  prefix = jnp.array([[1, 1, 1, 0, 0]], bool)
  full, local = np.asarray(paligemma.attention_masks(config, jnp.arange(5), prefix, valid, prefix))[:, 0]
  expected_full = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]], bool)
  expected_local = expected_full.copy()
  expected_local[3, :2] = expected_local[4, :3] = False  # slot 3 sees 2-3; slot 4 (padding) would see 3-4
  np.testing.assert_array_equal(full, expected_full)
  np.testing.assert_array_equal(local, expected_local)


def test_the_prompt_text_is_hfs():
  assert paligemma_hub.prompt_text("answer en what?", 3) == "<image><image><image><bos>answer en what?\n"


def test_matmul_inputs_are_bfloat16_when_asked(tmp_path):
  """With dtype bfloat16 every matrix product of the forward pass reads bfloat16 (while the
  parameters stay float32), and the logits stay float32."""
  config = _config(tmp_path)
  model = paligemma.PaliGemma(config, dtype=jnp.bfloat16)
  inputs = paligemma.example_inputs(config, batch=2, text_length=3)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), **inputs))
  assert {leaf.dtype for leaf in jax.tree.leaves(shapes)} == {np.dtype(np.float32)}
  variables = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  jaxpr = jax.make_jaxpr(lambda v: model.apply(v, **inputs))(variables)

  def products(jaxpr):  # the matrix products of `jaxpr` and of the jaxprs inside it (scans, remat)
    for equation in jaxpr.eqns:
      if equation.primitive.name in ("dot_general", "conv_general_dilated"):
        yield equation
      for value in equation.params.values():
        for sub in value if isinstance(value, (tuple, list)) else [value]:
          if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
            yield from products(getattr(sub, "jaxpr", sub))

  found = list(products(jaxpr.jaxpr))
  assert len(found) >= 10
  assert all(var.aval.dtype == jnp.bfloat16 for equation in found for var in equation.invars)
  assert jaxpr.out_avals[0].dtype == jnp.float32


def _tokenizer(folder, extra=paligemma_hub.EXTRA_TOKENS):
  """A word-level tokenizer.json with Gemma's special ids, `<image>` at 4 and `extra` added."""
  vocab = {token: i for i, token in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<image>", "what", "?", "\n"])}
  words = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  words.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"\w+|[^\w ]"), "isolated")
  words.add_special_tokens(["<image>", "<bos>", "<eos>"])
  words.add_tokens(list(extra))
  words.save(str(folder / "tokenizer.json"))


def test_a_tokenizer_without_palis_tokens_is_one_line(tmp_path):
  config = _config(tmp_path)
  _tokenizer(tmp_path, extra=paligemma_hub.EXTRA_TOKENS[:1000])
  with pytest.raises(InputError, match=r"tokenizer.json: lacks 152 of PaliGemma's location / segmentation tokens "
                                       r"\(e.g. <loc1000>\)"):
    paligemma_hub.read_tokenizer(str(tmp_path), config)
  _tokenizer(tmp_path)
  with pytest.raises(InputError, match="tokenizer.json: <image> has id 4; config.json's image_token_index is 5"):
    paligemma_hub.read_tokenizer(str(tmp_path), dataclasses.replace(config, image_token_index=5))


def test_encode_pads_on_the_right_and_refuses_a_row_too_long(tmp_path):
  """The image's 4 tokens, <bos>, the prompt and "\\n" the prefix; the suffix and <eos> after it."""
  config = _config(tmp_path)
  _tokenizer(tmp_path)
  words = paligemma_hub.read_tokenizer(str(tmp_path), config)
  encoded = paligemma_hub.encode(words, config, ["what?", ""], ["what", "?"], length=12)
  np.testing.assert_array_equal(encoded["input_ids"], [[4, 4, 4, 4, 2, 5, 6, 7, 5, 1, 0, 0],
                                                       [4, 4, 4, 4, 2, 7, 6, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(encoded["input_mask"], [[1] * 10 + [0] * 2, [1] * 8 + [0] * 4])
  np.testing.assert_array_equal(encoded["prefix_mask"], [[1] * 8 + [0] * 4, [1] * 6 + [0] * 6])
  with pytest.raises(InputError, match="prompt 0: 10 tokens with its image's 4; rows hold 9"):
    paligemma_hub.encode(words, config, ["what?", ""], ["what", "?"], length=9)


@pytest.mark.slow
def test_remat_changes_no_value(tmp_path):
  """Rematerialised layers (every activation recomputed) give the same logits and gradients."""
  config = _config(tmp_path)
  inputs = paligemma.example_inputs(config, batch=2, text_length=5)
  inputs["input_ids"][:, 4:] = np.arange(10).reshape(2, 5) + 5
  inputs["prefix_mask"][:, 7:] = 0
  variables = jax.jit(paligemma.PaliGemma(config).init)(jax.random.key(0), **inputs)
  weights = jax.random.normal(jax.random.key(1), (2, 9, config.text.vocab_size))

  def loss(variables, remat):
    return jnp.sum(paligemma.PaliGemma(config, remat=remat).apply(variables, **inputs) * weights)

  scans = [str(jax.make_jaxpr(loss, static_argnums=1)(variables, r)).count("remat") for r in (None, "nothing_saveable")]
  assert scans == [0, 2]  # the vision tower's and the decoder's layers
  plain, remat = (jax.jit(jax.value_and_grad(loss), static_argnums=1)(variables, r) for r in (None, "nothing_saveable"))
  np.testing.assert_allclose(plain[0], remat[0], rtol=1e-6)
  # the same products, fused differently when recomputed: equal up to float32's rounding at the gradients' scale
  plain, remat = (np.asarray(jax.flatten_util.ravel_pytree(grads)[0]) for grads in (plain[1], remat[1]))
  np.testing.assert_allclose(remat, plain, rtol=0, atol=1e-6 * np.abs(plain).max())
