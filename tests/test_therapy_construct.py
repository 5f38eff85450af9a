"""AnswerTherapy construction (data_pipeline/answertherapy/construct.py): each step on hand-built
questions with hand-computed results, the seeded 70/10/20 split, the end-to-end run on
the synthetic raw input read back by `read_therapy`, and one-line errors."""

import json
import os
import re

import numpy as np
import pytest

from data_pipeline.answertherapy import cli as construct_cli
from data_pipeline.answertherapy import construct
from data_pipeline.answertherapy import construct_raw as raw
from vqajax.answertherapy import analysis as therapy
from vqajax.answertherapy import files as therapy_files
from vqajax.core.errors import InputError
from vqajax.synthetic.answertherapy import raw as synthetic_raw

VQA, VIZWIZ = therapy_files.VQA, therapy_files.VIZWIZ


def _q(answers=("a", "b"), question="What is this?", source=VQA, key=1, image_id=1, **changes):
  return raw.Question(source=source, key=key, image_id=image_id, question=question,
                      answer_type="other", answers=tuple(answers), **changes)


def _box(x0, y0, x1, y1):
  return np.array([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], np.float64)


def _grounding(answers, several=False, width=20, height=20):
  return raw.Grounding("g.json: records[0]", several, width, height, answers)


# ---------------------------------------------------------------------------- answers

def test_unusable_answers_are_dropped_after_strip_and_lower_case():
  questions = [_q(["unanswerable", " Unsuitable", "red", "red", "unanswerable image", "UNANSWERABLE"]),
               _q(["blue"] * 3)]
  kept, removed = construct.drop_unusable_answers(questions)
  assert removed == 3
  assert [q.answers for q in kept] == [("red", "red", "unanswerable image"), ("blue",) * 3]


def test_valid_answers_need_two_annotators_by_exact_string():
  questions = [_q(["a", "b", "a", "c", "b", "b", "A", "d", "a ", "e"]),  # b x3, a x2; A, "a ", c, d, e once
               _q(["x", "y", "y", "x"]),  # a tie: first appearance first
               _q(["p", "q"])]
  kept, removed = construct.valid_answers(questions)
  assert [q.answers for q in kept] == [("b", "a"), ("x", "y"), ()]
  assert removed == 5 + 0 + 2


def test_questions_need_two_answers():
  kept, removed = construct.at_least_two_answers([_q(["a"]), _q(["a", "b"], key=2), _q([], key=3)])
  assert ([q.key for q in kept], removed) == ([2], 2)


@pytest.mark.parametrize("question,dropped", [
    ("What is on the table and the chair?", True),  # 8 words
    ("What color are the cup and plate?", True),  # 7 words
    ("Salt, pepper, and what else here?", True),  # 6 words once "pepper," is stripped
    ("AND what is this thing here?", True),  # case does not matter
    ("Is it black and white?", False),  # 5 words: not more than five
    ("What is  black and  white ?", False),  # "?" alone is no word: 5 words
    ("What is in his hand right now?", False),  # "hand" is not "and"
    ("Is this a black-and-white photo?", False),  # one word black-and-white
    ("What is the man on the left doing?", False),
])
def test_and_questions(question, dropped):
  assert construct.is_and_question(question) is dropped
  kept, removed = construct.drop_and_questions([_q(question=question), _q(key=2)])
  assert (len(kept), removed) == (2 - dropped, int(dropped))


def test_repeats_keep_the_first_of_same_source_image_and_normalised_text():
  questions = [
      _q(question="What is on the table?", key=1, image_id=5),
      _q(question="  what IS on the\ttable? ", key=2, image_id=5),  # repeat of 1
      _q(question="What is on the table?", key=3, image_id=6),  # another image
      _q(question="What is on the table ?", key=4, image_id=5),  # another text
      _q(question="What is on the table?", key="VizWiz_train_5.jpg", image_id=5, source=VIZWIZ),
      _q(question="what is on the table?", key=6, image_id=5),  # repeat of 1
  ]
  kept, removed = construct.drop_repeats(questions)
  assert ([q.key for q in kept], removed) == ([1, 3, 4, "VizWiz_train_5.jpg"], 2)


# ---------------------------------------------------------------------------- groundings

def test_groundings_are_attached_by_question_id_or_image():
  pair = (_box(0, 0, 4, 4), _box(0, 0, 4, 4))
  flagged = _grounding({"a": pair, "b": pair}, several=True)
  groundings = {(VQA, 1): _grounding({"a": pair, "b": pair, "unused": pair}),
                (VQA, 3): flagged, (VIZWIZ, "VizWiz_val_1.png"): _grounding({"a": pair, "b": pair})}
  questions = [_q(key=1), _q(key=2), _q(key=3),
               _q(key="VizWiz_val_1.png", source=VIZWIZ), _q(key=1, source=VIZWIZ)]
  kept, removed = construct.attach_groundings(questions, groundings)
  assert ([(q.source, q.key) for q in kept], removed) == ([(VQA, 1), (VQA, 3), (VIZWIZ, "VizWiz_val_1.png")], 2)
  assert kept[1].grounding is flagged
  kept, removed = construct.drop_several_questions(kept)
  assert ([q.key for q in kept], removed) == ([1, "VizWiz_val_1.png"], 1)


def test_a_valid_answer_without_groundings_is_an_error():
  groundings = {(VQA, 1): _grounding({"a": (_box(0, 0, 4, 4),) * 2})}
  with pytest.raises(InputError, match=r"^g\.json: records\[0\]: expected the two annotators' "
                     r"polygons of valid answer 'b', got answers \['a'\]$"):
    construct.attach_groundings([_q(["a", "b"])], groundings)


# Pixel areas (a pixel is in when its centre is inside): [0, 20] x [0, 20] covers 400
# pixels; [0, 20] x [0, 15] 300; [0, 20] x [0, 14.9] still 300 (row 14's centre 14.5 is
# inside; its geometric area 298 would give 0.745); [0, 20] x [0, 14.4] 280 (rows 0-13).
# [0, 7] x [0, 1] and [1, 8] x [0, 1]: 7 pixels each, 6 shared, union 8.
@pytest.mark.parametrize("pair,iou,larger", [
    ((_box(0, 0, 20, 15), _box(0, 0, 20, 20)), 300 / 400, 1),  # exactly 0.75: kept
    ((_box(0, 0, 20, 20), _box(0, 0, 20, 14.9)), 300 / 400, 0),
    ((_box(0, 0, 20, 14.4), _box(0, 0, 20, 20)), 280 / 400, 1),  # dropped
    ((_box(0, 0, 7, 1), _box(1, 0, 8, 1)), 6 / 8, 0),  # a tie: the first annotator's
    ((_box(1, 0, 8, 1), _box(0, 0, 7, 1.4)), 6 / 8, 0),
    ((_box(0, 0, 4, 4), _box(10, 10, 14, 14)), 0, 0),
])
def test_annotator_agreement_iou_and_the_larger_polygon(pair, iou, larger):
  assert construct.agreement(pair, 20, 20) == (pytest.approx(iou), larger)


def test_agreed_groundings_keep_the_larger_polygon_at_iou_at_least_0_75():
  big, three_quarters, less = _box(0, 0, 20, 20), _box(0, 0, 20, 14.9), _box(0, 0, 20, 14.4)
  g = _grounding({"a": (three_quarters, big), "b": (big, less), "c": (_box(0, 0, 7, 1), _box(1, 0, 8, 1))})
  kept, removed = construct.keep_agreed_groundings([_q(["a", "b", "c"], grounding=g)])
  assert removed == 1
  assert kept[0].answers == ("a", "c")
  assert kept[0].polygons[0] is big and kept[0].polygons[1] is g.answers["c"][0]


# ---------------------------------------------------------------------------- split

def test_vqa_questions_split_70_10_20_seeded_and_vizwiz_keeps_its_split():
  questions = [_q(key=k) for k in range(50)]
  questions[10:10] = [_q(key=f"VizWiz_val_{k}.jpg", source=VIZWIZ, split="val") for k in range(3)]
  split = construct.split_vqa(questions, seed=3)
  assert [q.key for q in split] == [q.key for q in questions]  # input order
  assert [q.split for q in split[10:13]] == ["val"] * 3
  vqa = [q for q in split if q.source == VQA]
  keys = {name: {q.key for q in vqa if q.split == name} for name in ("train", "val", "test")}
  assert [len(k) for k in keys.values()] == [35, 5, 10]
  assert set().union(*keys.values()) == set(range(50))
  assert [q.split for q in construct.split_vqa(questions, seed=3)] == [q.split for q in split]
  assert [q.split for q in construct.split_vqa(questions, seed=4)] != [q.split for q in split]


def test_floor_split_sizes():
  for n, expected in ((15, [10, 1, 4]), (9, [6, 0, 3]), (1, [0, 0, 1])):
    split = construct.split_vqa([_q(key=k) for k in range(n)], seed=0)
    assert [sum(q.split == name for q in split) for name in ("train", "val", "test")] == expected


# ---------------------------------------------------------------------------- end to end

# What synthetic_raw's scenarios remove (59 VQAv2 + 9 VizWiz questions, 10 answers each):
#   unusable: 2 x 4 (unusable) + 2 x 5 (mostly unanswerable) + 6 x 3 (VizWiz kept)
#             + 2 x 8 (VizWiz unanswerable) + 1 x 3 (VizWiz several) = 55 of 680
#   valid: the single-annotator answers: 40 questions x 3 (two valid answers)
#          + 12 x 2 (three valid) + 2 x 2 + 3 x 2 (one valid) = 154; left 141 distinct
#   < 2 valid: 2 + 3 VQAv2, 2 VizWiz = 7;  "and": 3;  repeated: 3;  not grounded: 2
#   several: 3 VQAv2 + 1 VizWiz = 4 (2 answers each)
#   agreement: 3 + 3 answers;  < 2 grounded: the 3 questions left with one answer
# Kept: 40 VQAv2 (28 / 4 / 8) and 6 VizWiz (4 train, 2 val); 9 + 2 single (equal).
EXPECTED_REPORT = [
    ["input", None, None, 68, 680],
    ["unusable answers", "annotators' answers", 55, 68, 625],
    ["valid answers", "distinct answers", 154, 68, 141],
    ["< 2 valid answers", "questions", 7, 61, 134],
    ['"and" questions', "questions", 3, 58, 128],
    ["repeated questions", "questions", 3, 55, 122],
    ["not grounded", "questions", 2, 53, 118],
    ["several questions", "questions", 4, 49, 110],
    ["annotator agreement", "answers", 6, 49, 104],
    ["< 2 grounded answers", "questions", 3, 46, 101],
]


def _construct(argv):
  """`vqajax therapy construct ARGV`'s exit status."""
  return construct_cli.main(argv)


def _run(raw_paths, out, *extra):
  return _construct(["--questions", raw_paths["questions"], "--annotations", raw_paths["annotations"],
                     "--vizwiz", raw_paths["vizwiz_train"], raw_paths["vizwiz_val"],
                     "--groundings", raw_paths["groundings"], "--out", str(out), *extra])


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
  """(raw paths, output dir, returned tables) of `build` on the synthetic raw input (seed 0)."""
  base = tmp_path_factory.mktemp("construct")
  paths = synthetic_raw.generate(str(base / "raw"), seed=0)
  text = construct.build(str(base / "out"), paths["groundings"], paths["questions"], paths["annotations"],
                         [paths["vizwiz_train"], paths["vizwiz_val"]], seed=0)
  return paths, base / "out", text


def test_end_to_end_on_the_synthetic_raw_input(synthetic):
  paths, out, printed = synthetic
  report = json.loads((out / "construction.json").read_text())
  assert [list(row.values()) for row in report] == EXPECTED_REPORT
  assert "| several questions | questions | 4 | 49 | 110 |" in printed
  assert "| VQA_val.json | 4 |" in printed and (out / "splits.md").exists()
  files = ["VQA_train.json", "VQA_val.json", "VQA_test.json", "VizWiz_train.json", "VizWiz_val.json"]
  samples = {name: therapy_files.read_therapy(str(out / name)) for name in files}
  assert [len(s) for s in samples.values()] == [28, 4, 8, 4, 2]
  vqa_ids = [s.question_id for name in files[:3] for s in samples[name]]
  assert len(set(vqa_ids)) == 40 and all(type(i) is str for i in vqa_ids)
  assert {s.source for name in files[3:] for s in samples[name]} == {VIZWIZ}
  assert all(s.image_id.startswith("VizWiz_val_") for s in samples["VizWiz_val.json"])
  grounded = therapy.analyze([s for ss in samples.values() for s in ss])
  assert all(g.grounding == g.sample.label for g in grounded)  # binary_label is the analysis' rule
  assert sum(g.grounding == "single" for g in grounded) == 11
  assert {r for g in grounded if g.grounding == "multiple" for r in g.relations} == set(therapy.RELATIONS)
  assert not [p for g in grounded for p in g.problems]
  record = json.loads((out / "VQA_train.json").read_text())[0]
  assert sorted(record) == sorted(["image_id", "question", "answers", "grounding_labels", "width", "height",
                                   "answer_type", "binary_label", "question_id"])
  assert len(record["answers"]) == len(set(record["answers"])) == len(record["grounding_labels"])


def test_the_report_is_the_same_for_every_seed_and_the_split_follows_the_seed(synthetic, tmp_path, capsys):
  paths, out, _ = synthetic
  other = synthetic_raw.generate(str(tmp_path / "raw"), seed=5)
  assert _run(other, tmp_path / "out", "--seed", "1") == 0
  report = json.loads((tmp_path / "out" / "construction.json").read_text())
  assert [list(row.values()) for row in report] == EXPECTED_REPORT
  assert _run(paths, tmp_path / "reseeded", "--seed", "1") == 0
  ids = lambda d: [r["question_id"] for r in json.loads((d / "VQA_val.json").read_text())]
  assert ids(tmp_path / "reseeded") != ids(out)
  assert "| < 2 grounded answers | questions | 3 | 46 | 101 |" in capsys.readouterr().out


# ---------------------------------------------------------------------------- errors

def _points(*xy):
  return [{"x": x, "y": y} for x, y in xy]


SQUARE = _points((0, 0), (4, 0), (4, 4), (0, 4))


def _inputs(tmp_path, groundings=None, vizwiz=None, annotations=None):
  """A one-question raw input (cat x5, dog x5) with `groundings` / `vizwiz` changes."""
  files = {
      "q.json": {"questions": [{"image_id": 7, "question": "What is it?", "question_id": 70}]},
      "a.json": annotations or {"annotations": [{"image_id": 7, "question_id": 70, "answer_type": "other",
                                                 "answers": [{"answer": a} for a in ["cat", "dog"] * 5]}]},
      "v.json": vizwiz or [{"image": "VizWiz_val_00000001.jpg", "question": "What?", "answer_type": "other",
                            "answers": [{"answer": "tea"}] * 10}],
      "g.json": groundings if groundings is not None else [
          {"question_id": 70, "several_questions": False, "width": 8, "height": 6,
           "answers": {"cat": [SQUARE, SQUARE], "dog": [SQUARE, SQUARE]}}],
  }
  for name, content in files.items():
    (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
  return ["--questions", str(tmp_path / "q.json"), "--annotations", str(tmp_path / "a.json"),
          "--vizwiz", str(tmp_path / "v.json"), "--groundings", str(tmp_path / "g.json"),
          "--out", str(tmp_path / "out")]


def _record(**changes):
  record = {"question_id": 70, "several_questions": False, "width": 8, "height": 6,
            "answers": {"cat": [SQUARE, SQUARE], "dog": [SQUARE, SQUARE]}}
  record.update(changes)
  return record


def test_a_one_question_input_runs(tmp_path, capsys):
  assert _construct(_inputs(tmp_path)) == 0
  [record] = json.loads((tmp_path / "out" / "VQA_test.json").read_text())  # floor: 0 train, 0 val
  assert record == {"image_id": "7", "question": "What is it?", "answers": ["cat", "dog"],
                    "grounding_labels": [SQUARE, SQUARE], "width": 8, "height": 6,
                    "answer_type": "other", "binary_label": "single", "question_id": "70"}
  assert json.loads((tmp_path / "out" / "VQA_train.json").read_text()) == []
  assert json.loads((tmp_path / "out" / "VizWiz_val.json").read_text()) == []  # "tea" alone


@pytest.mark.parametrize("changes,message", [
    ({"groundings": {"a": 1}}, r"g\.json: expected a JSON list of groundings records"),
    ({"groundings": [3]}, r"g\.json: records\[0\]: expected an object, got 3"),
    ({"groundings": [_record(image="x.jpg")]},
     r'g\.json: records\[0\]: expected exactly one of "question_id" \(VQAv2\) and "image" \(VizWiz\)'),
    ({"groundings": [_record(question_id="70")]}, r"g\.json: records\[0\]: expected an integer \"question_id\", got '70'"),
    ({"groundings": [_record(), _record()]},
     r"g\.json: records\[1\] \(question_id=70\): question_id appears twice \(first at .*g\.json: records\[0\] \(question_id=70\)\)"),
    ({"groundings": [_record(several_questions=0)]},
     r'records\[0\] \(question_id=70\): expected a boolean "several_questions", got 0'),
    ({"groundings": [_record(width=0)]},
     r'records\[0\] \(question_id=70\): expected "width" and "height" from 1 to 10000 pixels, got 0 x 6'),
    ({"groundings": [_record(height=200000)]}, r'expected "width" and "height" from 1 to 10000 pixels, got 8 x 200000'),
    ({"groundings": [_record(height=True)]}, r'expected a positive integer "height", got True'),
    ({"groundings": [_record(answers={"cat": [SQUARE, [{"x": 8 * (k % 2), "y": 0} for k in range(176)]]})]},
     r"records\[0\] \(question_id=70\): answers\['cat'\]\[1\]: expected an outline of at most 100 x "
     r"\(width \+ height\) = 1400 pixels .*, got 1408"),
    ({"groundings": [_record(answers={"cat": [SQUARE]})]},
     r"records\[0\] \(question_id=70\): answers\['cat'\]: expected the two annotators' polygons, got"),
    ({"groundings": [_record(answers={"cat": [SQUARE, [{"x": 1}]]})]},
     r"answers\['cat'\]\[1\]\[0\]: expected a point \{x, y\} of finite numbers, got \{'x': 1\}"),
    ({"groundings": [_record(answers={"cat": [SQUARE, {"x": 1, "y": 2}]})]},
     r"answers\['cat'\]\[1\]: expected a list of \{x, y\} points, got"),
    ({"groundings": [_record(answers={"cat": [SQUARE, SQUARE]})]},
     r"records\[0\] \(question_id=70\): expected the two annotators' polygons of valid answer 'dog', got answers \['cat'\]"),
    ({"vizwiz": [{"image": "img_1.jpg", "question": "What?", "answer_type": "other", "answers": []}]},
     r"v\.json: records\[0\]: expected an image name VizWiz_<split>_<number>\.<ext>, got 'img_1\.jpg'"),
    ({"vizwiz": [{"image": "VizWiz_val_1.jpg", "question": "What?", "answer_type": "other", "answers": []}] * 2},
     r"v\.json: records\[1\]: image VizWiz_val_1\.jpg appears twice \(first at .*v\.json: records\[0\]\)"),
    ({"vizwiz": [{"image": "VizWiz_val_1.jpg", "question": "What?", "answers": []}]},
     r'v\.json: records\[0\]: expected a string "answer_type", got none'),
    ({"vizwiz": [{"image": "VizWiz_val_1.jpg", "question": "Q", "answer_type": "other", "answers": [{"answer": 1}]}]},
     r'v\.json: records\[0\]: answers\[0\]: expected a string "answer", got 1'),
    ({"annotations": {"annotations": [{"image_id": 8, "question_id": 70, "answer_type": "other",
                                       "answers": [{"answer": "cat"}]}]}},
     r"a\.json: annotations\[0\] \(question_id=70\) has image_id 8, .*q\.json says 7"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, changes, message):
  assert _construct(_inputs(tmp_path, **changes)) == 2
  error = capsys.readouterr().err
  assert error.startswith("vqajax therapy construct: error: ") and error.count("\n") == 1
  assert re.search(message, error), error
  assert not os.path.exists(tmp_path / "out")


def test_missing_files_and_missing_sources(tmp_path, capsys):
  args = _inputs(tmp_path)
  assert _construct(args[:1] + [str(tmp_path / "nope.json")] + args[2:]) == 2
  assert "nope.json: file not found" in capsys.readouterr().err
  assert _construct(args[2:]) == 2  # annotations without questions
  assert capsys.readouterr().err == ("vqajax therapy construct: error: VQAv2 input needs both a questions and "
                                     "an annotations file\n")
  assert _construct(args[-4:]) == 2
  assert "no input questions" in capsys.readouterr().err
  for seed in ("-1", str(2**32)):  # numpy's seeds, as `data --seed` and config.seed
    assert _construct(args + ["--seed", seed]) == 2
    assert capsys.readouterr().err == (f"vqajax therapy construct: error: --seed: expected an integer from 0 to "
                                       f"4294967295, got {seed}\n")
  assert not os.path.exists(tmp_path / "out")
