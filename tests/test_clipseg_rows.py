"""The CLIPSeg grounding row (experiments/therapy/clipseg_ground.py, nn/clipseg_models.py): its prompts
by hand, a run from a Hub folder starting with its parameters, CLIP's towers frozen under AdamW with
decay, a refused folder leaving the workdir as it was, and a runlocal run from scratch through the
front door, asked about a new picture from its bundle.

The Hub folder is written without torch: a random `CLIPSeg`'s parameters in HF's names and layouts
(`hub.hf_tensors` of the table `tests/test_clipseg.py` proves against transformers)."""

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from experiments.therapy import clipseg_ground
from vqajax import cli
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import grounding_mask
from vqajax.core import config as config_lib
from vqajax.core import experiment, text
from vqajax.core.model import Text
from vqajax.nn import clipseg, clipseg_hub, clipseg_models, hub
from vqajax.synthetic import embedded

WORDS = ["what", "is", "the", "colour", "of", "?", "red", "blue", "sky"]


def _hub_folder(folder, words) -> dict:
  """A random CLIPSeg Hub folder (config.json, model.safetensors, vocab.json + merges.txt of a
  word-per-token BPE): 16 wide, 2 layers, 8 px patches (the refined head), CLIP's image size 32."""
  tower = clipseg.Tower(16, 32, 2, 2)
  specials = ["<|startoftext|>", "<|endoftext|>"]
  vocab = {token: i for i, token in enumerate([f"{w}</w>" for w in words] + specials)}
  config = clipseg.CLIPSegConfig(text=tower, vision=tower, vocab_size=len(vocab), max_position_embeddings=12,
                                 eos_token_id=vocab["<|endoftext|>"], image_size=32, patch_size=8, projection_dim=16,
                                 extract_layers=(0, 1), reduce_dim=8, decoder_num_attention_heads=2,
                                 decoder_intermediate_size=16)
  params = clipseg.CLIPSeg(config).init(jax.random.key(3), **clipseg.example_inputs(config, text_length=4))["params"]
  tensors = hub.hf_tensors(clipseg_hub.parameter_table(config), params)
  os.makedirs(folder)
  safetensors_numpy.save_file(tensors, os.path.join(folder, hub.WEIGHTS))
  raw = dataclasses.asdict(config)
  text_config = dict(raw.pop("text"), vocab_size=raw.pop("vocab_size"),
                     max_position_embeddings=raw.pop("max_position_embeddings"), eos_token_id=raw.pop("eos_token_id"))
  vision_config = dict(raw.pop("vision"), image_size=raw.pop("image_size"), patch_size=raw.pop("patch_size"),
                       num_channels=raw.pop("num_channels"))
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"model_type": "clipseg", "text_config": text_config, "vision_config": vision_config, **raw}, f)
  with open(os.path.join(folder, "vocab.json"), "w") as f:
    json.dump(vocab, f)
  with open(os.path.join(folder, "merges.txt"), "w") as f:
    f.write("#version: 0.2\n")  # no merges: a word is a token only where the vocabulary has it whole
  return tensors


def test_the_prompts_by_hand():
  """I+Q+A joins the question and the slot's answer with a space; a padding slot has the question alone."""
  spec = clipseg_models.Spec(clipseg.CLIPSegConfig(eos_token_id=2), clipseg_models.word_tokenizer(WORDS), 8)
  enc = therapy_dataset.Encoders(vocab=text.Vocab(WORDS), image_shape=(32, 32, 4), text=Text("clipseg", spec))
  config = config_lib.override(clipseg_ground.get_config("runlocal"), {"data.max_answers": 3})
  arrays = therapy_dataset.text_arrays(["What is it?"], [("red", "blue sky")], enc, config)
  vocab = json.loads(spec.tokenizer_json)["model"]["vocab"]
  start, end, unknown = vocab["<|startoftext|>"], vocab["<|endoftext|>"], vocab["<|unk|>"]
  question = [start, vocab["what"], vocab["is"], unknown, vocab["?"]]  # "it" is not among WORDS
  expected = [question + [vocab["red"], end, end], question + [vocab["blue"], vocab["sky"], end],
              question + [end, end, end]]  # padded with the end token, as CLIP pads
  np.testing.assert_array_equal(arrays["input_ids"][0], expected)
  np.testing.assert_array_equal(arrays["attention_mask"][0], [[1] * 7 + [0], [1] * 8, [1] * 6 + [0, 0]])


@pytest.fixture(scope="module")
def tiny_copy(tiny_therapy, tmp_path_factory):
  """The tiny therapy set copied (pixel stores are written into it)."""
  out = tmp_path_factory.mktemp("clipseg_rows") / "tiny"
  shutil.copytree(tiny_therapy, out)
  return str(out)


@pytest.mark.slow
def test_a_run_from_a_checkpoint_starts_with_its_tensors(tiny_copy, tmp_path):
  folder = tmp_path / "hub"
  tensors = _hub_folder(folder, WORDS)
  config = config_lib.override(clipseg_ground.get_config("runlocal"), {
      "data.dir": tiny_copy, "model.init_from": str(folder), "model.train": "decoder"})
  embedded.prepare(config)
  exp = experiment.Experiment.build(grounding_mask, config, jax.devices()[:1])
  start = jax.device_get(exp.initial_state().params)
  np.testing.assert_array_equal(start["text"]["token_embedding"]["embedding"],
                                tensors["clip.text_model.embeddings.token_embedding.weight"])
  np.testing.assert_array_equal(start["vision"]["layers"]["fc1"]["kernel"][1],
                                tensors["clip.vision_model.encoder.layers.1.mlp.fc1.weight"].T)
  np.testing.assert_array_equal(start["decoder"]["film_mul"]["kernel"], tensors["decoder.film_mul.weight"].T)
  assert exp.data.train["input_ids"].shape[-1] == 12  # the checkpoint's max_position_embeddings
  assert exp.task.frozen(config.model) == ("text", "vision")


def test_frozen_groups_never_change_under_adamw_with_decay():
  """`make_optimizer(..., frozen)`: the frozen groups keep every bit through AdamW steps with weight
  decay and gradients of their own; the others move."""
  cfg = config_lib.override(clipseg_ground.get_config("runlocal"), {}).optimizer
  tx = experiment.make_optimizer(cfg, 10, frozen=("text", "vision"))
  params = {name: {"kernel": np.full((2, 3), 0.5, np.float32)} for name in ("text", "vision", "decoder")}
  grads = {name: {"kernel": np.ones((2, 3), np.float32)} for name in params}
  state, moved = tx.init(params), params
  for _ in range(2):
    updates, state = tx.update(grads, state, moved)
    moved = jax.tree.map(lambda p, u: p + u, moved, updates)
  for name in ("text", "vision"):
    np.testing.assert_array_equal(moved[name]["kernel"], params[name]["kernel"])
  assert (moved["decoder"]["kernel"] < 0.5).all()  # a positive gradient and decay both pull it down


def test_a_refused_checkpoint_leaves_the_workdir_as_it_was(tiny_copy, tmp_path, capsys):
  folder = tmp_path / "hub"
  _hub_folder(folder, WORDS)
  tensors = safetensors_numpy.load_file(folder / hub.WEIGHTS)
  tensors["decoder.film_add.bias"] = tensors["decoder.film_add.bias"][:-1]
  safetensors_numpy.save_file(tensors, folder / hub.WEIGHTS)
  workdir = tmp_path / "run"
  argv = ["train", f"--config={os.path.dirname(clipseg_ground.__file__)}/clipseg_ground.py:runlocal",
          f"--workdir={workdir}", f"--config.data.dir={tiny_copy}", f"--config.model.init_from={folder}"]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err  # the log's lines, then the refusal
  assert err.splitlines()[-1] == (f"vqajax train: error: {folder / hub.WEIGHTS}: tensor decoder.film_add.bias has "
                                  "shape (7,); the model expects (8,)") and "Traceback" not in err, err
  assert not workdir.exists()


@pytest.mark.slow
def test_runlocal_trains_from_scratch_and_its_bundle_grounds_a_new_picture(tiny_copy, tmp_path, capsys):
  run, bundle = tmp_path / "run", tmp_path / "bundle"
  config = f"{os.path.dirname(clipseg_ground.__file__)}/clipseg_ground.py:runlocal"
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", f"--config.data.dir={tiny_copy}"]) == 0
  table = (run / "results" / "step_4" / "table5.md").read_text()
  assert "| clipseg_ground | grid |" in table and "| whole image | grid |" in table
  assert cli.main(["export", f"--workdir={run}", f"--out={bundle}"]) == 0
  picture = os.path.join(tiny_copy, "val2014", sorted(os.listdir(os.path.join(tiny_copy, "val2014")))[0])
  capsys.readouterr()
  assert cli.main(["ask", f"--workdir={bundle}", "--image", picture, "--question", "what is it?",
                   "--answers", "cup", "plate", f"--out={tmp_path / 'masks'}", "--json"]) == 0
  records = json.loads((tmp_path / "masks" / "masks.json").read_text())
  assert len(records) == 1 and [m["answer"] for m in records[0]["masks"]] == ["cup", "plate"]
  assert all(os.path.exists(tmp_path / "masks" / m["png"]) for m in records[0]["masks"])
