"""CLIPSeg (vqajax/nn/clipseg.py) and its Hub folders (clipseg_hub.py) against Hugging Face transformers.

The reference is HF's PyTorch `CLIPSegForImageSegmentation` and `CLIPTokenizer` on tiny random
checkpoints that tests/clipseg_reference.py writes in a subprocess (torch next to TensorFlow
can crash a process).
"""

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import clipseg_reference
from vqajax.core.errors import InputError
from vqajax.nn import clipseg, clipseg_hub

pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
                                reason="torch and transformers (the test extra) are the reference")
HERE = os.path.dirname(os.path.abspath(__file__))


def _prompts(n: int = 1000) -> list[str]:
  """Prompts with mixed case, punctuation, digits, accents, emoji, CJK, odd spaces; some past 77 tokens."""
  rng = random.Random(0)
  words = ["a", "dog", "The", "man", "on", "the", "LEFT", "wearing", "red", "hat", "Café", "naïve", "RÉSUMÉ", "São",
           "dog's", "don't", "x-ray", "1,000", "3.5", "42", "#1", "$20", "50%", "🐶", "😀🎉", "狗", "東京", "über",
           "ﬁsh", "x²", "—", "…", "(left)", '"quoted"', "a/b", "<|endoftext|>", "coffee", "grass", "sky"]
  out = []
  for _ in range(n):
    text = " ".join(rng.choice(words) for _ in range(rng.choice([1, 2, 4, 7, 12, 40])))
    out.append(text + rng.choice(["", "?", " ", "!", "  \t", "\n"]))
  return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """The folder holding tokenizer/, refined/ and plain/ (clipseg_reference.py), and the prompts encoded."""
  root = tmp_path_factory.mktemp("clipseg")
  prompts = _prompts()
  (root / "prompts.json").write_text(json.dumps(prompts, ensure_ascii=False), encoding="utf-8")
  subprocess.run([sys.executable, os.path.join(HERE, "clipseg_reference.py"), str(root), str(root / "prompts.json")],
                 check=True, capture_output=True)
  return root, prompts


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(clipseg_reference.ARCHITECTURES))
def test_logits_equal_hf_for_text_and_image_prompts(checkpoints, name):
  """Every batch (CLIP's image size and another, whose position embeddings are resized bicubically
  as torch does; prompts of several lengths, padded): logits within 1e-5."""
  folder = str(checkpoints[0] / name)
  config = clipseg_hub.read_config(folder)
  assert config.use_complex_transposed_convolution == clipseg_reference.ARCHITECTURES[name][
      "use_complex_transposed_convolution"]
  model, params = clipseg.CLIPSeg(config), {"params": clipseg_hub.read_params(folder, config)}
  apply = jax.jit(model.apply)  # as the rows run it, and one compile a shape instead of one an op
  with np.load(os.path.join(folder, "reference.npz")) as reference:
    reference = dict(reference)
  for b, (height, _, lengths) in enumerate(clipseg_reference.BATCHES):
    images = reference[f"{b}/images"]
    by_text = apply(params, images, reference[f"{b}/input_ids"], reference[f"{b}/attention_mask"])
    by_image = apply(params, images, prompt_pixels=reference[f"{b}/prompts"])
    side = height // 8 * (4 if config.use_complex_transposed_convolution else 8)  # refined: (8 // 4) ** 2 a patch
    assert by_text.shape == by_image.shape == (len(lengths), side, side)
    np.testing.assert_allclose(by_text, reference[f"{b}/by_text"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(by_image, reference[f"{b}/by_image"], atol=1e-5, rtol=0)


def test_cubic_resize_matches_torch_kernel_by_hand():
  """torch's bicubic (A = -0.75, align_corners=False) from 2 to 4 samples, worked out by hand:
  output 0 reads source -0.25 (taps at -2..1 clamped to 0, 0, 0, 1), output 1 reads 0.25."""
  a = -0.75
  near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1
  far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
  t = 0.75  # -0.25 = -1 + 0.75
  first = [far(t + 1) + near(t) + near(1 - t), far(2 - t)]  # taps -2, -1, 0 clamp to 0
  t = 0.25
  second = [far(t + 1) + near(t), near(1 - t) + far(2 - t)]  # taps -1, 0 -> 0; 1, 2 -> 1
  expected = np.array([first, second, second[::-1], first[::-1]])
  np.testing.assert_allclose(clipseg.cubic_resize_matrix(2, 4), expected, rtol=1e-6)
  np.testing.assert_allclose(clipseg.cubic_resize_matrix(5, 5), np.eye(5), atol=1e-7)  # the same size: unchanged


def test_the_tokenizer_equals_hf_from_either_file_set(checkpoints):
  """1,000 prompts (punctuation, digits, accents, emoji, CJK, the end-of-text token written out,
  some past 77 tokens) encode as HF's CLIPTokenizer does, from tokenizer.json and from
  vocab.json + merges.txt alone."""
  root, prompts = checkpoints
  folder = root / "tokenizer"
  with np.load(folder / "encodings.npz") as reference:
    expected = dict(reference)
  only_bpe = root / "only_bpe"
  only_bpe.mkdir()
  for name in ("vocab.json", "merges.txt"):
    shutil.copy(folder / name, only_bpe / name)
  pad = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))["<|endoftext|>"]
  for source in (folder, only_bpe):
    encoded = clipseg_hub.encode(clipseg_hub.read_tokenizer(str(source)), prompts, 77, pad)
    for key in ("input_ids", "attention_mask"):
      np.testing.assert_array_equal(encoded[key], expected[key], err_msg=f"{source}: {key}")


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(model_type="vilt"), "not a CLIPSeg checkpoint (model_type 'vilt'"),
    (lambda c: c.update(extract_layers=[1, 9]), "field extract_layers [1, 9] must name vision layers 0..3"),
    (lambda c: c["vision_config"].update(num_hidden_layers=10 ** 6), "field vision_config.num_hidden_layers is"),
    (lambda c: c["text_config"].update(hidden_size=30), "text_config sizes do not fit"),
    (lambda c: c["text_config"].update(hidden_act="tanh"), "field text_config.hidden_act is 'tanh'"),
    (lambda c: c.update(reduce_dim="64"), "field reduce_dim is '64'; expected int"),
], ids=["model_type", "extract_layers", "huge", "heads", "activation", "type"])
def test_a_config_that_does_not_fit_is_one_line(checkpoints, tmp_path, change, message):
  folder = tmp_path / "bad"
  shutil.copytree(checkpoints[0] / "plain", folder)
  config = json.loads((folder / "config.json").read_text())
  change(config)
  (folder / "config.json").write_text(json.dumps(config))
  with pytest.raises(InputError, match="config.json: ") as raised:
    clipseg_hub.read_config(str(folder))
  assert message in str(raised.value) and "\n" not in str(raised.value)


def test_weights_of_another_architecture_are_one_line(checkpoints, tmp_path):
  """The refined checkpoint's weights under the plain one's config: named, not a traceback."""
  folder = tmp_path / "mixed"
  shutil.copytree(checkpoints[0] / "plain", folder)
  shutil.copy(checkpoints[0] / "refined" / "model.safetensors", folder / "model.safetensors")
  with pytest.raises(InputError, match=r"model.safetensors: 6 tensors that CLIPSeg has not, 2 missing"):
    clipseg_hub.read_params(str(folder))
