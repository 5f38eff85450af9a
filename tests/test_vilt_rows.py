"""ViLT rows (vqajax/nn/vilt_run.py, experiments/vqa/vilt.py): the pixel store, the run's
tokenizer, ViLT's VQA loss, the start from a Hub folder, and a runlocal run answering a new image."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from experiments.vqa import vilt as vilt_row
from tests.vilt_checkpoint import tiny_hub
from vqajax.core import experiment
from vqajax.features.store import FeatureStore
from vqajax.nn import vilt, vilt_hub, vilt_run
from vqajax.synthetic import embedded
from vqajax.vqa import task as vqa_task


def test_the_pixel_store_is_each_image_fitted_and_padded(tmp_path):
  rng = np.random.default_rng(0)
  shapes = {"img_1.png": (10, 20), "img_2.png": (24, 6)}  # (height, width)
  os.makedirs(tmp_path / "images")
  for name, shape in shapes.items():
    Image.fromarray(rng.integers(0, 256, (*shape, 3), np.uint8)).save(tmp_path / "images" / name)
  out = tmp_path / "out" / "pixels.npy"
  done = subprocess.run([sys.executable, "-m", "vqajax", "features", "--images", str(tmp_path / "images"), "--model", "pixels",
                         "--layer", "pixels", "--size", "12", "--out", str(out)], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  store = FeatureStore(str(out))
  assert store.dtype == np.uint8 and store.shape == (12, 12, 4)
  assert store.settings["preprocess"] == "vilt" and store.settings["image_size"] == 12
  for image_id, (name, (height, width)) in zip((1, 2), shapes.items()):
    size = (12, 6) if width > height else (3, 12)  # (width, height) with the longer side 12
    expected = np.zeros((12, 12, 4), np.uint8)
    expected[:size[1], :size[0], :3] = np.asarray(Image.open(tmp_path / "images" / name).resize(size, Image.BICUBIC))
    expected[:size[1], :size[0], 3] = 1
    np.testing.assert_array_equal(store.read(store.rows([image_id]), np.uint8)[0], expected)


def test_pixels_are_normalised_as_vilts_processor_on_the_device():
  image = np.zeros((1, 2, 2, 4), np.uint8)
  image[0, 0, 0] = (0, 255, 51, 1)
  image[0, 0, 1] = (255, 255, 255, 0)  # padding: 0 whatever it holds
  values, mask = vilt_run.pixel_inputs(image)
  np.testing.assert_allclose(values[0, 0, 0], [-1.0, 1.0, 51 / 255 / 0.5 - 1.0], atol=1e-6)
  np.testing.assert_array_equal(values[0, 0, 1], 0.0)
  np.testing.assert_array_equal(mask[0], [[1, 0], [0, 0]])


def test_a_from_scratch_run_tokenizes_the_training_words():
  tokenizer_json = vilt_run.word_tokenizer(["What colour is the bus?", "what is it?"], 8)
  spec = vilt_run.Spec(vilt.ViltConfig(max_position_embeddings=8), tokenizer_json)
  vocab = json.loads(tokenizer_json)["model"]["vocab"]
  # specials, then by count (what, is: 2, ?: 2), then alphabetically
  assert sorted(vocab, key=vocab.get)[:9] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "?", "is", "what", "bus"]
  encoded = spec.encode(["What is the zebra?"])
  ids = [vocab[t] for t in ("[CLS]", "what", "is", "the")] + [vocab["[UNK]"], vocab["?"], vocab["[SEP]"], 0]
  np.testing.assert_array_equal(encoded["input_ids"][0], ids)
  np.testing.assert_array_equal(encoded["attention_mask"][0], [1] * 7 + [0])
  again = vilt_run.Spec.from_tables(json.loads(json.dumps(spec.tables())))
  np.testing.assert_array_equal(again.encode(["What is the zebra?"])["input_ids"], encoded["input_ids"])


def test_vilts_vqa_loss_by_hand():
  logits = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
  answer_index = np.array([[0, 0, 2, -1, -2], [1, 1, 1, 1, 1]], np.int32)  # -1 padding, -2 out of the table
  targets = np.array([[0.6, 0.0, 0.3], [0.0, 1.0, 0.0]])
  bce = np.log1p(np.exp(-logits)) * targets + np.log1p(np.exp(logits)) * (1 - targets)
  loss = vqa_task.bce_loss(logits, {"answer_index": answer_index})
  np.testing.assert_allclose(loss, bce.sum(1).mean(), rtol=1e-6)


@pytest.fixture(scope="module")
def tiny_copy(tiny_data, tmp_path_factory):
  """The tiny set copied (its pixel store is written into it)."""
  out = tmp_path_factory.mktemp("vilt_rows") / "tiny"
  shutil.copytree(tiny_data, out)
  return str(out)


def test_a_run_from_a_checkpoint_starts_with_its_parameters(tiny_copy, tmp_path, caplog):
  config = vilt_row.get_config("runlocal")
  words = ["what", "is", "the", "colour", "of", "?"] + [f"w{i}" for i in range(19)]
  tensors = tiny_hub(tmp_path / "hub", 2, words)
  config.data.dir, config.model.init_from = tiny_copy, str(tmp_path / "hub")
  embedded.prepare(config)
  exp = experiment.Experiment.build(vqa_task, config, jax.devices()[:1])
  with caplog.at_level("WARNING"):
    params = jax.device_get(exp.initial_state().params)
  assert "initialised classifier (not in the checkpoint)" in caplog.text
  backbone = params["vilt"]
  np.testing.assert_array_equal(backbone["text_embeddings"]["word_embeddings"]["embedding"],
                                tensors["embeddings.text_embeddings.word_embeddings.weight"])
  np.testing.assert_array_equal(backbone["patch_embeddings"]["kernel"],
                                tensors["embeddings.patch_embeddings.projection.weight"].transpose(2, 3, 1, 0))
  np.testing.assert_array_equal(backbone["layers"]["intermediate"]["kernel"][1],
                                tensors["encoder.layer.1.intermediate.dense.weight"].T)
  np.testing.assert_array_equal(backbone["layers"]["layernorm_before"]["scale"][0],
                                tensors["encoder.layer.0.layernorm_before.weight"])
  assert sum(x.size for x in jax.tree_util.tree_leaves(backbone)) == sum(t.size for t in tensors.values())
  # the run's text is the folder's tokenizer, at the checkpoint's 12 tokens
  first = exp.data.train["input_ids"][0]
  assert first.shape == (12,) and first[0] == 2 and first[first.nonzero()[0][-1]] == 3
  assert exp.data.encoders.vilt.config == vilt_hub.read_config(str(tmp_path / "hub"))


@pytest.mark.slow
def test_a_runlocal_run_trains_and_answers_a_new_image(tiny_copy, tmp_path, one_device_env):
  workdir = tmp_path / "run"
  env = dict(one_device_env, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), one_device_env.get("PYTHONPATH")])))
  base = [sys.executable, "-m", "vqajax"]
  done = subprocess.run(base + ["train", "--config=experiments/vqa/vilt.py:runlocal", f"--workdir={workdir}",
                                f"--config.data.dir={tiny_copy}", "--config.num_train_steps=2"],
                        capture_output=True, text=True, env=env)
  assert done.returncode == 0, done.stderr[-2000:]
  assert json.loads((workdir / "run.json").read_text())["finished_step"] == 2
  tables = json.loads((workdir / "encoders.json").read_text())["tables"]
  assert tables["vilt"]["config"]["image_size"] == 32 and tables["vilt"]["tokenizer"]["model"]["type"] == "WordPiece"
  picture = sorted(os.listdir(os.path.join(tiny_copy, "val2014")))[0]
  moved = tmp_path / "img_7.jpg"
  shutil.copy(os.path.join(tiny_copy, "val2014", picture), moved)
  shutil.move(tiny_copy, tiny_copy + ".away")  # answering reads no training data
  try:
    asked = subprocess.run(base + ["ask", "--workdir", str(workdir), "--image", str(moved), "--question",
                                   "what colour is the bus?", "--json", "--top-k", "3"],
                           capture_output=True, text=True, env=env)
  finally:
    shutil.move(tiny_copy + ".away", tiny_copy)
  assert asked.returncode == 0, asked.stderr[-2000:]
  answers = json.loads(asked.stdout)
  assert len(answers[0]["answers"]) == 3
