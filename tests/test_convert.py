"""`vqajax convert vizwiz` (data_pipeline/convert/vizwiz.py): hand-made VizWiz-VQA records
against hand-written official files, the result read by the VQA readers and loaded into the
same arrays as the VizWiz files themselves, and bad input as one line with nothing written."""

import json
import os
import re

import numpy as np
import pytest

from experiments.vqa import deeper_lstm_norm_i
from vqajax import cli
from vqajax.core import config as config_lib
from vqajax.core import official_files
from vqajax.features.store import FeatureStore, write_store
from vqajax.vqa import dataset as vqa_dataset

SHIRT = ["navy", "blue", "blue", "navy", "black", "blue", "navy", "black", "blue", "navy"]  # navy 4, blue 4: a tie
SOUP = [("yes", "yes")] * 6 + [("no", "maybe")] * 3 + [("soup", "no")]
VAL = [
    {"image": "VizWiz_val_00000028.jpg", "question": "What color is this shirt?", "answer_type": "other",
     "answerable": 1, "answers": [{"answer": a, "answer_confidence": "yes"} for a in SHIRT]},
    {"image": "VizWiz_val_00000003.jpg", "question": "Is this a can of soup?", "answer_type": "yes/no",
     "answerable": 1, "answers": [{"answer": a, "answer_confidence": c} for a, c in SOUP]},
    {"image": "VizWiz_val_00000100.jpg", "question": "Hjkl?", "answer_type": "unanswerable", "answerable": 0,
     "answers": [{"answer": "unanswerable", "answer_confidence": "no"}] * 10},
]
TEST = [{"image": "VizWiz_test_00000007.jpg", "question": "What is this?"}]
HEADER = {"license": {"name": "Creative Commons Attribution 4.0 International License",
                      "url": "https://creativecommons.org/licenses/by/4.0/"}, "data_type": "vizwiz"}


def _info(name):
  return {"description": f"VizWiz-VQA {name} as official VQA v2 files (vqajax convert vizwiz)",
          "url": "https://vizwiz.org/tasks-and-datasets/vqa/"}


def _write(folder, name, records):
  folder.mkdir(exist_ok=True)
  (folder / name).write_text(json.dumps(records))
  return str(folder / name)


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def test_hand_made_records_give_the_hand_written_official_files(tmp_path, capsys):
  val, test = _write(tmp_path / "in", "val.json", VAL), _write(tmp_path / "in", "test.json", TEST)
  out = tmp_path / "out"
  assert cli.main(["convert", "vizwiz", val, test, "--out", str(out)]) == 0
  files = {name: out / name for name in ("v2_OpenEnded_vizwiz_val_questions.json", "v2_vizwiz_val_annotations.json",
                                         "v2_OpenEnded_vizwiz_test_questions.json")}
  assert sorted(os.listdir(out)) == sorted(files)  # the test split has no answers: questions only
  assert capsys.readouterr().out.splitlines() == [f"{val} -> {files['v2_OpenEnded_vizwiz_val_questions.json']}, "
                                                  f"{files['v2_vizwiz_val_annotations.json']}",
                                                  f"{test} -> {files['v2_OpenEnded_vizwiz_test_questions.json']}"]
  keys = [2_000_000_028, 2_000_000_003, 2_000_000_100]  # val's images: 2e9 + the number in the name
  ids = [200_000_000, 200_000_001, 200_000_002]  # val's questions: 2e8 + the position
  assert _read(files["v2_OpenEnded_vizwiz_val_questions.json"]) == {
      **HEADER, "info": _info("val.json"), "data_subtype": "val", "task_type": "Open-Ended", "questions": [
          {"image_id": k, "question": r["question"], "question_id": i} for k, i, r in zip(keys, ids, VAL)]}
  answers = lambda r: [dict(a, answer_id=j + 1) for j, a in enumerate(r["answers"])]
  assert _read(files["v2_vizwiz_val_annotations.json"]) == {
      **HEADER, "info": _info("val.json"), "data_subtype": "val", "annotations": [
          {"question_id": ids[0], "image_id": keys[0], "question_type": "what color is", "answer_type": "other",
           "multiple_choice_answer": "navy", "answers": answers(VAL[0])},  # the tie: the one given first
          {"question_id": ids[1], "image_id": keys[1], "question_type": "is this a", "answer_type": "yes/no",
           "multiple_choice_answer": "yes", "answers": answers(VAL[1])},
          {"question_id": ids[2], "image_id": keys[2], "question_type": "none of the above",
           "answer_type": "unanswerable", "multiple_choice_answer": "unanswerable", "answers": answers(VAL[2])}]}
  assert _read(files["v2_OpenEnded_vizwiz_test_questions.json"]) == {
      **HEADER, "info": _info("test.json"), "data_subtype": "test", "task_type": "Open-Ended",
      "questions": [{"image_id": 3_000_000_007, "question": "What is this?", "question_id": 300_000_000}]}
  questions = official_files.read_questions(str(files["v2_OpenEnded_vizwiz_val_questions.json"]))
  annotations = official_files.read_annotations(str(files["v2_vizwiz_val_annotations.json"]))
  pairs = official_files.join(questions["questions"], annotations["annotations"], "q", "a")
  assert [(q["question"], a["multiple_choice_answer"]) for q, a in pairs] == [
      ("What color is this shirt?", "navy"), ("Is this a can of soup?", "yes"), ("Hjkl?", "unanswerable")]


def _config(data_dir, **data):
  return config_lib.override(deeper_lstm_norm_i.get_config("runlocal"),
                             {f"data.{k}": v for k, v in dict(data, dir=data_dir, val_mc_questions="").items()})


def test_a_vqa_config_loads_the_converted_files_as_the_vizwiz_files(tiny_data, tiny_vizwiz, tmp_path):
  """The converted train / val load into the arrays the VizWiz files give (`data.format=vizwiz`),
  with one store keyed as `vqajax features` keys VizWiz images serving both splits."""
  out = tmp_path / "converted"
  assert cli.main(["convert", "vizwiz", str(tiny_vizwiz / "train.json"), str(tiny_vizwiz / "val.json"),
                   "--out", str(out)]) == 0
  coco = FeatureStore(os.path.join(tiny_data, "features", "fc7.h5"))
  features = coco.read(np.arange(len(coco.image_ids)))
  keyed = str(tmp_path / "vizwiz_fc7.h5")  # VizWiz_train_<n>.jpg -> 1e9 + n, VizWiz_val_<n>.jpg -> 2e9 + n
  write_store(keyed, np.concatenate([coco.image_ids + 1_000_000_000, coco.image_ids + 2_000_000_000]),
              np.concatenate([features, features]))
  direct = vqa_dataset.load(_config(tiny_data, format="vizwiz", train_questions=str(tiny_vizwiz / "train.json"),
                                    val_questions=str(tiny_vizwiz / "val.json")).data)
  converted = vqa_dataset.load(_config(
      str(out), features=keyed, train_questions="v2_OpenEnded_vizwiz_train_questions.json",
      train_annotations="v2_vizwiz_train_annotations.json", val_questions="v2_OpenEnded_vizwiz_val_questions.json",
      val_annotations="v2_vizwiz_val_annotations.json").data)
  assert converted.val_info == {"data_type": "vizwiz", "data_subtype": "val"}
  for split, image_base, question_base in (("train", 1_000_000_000, 100_000_000), ("val", 2_000_000_000, 200_000_000)):
    a, b = getattr(direct, split), getattr(converted, split)
    assert sorted(a) == sorted(b)
    for key in set(a) - {"question_id", "image_row"}:
      np.testing.assert_array_equal(a[key], b[key], err_msg=f"{split} {key}")
    np.testing.assert_array_equal(direct.store.read(a["image_row"]), converted.store.read(b["image_row"]))
    np.testing.assert_array_equal(b["question_id"], question_base + a["question_id"])  # a's: the position
    records = _read(tiny_vizwiz / f"{split}.json")
    rows = converted.store.rows([image_base + int(records[i]["image"][-12:-4]) for i in a["question_id"].tolist()],
                                "the expected keys")
    np.testing.assert_array_equal(b["image_row"], rows)


@pytest.mark.parametrize("records, message", [
    ([dict(VAL[0], image="photo_28.jpg")], r"val.json: records\[0\]: expected an image name "
     r"VizWiz_<train\|val\|test>_<number>.jpg, got 'photo_28.jpg'"),
    ([VAL[0], dict(VAL[1], image="VizWiz_train_00000003.jpg")], r"val.json: records\[1\]: image "
     r"'VizWiz_train_00000003.jpg' is not of split val, as records\[0\]'s is"),
    ([VAL[0], {k: v for k, v in VAL[1].items() if k != "answers"}], r"val.json: records\[1\]: expected .*\"answers\""),
    ([dict(VAL[0], answer_type="colour")], r"val.json: records\[0\] answer_type 'colour' is not one of"),
    ({"questions": []}, r"val.json: expected a non-empty JSON list of VizWiz-VQA records"),
    ([{k: v for k, v in VAL[0].items() if k != "question"}], r'val.json: records\[0\]: expected a string "question", '
     r"got none"),  # had been a KeyError traceback, with answers and without
    ([{"image": VAL[0]["image"]}], r'val.json: records\[0\]: expected a string "question", got none'),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, records, message):
  path = _write(tmp_path / "in", "val.json", records)
  other = _write(tmp_path / "in", "test.json", TEST)
  assert cli.main(["convert", "vizwiz", other, path, "--out", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("vqajax convert: error: ") and "Traceback" not in err, err
  assert re.search(message, err), err
  assert not (tmp_path / "out").exists()


def test_two_files_of_one_split_and_an_output_over_an_input_are_refused(tmp_path, capsys):
  val = _write(tmp_path / "in", "val.json", VAL)
  again = _write(tmp_path / "copy", "val.json", VAL[:1])
  assert cli.main(["convert", "vizwiz", val, again, "--out", str(tmp_path / "out")]) == 2
  assert f"{again}: holds split val, as {val} does (one file per split)" in capsys.readouterr().err
  named = _write(tmp_path / "in", "v2_OpenEnded_vizwiz_val_questions.json", VAL)  # the output's name
  assert cli.main(["convert", "vizwiz", named, "--out", str(tmp_path / "in")]) == 2
  assert f"{named}: is an input of this command" in capsys.readouterr().err
  assert _read(named) == VAL and sorted(os.listdir(tmp_path / "in")) == sorted(os.path.basename(p) for p in (named, val))
