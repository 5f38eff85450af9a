"""The cache of encoded annotations/questions behind `vqajax score`, and `accuracy_of`."""

import json
import logging
import os
import pickle
import random
import re
import time

import numpy as np
import pytest

from bench.reference import reference_accuracy
from vqajax.core.errors import InputError
from vqajax.vqa.accuracy import cache as score_cache
from vqajax.vqa.accuracy import inputs, score, score_cli

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


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
  directory = tmp_path_factory.mktemp("cache")
  monkeypatch.setenv("VQAJAX_CACHE", str(directory))
  return directory


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


def _write(path, obj, age=60.0):
  """Writes JSON and dates it `age` seconds back (fresh files are not cached)."""
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  _age(path, age)
  return str(path)


def _age(path, age):
  mtime_ns = time.time_ns() - int(age * 1e9)
  os.utime(path, ns=(mtime_ns, mtime_ns))


def _files(tmp_path, questions, annotations, results):
  return (
    _write(tmp_path / "q.json", {"questions": questions}),
    _write(tmp_path / "a.json", {"annotations": annotations}),
    _write(tmp_path / "r.json", results),
  )


def _entries(cache):
  return sorted(name.split("-")[0] for name in os.listdir(cache))


def _no_parsing(monkeypatch):
  def fail(path):
    raise AssertionError(f"{path} parsed despite the cache")

  monkeypatch.setattr(score, "read_questions", fail)
  monkeypatch.setattr(score, "read_annotations", fail)


def test_cached_scores_are_bit_identical(tmp_path, cache, monkeypatch):
  questions, annotations, results = _dataset()
  assert score_cache.encode_annotations(annotations).targets["gt_dup"].max() > 1
  paths = _files(tmp_path, questions, annotations, results)
  plain = score.evaluate_files(*paths, multiple_choice=True, cache=False)
  assert os.listdir(cache) == []
  cold = score.evaluate_files(*paths, multiple_choice=True)
  assert _entries(cache) == ["annotations", "questions"]
  _no_parsing(monkeypatch)
  warm = score.evaluate_files(*paths, multiple_choice=True)
  expected = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
  assert plain == cold == warm == expected
  assert json.dumps(plain) == json.dumps(warm)  # same float bits, same key order
  assert list(plain[1]) == list(warm[1]) == [a["question_id"] for a in annotations]


def _error(fn):
  with pytest.raises(InputError) as e:
    fn()
  return str(e.value)


def test_multiple_choice_errors_are_the_same_from_the_cache(tmp_path, monkeypatch):
  questions, annotations, results = _dataset(n=50)
  results[7] = dict(results[7], answer="not a choice")
  del questions[30]["multiple_choices"]
  paths = _files(tmp_path, questions, annotations, results)
  plain = _error(lambda: score.evaluate_files(*paths, multiple_choice=True, cache=False))
  score.evaluate_files(*paths)  # fills the cache: open-ended needs no choices
  _no_parsing(monkeypatch)
  assert _error(lambda: score.evaluate_files(*paths, multiple_choice=True)) == plain
  first = min(results[7]["question_id"], questions[30]["question_id"])
  assert f"question_id {first}:" in plain


def test_changed_file_invalidates_its_entry(tmp_path, cache):
  questions, annotations, results = _dataset(seed=1)
  q, a, r = _files(tmp_path, questions, annotations, results)
  before = score.evaluate_files(q, a, r)
  stat = os.stat(a)
  # Same size, other content, other mtime.
  text = (tmp_path / "a.json").read_text()
  _write(tmp_path / "a.json", text.replace('"is the"', '"IS THE"'), age=30)
  assert os.stat(a).st_size == stat.st_size
  after = score.evaluate_files(q, a, r)
  assert "IS THE" in after[0]["perQuestionType"] and after == score.evaluate_files(q, a, r, cache=False) != before
  # Other size, same mtime.
  annotations[0]["answers"] = [{"answer": results[0]["answer"]}] * 10
  _write(tmp_path / "a.json", {"annotations": annotations})
  os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert score.evaluate_files(q, a, r) == score.evaluate_files(q, a, r, cache=False)
  assert _entries(cache) == ["annotations", "questions"]  # rewritten in place


@pytest.mark.parametrize("how", ["in place", "copied over"])
def test_a_same_size_rewrite_with_its_mtime_put_back_is_not_stale(tmp_path, cache, how):
  """Issue 22.4: `cp -p` / `touch -r` put the mtime back; the ctime (or the inode) changes."""
  questions, annotations, results = _dataset(seed=3)
  q, a, r = _files(tmp_path, questions, annotations, results)
  before = score.evaluate_files(q, a, r)
  assert _entries(cache) == ["annotations", "questions"]
  old = os.stat(a)
  text = (tmp_path / "a.json").read_text().replace('"is the"', '"IS THE"')
  if how == "in place":
    (tmp_path / "a.json").write_text(text)
  else:
    (tmp_path / "copy.json").write_text(text)
    os.replace(tmp_path / "copy.json", a)
  os.utime(a, ns=(old.st_atime_ns, old.st_mtime_ns))
  assert (os.stat(a).st_size, os.stat(a).st_mtime_ns) == (old.st_size, old.st_mtime_ns)
  after = score.evaluate_files(q, a, r)
  assert after == score.evaluate_files(q, a, r, cache=False) != before


def test_recently_modified_files_are_not_cached(tmp_path, cache):
  questions, annotations, results = _dataset(n=20)
  paths = _files(tmp_path, questions, annotations, results)
  _age(paths[1], 0)
  score.evaluate_files(*paths)
  assert _entries(cache) == ["questions"]
  _age(paths[1], 10)
  score.evaluate_files(*paths)
  assert _entries(cache) == ["annotations", "questions"]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "not a pair"])
def test_unreadable_entry_is_ignored_and_rebuilt(tmp_path, cache, caplog, damage):
  questions, annotations, results = _dataset(n=60)
  paths = _files(tmp_path, questions, annotations, results)
  expected = score.evaluate_files(*paths)
  entry = score_cache.entry_path("annotations", paths[1])
  data = open(entry, "rb").read()
  if damage == "not a pair":
    with open(entry, "wb") as f:
      pickle.dump(["a", "list", "of", "words"], f)
  else:
    with open(entry, "wb") as f:
      f.write({"garbage": b"not a zip" * 100, "truncated": data[: len(data) // 2], "empty": b""}[damage])
  with caplog.at_level(logging.WARNING, logger=score_cache.__name__):
    assert score.evaluate_files(*paths) == expected
  assert "ignoring unreadable score cache entry" in caplog.text and entry in caplog.text
  caplog.clear()
  assert score.evaluate_files(*paths) == expected
  assert not caplog.text  # rebuilt: read back without complaint
  assert open(entry, "rb").read() != b""


def test_unwritable_cache_only_warns(tmp_path, monkeypatch, caplog):
  blocker = tmp_path / "not a directory"
  blocker.write_text("")
  monkeypatch.setenv("VQAJAX_CACHE", str(blocker / "cache"))
  paths = _files(tmp_path, *_dataset(n=20))
  with caplog.at_level(logging.WARNING, logger=score_cache.__name__):
    assert score.evaluate_files(*paths) == score.evaluate_files(*paths, cache=False)
  assert "cannot write score cache entry" in caplog.text


def test_cli_no_cache_and_bad_input_leave_the_cache_empty(tmp_path, cache, capsys):
  questions, annotations, results = _dataset(n=30)
  q, a, r = _files(tmp_path, questions, annotations, results)
  args = ["--questions", q, "--annotations", a, "--results", r]
  assert score_cli.main(args + ["--no-cache"]) == 0 and os.listdir(cache) == []
  plain = capsys.readouterr().out
  bad = [dict(annotations[0], answers=[])] + annotations[1:]
  _write(tmp_path / "a.json", {"annotations": bad})
  assert score_cli.main(args) == 2 and _entries(cache) == ["questions"]
  _write(tmp_path / "a.json", {"annotations": annotations}, age=20)
  capsys.readouterr()
  assert score_cli.main(args) == 0 and score_cli.main(args) == 0
  assert _entries(cache) == ["annotations", "questions"]
  assert capsys.readouterr().out == plain * 2


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
  generic = score_cache.encode_annotations(annotations)
  assert generic.targets["gt_dup"].max() > 1
  paths = _files(tmp_path, questions, annotations, results)

  def fail(*args, **kwargs):
    raise AssertionError("the generic path was taken")

  monkeypatch.setattr(inputs.official_files, "read_annotations", fail)
  monkeypatch.setattr(inputs.official_files, "read_questions", fail)
  monkeypatch.setattr(inputs, "_checked_results", fail)
  _same_encoding(inputs.read_annotations(paths[1]), generic)
  by_id = {r["question_id"]: r["answer"] for r in results}
  assert score.evaluate_files(*paths, cache=False) == reference_accuracy(annotations, by_id)


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
  _same_encoding(encoded, score_cache.encode_annotations(json.loads(open(paths[1]).read())["annotations"]))
  by_id = {r["question_id"]: r["answer"] for r in results}
  assert score.evaluate_files(*paths, cache=False) == reference_accuracy(annotations, by_id)


@pytest.mark.parametrize("records, words", [
  ([{"question_id": 1, "multiple_choices": []}], 'questions[0] (question_id=1): expected "multiple_choices" to be a'),
  ([{"question_id": 1}, {"question_id": 1}], "questions[1]: duplicate question_id 1 (first at questions[0])"),
  ([{"question_id": 2**63}], 'questions[0]: expected an integer "question_id" within 64 bits'),
])
def test_questions_outside_the_fast_path_get_the_generic_errors(tmp_path, records, words):
  path = _write(tmp_path / "q.json", {"questions": records})
  with pytest.raises(InputError, match=re.escape(f"{path}: {words}")):
    inputs.read_questions(path)
