"""The four non-neural baselines: hand-computed cases, MC choice, word vectors (their ordering on\nthe small set: test_learning.py)."""

import json
import os

import numpy as np
import pytest

from experiments.vqa import deeper_lstm_norm_i
from vqajax.vqa import baselines, baselines_nn
from vqajax.vqa import dataset as vqa_dataset
from vqajax.vqa.accuracy import score


def _rec(qid, question, answer, qtype="what", image_id=None, choices=None):
  q = {"question_id": qid, "image_id": qid if image_id is None else image_id, "question": question}
  if choices is not None:
    q["multiple_choices"] = choices
  a = {"question_id": qid, "image_id": q["image_id"], "question_type": qtype,
       "answer_type": "other", "multiple_choice_answer": answer,
       "answers": [{"answer": answer, "answer_confidence": "yes", "answer_id": i + 1} for i in range(10)]}
  return q, a


def _config(data_dir):
  config = deeper_lstm_norm_i.get_config("runlocal").data
  config.dir = data_dir
  return config


def test_random_is_seeded_and_uniform_over_the_top_answers():
  train = [_rec(i, "q", a) for i, a in enumerate(["yes"] * 5 + ["no"] * 3 + ["red"] * 2 + ["rare"])]
  val = [_rec(100 + i, "q", "x") for i in range(400)]
  out = baselines.random_answers(train, val, seed=3, top=3)
  picks = np.random.default_rng(3).integers(3, size=400)
  assert out == {100 + i: ["yes", "no", "red"][p] for i, p in enumerate(picks)}
  assert set(out.values()) == {"yes", "no", "red"}  # "rare" is not in the top 3
  assert baselines.random_answers(train, val, seed=4, top=3) != out


def test_prior_is_the_most_frequent_training_answer():
  train = [_rec(i, "q", a) for i, a in enumerate(["no", "yes", "yes", "2", "no", "yes"])]
  assert baselines.prior_answers(train, [_rec(7, "q", "no"), _rec(8, "q", "2")]) == {7: "yes", 8: "yes"}


def test_per_type_prior_needs_30_training_questions():
  train = ([_rec(i, "is the x?", "yes", "is the") for i in range(35)]
           + [_rec(100 + i, "what color is the x?", "red" if i < 20 else "blue", "what color is the")
              for i in range(30)]
           + [_rec(200 + i, "how many x?", "2", "how many") for i in range(29)])
  val = [_rec(1000, "", "", "what color is the"), _rec(1001, "", "", "how many"),
         _rec(1002, "", "", "why"), _rec(1003, "", "", "is the")]
  assert baselines.type_priors(train) == {"is the": "yes", "what color is the": "red"}
  assert baselines.q_type_prior_answers(train, val) == {1000: "red", 1001: "yes", 1002: "yes", 1003: "yes"}
  assert baselines.q_type_prior_answers(train, val, min_questions=29)[1001] == "2"


def _images(table):
  return lambda ids: np.stack([np.asarray(table[int(i)], np.float32) for i in ids])


def test_nearest_neighbour_picks_by_image_among_the_4_nearest_questions():
  # Question cosines to "what color is the car": t1, t2 = 1; t0, t3 = 0.8; t4 = 0.67.
  train = [_rec(0, "What color is the bus?", "yellow", image_id=10),
           _rec(1, "What color is the car?", "blue", image_id=11),
           _rec(2, "what color is the car", "green", image_id=12),
           _rec(3, "What color is the truck?", "white", image_id=13),
           _rec(4, "Is the car red?", "no", image_id=14)]
  val = [_rec(100, "What color is the car?", "green", image_id=20)]
  images = {10: [0, 1, 0], 11: [0, 0, 1], 12: [1, 0.3, 0], 13: [1, 1, 1], 14: [2, 0, 0], 20: [1, 0, 0]}
  assert baselines_nn.nearest_neighbour_answers(train, val, _images(images)) == {100: "green"}
  # With k=5 the identical image of t4 is reachable.
  assert baselines_nn.nearest_neighbour_answers(train, val, _images(images), k=5) == {100: "no"}
  # k=1: the first of the two identical questions, whatever the images.
  assert baselines_nn.nearest_neighbour_answers(train, val, _images(images), k=1) == {100: "blue"}


def test_nearest_neighbour_ties_keep_the_earliest_questions():
  train = [_rec(i, "is it red", str(i), image_id=i) for i in range(6)]
  val = [_rec(100, "is it red", "", image_id=50), _rec(101, "zebra", "", image_id=51)]
  images = {i: [1, 0] for i in range(6)}
  images.update({4: [0, 1], 5: [0, 1], 50: [0, 1], 51: [0, 1], 3: [0.1, 1]})
  # Only training questions 0-3 are candidates (ties -> earlier), the best image is 3's;
  # "zebra" (no known word) is equally far from all: the first 4 again.
  out = baselines_nn.nearest_neighbour_answers(train, val, _images(images))
  assert out == {100: "3", 101: "3"}
  chosen = baselines_nn.nearest_neighbours([["a"], ["b"], ["a"]], [1, 2, 3], [["a"]], [9],
                                           _images({1: [1, 0], 2: [1, 0], 3: [0, 1], 9: [0, 1]}), k=2)
  np.testing.assert_array_equal(chosen, [2])


def test_nearest_neighbour_representation_is_pluggable():
  train = [_rec(0, "what is red", "a", image_id=1), _rec(1, "is it blue", "b", image_id=2)]
  val = [_rec(9, "what is blue", "", image_id=3)]
  images = _images({1: [1, 0], 2: [1, 0], 3: [1, 0]})
  assert baselines_nn.nearest_neighbour_answers(train, val, images, k=1) == {9: "a"}  # 2 words shared
  last_word = lambda tokens: np.array([tokens[-1] == "red", tokens[-1] == "blue"], np.float32)
  assert baselines_nn.nearest_neighbour_answers(train, val, images, k=1, represent=last_word) == {9: "b"}


def test_multiple_choice_fallback_similarity():
  assert baselines.choose("Two", ["3", "2", "two"]) == "2"  # official normalisation
  assert baselines.choose("skiing", ["surfing", "ski", "tennis"]) == "ski"  # trigrams
  assert baselines.choose("zzz", ["a", "b"]) == "a"  # ties -> first
  val = [_rec(1, "q", "", choices=["no", "yes"]), _rec(2, "q", "", choices=["red", "blue"])]
  assert baselines.multiple_choice_answers({1: "yes", 2: "dark blue"}, val) == {1: "yes", 2: "blue"}
  with pytest.raises(baselines.InputError, match="multiple_choices"):
    baselines.multiple_choice_answers({1: "yes"}, [_rec(1, "q", "")])


@pytest.mark.parametrize("header", [True, False])
def test_word_vectors_are_read_and_used(tmp_path, header):
  lines = ["red 1 0 0", "Crimson 0.9 0.1 0", "crimson 0.8 0.2 0", "blue 0 1 0", "dark 0 0 1"]
  path = tmp_path / "vectors.txt"
  path.write_text(("5 3\n" if header else "") + "\n".join(lines) + "\n", encoding="utf-8")
  vectors = baselines.read_word_vectors(str(path))
  assert sorted(vectors) == ["blue", "crimson", "dark", "red"]
  np.testing.assert_array_equal(vectors["crimson"], np.float32([0.8, 0.2, 0]))  # lower-case spelling wins
  assert sorted(baselines.read_word_vectors(str(path), keep={"red"})) == ["red"]
  np.testing.assert_allclose(baselines.answer_vector("Dark red", vectors), [0.5, 0, 0.5])
  # No trigram in common: the fallback answers the first choice, the vectors "red".
  assert baselines.choose("crimson", ["blue", "red"]) == "blue"
  assert baselines.choose("crimson", ["blue", "red"], vectors) == "red"
  assert baselines.choose("crimson", ["navy", "red"], vectors) == "red"  # no vector for navy
  assert baselines.choose("purple", ["blue", "red"], vectors) == "blue"  # none for the answer


def test_word_vector_file_errors(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_text("red 1 0\nblue 0 x\n", encoding="utf-8")
  with pytest.raises(baselines.WordVectorError, match=r"bad.txt:2"):
    baselines.read_word_vectors(str(path))
  path.write_text("red 1 0\nblue 1\n", encoding="utf-8")
  with pytest.raises(baselines.WordVectorError, match=r"bad.txt:2"):
    baselines.read_word_vectors(str(path))


def _run_baseline(name, config, word_vectors=None, data=None, train_records=None):
  """One baseline's answers on the val split, scored officially."""
  predicted = baselines.predict_baseline(name, data, train_records, word_vectors, 0)
  annotations = [a for _, a in data.val_records]
  mc = predicted.get("MultipleChoice")
  return {"results": predicted["OpenEnded"], "mc_results": mc,
          "accuracy": score.accuracy_of(annotations, predicted["OpenEnded"])[0],
          "mc_accuracy": None if mc is None else score.accuracy_of(annotations, mc)[0]}


def test_run_baseline_on_tiny_data(tiny_data, tmp_path):
  config = _config(tiny_data)
  data, train = vqa_dataset.load(config), vqa_dataset.read_train_records(config)[0]
  path = tmp_path / "vectors.txt"
  path.write_text("yes 1 0\nno 0 1\n", encoding="utf-8")
  for name in baselines.BASELINES:
    out = _run_baseline(name, config, word_vectors=str(path), data=data, train_records=train)
    assert set(out["results"]) == {q["question_id"] for q, _ in data.val_records}
    for q, _ in data.val_records:
      assert out["mc_results"][q["question_id"]] in q["multiple_choices"]
    assert 0 <= out["accuracy"]["overall"] <= 100 and "perQuestionType" in out["mc_accuracy"]
  with pytest.raises(baselines.InputError, match="unknown baseline"):
    _run_baseline("oracle", config, data=data, train_records=train)


def test_run_and_write_gives_official_files_scored_like_the_reference(tiny_data, tmp_path):
  from bench.reference import reference_accuracy
  config = deeper_lstm_norm_i.get_config("runlocal")
  config.data.dir = tiny_data
  rows = baselines.run_and_write(config, str(tmp_path), ["prior", "q_type_prior"])
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  out = tmp_path / "results" / "q_type_prior"
  with open(out / "v2_OpenEnded_mscoco_val2014_q_type_prior_results.json") as f:
    results = {r["question_id"]: r["answer"] for r in json.load(f)}
  expected, _ = reference_accuracy(annotations, results)
  with open(out / "v2_OpenEnded_mscoco_val2014_q_type_prior_accuracy.json") as f:
    assert json.load(f) == expected
  assert rows["q_type_prior"]["accuracy"] == expected["overall"]
  assert rows["prior"]["mc_accuracy/yes/no"] == rows["prior"]["accuracy/yes/no"]  # "yes" is a choice


def test_a_trained_runs_workdir_or_other_settings_are_refused_and_left_as_they_were(tiny_data, tiny_lstm_run, tmp_path,
                                                                                     capsys):
  from vqajax import cli
  run = tiny_lstm_run[0]
  before = {name: open(os.path.join(run, name), "rb").read() for name in ("run.json", "metrics.jsonl")}
  config = "experiments/vqa/deeper_lstm_norm_i.py:runlocal"  # the run's own config: baselines would still replace it
  argv = ["baselines", f"--config={config}", f"--config.data.dir={tiny_data}", "--baselines", "prior"]
  assert cli.main(argv + ["--workdir", run]) == 2
  assert capsys.readouterr().err.splitlines()[-1] == (f"vqajax baselines: error: {run}: holds a trained run; the "
                                                      "baselines go into a workdir of their own")
  assert before == {name: open(os.path.join(run, name), "rb").read() for name in before}
  assert not os.path.exists(os.path.join(run, "results", "prior"))
  own = str(tmp_path / "baselines")
  assert cli.main(argv + ["--workdir", own]) == 0  # then again, as a rerun of a sweep's point does
  assert cli.main(argv + ["--workdir", own, "--baselines", "random"]) == 0
  capsys.readouterr()
  assert cli.main(argv + ["--workdir", own, "--config.seed=7"]) == 2
  assert capsys.readouterr().err.splitlines()[-1] == (f"vqajax baselines: error: {own}: holds a run with other "
                                                      "settings (seed 0 -> 7); use another --workdir")
  assert sorted(os.listdir(os.path.join(own, "results"))) == ["prior", "random"]
