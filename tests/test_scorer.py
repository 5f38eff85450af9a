"""Official VQA accuracy: reference loop, vectorised fast path and the vqajax score CLI."""

import json
import os
import random
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench.reference import reference_accuracy
from vqajax.core.errors import InputError
from vqajax.core.official_files import Answer
from vqajax.vqa.accuracy import score_cli
from vqajax.vqa.accuracy.kernel import (
  Interner,
  aggregate_official,
  encode_answer_table,
  encode_predictions,
  encode_targets,
  percent_per_question,
  pred_ids_from_table,
  question_accuracy,
  question_accuracy_exact,
)


def _answers(strings, ids=True, confidence="yes"):
  return [
    dict(answer=s, answer_confidence=confidence, **({"answer_id": j + 1} if ids else {})) for j, s in enumerate(strings)
  ]


def _annotation(qid, answers, question_type="what color is the", answer_type="other"):
  return {
    "question_id": qid,
    "image_id": qid,
    "question_type": question_type,
    "answer_type": answer_type,
    "answers": answers,
  }


def _fast(annotations, predictions):
  interner = Interner()
  t = encode_targets(annotations, interner, max_answers=10)
  pred = encode_predictions(predictions, t["unanimous"], interner)
  return pred, t


# (answers, prediction, accuracy worked out by hand as the mean over annotators of
#  min(1, matches among the other answers / 3))
HAND_CASES = {
  "unanimous exact": (_answers(["yes"] * 10), "yes", 1.0),
  "unanimous, prediction cased": (_answers(["yes"] * 10), "Yes", 0.0),
  "unanimous, prediction punctuated": (_answers(["yes"] * 10), "yes!", 0.0),
  "unanimous, prediction whitespace": (_answers(["yes"] * 10), " yes\n", 1.0),
  "split annotators normalise the prediction": (_answers(["yes"] * 9 + ["Yes"]), "Yes", 1.0),
  "split, yes!": (_answers(["yes"] * 9 + ["no"]), "yes!", 1.0),
  "split, yes .": (_answers(["yes ."] + ["yes"] * 9), "yes", 1.0),
  "tabs and newlines are cleaned, unanimous": (_answers(["yes\t", "\nyes"] + ["yes"] * 8), "Yes", 0.0),
  "number words": (_answers(["2", "2", "two"] + ["cat"] * 7), "2", (3 * 2 / 3 + 7) / 10),
  "articles and number words": (_answers(["two dogs"] * 5 + ["2 dogs"] * 5), "the two dogs", 1.0),
  "two of ten": (_answers(["red"] * 2 + ["blue"] * 8), "red", (2 * 1 / 3 + 8 * 2 / 3) / 10),
  "one of ten": (_answers(["red"] + ["blue"] * 9), "red", 9 * 1 / 3 / 10),
  "no match": (_answers(["red"] + ["blue"] * 9), "green", 0.0),
  "thousands comma": (_answers(["1,000"] * 5 + ["1000"] * 5), "1000", 1.0),
  "contraction": (_answers(["dont know"] * 4 + ["don't know"] * 6), "Dont know.", 1.0),
  "it's is kept": (_answers(["it's"] * 3 + ["its"] * 7), "it's", (3 * 2 / 3 + 7) / 10),
  "a dog.": (_answers(["a dog.", "dog", "the dog"] + ["cat"] * 7), "Dog", (3 * 2 / 3 + 7) / 10),
  "more than 32 periods": (_answers(["." * 33 + "x"] * 3 + ["x"] * 7), "." * 33 + "x", (3 * 2 / 3 + 7) / 10),
  "three answers": (_answers(["cat", "cat", "dog"]), "cat", (1 / 3 + 1 / 3 + 2 / 3) / 3),
  "one answer never scores": (_answers(["cat"]), "cat", 0.0),
  "four unanimous answers": (_answers(["cat"] * 4), "cat", 1.0),
  # Identical answer dicts (no answer_id) leave each other out: a "red" annotator sees no
  # other "red" at all, a "blue" one sees all three.
  "duplicate dicts": (_answers(["red"] * 3 + ["blue"] * 7, ids=False), "red", 7 / 10),
  "duplicate dicts after normalisation": (_answers(["Red", "red"] + ["blue"] * 8, ids=False), "red", 8 * 2 / 3 / 10),
  "same answers, different confidence": (
    _answers(["red"], ids=False)
    + _answers(["red"], ids=False, confidence="maybe")
    + _answers(["red"], ids=False, confidence="no")
    + _answers(["blue"] * 7),
    "red",
    (3 * 2 / 3 + 7) / 10,
  ),
  "same answer and confidence, distinct ids": (_answers(["red"] * 3 + ["blue"] * 7), "red", (3 * 2 / 3 + 7) / 10),
}


@pytest.mark.parametrize("name", HAND_CASES)
def test_hand_computed(name):
  answers, prediction, expected = HAND_CASES[name]
  annotations = [_annotation(7, answers)]
  _, per_question = reference_accuracy(annotations, {7: prediction})
  assert per_question[7] == round(100 * expected, 2)
  pred, t = _fast(annotations, [prediction])
  exact = question_accuracy_exact(pred, t["gt_ids"], t["gt_dup"], t["gt_valid"])
  assert exact[0] == pytest.approx(expected, abs=1e-12)
  assert percent_per_question(exact) == [per_question[7]]
  jitted = jax.jit(question_accuracy)(*map(jnp.asarray, (pred, t["gt_ids"], t["gt_dup"], t["gt_valid"])))
  assert float(jitted[0]) == pytest.approx(expected, abs=1e-6)


def test_encode_targets_layout():
  annotations = [_annotation(1, _answers(["Yes", "yes"])), _annotation(2, _answers(["no"] * 3))]
  interner = Interner()
  t = encode_targets(annotations, interner, max_answers=4)
  assert t["gt_valid"].tolist() == [[True, True, False, False], [True, True, True, False]]
  assert t["unanimous"].tolist() == [False, True]
  yes, no = interner("yes"), interner("no")
  assert t["gt_ids"].tolist() == [[yes, yes, -1, -1], [no, no, no, -1]]
  assert t["gt_dup"].tolist() == [[1] * 4, [1] * 4]
  with pytest.raises(InputError, match="question_id 2: has 3 answers, expected 1 to 2"):
    encode_targets(annotations, Interner(), max_answers=2)
  with pytest.raises(InputError, match="question_id 3: has 0 answers"):
    encode_targets([_annotation(3, [])], Interner())
  assert encode_targets([], Interner())["gt_ids"].shape == (0, 10)


def test_typed_answers_count_equal_answers_as_the_official_dicts_do():
  # The official loop drops, for each answer, every answer dict equal to it: equal means
  # answer, confidence and id alike (absent counts as a value of its own).
  answers = [Answer("red", "yes"), Answer("red", "yes"), Answer("red", "maybe"), Answer("red"), Answer("red", "yes", 4),
             Answer("blue", "yes", 4)]
  t = encode_targets([{"question_id": 1, "answers": answers}], Interner(), max_answers=6)
  assert t["gt_dup"].tolist() == [[2, 2, 1, 1, 1, 1]]
  assert t["gt_valid"].all() and not t["unanimous"][0]


_VARIANTS = [
  "yes",
  "Yes",
  "yes!",
  "yes .",
  "YES",
  " yes\t",
  "no",
  "No.",
  "nope",
  "2",
  "two",
  "Two",
  "2.",
  "1,000",
  "1000",
  "1 000",
  "a dog",
  "the dog.",
  "dog",
  "Dog",
  "dogs",
  "dont know",
  "don't know",
  "it's",
  "its",
  "red, white",
  "red white",
  "(red)",
  "red/white",
  "Im",
  "I'm",
  "none",
  "0",
  "ten",
  "10",
  "." * 35 + "x",
  ".x",
  "x",
  "e.g.",
  "eg",
  "3.5",
  "3 5",
  "somebody'd",
  "somebodyd",
  "",
  "!",
  "a",
  "the one",
]


def _random_question(rng, qid):
  pool = rng.sample(_VARIANTS, rng.choice([1, 2, 3, 5]))
  n = rng.choice([10] * 6 + [1, 2, 3, 5, 9])
  answers = [{"answer": rng.choice(pool), "answer_confidence": rng.choice(["yes", "maybe"])} for _ in range(n)]
  id_style = rng.random()
  for j, a in enumerate(answers):
    if id_style < 0.6:
      a["answer_id"] = j + 1
    elif id_style < 0.8:
      a["answer_id"] = rng.randrange(3)  # repeated ids: dict duplicates possible
  prediction = rng.choice(pool + _VARIANTS[:12])
  return (
    _annotation(
      qid, answers, rng.choice(["what is", "how many", "is the", "why"]), rng.choice(["yes/no", "number", "other"])
    ),
    prediction,
  )


def test_fast_path_matches_reference_on_random_questions():
  rng = random.Random(1234)
  pairs = [_random_question(rng, 10 * i + 3) for i in range(3000)]
  annotations = [a for a, _ in pairs]
  results = {a["question_id"]: p for a, p in pairs}
  ref_accuracy, ref_per_question = reference_accuracy(annotations, results)
  assert ref_accuracy["overall"] > 0

  pred, t = _fast(annotations, [p for _, p in pairs])
  exact = question_accuracy_exact(pred, t["gt_ids"], t["gt_dup"], t["gt_valid"])
  assert (
    aggregate_official(exact, [a["question_type"] for a in annotations], [a["answer_type"] for a in annotations])
    == ref_accuracy
  )
  assert percent_per_question(exact) == [ref_per_question[a["question_id"]] for a in annotations]
  assert (t["gt_dup"] > 1).any()

  arrays = (pred, t["gt_ids"], t["gt_dup"], t["gt_valid"])
  np.testing.assert_allclose(question_accuracy(*arrays, xp=np), exact, rtol=0, atol=1e-12)
  jitted = jax.jit(question_accuracy)(*map(jnp.asarray, arrays))
  np.testing.assert_allclose(np.asarray(jitted), exact, rtol=0, atol=1e-6)


def test_pred_ids_from_table_and_padding_rows():
  rng = random.Random(5)
  pairs = [_random_question(rng, i) for i in range(200)]
  annotations = [a for a, _ in pairs]
  interner = Interner()
  t = encode_targets(annotations, interner)
  raw_ids, norm_ids = encode_answer_table(_VARIANTS, interner)
  index = np.array([rng.randrange(len(_VARIANTS)) for _ in pairs])
  expected = encode_predictions([_VARIANTS[i] for i in index], t["unanimous"], interner)
  np.testing.assert_array_equal(pred_ids_from_table(index, t["unanimous"], raw_ids, norm_ids, xp=np), expected)
  on_device = jax.jit(pred_ids_from_table)(index, t["unanimous"], raw_ids, norm_ids)
  np.testing.assert_array_equal(np.asarray(on_device), expected)
  padded = question_accuracy(
    jnp.zeros(2, jnp.int32), jnp.zeros((2, 10), jnp.int32), jnp.ones((2, 10), jnp.int32), jnp.zeros((2, 10), bool)
  )
  assert np.asarray(padded).tolist() == [0.0, 0.0]


# ---------------------------------------------------------------------------- CLI


def _write(path, obj):
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def _files(tmp_path, annotations, results, questions=None):
  if questions is None:
    questions = [{"question_id": a["question_id"], "image_id": a["image_id"], "question": "?"} for a in annotations]
  return (
    _write(tmp_path / "q.json", {"questions": questions, "task_type": "Open-Ended"}),
    _write(tmp_path / "a.json", {"annotations": annotations}),
    _write(tmp_path / "r.json", results),
  )


def _dataset():
  """Accuracies 1.0 (is the), 0.6 and 0.3 (what color is the)."""
  annotations = [
    _annotation(1, _answers(["yes"] * 10), "is the", "yes/no"),
    _annotation(2, _answers(["red"] * 2 + ["blue"] * 8)),
    _annotation(3, _answers(["red"] + ["blue"] * 9)),
  ]
  results = [
    {"question_id": 3, "answer": "red"},
    {"question_id": 1, "answer": "yes"},
    {"question_id": 2, "answer": "Red"},
  ]
  return annotations, results


def _run(argv, capsys):
  code = score_cli.main(argv)
  out, err = capsys.readouterr()
  return code, out, err


def test_cli_official_layout_and_rounding(tmp_path, capsys):
  q, a, r = _files(tmp_path, *_dataset())
  out_path, per_q_path = tmp_path / "acc.json", tmp_path / "perq.json"
  code, out, err = _run(
    ["--questions", q, "--annotations", a, "--results", r, "--out", str(out_path), "--per-question", str(per_q_path)],
    capsys,
  )
  assert (code, err) == (0, "")
  expected = {
    "overall": 63.33,  # 100 * (1.0 + 0.6 + 0.3) / 3
    "perQuestionType": {"is the": 100.0, "what color is the": 45.0},
    "perAnswerType": {"yes/no": 100.0, "other": 45.0},
  }
  assert json.loads(out) == expected
  assert json.loads(out_path.read_text()) == expected
  assert json.loads(per_q_path.read_text()) == {"1": 100.0, "2": 60.0, "3": 30.0}
  assert sorted(os.listdir(tmp_path)) == ["a.json", "acc.json", "perq.json", "q.json", "r.json"]


def test_cli_rounds_ties_like_python2(tmp_path, capsys):
  # 17 of 32 questions right: 100 * 17 / 32 = 53.125 exactly; Python 2 gives 53.13.
  annotations = [_annotation(i, _answers(["cat"] * 10)) for i in range(32)]
  results = [{"question_id": i, "answer": "cat" if i < 17 else "dog"} for i in range(32)]
  q, a, r = _files(tmp_path, annotations, results)
  code, out, _ = _run(["--questions", q, "--annotations", a, "--results", r], capsys)
  assert code == 0 and json.loads(out)["overall"] == 53.13


def test_cli_multiple_choice(tmp_path, capsys):
  annotations, results = _dataset()
  choices = {1: ["yes", "no"], 2: ["Red", "blue"], 3: ["red", "blue"]}
  questions = [{"question_id": i, "image_id": i, "question": "?", "multiple_choices": c} for i, c in choices.items()]
  q, a, r = _files(tmp_path, annotations, results, questions)
  code, out, err = _run(["--questions", q, "--annotations", a, "--results", r, "--multiple-choice"], capsys)
  assert (code, err) == (0, "") and json.loads(out)["overall"] == 63.33

  choices[2] = ["red", "blue"]  # 'Red' is not a choice, even though it scores as 'red'
  questions[1]["multiple_choices"] = choices[2]
  q, a, r = _files(tmp_path, annotations, results, questions)
  code, _, err = _run(["--questions", q, "--annotations", a, "--results", r, "--multiple-choice"], capsys)
  assert code == 2 and "r.json" in err and "question_id 2" in err and "Red" in err


def _broken(annotations, results):
  """name -> (file to corrupt, corrupted object or text, words the error must contain)."""
  bad_answer = [dict(x) for x in annotations]
  bad_answer[1] = dict(bad_answer[1], answers=_answers(["red", "blue"]) + [{"answer": 5}])
  return {
    "broken json": ("a.json", '{"annotations": [', ["a.json", "JSON"]),
    "annotations not an object": ("a.json", annotations, ["a.json", '"annotations"']),
    "missing question_type": (
      "a.json",
      {"annotations": [{k: v for k, v in x.items() if k != "question_type"} for x in annotations]},
      ["a.json", "annotations[0]", "question_type"],
    ),
    "empty answers": (
      "a.json",
      {"annotations": [dict(annotations[0], answers=[])]},
      ["a.json", "question_id=1", "answer"],
    ),
    "answer not a string": (
      "a.json",
      {"annotations": bad_answer},
      ["a.json", "annotations[1]", "answers[2]", "string"],
    ),
    "duplicate annotation": (
      "a.json",
      {"annotations": annotations + annotations[:1]},
      ["a.json", "annotations[3]", "duplicate question_id 1"],
    ),
    "string question id in annotations": (
      "a.json",
      {"annotations": [dict(annotations[0], question_id="1")] + annotations[1:]},
      ["a.json", "annotations[0]", "question_id"],
    ),
    "questions disagree": (
      "q.json",
      {"questions": [{"question_id": 1}, {"question_id": 2}, {"question_id": 9}]},
      ["q.json", "9", "a.json"],
    ),
    "questions missing key": ("q.json", {"question": []}, ["q.json", '"questions"']),
    "results not a list": ("r.json", {"results": results}, ["r.json", "list"]),
    "result not an object": ("r.json", results + [[4, "x"]], ["r.json", "results[3]", "object"]),
    "result id is bool": (
      "r.json",
      [{"question_id": True, "answer": "x"}] + results,
      ["r.json", "results[0]", "integer"],
    ),
    "result answer null": (
      "r.json",
      [dict(results[0], answer=None)] + results[1:],
      ["r.json", "results[0]", "question_id=3", "answer"],
    ),
    "results missing ids": ("r.json", results[:1], ["r.json", "2 of 3", "1, 2"]),
    "results unknown ids": ("r.json", results + [{"question_id": 8, "answer": "x"}], ["r.json", "1 question ids", "8"]),
    "duplicate result": (
      "r.json",
      results + [{"question_id": 2, "answer": "x"}],
      ["r.json", "results[3]", "duplicate question_id 2", "results[2]"],
    ),
    "missing file": ("r.json", None, ["r.json", "file not found"]),
  }


@pytest.mark.parametrize("name", _broken(*_dataset()))
def test_cli_rejects_bad_input(tmp_path, capsys, name):
  annotations, results = _dataset()
  filename, content, words = _broken(annotations, results)[name]
  paths = dict(zip(["q.json", "a.json", "r.json"], _files(tmp_path, annotations, results)))
  if content is None:
    os.remove(paths[filename])
  else:
    _write(tmp_path / filename, content)
  code, out, err = _run(
    [
      "--questions",
      paths["q.json"],
      "--annotations",
      paths["a.json"],
      "--results",
      paths["r.json"],
      "--out",
      str(tmp_path / "acc.json"),
      "--per-question",
      str(tmp_path / "perq.json"),
    ],
    capsys,
  )
  assert code == 2 and out == ""
  assert err.endswith("\n") and err.count("\n") == 1, err
  for word in words:
    assert word in err, (word, err)
  assert not {"acc.json", "perq.json"} & set(os.listdir(tmp_path))
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_cli_unwritable_output(tmp_path, capsys):
  q, a, r = _files(tmp_path, *_dataset())
  code, out, err = _run(
    [
      "--questions",
      q,
      "--annotations",
      a,
      "--results",
      r,
      "--per-question",
      str(tmp_path / "perq.json"),
      "--out",
      str(tmp_path / "missing" / "acc.json"),
    ],
    capsys,
  )
  assert code == 2 and out == "" and err.count("\n") == 1 and "acc.json" in err
  assert sorted(os.listdir(tmp_path)) == ["a.json", "q.json", "r.json"]


def test_cli_as_module(tmp_path):
  q, a, r = _files(tmp_path, *_dataset())
  proc = subprocess.run(
    [sys.executable, "-m", "vqajax", "score", "--questions", q, "--annotations", a, "--results", r],
    capture_output=True,
    text=True,
    cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  )
  assert proc.returncode == 0, proc.stderr
  assert json.loads(proc.stdout)["overall"] == 63.33
