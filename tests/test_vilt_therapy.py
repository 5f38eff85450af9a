"""The AnswerTherapy ViLT rows (experiments/therapy/vilt_class.py, vilt_mask.py): their text
layouts by hand, one mask per answer slot's own text, a run from a Hub folder starting with its
parameters, and runlocal runs grounding a new image without their data."""

import functools
import json
import os
import shutil

import jax
import ml_collections
import numpy as np
import pytest
from PIL import Image

from experiments.therapy import vilt_class, vilt_mask
from tests.test_demo import FakeAnswerer
from tests.vilt_checkpoint import tiny_hub
from vqajax import cli, demo
from vqajax.answertherapy import ask, grounding_mask, models
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.core import config as config_lib
from vqajax.core import experiment, text, train
from vqajax.core.errors import InputError
from vqajax.core.model import Text
from vqajax.nn import vilt, vilt_run
from vqajax.synthetic import embedded

WORDS = ["what", "is", "it", "?", "red", "blue", "sky"]


def _config(task: str, inputs: str) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"task": task, "model": {"name": "vilt", "inputs": inputs},
                                    "data": {"max_answers": 3, "max_question_len": 8, "max_answer_len": 3}})


def _encoders(length: int = 12) -> therapy_dataset.Encoders:
  spec = vilt_run.Spec(vilt.ViltConfig(max_position_embeddings=length), vilt_run.word_tokenizer(WORDS, length))
  return therapy_dataset.Encoders(vocab=text.Vocab(WORDS), image_shape=(16, 16, 4), text=Text("vilt", spec))


@pytest.mark.parametrize("task, inputs, texts", [
    ("grounding_class", "i+q+a", [[["[CLS]", "what", "is", "it", "?", "[SEP]"], ["red", "[SEP]", "blue", "sky", "[SEP]"]]]),
    ("grounding_class", "i+q", [[["[CLS]", "what", "is", "it", "?", "[SEP]"], []]]),
    ("grounding_mask", "i+q+a", [[["[CLS]", "what", "is", "it", "?", "[SEP]"], ["red", "[SEP]"]],
                                 [["[CLS]", "what", "is", "it", "?", "[SEP]"], ["blue", "sky", "[SEP]"]],
                                 [["[CLS]", "what", "is", "it", "?", "[SEP]"], ["[SEP]"]]]),  # a padding slot
    ("grounding_mask", "i+a", [[["[CLS]", "red", "[SEP]"], []], [["[CLS]", "blue", "sky", "[SEP]"], []],
                               [["[CLS]", "[SEP]"], []]]),
    ("grounding_mask", "i+q", [[["[CLS]", "what", "is", "it", "?", "[SEP]"], []]]),  # one text a question
])
def test_the_text_layouts_by_hand(task, inputs, texts):
  enc = _encoders()
  vocab = json.loads(enc.text.encoder.tokenizer_json)["model"]["vocab"]
  arrays = therapy_dataset.text_arrays(["What is it?"], [("red", "blue sky")], enc, _config(task, inputs))
  ids, types, mask = (arrays[k].reshape(-1, 12) for k in ("input_ids", "token_type_ids", "attention_mask"))
  assert arrays["input_ids"].shape == ((1, 12) if task == "grounding_class" else (1, len(texts), 12))
  for row, (first, second) in enumerate(texts):
    n = len(first) + len(second)
    np.testing.assert_array_equal(ids[row], [vocab[t] for t in first + second] + [0] * (12 - n))
    np.testing.assert_array_equal(types[row], [0] * len(first) + [1] * len(second) + [0] * (12 - n))
    np.testing.assert_array_equal(mask[row], [1] * n + [0] * (12 - n))
  assert arrays["tokens"].shape == (1, 8)  # the grid models' arrays stay


def test_each_answer_slot_is_its_own_texts_mask():
  enc = _encoders(6)
  config = vilt.ViltConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=24, image_size=16, patch_size=8, max_position_embeddings=6)
  enc.text = Text("vilt", vilt_run.Spec(config, enc.text.encoder.tokenizer_json))
  cfg = ml_collections.ConfigDict({"name": "vilt", "inputs": "i+q+a", "dtype": "float32", "remat": "none",
                                   "mask_grid": 5})
  model = models.build(cfg, enc, "grounding_mask")
  rng = np.random.default_rng(0)
  image = rng.integers(0, 256, (2, 16, 16, 4)).astype(np.uint8)
  image[..., 3] = 1
  slots = {"input_ids": rng.integers(0, 12, (2, 3, 6)).astype(np.int32), "attention_mask": np.ones((2, 3, 6), np.int32),
           "token_type_ids": rng.integers(0, 2, (2, 3, 6)).astype(np.int32)}
  batch = {**slots, "image": image, "answer_valid": np.ones((2, 3), bool)}
  params = jax.jit(lambda b: model.init(jax.random.key(0), b, train=False))(batch)["params"]
  apply = jax.jit(lambda b: model.apply({"params": params}, b, train=False))
  out = apply(batch)
  assert out.shape == (2, 3, 5, 5)
  one = jax.jit(functools.partial(vilt.ViltMask(config, 1, (5, 5)).apply, {"params": params}))
  values, pixel_mask = vilt_run.pixel_inputs(image)
  for j in range(3):  # the slot's text alone, with the image
    alone = one(slots["input_ids"][:, j], slots["attention_mask"][:, j], values, pixel_mask, slots["token_type_ids"][:, j])
    np.testing.assert_allclose(out[:, j], alone[:, 0], atol=1e-5)
  per_question = apply({**batch, **{k: v[:, :1] for k, v in slots.items()}})
  np.testing.assert_allclose(per_question, np.broadcast_to(out[:, :1], out.shape), atol=1e-5)  # I+Q


@pytest.mark.parametrize("module, inputs, expected", [(vilt_class, "q+a", "('i+q', 'i+q+a')"),
                                                      (vilt_mask, "q", "('i+q', 'i+q+a', 'i+a')")])
def test_a_vilt_row_without_the_image_is_refused_in_one_line(module, inputs, expected):
  config = config_lib.override(module.get_config("runlocal"), {"model.inputs": inputs})
  with pytest.raises(InputError) as refused:
    config_lib.check(config, cli.task_of(config).rules(config))
  assert str(refused.value) == f"config.model.inputs: expected one of {expected}, got '{inputs}'"



def test_a_mask_run_from_a_checkpoint_starts_with_its_parameters(therapy_copy, tmp_path, caplog):
  config = vilt_mask.get_config("runlocal")
  tensors = tiny_hub(tmp_path / "hub", 1, ["what", "is", "the", "colour", "of", "?"])
  config.data.dir, config.model.init_from = therapy_copy, str(tmp_path / "hub")
  embedded.prepare(config)
  exp = experiment.Experiment.build(grounding_mask, config, jax.devices()[:1])
  with caplog.at_level("WARNING"):
    params = jax.device_get(exp.initial_state().params)
  assert "initialised mask_head (not in the checkpoint)" in caplog.text
  np.testing.assert_array_equal(params["vilt"]["text_embeddings"]["word_embeddings"]["embedding"],
                                tensors["embeddings.text_embeddings.word_embeddings.weight"])
  np.testing.assert_array_equal(params["vilt"]["layers"]["intermediate"]["kernel"][0],
                                tensors["encoder.layer.0.intermediate.dense.weight"].T)
  assert sum(x.size for x in jax.tree_util.tree_leaves(params["vilt"])) == sum(t.size for t in tensors.values())
  assert params["mask_head"]["kernel"].shape == (16, 1)
  ids = exp.data.train["input_ids"]  # the folder's tokenizer, a text per answer slot: [CLS] q [SEP] answer [SEP]
  assert ids.shape == (len(exp.data.train["label"]), 4, 12)
  valid = exp.data.train["answer_valid"]
  assert (ids[..., 0] == 2).all() and ((ids == 3).sum(-1)[valid] == 2).all()
  assert exp.data.train["grid_mask"].shape[-2:] == (14, 14)  # config.model.mask_grid, not the 32 px store


@pytest.mark.slow
def test_runlocal_runs_train_and_ground_a_new_image_without_their_data(therapy_copy, tmp_path):
  runs = {}
  for name, module in (("class", vilt_class), ("mask", vilt_mask)):
    config = config_lib.override(module.get_config("runlocal"), {
        "data.dir": therapy_copy, "num_train_steps": 1, "eval_every_steps": 1, "log_every_steps": 1})
    embedded.prepare(config)
    runs[name] = str(tmp_path / name)
    metrics = train.train_and_evaluate(cli.task_of(config), config, runs[name])["val"]
    assert {"class": "balanced_accuracy", "mask": "from_masks/recall/single"}[name] in metrics
  results = json.loads((tmp_path / "mask" / "results" / "step_1" / "results.json").read_text())
  assert len(results) == sum(len(json.load(open(os.path.join(therapy_copy, f)))[i]["answers"])
                             for f in ("VQA_val.json", "VizWiz_val.json")
                             for i in range(len(json.load(open(os.path.join(therapy_copy, f))))))
  picture = os.path.join(therapy_copy, "val2014", sorted(os.listdir(os.path.join(therapy_copy, "val2014")))[0])
  moved = tmp_path / "photo.jpg"
  shutil.copy(picture, moved)
  shutil.move(therapy_copy, therapy_copy + ".away")  # grounding reads no training data
  try:
    grounder = ask.Grounder.from_workdir(runs["mask"], class_workdir=runs["class"])
    features = grounder.features_of([str(moved)])[0]
    result = grounder.ground("what is on the table?", ["plate", "dish"], features=features, image_size=(20, 30))
    shown = demo.Page(FakeAnswerer(extractor=True), grounder).ask(None, str(moved), "what is on it?", "", "plate, dish")
  finally:
    shutil.move(therapy_copy + ".away", therapy_copy)
  assert features.shape == (32, 32, 4) and grounder.grid == 14
  assert result["masks"].shape == (2, 14, 14) and result["single_from"] == "classifier"
  assert [r["size"] for r in result["rle"]] == [[20, 30]] * 2
  # the demo's mask route on the ViLT runs: the upload's masks over its own picture, each answer in the legend
  assert shown["overlay"].shape == np.asarray(Image.open(moved)).shape and "decided by the grounding_class run" in shown["call"]
  assert all(answer in shown["legend"] for answer in ("plate", "dish"))
