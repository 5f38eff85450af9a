import json
import logging
import os

import numpy as np
import pytest

from experiments.vqa import deeper_lstm_norm_i
from vqajax.core import config as config_lib
from vqajax.core import official_files, text
from vqajax.features.store import write_store_blocks
from vqajax.vqa import dataset as vqa_dataset


def _load(data_dir, **changes):
  changes = {f"data.{k}": v for k, v in dict(changes, dir=data_dir).items()}
  return vqa_dataset.load(config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), changes).data)


def _train_annotations(data_dir):
  with open(os.path.join(data_dir, "v2_mscoco_train2014_annotations.json")) as f:
    return json.load(f)["annotations"]


def test_arrays_follow_the_files(tiny_data):
  data = _load(tiny_data, num_answers=20)
  annotations = _train_annotations(tiny_data)
  counts = {}
  for a in annotations:
    counts[a["multiple_choice_answer"]] = counts.get(a["multiple_choice_answer"], 0) + 1
  top = sorted(counts, key=lambda a: (-counts[a], a))[:20]
  assert data.answers.answers == top
  kept = [a for a in annotations if a["multiple_choice_answer"] in top]  # drop_unknown_answers
  np.testing.assert_array_equal(data.train["question_id"], [a["question_id"] for a in kept])
  assert [data.answers.answers[i] for i in data.train["label"]] == [a["multiple_choice_answer"] for a in kept]
  val = data.val
  assert len(val["question_id"]) == len(data.val_records)
  assert val["tokens"].shape[1] == 26 and (val["length"] <= 26).all()
  assert val["choice_index"].shape[1] == 18  # v1 multiple-choice file
  q0 = data.val_records[0][0]
  assert [data.answers.answers[i] if i >= 0 else None for i in val["choice_index"][0]] == [
      c if c in top else None for c in q0["multiple_choices"]]
  assert data.store.image_ids[val["image_row"][0]] == q0["image_id"]


def test_vocabulary_threshold_and_confidence_filter(tiny_data):
  full = _load(tiny_data, num_answers=1000, drop_unknown_answers=False)
  at5 = _load(tiny_data, num_answers=1000, drop_unknown_answers=False, vocab_min_count=5)
  counts = {}
  for q, _ in [(q["question"], None) for q in json.load(open(
      os.path.join(tiny_data, "v2_OpenEnded_mscoco_train2014_questions.json")))["questions"]]:
    for t in text.tokenize(q):
      counts[t] = counts.get(t, 0) + 1
  assert len(full.vocab) == len(counts) + 2
  assert len(at5.vocab) == sum(c >= 5 for c in counts.values()) + 2 < len(full.vocab)
  assert (at5.train["tokens"] == text.UNK).sum() > 0 and (full.train["tokens"] == text.UNK).sum() == 0
  confident = _load(tiny_data, num_answers=1000, drop_unknown_answers=False, confident_only=True)
  expected = [a["question_id"] for a in _train_annotations(tiny_data)
              if sum(x["answer_confidence"] == "yes" for x in a["answers"]) >= 5]
  assert 0 < len(expected) < len(full.train["question_id"])
  np.testing.assert_array_equal(confident.train["question_id"], expected)
  assert len(confident.val["question_id"]) == len(full.val["question_id"])  # val never filtered


def _top_words(texts, k):
  """The k most frequent words of `texts` (ties alphabetically), counted by hand."""
  counts = {}
  for t in texts:
    for w in text.tokenize(t):
      counts[w] = counts.get(w, 0) + 1
  return sorted(counts, key=lambda w: (-counts[w], w))[:k]


def test_bag_of_words_inputs_follow_the_files(tiny_data):
  data = _load(tiny_data, train_captions="captions_train2014.json", val_captions="captions_val2014.json",
               bow_words=50, caption_words=40)
  assert data.bag_sizes == {"question_bow": 50 + 30, "caption_bow": 40}
  with open(os.path.join(tiny_data, "captions_val2014.json")) as f:
    captions = json.load(f)["annotations"]
  with open(os.path.join(tiny_data, "captions_train2014.json")) as f:
    top = _top_words((c["caption"] for c in json.load(f)["annotations"]), 40)
  q, _ = data.val_records[3]
  words = [w for c in captions if c["image_id"] == q["image_id"] for w in text.tokenize(c["caption"])]
  expected = sorted(top.index(w) for w in words if w in top)
  row = data.val["caption_bow"][3]
  assert sorted(row[row >= 0]) == expected
  # the question bag: each occurrence of a top-50 training question word, by rank
  with open(os.path.join(tiny_data, "v2_OpenEnded_mscoco_train2014_questions.json")) as f:
    qtop = _top_words((question["question"] for question in json.load(f)["questions"]), 50)
  qrow = data.val["question_bow"][3]
  assert sorted(qrow[:26][qrow[:26] >= 0]) == sorted(
      qtop.index(w) for w in text.tokenize(q["question"]) if w in qtop)
  assert ((qrow[26:] == -1) | ((qrow[26:] >= 50) & (qrow[26:] < 80))).all()
  assert "caption_bow" not in _load(tiny_data).val  # no captions configured


def test_captions_missing_for_an_image_name_the_file_and_image(tiny_data, tmp_path):
  with open(os.path.join(tiny_data, "captions_val2014.json")) as f:
    captions = json.load(f)
  dropped = captions["annotations"][0]["image_id"]
  captions["annotations"] = [c for c in captions["annotations"] if c["image_id"] != dropped]
  path = tmp_path / "captions_val2014.json"
  path.write_text(json.dumps(captions))
  with pytest.raises(official_files.DataFileError, match=f"{path}: no caption for image_id {dropped}"):
    _load(tiny_data, train_captions="captions_train2014.json", val_captions=str(path))
  path.write_text(json.dumps({"annotations": [{"image_id": 1, "caption": 5}]}))
  with pytest.raises(official_files.DataFileError, match=r"annotations\[0\]: expected a string \"caption\""):
    _load(tiny_data, train_captions="captions_train2014.json", val_captions=str(path))


def test_a_question_in_two_training_files_and_an_unknown_answer_type_are_named(tiny_data, tmp_path):
  train_q, train_a = "v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json"
  with open(os.path.join(tiny_data, "v2_OpenEnded_mscoco_val2014_questions.json")) as f:
    questions = json.load(f)
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)
  taken = _train_annotations(tiny_data)[7]["question_id"]  # a training question's id, given again in record 3
  questions["questions"][3]["question_id"] = annotations["annotations"][3]["question_id"] = taken
  for name, content in (("more_q.json", questions), ("more_a.json", annotations)):
    (tmp_path / name).write_text(json.dumps(content))
  with pytest.raises(official_files.DataFileError) as error:
    _load(tiny_data, train_questions=f"{train_q},{tmp_path / 'more_q.json'}",
          train_annotations=f"{train_a},{tmp_path / 'more_a.json'}")
  assert str(error.value) == f"{tmp_path / 'more_q.json'}: question_id {taken} is also in {tiny_data}/{train_q}"

  annotations["annotations"][5]["answer_type"] = "colour"
  (tmp_path / "more_a.json").write_text(json.dumps(annotations))
  with pytest.raises(official_files.DataFileError, match=r"more_a\.json: annotations\[5\] answer_type 'colour' is not one of"):
    _load(tiny_data, val_annotations=str(tmp_path / "more_a.json"))


def test_a_confidence_filter_that_keeps_nothing_is_one_error(tiny_data, tmp_path):
  annotations = _train_annotations(tiny_data)
  for a in annotations:
    a["answers"] = [dict(x, answer_confidence="maybe") for x in a["answers"]]
  path = tmp_path / "unsure.json"
  path.write_text(json.dumps({"annotations": annotations}))
  with pytest.raises(official_files.DataFileError) as error:
    _load(tiny_data, train_annotations=str(path), confident_only=True)
  assert str(error.value) == (f"config.data.confident_only: no question of {tiny_data}/v2_OpenEnded_mscoco_train2014_"
                              "questions.json has 5 or more answers with answer_confidence 'yes'")


def test_the_question_vocabulary_is_logged_only_where_the_model_reads_it(tiny_data, tmp_path, caplog):
  """A model with its own tokenizer (ViLT, reading a pixel store) encodes its questions with it: the word
  vocabulary's size is not its."""
  config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"data.dir": tiny_data}).data
  caplog.set_level(logging.INFO, logger="absl")
  data = vqa_dataset.load(config)
  assert f"question vocabulary: {len(data.vocab)} entries (min count 1, with PAD and UNK)" in caplog.messages
  caplog.clear()
  ids = data.store.image_ids
  write_store_blocks(str(tmp_path / "pixels.h5"), ids, (8, 8, 4), np.uint8, [np.zeros((len(ids), 8, 8, 4), np.uint8)])
  with config.unlocked():
    config.features = str(tmp_path / "pixels.h5")
  vqa_dataset.load(config, text_encoder=lambda texts, shape: None)
  assert caplog.messages and not any("question vocabulary" in m for m in caplog.messages)
