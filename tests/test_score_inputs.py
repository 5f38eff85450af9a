"""How `vqajax score` reads the annotations and questions files (the official layout's fast path,
any other through the generic readers, the same encoding either way), and `accuracy_of`."""

import json
import random
import re

import numpy as np
import pytest

from bench.reference import reference_accuracy
from vqajax.core.errors import InputError
from vqajax.vqa.accuracy import inputs, score
from vqajax.vqa.accuracy.encoded import encode_annotations

_VARIANTS = [
  "red",
  "Red",
  "red.",
  " red\n",
  "blue",
  "two",
  "2",
  "a dog",
  "dog",
  "yes",
  "Yes!",
  "dont",
  "don't",
  "its",
  "it's",
  "1,000",
  "1000",
]


def _dataset(seed=0, n=400):
  """Questions (with multiple_choices), annotations and results: split and unanimous
  answers, 1, 3 or 10 answers, answer dicts with and without answer_id (duplicates)."""
  rng = random.Random(seed)
  questions, annotations, results = [], [], []
  for i in range(n):
    qid = 7 * i + 1
    pool = rng.sample(_VARIANTS, rng.randint(1, 4))
    with_ids = rng.random() < 0.6
    answers = [
      {"answer": rng.choice(pool), "answer_confidence": "yes", **({"answer_id": j + 1} if with_ids else {})}
      for j in range(rng.choice([10, 10, 10, 3, 1]))
    ]
    choices = rng.sample(_VARIANTS, 6)
    questions.append({"question_id": qid, "image_id": i, "question": "?", "multiple_choices": choices})
    annotations.append(
      {
        "question_id": qid,
        "image_id": i,
        "question_type": rng.choice(["what is", "is the", "how many"]),
        "answer_type": rng.choice(["yes/no", "number", "other"]),
        "answers": answers,
      }
    )
    results.append({"question_id": qid, "answer": rng.choice(choices)})
  rng.shuffle(results)
  return questions, annotations, results


def _write(path, obj):
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def _files(tmp_path, questions, annotations, results):
  return (
    _write(tmp_path / "q.json", {"questions": questions}),
    _write(tmp_path / "a.json", {"annotations": annotations}),
    _write(tmp_path / "r.json", results),
  )


def test_accuracy_of_in_memory_records():
  _, annotations, results = _dataset(seed=3, n=200)
  by_id = {r["question_id"]: r["answer"] for r in results}
  assert score.accuracy_of(annotations, by_id) == reference_accuracy(annotations, by_id)
  assert score.accuracy_of(annotations, {**by_id, -5: "ignored"}) == score.accuracy_of(annotations, by_id)
  missing = annotations[3]["question_id"]
  del by_id[missing]
  with pytest.raises(InputError, match=f"no result for 1 of 200 .*: {missing}$"):
    score.accuracy_of(annotations, by_id)


def _official_dataset(seed=0, n=300):
  """Annotations in the official layout (answer, answer_confidence, answer_id and nothing
  else), with repeated answer dicts (same answer_id and confidence), equal answers of other
  confidences and answer_ids in any order."""
  rng = random.Random(seed)
  _, annotations, results = _dataset(seed, n)
  for a in annotations:
    a["answers"] = [
      {"answer": x["answer"], "answer_confidence": rng.choice(["yes", "maybe", "no"]), "answer_id": rng.choice([j + 1, 1])}
      for j, x in enumerate(a["answers"])
    ]
  questions = [{"question_id": a["question_id"], "image_id": 0, "question": "?"} for a in annotations]
  return questions, annotations, results


def _same_encoding(a, b):
  assert (a.question_ids, a.strings) == (b.question_ids, b.strings)
  for x, y in ((a.question_types, b.question_types), (a.answer_types, b.answer_types)):
    assert x.names == y.names and np.array_equal(x.codes, y.codes)
  assert a.targets.keys() == b.targets.keys()
  for k in a.targets:
    assert np.array_equal(a.targets[k], b.targets[k]) and a.targets[k].dtype == b.targets[k].dtype, k


def test_official_layout_takes_the_fast_path_with_the_same_encoding(tmp_path, monkeypatch):
  questions, annotations, results = _official_dataset()
  generic = encode_annotations(annotations)
  assert generic.targets["gt_dup"].max() > 1
  paths = _files(tmp_path, questions, annotations, results)

  def fail(*args, **kwargs):
    raise AssertionError("the generic path was taken")

  monkeypatch.setattr(inputs.official_files, "read_annotations", fail)
  monkeypatch.setattr(inputs.official_files, "read_questions", fail)
  monkeypatch.setattr(inputs, "checked_results", fail)
  _same_encoding(inputs.read_annotations(paths[1]), generic)
  by_id = {r["question_id"]: r["answer"] for r in results}
  assert score.evaluate_files(*paths) == reference_accuracy(annotations, by_id)


def _outside_the_layout(annotations):
  """name -> annotations the fast path does not take (valid all the same)."""
  def changed(i, **answer):
    out = [dict(a, answers=[dict(x) for x in a["answers"]]) for a in annotations]
    out[i]["answers"][0].update(answer)
    return out

  return {
    "another key": changed(5, extra=1),
    "another confidence": changed(6, answer_confidence="unsure"),
    "no answer_id": [dict(a, answers=[{"answer": x["answer"]} for x in a["answers"]]) for a in annotations],
    "answer_id a string": changed(7, answer_id="7"),
    "answer_id beyond 64 bits": changed(8, answer_id=2**70),
    "NaN beside the answers": [dict(annotations[0], image_id=float("nan"))] + annotations[1:],
  }


@pytest.mark.parametrize("name", _outside_the_layout(_official_dataset(n=30)[1]))
def test_other_layouts_take_the_generic_path_with_the_same_numbers(tmp_path, name, monkeypatch):
  questions, annotations, results = _official_dataset(n=30)
  annotations = _outside_the_layout(annotations)[name]
  paths = _files(tmp_path, questions, annotations, results)
  generic_reads = []
  read = inputs.official_files.read_annotations
  monkeypatch.setattr(inputs.official_files, "read_annotations", lambda *a, **k: generic_reads.append(1) or read(*a, **k))
  encoded = inputs.read_annotations(paths[1])
  assert generic_reads == [1]
  _same_encoding(encoded, encode_annotations(json.loads(open(paths[1]).read())["annotations"]))
  by_id = {r["question_id"]: r["answer"] for r in results}
  assert score.evaluate_files(*paths) == reference_accuracy(annotations, by_id)


@pytest.mark.parametrize("records, words", [
  ([{"question_id": 1, "multiple_choices": []}], 'questions[0] (question_id=1): expected "multiple_choices" to be a'),
  ([{"question_id": 1}, {"question_id": 1}], "questions[1]: duplicate question_id 1 (first at questions[0])"),
  ([{"question_id": 2**63}], 'questions[0]: expected an integer "question_id" within 64 bits'),
])
def test_questions_outside_the_fast_path_get_the_generic_errors(tmp_path, records, words):
  path = _write(tmp_path / "q.json", {"questions": records})
  with pytest.raises(InputError, match=re.escape(f"{path}: {words}")):
    inputs.read_questions(path)


def test_a_multiple_choice_error_names_the_first_question_it_finds(tmp_path):
  questions, annotations, results = _dataset(n=50)
  results[7] = dict(results[7], answer="not a choice")
  del questions[30]["multiple_choices"]
  paths = _files(tmp_path, questions, annotations, results)
  score.evaluate_files(*paths)  # open-ended needs no choices
  with pytest.raises(InputError) as e:
    score.evaluate_files(*paths, multiple_choice=True)
  assert f"question_id {min(results[7]['question_id'], questions[30]['question_id'])}:" in str(e.value)
