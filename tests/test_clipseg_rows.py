"""The CLIPSeg grounding row (experiments/therapy/clipseg_ground.py, nn/clipseg_models.py): its prompts
by hand, a run from a Hub folder starting with its parameters, CLIP's towers frozen under AdamW with
decay, a refused folder leaving the workdir as it was, and a runlocal run from scratch through the
front door, asked about a new picture from its bundle.

The Hub folder is written without torch: a random `CLIPSeg`'s parameters in HF's names and layouts
(`hub.hf_tensors` of the table `tests/test_clipseg.py` proves against transformers)."""

import json
import os
import shutil

import jax
import numpy as np
import pytest
from PIL import Image
from safetensors import numpy as safetensors_numpy

from experiments.sweeps import therapy_grounding
from experiments.therapy import clipseg_ground, clipseg_zeroshot, vilt_mask
from experiments.therapy import grounding_mask as grid_mask
from vqajax import cli, commands, demo
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.answertherapy import grounding_mask, report
from vqajax.answertherapy.ask import Grounder
from vqajax.core import checkpoint, experiment, run_record, text
from vqajax.core import config as config_lib
from vqajax.core.model import Text
from vqajax.nn import clipseg, clipseg_hub, clipseg_models, hub
from vqajax.synthetic import clipseg as random_clipseg
from vqajax.synthetic import embedded
from vqajax.vqa import sweep

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
  shapes = jax.eval_shape(clipseg.CLIPSeg(config).init, jax.random.key(3), **clipseg.example_inputs(config, text_length=4))
  rng = np.random.default_rng(3)  # random tensors of the model's shapes, no init to compile
  params = jax.tree.map(lambda s: (0.02 * rng.standard_normal(s.shape)).astype(s.dtype), shapes["params"])
  os.makedirs(folder)
  clipseg_hub.save(folder, config, params, vocab)  # no merges: a word is a token only where the vocabulary has it
  return hub.hf_tensors(clipseg_hub.parameter_table(config), params)


@pytest.mark.parametrize("row", [clipseg_ground, clipseg_zeroshot])
@pytest.mark.parametrize("inputs", ["i+q+a", "i+q", "i+a"])
def test_the_prompts_by_hand(row, inputs):
  """I+Q+A joins the question and the slot's answer with a space (a padding slot: the question alone);
  I+Q is one prompt per question; I+A the slot's answer alone (a padding slot: no words)."""
  spec = clipseg_models.Spec(clipseg.CLIPSegConfig(eos_token_id=2), clipseg_models.word_tokenizer(WORDS), 8)
  enc = therapy_dataset.Encoders(vocab=text.Vocab(WORDS), image_shape=(32, 32, 4), text=Text("clipseg", spec))
  config = config_lib.override(row.get_config("runlocal"), {"data.max_answers": 3, "model.inputs": inputs})
  arrays = therapy_dataset.text_arrays(["What is it?"], [("red", "blue sky")], enc, config)
  vocab = json.loads(spec.tokenizer_json)["model"]["vocab"]
  start, end, unknown = vocab["<|startoftext|>"], vocab["<|endoftext|>"], vocab["<|unk|>"]
  question = [vocab["what"], vocab["is"], unknown, vocab["?"]]  # "it" is not among WORDS
  answers = [[vocab["red"]], [vocab["blue"], vocab["sky"]], []]
  prompts = {"i+q+a": [question + a for a in answers], "i+q": [question], "i+a": answers}[inputs]
  expected = [[start, *p, end] + [end] * (6 - len(p)) for p in prompts]  # padded with the end token, as CLIP pads
  np.testing.assert_array_equal(arrays["input_ids"][0], expected)
  np.testing.assert_array_equal(arrays["attention_mask"][0], [[1] * (len(p) + 2) + [0] * (6 - len(p)) for p in prompts])


def test_the_zero_shot_row_evaluates_a_checkpoint_untrained():
  """No training steps; the paper size starts from CLIPSeg's checkpoint, the small sizes from the random
  one made offline; the three prompt variants are config overrides, as for the fine-tuned row."""
  for arg, start, side in (("", clipseg_ground.CHECKPOINT, 352), ("cpu", embedded.RANDOM_CLIPSEG, 64),
                           ("runlocal", embedded.RANDOM_CLIPSEG, 32)):
    config = clipseg_zeroshot.get_config(arg)
    assert (config.num_train_steps, config.num_epochs, config.model.init_from) == (0, 0.0, start)
    assert config.data.features == f"features/pixels{side}.npy"
    assert config.data == clipseg_ground.get_config(arg).data  # the same pictures as the fine-tuned row
    for inputs in ("i+q", "i+q+a", "i+a"):
      commands.check_config(config_lib.override(config, {"model.inputs": inputs}))


def test_the_random_checkpoint_another_run_wrote_meanwhile_is_taken(tmp_path, monkeypatch):
  """Zero-shot points started together (a cluster's array) each find no random checkpoint: the first
  complete folder renamed into place stays, the others' partial folders go, and no run fails."""
  target = tmp_path / "random"
  monkeypatch.setattr(embedded, "RANDOM_CLIPSEG", str(target))

  def another_run_first(partial):
    target.mkdir()
    (target / "config.json").write_text("theirs")
    (tmp_path / partial / "config.json").write_text("ours")
    return {}

  monkeypatch.setattr(random_clipseg, "write", another_run_first)
  config = config_lib.override(clipseg_zeroshot.get_config("runlocal"), {"data.synthetic": False,
                                                                        "data.dir": str(tmp_path)})
  embedded.prepare(config)
  assert os.listdir(tmp_path) == ["random"] and os.listdir(target) == ["config.json"]
  assert (target / "config.json").read_text() == "theirs"



@pytest.mark.slow
def test_a_run_from_a_checkpoint_starts_with_its_tensors(therapy_copy, tmp_path):
  folder = tmp_path / "hub"
  tensors = _hub_folder(folder, WORDS)
  config = config_lib.override(clipseg_ground.get_config("runlocal"), {
      "data.dir": therapy_copy, "model.init_from": str(folder), "model.train": "decoder"})
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


def test_a_refused_checkpoint_leaves_the_workdir_as_it_was(therapy_copy, tmp_path, capsys):
  folder = tmp_path / "hub"
  _hub_folder(folder, WORDS)
  tensors = safetensors_numpy.load_file(folder / hub.WEIGHTS)
  tensors["decoder.film_add.bias"] = tensors["decoder.film_add.bias"][:-1]
  safetensors_numpy.save_file(tensors, folder / hub.WEIGHTS)
  workdir = tmp_path / "run"
  argv = ["train", f"--config={os.path.dirname(clipseg_ground.__file__)}/clipseg_ground.py:runlocal",
          f"--workdir={workdir}", f"--config.data.dir={therapy_copy}", f"--config.model.init_from={folder}"]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err  # the log's lines, then the refusal
  assert err.splitlines()[-1] == (f"vqajax train: error: {folder / hub.WEIGHTS}: tensor decoder.film_add.bias has "
                                  "shape (7,); the model expects (8,)") and "Traceback" not in err, err
  assert not workdir.exists()


@pytest.mark.slow
def test_runlocal_trains_from_scratch_and_its_bundle_grounds_a_new_picture(therapy_copy, tmp_path, capsys):
  run, bundle = tmp_path / "run", tmp_path / "bundle"
  config = f"{os.path.dirname(clipseg_ground.__file__)}/clipseg_ground.py:runlocal"
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", f"--config.data.dir={therapy_copy}"]) == 0
  table = (run / "results" / "step_4" / "table5.md").read_text()
  assert "| clipseg_ground | grid |" in table and "| whole image | grid |" in table
  assert cli.main(["export", f"--workdir={run}", f"--out={bundle}"]) == 0
  picture = os.path.join(therapy_copy, "val2014", sorted(os.listdir(os.path.join(therapy_copy, "val2014")))[0])
  capsys.readouterr()
  assert cli.main(["ask", f"--workdir={bundle}", "--image", picture, "--question", "what is it?",
                   "--answers", "cup", "plate", f"--out={tmp_path / 'masks'}", "--json"]) == 0
  records = json.loads((tmp_path / "masks" / "masks.json").read_text())
  assert len(records) == 1 and [m["answer"] for m in records[0]["masks"]] == ["cup", "plate"]
  assert all(os.path.exists(tmp_path / "masks" / m["png"]) for m in records[0]["masks"])


def _mask_run(path, config, **metrics) -> str:
  """A mask workdir as a finished run leaves it (run.json, results/step_3/metrics.json), the whole image's
  scores those of one val split."""
  run_record.write_run_file(str(path), config, {"val_questions": 0})
  os.makedirs(path / "results" / "step_3")
  whole = {"whole_image/iou_pq": 15.0, "whole_image/pixel/iou_pq": 16.0, "whole_image/VizWiz/iou_pq": 20.0}
  (path / "results" / "step_3" / "metrics.json").write_text(json.dumps({"step": 3, **whole, **metrics}))
  return str(path)


def test_one_grounding_table_holds_every_row_once(tmp_path, capsys):
  """`vqajax therapy grounding`: the whole image, then a row per run and level, named from the run
  (its model's label, "zero-shot" for a run of no steps, its inputs) or as given."""
  runs = [_mask_run(tmp_path / name, config_lib.override(row.get_config("runlocal"), {"model.inputs": inputs}),
                    **{"iou_pq": score, "pixel/iou_pq": score - 1, "multiple/iou_pq": score / 2})
          for name, row, inputs, score in (("grid", grid_mask, "i+q", 70.0), ("vilt", vilt_mask, "i+q+a", 40.0),
                                           ("zs", clipseg_zeroshot, "i+a", 10.0), ("ft", clipseg_ground, "i+q+a", 50.0))]
  assert cli.main(["therapy", "grounding", *runs, f"random={runs[2]}", "--out", str(tmp_path / "t")]) == 0
  assert "| CLIPSeg zero-shot I+A | grid | 10.00 |" in capsys.readouterr().out
  rows = json.loads((tmp_path / "t" / "grounding.json").read_text())
  names = ["whole image", "I+Q", "ViLT I+Q+A", "CLIPSeg zero-shot I+A", "CLIPSeg I+Q+A", "random"]
  assert [(r["method"], r["masks"]) for r in rows] == [(n, level) for n in names for level in ("grid", "pixel")]
  assert [(r["all IoU-PQ"], r["multiple IoU-PQ"], r["VizWiz IoU-PQ"]) for r in rows[:4]] == [
      (15.0, None, 20.0), (16.0, None, None), (70.0, 35.0, None), (69.0, None, None)]
  assert [r["all IoU-PQ"] for r in rows[4:]] == [40.0, 39.0, 10.0, 9.0, 50.0, 49.0, 10.0, 9.0]
  by_epochs = config_lib.override(clipseg_ground.get_config("runlocal"), {"num_train_steps": 0, "num_epochs": 2.0})
  assert report.row_name(by_epochs) == "CLIPSeg I+Q+A"  # its steps come from its epochs: it trains


def test_the_grounding_table_refuses_other_runs_and_other_questions(tmp_path, capsys):
  from experiments.therapy import grounding_class
  mask = _mask_run(tmp_path / "mask", grid_mask.get_config("runlocal"), **{"pixel/iou_pq": 1.0})
  classifier = tmp_path / "class"
  run_record.write_run_file(str(classifier), grounding_class.get_config("runlocal"), {"val_questions": 0})
  other = tmp_path / "other"
  _mask_run(other, grid_mask.get_config("runlocal"), **{"pixel/iou_pq": 2.0})
  metrics = json.loads((other / "results" / "step_3" / "metrics.json").read_text())
  (other / "results" / "step_3" / "metrics.json").write_text(json.dumps({**metrics, "whole_image/iou_pq": 9.0}))
  for run, message in ((str(classifier), f"{classifier}: a grounding_class run; expected a grounding_mask run"),
                       (str(other), "row name(s) ['I+Q+A'] given to several runs; name them NAME=WORKDIR"),
                       (f"o={other}", f"o={other}: {other}/results/step_3 was evaluated on other questions than "
                                      f"{mask}/results/step_3 (their whole-image scores differ)")):
    assert cli.main(["therapy", "grounding", mask, run, "--out", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err.startswith(f"vqajax therapy: error: {message}")
  assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("damaged, message", [
    ([1, 2], "expected an object of metrics (name: number), got list"),
    ("iou", "expected an object of metrics (name: number), got str"),
    ({"step": 3, "iou_pq": "abc"}, "metric 'iou_pq': expected a number, got 'abc'"),
    ({"step": 3, "iou_pq": {}}, "metric 'iou_pq': expected a number, got '{}'"),
    ({"step": 3, "iou_pq": True}, "metric 'iou_pq': expected a number, got 'True'")])
def test_an_edited_metrics_file_is_refused_never_evaluated_over_or_shown(tmp_path, capsys, damaged, message):
  mask = _mask_run(tmp_path / "mask", grid_mask.get_config("runlocal"), iou_pq=1.0)
  metrics = tmp_path / "mask" / "results" / "step_3" / "metrics.json"
  metrics.write_text(json.dumps(damaged))
  assert cli.main(["therapy", "grounding", mask, "--out", str(tmp_path / "t")]) == 2
  assert capsys.readouterr().err == f"vqajax therapy: error: {metrics}: {message}\n"
  assert json.loads(metrics.read_text()) == damaged and not (tmp_path / "t").exists()


def test_an_output_inside_a_run_is_refused_before_the_run_is_evaluated(tmp_path, capsys):
  mask = tmp_path / "mask"
  run_record.write_run_file(str(mask), grid_mask.get_config("runlocal"), {"val_questions": 0})  # no results yet
  assert cli.main(["therapy", "grounding", str(mask), "--out", str(mask / "table")]) == 2
  assert capsys.readouterr().err.startswith(f"vqajax therapy: error: {mask}/table: lies in {mask}, an input")
  assert os.listdir(mask) == ["run.json"]


def test_the_grounding_sweep_has_a_valid_row_per_line():
  """experiments/sweeps/therapy_grounding.py: each ROWS line one point, whose config its checks pass."""
  points, base = sweep.load_sweep(f"{os.path.dirname(therapy_grounding.__file__)}/therapy_grounding.py:runlocal")
  assert base is None and [p.name for p in points] == [name for name, _, _ in therapy_grounding.ROWS]
  configs = [commands.check_config(sweep.point_config(p, {})) for p in points]
  assert [(c.model.name, c.model.inputs, c.num_train_steps) for c in configs] == [
      ("mask_predictor", "i+q", 20), ("mask_predictor", "i+q+a", 20), ("mask_predictor", "i+a", 20),
      ("vilt", "i+q+a", 4), ("clipseg", "i+q", 0), ("clipseg", "i+q+a", 0), ("clipseg", "i+a", 0),
      ("clipseg", "i+q", 4), ("clipseg", "i+q+a", 4), ("clipseg", "i+a", 4),
      ("paligemma", "i+q", 0), ("paligemma", "i+q+a", 0), ("paligemma", "i+a", 0)]


@pytest.mark.slow
def test_a_zero_shot_run_keeps_the_random_checkpoint_it_starts_from_and_grounds_without_it(
    therapy_copy, tmp_path, monkeypatch, capsys):
  """The runlocal zero-shot row: the random Hub folder written on first use (no download), evaluated at
  step 0 and kept as the run's checkpoint of step 0, tensor for tensor; asked about a picture once the
  folder is gone (the run records CLIP's tokenizer: a character per token)."""
  folder, run = tmp_path / "random", tmp_path / "run"
  monkeypatch.setattr(embedded, "RANDOM_CLIPSEG", str(folder))
  config = f"{os.path.dirname(clipseg_zeroshot.__file__)}/clipseg_zeroshot.py:runlocal"
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", f"--config.data.dir={therapy_copy}",
                   "--config.model.inputs=i+a"]) == 0
  assert sorted(os.listdir(folder)) == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]
  assert run_record.read_record(str(run))["finished_step"] == 0 and checkpoint.complete_steps(str(run / "checkpoints")
                                                                                              ) == [0]
  logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
  table = json.loads((run / "results" / "step_0" / "table5.json").read_text())
  assert [line["step"] for line in logged] == [0] and logged[0]["val/iou_pq"] == table[2]["all IoU-PQ"]
  params, _, _ = checkpoint.read_params(str(run / "checkpoints"), 0)
  saved = hub.hf_tensors(clipseg_hub.parameter_table(clipseg_hub.read_config(str(folder))), params)
  stored = safetensors_numpy.load_file(folder / hub.WEIGHTS)
  assert sorted(saved) == sorted(stored) and all(np.array_equal(saved[k], stored[k]) for k in stored)
  vocab = random_clipseg.vocabulary()
  tokens = ["<|startoftext|>", "h", "i</w>", ",</w>", "c", "a", "t</w>", "<|endoftext|>"]  # lower case, a char each
  assert clipseg_hub.read_tokenizer(str(folder)).encode("Hi, cat").ids == [vocab[t] for t in tokens]
  shutil.rmtree(folder)
  monkeypatch.setattr(embedded, "RANDOM_CLIPSEG", str(tmp_path / "elsewhere"))  # nothing writes the run's again
  picture = os.path.join(therapy_copy, "val2014", sorted(os.listdir(os.path.join(therapy_copy, "val2014")))[0])
  capsys.readouterr()
  assert cli.main(["ask", f"--workdir={run}", "--image", picture, "--question", "what is it?",
                   "--answers", "cup", "plate", "mug", f"--out={tmp_path / 'masks'}", "--json"]) == 0
  records = json.loads((tmp_path / "masks" / "masks.json").read_text())
  assert [m["answer"] for m in records[0]["masks"]] == ["cup", "plate", "mug"]
  grounder = Grounder.from_workdir(str(run))  # the demo draws the run's masks over its own pictures
  key = str(grounder.image_ids[0])
  out = demo.Page(NoAnswerer(), grounder).ask(key, None, "what is it?", "", "cup, plate")
  height, width = np.asarray(Image.open(grounder.image_path(grounder.image_ids[0]))).shape[:2]
  assert out["error"] == "" and out["overlay"].shape == (height, width, 3) and "plate" in out["legend"]
  assert not folder.exists() and not (tmp_path / "elsewhere").exists()


class NoAnswerer:
  """A demo page's VQA side with no images: the mask run's own pictures are grounded on typed answers."""
  image_ids = []
