"""PaliGemma's rows (nn/paligemma_models.py, experiments/therapy/paligemma_zeroshot.py): the zero-shot reading
rule on crafted replies (on the host and on the device), Table 4's left-out count by hand, a zero-shot run
from a Hub folder keeping its tensors, a refused folder leaving no workdir; the VQA row's answer suffix and
loss weights, multiple choice by likelihood, replies scored as the official script, runlocal through
train / export / ask.

The Hub folder is written without torch: a random `PaliGemma`'s parameters in HF's names and layouts
(`hub.hf_tensors` of the table `tests/test_paligemma.py` proves against transformers)."""

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
from safetensors import numpy as safetensors_numpy

from bench.reference import reference_accuracy
from experiments.therapy import paligemma_zeroshot
from experiments.vqa import deeper_lstm_norm_i
from vqajax import cli, demo
from vqajax.answertherapy import grounding_class, table4
from vqajax.core import config as config_lib
from vqajax.core import trained
from vqajax.nn import hub, paligemma, paligemma_hub, paligemma_models
from vqajax.vqa import task as vqa_task

SINGLE, MULTIPLE, LEFT_OUT = paligemma_models.SINGLE, paligemma_models.MULTIPLE, paligemma_models.LEFT_OUT


@pytest.mark.parametrize("reply, expected", [
    ("yes", SINGLE), ("Yes, they do.", SINGLE), ("YES", SINGLE), ("no", MULTIPLE), ("No.", MULTIPLE),
    (" no", MULTIPLE), ("nope", MULTIPLE), ("ye", LEFT_OUT), ("maybe yes", LEFT_OUT), ("", LEFT_OUT),
    ("a dog", LEFT_OUT), ("  yes", LEFT_OUT)])  # "  yes": its first three characters are "  y"
def test_a_reply_is_read_by_its_first_three_characters(reply, expected):
  assert paligemma_models.read_reply(reply) == expected


def test_the_device_reads_the_concatenated_tokens_as_the_host_reads_the_text():
  """Token rows whose texts split a reply anywhere, with end-of-sequence (1) and padding (0) tokens
  that have no text: each read as `read_reply` reads the joined text, by hand."""
  words = ["", "", "Y", "es", "n", "O", " ", "maybe", "y", "e"]  # ids 0 (pad) and 1 (eos) have no text
  heads = np.full((len(words), 3), -1, np.int32)
  for i, word in enumerate(words):
    heads[i, :len(word)] = [ord(c) for c in word.lower()[:3]]
  rows = {(2, 3, 0, 0): SINGLE,       # "Yes"
          (8, 9, 4, 0): LEFT_OUT,     # "yen"
          (8, 1, 9, 4): LEFT_OUT,     # "y", then the end: the rest is not the reply
          (4, 5, 1, 0): MULTIPLE,     # "nO"
          (6, 4, 5, 0): MULTIPLE,     # " nO": "no" among the first three
          (6, 6, 4, 5): LEFT_OUT,     # "  nO"
          (7, 2, 3, 0): LEFT_OUT,     # "maybeYes"
          (1, 2, 3, 0): LEFT_OUT}     # nothing before the end
  read = jax.jit(paligemma_models.read_heads)(jnp.asarray(list(rows)), jnp.asarray(heads), jnp.asarray([1]))
  np.testing.assert_array_equal(read, list(rows.values()))
  texts = ["".join(words[t] for t in (row[:row.index(1)] if 1 in row else row)) for row in rows]
  assert [paligemma_models.read_reply(t) for t in texts] == list(rows.values())


def test_table4_leaves_out_what_a_method_left_out_and_counts_it():
  """Sums by hand [all, VQAv2, VizWiz] x [single, multiple]: 3 answered single (2 right), 2 answered
  multiple (1 right), 4 left out (3 of them single): precision / recall on the answered, the naive
  baselines on all 9, the left-out count per source."""
  sums = {"true_positive": np.array([[2, 1], [2, 0], [0, 1]]), "predicted": np.array([[3, 2], [2, 0], [1, 2]]),
          "actual": np.array([[3, 2], [2, 0], [1, 2]]), table4.LEFT_OUT: np.array([[3, 1], [1, 0], [2, 1]])}
  metrics = table4.with_baselines(sums)
  assert metrics["precision/single"] == pytest.approx(200 / 3) and metrics["recall/multiple"] == 50.0
  assert (metrics["left_out"], metrics["VQAv2/left_out"], metrics["VizWiz/left_out"]) == (4.0, 1.0, 3.0)
  assert metrics["always_single/precision/single"] == pytest.approx(100 * 6 / 9)  # 6 of the 9 are single
  columns, rows = table4.table(table4.baseline_rows(metrics) + [("zero-shot", metrics, "")])
  assert columns[-1] == "left out" and [r["left out"] for r in rows[:3]] == [None, None, 4]


def _hub_folder(folder, side: int) -> dict:
  """A random PaliGemma Hub folder (config.json, model.safetensors, tokenizer.json): SigLIP 16 wide on
  `side` px pictures in 8 px patches, a 1-layer Gemma 16 wide; the tokenizer Gemma's specials, a few
  words and the location / segmentation tokens."""
  specials = list(paligemma_models.SPECIAL)
  vocab = {token: i for i, token in enumerate(specials + ["yes", "no", "\n"])}
  words = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  words.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"\w+|[^\w ]"), "isolated")
  words.add_special_tokens(specials)
  words.add_tokens(list(paligemma_hub.EXTRA_TOKENS))
  os.makedirs(folder)
  words.save(os.path.join(folder, "tokenizer.json"))
  vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=side,
                patch_size=8)
  text = dict(vocab_size=words.get_vocab_size(), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=1, head_dim=8)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"model_type": "paligemma", "projection_dim": 16, "image_token_index": 4,
               "vision_config": {"model_type": "siglip_vision_model", **vision},
               "text_config": {"model_type": "gemma", **text}}, f)
  config = paligemma_hub.read_config(str(folder))
  shapes = jax.eval_shape(paligemma.PaliGemma(config).init, jax.random.key(5), **paligemma.example_inputs(config))
  rng = np.random.default_rng(5)  # random tensors of the model's shapes, no init to compile
  params = jax.tree.map(lambda s: (0.02 * rng.standard_normal(s.shape)).astype(s.dtype), shapes["params"])
  tensors = hub.hf_tensors(paligemma_hub.parameter_table(config), params)
  safetensors_numpy.save_file(tensors, os.path.join(folder, hub.WEIGHTS))
  return tensors



def test_a_refused_checkpoint_leaves_no_workdir(therapy_copy, tmp_path, capsys):
  folder = tmp_path / "hub"
  _hub_folder(folder, 32)
  tensors = safetensors_numpy.load_file(folder / hub.WEIGHTS)
  key = f"{paligemma_hub.TEXT}.layers.0.mlp.up_proj.weight"
  tensors[key] = tensors[key][:-1]
  safetensors_numpy.save_file(tensors, folder / hub.WEIGHTS)
  workdir = tmp_path / "run"
  argv = ["train", f"--config={os.path.dirname(paligemma_zeroshot.__file__)}/paligemma_zeroshot.py:runlocal",
          f"--workdir={workdir}", f"--config.data.dir={therapy_copy}", f"--config.model.init_from={folder}"]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert err.splitlines()[-1] == (f"vqajax train: error: {folder / hub.WEIGHTS}: tensor {key} has shape (31, 16); "
                                  "the model expects (32, 16)") and "Traceback" not in err, err
  assert not workdir.exists()
  shutil.rmtree(folder)
  _hub_folder(folder, 16)  # pictures of 16 px, the store's of 32
  assert cli.main(argv) == 2
  assert capsys.readouterr().err.splitlines()[-1] == (
      f"vqajax train: error: config.data.features: a pixel store of 32 px; {folder} reads 16 px pictures "
      "(vqajax features --model pixels --size 16)") and not workdir.exists()
  assert cli.main(argv[:-1] + ["--config.model.text_length=8"]) == 2  # from scratch, prompts of more tokens
  assert "error: config.model.text_length (8 text tokens) is too short: prompt 0:" in capsys.readouterr().err
  (folder / "config.json").write_text(json.dumps({"model_type": "clip"}))
  assert cli.main(argv) == 2
  assert "not a PaliGemma checkpoint (model_type 'clip'" in capsys.readouterr().err and not workdir.exists()


@pytest.mark.slow
def test_a_zero_shot_run_keeps_its_checkpoints_tensors_and_stands_in_table4(therapy_copy, tmp_path):
  """From a Hub folder, no step trains: checkpoint 0 holds exactly the folder's tensors (every parameter
  is one of them), its evaluation is written, and its row stands in `vqajax therapy table4` with the
  questions it left out."""
  folder, run = tmp_path / "hub", tmp_path / "run"
  tensors = _hub_folder(folder, 32)
  config = f"{os.path.dirname(paligemma_zeroshot.__file__)}/paligemma_zeroshot.py:runlocal"
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", f"--config.data.dir={therapy_copy}",
                   f"--config.model.init_from={folder}"]) == 0
  assert os.listdir(run / "checkpoints") == ["0"]
  params = jax.device_get(trained.open_run(str(run), {"grounding_class": grounding_class}).params)
  vision, text = paligemma_hub.VISION, paligemma_hub.TEXT
  np.testing.assert_array_equal(params["embed_tokens"]["embedding"], tensors[f"{text}.embed_tokens.weight"])
  np.testing.assert_array_equal(params["layers"]["gate_proj"]["kernel"][0],
                                tensors[f"{text}.layers.0.mlp.gate_proj.weight"].T)
  np.testing.assert_array_equal(params["vision"]["patch_embedding"]["kernel"],
                                tensors[f"{vision}.embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0))
  table = paligemma_hub.parameter_table(paligemma_hub.read_config(str(folder)))
  assert {place.path for place in table.values()} == set(hub.leaves(params))  # each parameter the folder's
  assert len(table) == len(tensors)
  metrics = json.loads((run / "results" / "step_0" / "metrics.json").read_text())
  predictions = json.loads((run / "results" / "step_0" / "predictions.json").read_text())
  assert metrics["left_out"] == sum(p["predicted"] == "left out" for p in predictions)
  assert cli.main(["therapy", "table4", str(run), "--out", str(tmp_path / "t4")]) == 0
  rows = json.loads((tmp_path / "t4" / "table4.json").read_text())
  row = next(r for r in rows if r["method"] == "PaliGemma zero-shot I+Q+A" and r["source"] == "all")
  assert row["left out"] == metrics["left_out"]


def test_a_spec_round_trips_through_its_tables():
  spec = paligemma_models.Spec(paligemma.PaliGemmaConfig(), paligemma_models.word_tokenizer(["what is it?"]), 12)
  again = paligemma_models.Spec.from_tables(json.loads(json.dumps(spec.tables())))
  assert again == spec and dataclasses.asdict(again.config) == dataclasses.asdict(spec.config)


def test_the_answer_follows_the_prompt_and_alone_is_predicted():
  """Prompts padded on the right get their answer (tokens, then <eos> = 1) written after them; the
  loss's weights are 1 exactly on the answer's slots, so the prompt's tokens carry no loss."""
  ids, mask = jnp.asarray([[5, 6, 0, 0, 0], [5, 0, 0, 0, 0]]), jnp.asarray([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
  full, valid, placed = jax.jit(paligemma_models.with_suffix)(ids, mask, jnp.asarray([[7, 1, -1], [8, 9, 1]]))
  np.testing.assert_array_equal(full, [[5, 6, 7, 1, 0], [5, 8, 9, 1, 0]])
  np.testing.assert_array_equal(valid, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
  np.testing.assert_array_equal(placed, [[0, 0, 1, 1, 0], [0, 1, 1, 1, 0]])
  logits = np.zeros((1, 3, 4), np.float32)  # uniform: log 4 per token; a confident right guess on the last
  logits[0, 2, 3] = 100.0
  outputs = {"logits": logits, "targets": np.asarray([[1, 2, 3]]), "weights": np.asarray([[0.0, 1.0, 1.0]])}
  assert float(jax.jit(vqa_task.token_loss)(outputs, {})) == pytest.approx(np.log(4) / 2, abs=1e-6)


def test_multiple_choice_is_the_likeliest_answer():
  """Each choice's log-likelihood after the prompt equals the sum, taken by hand from the model's
  logits of the whole sequence, of its tokens' log-probabilities; the pick is the likeliest choice
  of the answer table, never one outside it."""
  config = paligemma.PaliGemmaConfig(
      vision=paligemma.VisionConfig(16, 32, 1, 2, image_size=16, patch_size=8),
      text=paligemma.TextConfig(vocab_size=12, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                layer_types=(paligemma.GLOBAL,)), image_token_index=11)
  model = paligemma.PaliGemma(config)
  variables = jax.jit(model.init)(jax.random.key(1), **paligemma.example_inputs(config))
  pixels = jax.random.normal(jax.random.key(2), (1, 16, 16, 3))
  prompt = [11] * 4 + [2, 5, 6]
  ids, mask = jnp.asarray([prompt + [0] * 4]), jnp.asarray([[1] * 7 + [0] * 4])
  table = np.asarray([[8, 9, 1], [10, 1, -1], [7, 1, -1]])
  choices = np.asarray([[2, 0, -1]])  # table answers 2 ("7 <eos>") and 0 ("8 9 <eos>"), and one the table lacks
  picked = table[choices[0, :2]]  # the two table answers, each after the prompt
  likelihood = jax.jit(lambda v, *rows: paligemma_models.suffix_likelihood(model.bind(v), *rows))
  scores = likelihood(variables, jnp.repeat(pixels, 2, 0), jnp.repeat(ids, 2, 0), jnp.repeat(mask, 2, 0),
                      jnp.asarray(picked))
  full = jnp.asarray([prompt + [7, 1, 0], prompt + [8, 9, 1]])
  logp = jax.nn.log_softmax(jax.jit(model.apply)(variables, jnp.repeat(pixels, 2, 0), full, jnp.asarray(
      [[1] * 9 + [0], [1] * 10]), jnp.repeat(mask[:, :10], 2, 0)))
  expected = [float(logp[0, 6, 7] + logp[0, 7, 1]), float(logp[1, 6, 8] + logp[1, 7, 9] + logp[1, 8, 1])]
  np.testing.assert_allclose(scores, expected, atol=1e-4)
  logits, targets, placed = jax.jit(lambda v, *rows: paligemma_models.suffix_logits(model.bind(v), *rows))(
      variables, jnp.repeat(pixels, 2, 0), jnp.repeat(ids, 2, 0), jnp.repeat(mask, 2, 0), jnp.asarray(picked))
  np.testing.assert_array_equal(targets[:, :2], [[7, 1], [8, 9]])  # the third token of row 0: past its end
  np.testing.assert_array_equal(placed, [[1, 1, 0], [1, 1, 1]])
  np.testing.assert_allclose(jax.nn.log_softmax(logits)[1], logp[1, 6:9], atol=1e-4)  # the slots before them
  np.testing.assert_allclose(jax.nn.log_softmax(logits)[0, :2], logp[0, 6:8], atol=1e-4)
  scores = [float(x) for x in scores]
  outputs = {"tokens": np.zeros((1, 2), np.int32),
             "choice_scores": jnp.where(jnp.asarray(choices) >= 0, jnp.asarray([scores + [0.0]]), -jnp.inf)}
  picked = vqa_task.answers(outputs, {"choice_index": choices})["mc_choice"]
  assert int(picked[0]) == int(np.argmax(scores))


@pytest.mark.slow
def test_runlocal_vqa_answers_in_words_and_scores_its_replies(tmp_path, capsys):
  """Fine-tuned on the tiny set through the front door: its evaluation writes the official results of
  its replies and their accuracies; its bundle answers a new picture in words, and the demo's page a
  store picture (with a multiple-choice pick); `submit` writes the server's file of its replies,
  every test question once in file order."""
  run, bundle = tmp_path / "run", tmp_path / "bundle"
  config = f"{os.path.dirname(paligemma_zeroshot.__file__)}/../vqa/paligemma.py:runlocal"
  assert cli.main(["train", f"--config={config}", f"--workdir={run}", "--config.num_train_steps=2"]) == 0
  step = run / "results" / "step_2"
  results = json.loads((step / "v2_OpenEnded_mscoco_val2014_paligemma_results.json").read_text())
  metrics = json.loads((step / "metrics.json").read_text())
  assert len(results) == 180 and {"accuracy", "mc_accuracy"} <= set(metrics)
  assert cli.main(["export", f"--workdir={run}", f"--out={bundle}"]) == 0
  capsys.readouterr()
  data = json.loads((run / "run.json").read_text())["config"]["data"]["dir"]
  picture = os.path.join(data, "val2014", sorted(os.listdir(os.path.join(data, "val2014")))[0])
  assert cli.main(["ask", f"--workdir={bundle}", "--image", picture, "--question", "what is it?", "--json"]) == 0
  answered = json.loads(capsys.readouterr().out)
  assert len(answered[0]["answers"]) == 1 and isinstance(answered[0]["answers"][0]["answer"], str)
  page = demo.page_of(demo._parser("vqajax demo").parse_args([f"--workdir={run}"]))  # the demo's page, no server
  key = page.image_choices()[0][1]
  shown = page.ask(key, None, "what is it?", "yes, no")
  assert shown["error"] == "" and len(shown["answers"]) == 1 and shown["pick"].startswith("Of the choices, the model picks")
  questions = os.path.join(data, "v2_OpenEnded_mscoco_test-dev2015_questions.json")
  assert cli.main(["submit", f"--workdir={run}", f"--out={tmp_path / 'server'}", questions]) == 0
  submitted = json.loads((tmp_path / "server" / "v2_OpenEnded_mscoco_test-dev2015_paligemma_results.json").read_text())
  asked = json.loads(open(questions).read())["questions"]
  assert [r["question_id"] for r in submitted] == [q["question_id"] for q in asked]
  assert all(isinstance(r["answer"], str) for r in submitted)


def test_replies_are_scored_as_the_official_script_scores_them(tiny_data):
  """Replies in words (an answer in capitals with a full stop, a number word, an article, a miss) on
  the tiny val split: the accuracies of the official script's loop (bench/reference.py), overall and
  per answer type."""
  config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"data.dir": str(tiny_data)})
  data = vqa_task.load(config)
  fields = ("answer", "answer_confidence", "answer_id")
  annotations = [{**a, "answers": [{f: getattr(x, f) for f in fields} for x in a["answers"]]}
                 for _, a in data.val_records]
  made = (lambda a: a["answers"][0]["answer"].upper() + ".", lambda a: "two",
          lambda a: "the " + a["multiple_choice_answer"], lambda a: "nothing")
  replies = [made[i % 4](a) for i, a in enumerate(annotations)]
  metrics = vqa_task.reply_metrics(data, replies)
  official, _ = reference_accuracy(annotations, {a["question_id"]: r for a, r in zip(annotations, replies)})
  assert 0 < official["overall"] < 100
  assert metrics["accuracy"] == pytest.approx(official["overall"], abs=0.005)
  for answer_type, value in official["perAnswerType"].items():
    assert metrics[f"accuracy/{answer_type}"] == pytest.approx(value, abs=0.005)
