"""Human agreement (Table I) and the answer figures (Fig. 9, 10): hand-computed cases."""

import csv
import json
import os
from fractions import Fraction

import pytest

from vqajax.core.errors import InputError
from vqajax.vqa import answers, humans
from vqajax.vqa.accuracy.normalize import normalize


def _ann(qid, answer_list, atype="other", qtype="what", mc=None):
  return {"question_id": qid, "question_type": qtype, "answer_type": atype,
          "multiple_choice_answer": mc if mc is not None else answer_list[0],
          "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1}
                      for i, a in enumerate(answer_list)]}


def _agreement(answer_list):
  return humans.human_agreement([_ann(1, answer_list)])["perQuestion"][1]


def test_unanimous_answers_agree_fully():
  # Every annotator has 9 matching others: min(9/3, 1) = 1 -> 100. Newlines, tabs and
  # surrounding spaces are cleaned before comparing, so these are unanimous too.
  assert _agreement(["yes"] * 10) == 100.0
  assert _agreement(["yes"] * 7 + ["yes\n", " yes", "\tyes "]) == 100.0


@pytest.mark.parametrize("answer_list, expected", [
    (["yes"] * 4 + ["no"] * 6, 100.0),  # yes: 3 others -> 1; no: 5 others -> 1
    (["cat"] * 3 + ["dog"] * 7, 90.0),  # cat: 2/3 each (x3 = 2); dog: 1 (x7 = 7) -> 9/10
    (["cat"] * 2 + ["dog"] * 8, 86.67),  # cat: 1/3 each (x2 = 2/3); dog: 8 -> 8.667/10
    (["cat"] + ["dog"] * 9, 90.0),  # cat: 0 others; dog: 1 (x9) -> 9/10
    ([w for w in "abcde" for _ in range(2)], 33.33),  # five pairs: everyone 1/3
    ([f"w{i}" for i in range(10)], 0.0),  # nobody matches anybody
    (["yes", "yes"], 33.33),  # two annotators: each has one match -> 1/3
])
def test_split_answers(answer_list, expected):
  assert _agreement(answer_list) == expected


def test_answers_are_normalised_when_they_differ():
  # All normalise to one string, so every annotator matches 9 others -> 100.
  assert _agreement(["two"] + ["2"] * 9) == 100.0  # unnormalised: "two" scores 0 -> 90
  assert _agreement(["The dog", "dog."] + ["dog"] * 8) == 100.0
  assert _agreement(["Yes"] + ["yes"] * 9) == 100.0
  assert _agreement(["dogs"] + ["dog"] * 9) == 90.0  # no stemming: "dogs" scores 0


def test_normalisation_only_when_answers_disagree(monkeypatch):
  calls = []
  monkeypatch.setattr(humans, "normalize", lambda s: calls.append(s) or normalize(s))
  assert _agreement(["The Dog"] * 9 + ["The Dog\n"]) == 100.0  # one answer after cleaning
  assert calls == []
  assert _agreement(["The Dog"] * 9 + ["dog"]) == 100.0
  assert len(calls) == 10


def test_groups_by_answer_type_and_question_type():
  anns = [_ann(1, ["yes"] * 10, "yes/no", "is the"),  # 1
          _ann(2, ["no"] + ["yes"] * 9, "yes/no", "what color"),  # 0.9
          _ann(3, ["cat"] * 2 + ["dog"] * 8, "other", "what color")]  # 0.8667
  out = humans.human_agreement(anns)
  assert out["overall"] == 92.22  # (1 + 0.9 + 0.86667) / 3 = 0.92222
  assert out["perAnswerType"] == {"yes/no": 95.0, "other": 86.67}
  assert out["perQuestionType"] == {"is the": 100.0, "what color": 88.33}  # 1.76667 / 2
  assert out["perQuestion"] == {1: 100.0, 2: 90.0, 3: 86.67}


def test_rounds_ties_away_from_zero_like_python2():
  # 32 answers, 5 agreeing "cat" (4 others each -> 1), 27 unique (0): 5/32 = 0.15625
  # exactly, 15.625 percent: Python 2 rounds the tie up; Python 3 would give 15.62.
  out = humans.human_agreement([_ann(1, ["cat"] * 5 + [f"w{i}" for i in range(27)])])
  assert round(15.625, 2) == 15.62
  assert out["perQuestion"][1] == 15.63 and out["overall"] == 15.63


@pytest.mark.parametrize("answer_list", [["yes"], []])
def test_fewer_than_two_answers_is_an_input_error(answer_list):
  with pytest.raises(InputError, match="question_id=7"):
    humans.human_agreement([_ann(1, ["yes"] * 10), _ann(7, answer_list, mc="yes")])


def test_matches_a_straightforward_computation_on_synthetic(tiny_data):
  path = os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")
  with open(path) as f:
    anns = json.load(f)["annotations"]
  exact = {}
  for ann in anns:
    ans = [a["answer"].replace("\n", " ").replace("\t", " ").strip() for a in ann["answers"]]
    if len(set(ans)) > 1:
      ans = [normalize(a) for a in ans]
    scores = [min(Fraction(sum(ans[i] == ans[j] for i in range(len(ans)) if i != j), 3), 1)
              for j in range(len(ans))]
    exact[ann["question_id"]] = 100 * sum(scores) / len(scores)
  out = humans.human_agreement(anns)
  overall = sum(exact.values()) / len(exact)
  assert 50 < overall < 100  # the synthetic annotators disagree sometimes
  assert abs(out["overall"] - float(overall)) <= 0.005 + 1e-9
  assert out["perQuestion"].keys() == exact.keys()
  assert all(abs(out["perQuestion"][q] - float(v)) <= 0.005 + 1e-9 for q, v in exact.items())


_FIG9_ANNS = [_ann(qid, ["x"] * 10, mc=mc) for qid, mc in
              [(1, "yes"), (2, "yes"), (3, "no"), (4, "2"), (5, "blue"), (6, "no"), (7, "red")]]


def test_correct_given_answer_orders_by_frequency_then_alphabet():
  per_question = {"1": 100.0, "2": 30.0, 3: 0.0, 4: 60.0, "5": 100.0, 6: 90.0, 7: 33.33}
  # no: (0 + 90) / 2; yes: (100 + 30) / 2; then the 1-question answers "2" < "blue" < "red".
  assert answers.correct_given_answer(_FIG9_ANNS, per_question, top=4) == [
      {"answer": "no", "questions": 2, "accuracy": 45.0},
      {"answer": "yes", "questions": 2, "accuracy": 65.0},
      {"answer": "2", "questions": 1, "accuracy": 60.0},
      {"answer": "blue", "questions": 1, "accuracy": 100.0}]
  assert len(answers.correct_given_answer(_FIG9_ANNS, per_question)) == 5


def test_correct_given_answer_counts_evaluated_questions_and_rounds():
  # Only questions 1, 2 (yes) and 3 (no) were evaluated: yes (100 + 0) / 2 = 50.
  assert answers.correct_given_answer(_FIG9_ANNS, {1: 100.0, 2: 0.0, 3: 0.0}) == [
      {"answer": "yes", "questions": 2, "accuracy": 50.0},
      {"answer": "no", "questions": 1, "accuracy": 0.0}]
  anns = [_ann(q, ["x"] * 10, mc="yes") for q in (1, 2, 3)]
  rows = answers.correct_given_answer(anns, {1: 100.0, 2: 0.0, 3: 0.0})
  assert rows[0]["accuracy"] == 33.33  # 100 / 3
  with pytest.raises(InputError, match="question_id=99"):
    answers.correct_given_answer(_FIG9_ANNS, {99: 100.0})


def test_answer_given_correct_shares_of_total_accuracy():
  results = {1: "yes", "2": "yes", 3: "no", 4: "2", 5: "blue"}
  per_question = {1: 100.0, 2: 60.0, "3": 40.0, 4: 0.0, 5: 0.0}
  # Total 200: yes earned 160 -> 80%, no 40 -> 20%; ties at 1: "2" < "blue" < "no".
  assert answers.answer_given_correct(results, per_question, top=3) == [
      {"answer": "yes", "predicted": 2, "share": 80.0},
      {"answer": "2", "predicted": 1, "share": 0.0},
      {"answer": "blue", "predicted": 1, "share": 0.0}]
  rows = answers.answer_given_correct({1: "a", 2: "b", 3: "c"}, {1: 50.0, 2: 50.0, 3: 50.0})
  assert [r["share"] for r in rows] == [33.33] * 3
  with pytest.raises(InputError, match="question_id=6"):
    answers.answer_given_correct(results, {6: 100.0})


def test_answer_given_correct_zero_total():
  rows = answers.answer_given_correct({1: "a", 2: "a", 3: "b"}, {1: 0, 2: 0, 3: 0})
  assert rows == [{"answer": "a", "predicted": 2, "share": 0.0},
                  {"answer": "b", "predicted": 1, "share": 0.0}]


def _read_csv(path):
  with open(path, newline="") as f:
    return list(csv.reader(f))


@pytest.mark.parametrize("n", [0, 3, 60])
def test_write_figures(tmp_path, n):
  import matplotlib.image  # here, not at collection: every worker collects every module
  fig9 = [{"answer": f"a, {i}", "questions": n - i, "accuracy": 100.0 * i / max(n, 1)}
          for i in range(n)]
  fig10 = [{"answer": f"p{i}", "predicted": n - i, "share": 1.5 * i} for i in range(n)]
  out = str(tmp_path / "new" / "dir")
  paths = answers.write_figures(out, "run", fig9, fig10)
  names = ["run_fig9_correct_given_answer.png", "run_fig9_correct_given_answer.csv",
           "run_fig10_answer_given_correct.png", "run_fig10_answer_given_correct.csv"]
  assert paths == [os.path.join(out, name) for name in names]
  assert sorted(os.listdir(out)) == sorted(names)  # no temp files left behind
  for png in paths[0::2]:
    with open(png, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    assert image.shape[0] >= 300 and image.shape[1] >= 500
  for path, rows, columns, kinds in [(paths[1], fig9, answers.FIG9_COLUMNS, (str, int, float)),
                                     (paths[3], fig10, answers.FIG10_COLUMNS, (str, int, float))]:
    header, *body = _read_csv(path)
    assert tuple(header) == columns
    assert [dict(zip(header, (k(v) for k, v in zip(kinds, r)))) for r in body] == rows
