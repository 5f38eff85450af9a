import json

import msgspec
import pytest

from vqajax.core import official_files
from vqajax.core.official_files import DataFileError
from vqajax.vqa import files as vqa_files


def _write(tmp_path, name, obj):
  path = tmp_path / name
  path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
  return str(path)


def _answers(*strings):
  return [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1} for i, a in enumerate(strings)]


def _annotation(qid, image_id=1, **changes):
  record = {"question_id": qid, "image_id": image_id, "question_type": "is the", "answer_type": "yes/no",
            "multiple_choice_answer": "yes", "answers": _answers(*["yes"] * 10)}
  record.update(changes)
  return record


def test_reads_official_layout_and_joins_in_annotation_order(tmp_path):
  q = _write(tmp_path, "q.json", {"task_type": "Open-Ended", "questions": [
      {"question_id": 11, "image_id": 1, "question": "Is it?"},
      {"question_id": 12, "image_id": 2, "question": "Is the cat black?"}]})
  a = _write(tmp_path, "a.json", {"annotations": [_annotation(12, 2), _annotation(11, 1)]})
  pairs = official_files.join(official_files.read_questions(q)["questions"], official_files.load_annotations(a), q, a)
  assert [(qq["question"], aa["question_id"]) for qq, aa in pairs] == [("Is the cat black?", 12), ("Is it?", 11)]


@pytest.mark.parametrize("content,message", [
    ('{"questions": [', r"q\.json: not valid JSON"),
    ("[]", r'q\.json: expected a JSON object with a non-empty "questions" list'),
    ('{"questions": [{"question_id": 1, "image_id": 2}]}', r'questions\[0\] \(question_id=1\): expected a string "question", got none'),
    ('{"questions": [{"question_id": "1", "image_id": 2, "question": "x"}]}', r"questions\[0\]: expected an integer \"question_id\", got '1'"),
    ('{"questions": [{"question_id": 1, "image_id": 2, "question": "x"}, {"question_id": 1, "image_id": 3, "question": "y"}]}',
     r"questions\[1\]: duplicate question_id 1 \(first at questions\[0\]\)"),
    ('{"questions": [{"question_id": 1, "image_id": 2, "question": "x", "multiple_choices": []}]}', r"multiple_choices"),
])
def test_malformed_questions(tmp_path, content, message):
  with pytest.raises(DataFileError, match=message):
    official_files.read_questions(_write(tmp_path, "q.json", content))


def test_missing_file(tmp_path):
  with pytest.raises(DataFileError, match="nope.json: file not found"):
    official_files.read_questions(str(tmp_path / "nope.json"))


@pytest.mark.parametrize("read", [official_files.read_annotations, official_files.load_annotations])
@pytest.mark.parametrize("records,message", [
    ([_annotation(5, answers=[])], r"annotations\[0\] \(question_id=5\): expected at least one answer"),
    ([_annotation(5, answers=[{"answer_id": 1}])], r'annotations\[0\] \(question_id=5\): answers\[0\]: expected a string "answer", got none'),
    ([{k: v for k, v in _annotation(5).items() if k != "answer_type"}], r'\(question_id=5\): expected a string "answer_type", got none'),
    ([_annotation(5), _annotation(5)], r"annotations\[1\]: duplicate question_id 5 \(first at annotations\[0\]\)"),
    ([_annotation(5, image_id=2**70)], r'annotations\[0\] \(question_id=5\): expected an integer "image_id" within 64 bits'),
    ([_annotation(5, question_type=True)], r'annotations\[0\] \(question_id=5\): expected a string "question_type", got True'),
])
def test_malformed_annotations(tmp_path, read, records, message):
  with pytest.raises(DataFileError, match=message):
    read(_write(tmp_path, "a.json", {"annotations": records}))


@pytest.mark.parametrize("content", [
    json.dumps({"info": {}, "annotations": [_annotation(1), _annotation(2, answers=_answers("no", "2", "yes"))]}),
    # read by the generic path: no confidences / ids, another key, a NaN beside the answers
    json.dumps({"annotations": [_annotation(1, answers=[{"answer": "yes"}, {"answer": "no", "answer_id": 7}])]}),
    json.dumps({"annotations": [_annotation(1, answers=[{"answer": "yes", "who": 3}], weight=float("nan"))]}),
])
def test_typed_annotations_hold_the_files_values(tmp_path, content):
  path = _write(tmp_path, "a.json", content)
  answer_keys = ("answer", "answer_confidence", "answer_id")
  expected = [{**{k: a[k] for k in official_files.Annotation.__annotations__ if k != "answers"},
               "answers": [tuple(x.get(k, "<absent>") for k in answer_keys) for x in a["answers"]]}
              for a in json.loads(content)["annotations"]]
  typed = official_files.load_annotations(path)
  assert [{**a, "answers": [tuple("<absent>" if getattr(x, k) is msgspec.UNSET else getattr(x, k) for k in answer_keys)
                            for x in a["answers"]]} for a in typed] == expected


def test_join_reports_unmatched_ids_and_image_mismatch(tmp_path):
  questions = [{"question_id": 1, "image_id": 1, "question": "x"}]
  with pytest.raises(DataFileError, match=r"a\.json: 1 annotated question ids are not in q\.json \(e\.g\. \[2\]\)"):
    official_files.join(questions, [_annotation(2)], "q.json", "a.json")
  with pytest.raises(DataFileError, match="has image_id 9, q.json says 1"):
    official_files.join(questions, [_annotation(1, 9)], "q.json", "a.json")


def test_vizwiz_records_become_vqa_style(tmp_path):
  path = _write(tmp_path, "val.json", [
      {"image": "VizWiz_val_00000012.jpg", "question": "What color is this shirt?", "answer_type": "other",
       "answerable": 1, "answers": [{"answer": "blue", "answer_confidence": "yes"}] * 6 +
                                  [{"answer": "navy", "answer_confidence": "maybe"}] * 4}])
  questions, annotations = vqa_files.read_vizwiz(path)
  assert questions["questions"] == [{"question_id": 0, "image_id": 12, "question": "What color is this shirt?"}]
  ann = annotations["annotations"][0]
  assert ann["multiple_choice_answer"] == "blue" and ann["question_type"] == "what color is"
  assert [a["answer_id"] for a in ann["answers"]] == list(range(1, 11))


def test_join_names_the_questions_without_annotation(tmp_path):
  q = _write(tmp_path, "q.json", {"questions": [{"question_id": 1, "image_id": 1, "question": "Is it?"},
                                                {"question_id": 2, "image_id": 1, "question": "Is it?"}]})
  a = _write(tmp_path, "a.json", {"annotations": [_annotation(1)]})
  with pytest.raises(DataFileError, match=r"a.json: 0 annotated question ids are not in .*q.json and 1 "
                                          r"questions have no annotation \(e.g. question_id \[2\]\)$"):
    official_files.join(official_files.read_questions(q)["questions"], official_files.load_annotations(a), q, a)


def _stdlib(path):
  """What load_json gave when it was the standard library's json (its value or message)."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (ValueError, RecursionError) as e:
    return type(e).__name__


_VALID = {  # msgspec refuses some of these: the standard library decides, with its values
  "official": '{"questions": [{"question_id": 18446744073709551615, "question": "caf\\u00e9 \\ud83d\\ude00"}]}',
  "nan and infinity": "[NaN, Infinity, -Infinity, 1e400]",
  "lone surrogate": '["\\ud800"]',
  "integer beyond 64 bits": "[" + "9" * 300 + ", -1e-400, 0.1, 1.7976931348623157e308]",
  "repeated key": '{"a": 1, "a": 2}',
  "crlf": '{\r\n"a": [1,\r\n 2]\r\n}\r\n',
}
_INVALID = {  # name: (bytes, what the standard library's message says)
  "truncated": (b'{"questions": [', "Expecting value: line 1 column 16 (char 15)"),
  "bom": (b"\xef\xbb\xbf[1]", "Unexpected UTF-8 BOM"),
  "invalid utf-8": (b'["\xff"]', "'utf-8' codec can't decode byte 0xff in position 2"),
  "control character": (b'["a\x01"]', "Invalid control character at: line 1 column 4 (char 3)"),
  "crlf positions": (b"[1,\r\n2,\r\n]", "line 3 column 1 (char 7)"),  # newlines read as open() reads them
  "nested too deeply": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
  "a 5000-digit integer": (b"[" + b"9" * 5000 + b"]", "Exceeds the limit (4300 digits)"),
  "trailing data": (b"[1] [2]", "Extra data: line 1 column 5 (char 4)"),
}


@pytest.mark.parametrize("name", _VALID)
def test_load_json_values_are_the_standard_librarys(tmp_path, name):
  path = _write(tmp_path, "x.json", _VALID[name])
  value = official_files.load_json(path)
  assert json.dumps(value) == json.dumps(_stdlib(path))  # NaN == NaN here; same ints and float bits


@pytest.mark.parametrize("name", _INVALID)
def test_load_json_errors_are_the_standard_librarys(tmp_path, name):
  content, words = _INVALID[name]
  path = tmp_path / "x.json"
  path.write_bytes(content)
  with pytest.raises(DataFileError) as e:
    official_files.load_json(str(path))
  message = str(e.value)
  assert message.startswith(f"{path}: not valid JSON (") and words in message and "\n" not in message
  if name != "nested too deeply":  # the old loader's exact line: the standard library's message
    with open(path, encoding="utf-8") as f:
      with pytest.raises(ValueError) as old:
        json.load(f)
    assert message == f"{path}: not valid JSON ({old.value})"


def test_decode_as_fits_or_says_none():
  assert official_files.decode_as(b'[{"question_id": 1, "answer": "x"}]', list[dict[str, int | str]]) is not None
  for content in (b'[{"question_id": true}]', b'[{"question_id": 1.0}]', b"[NaN]", b"[", b"[" * 5000 + b"]" * 5000):
    assert official_files.decode_as(content, list[dict[str, int]]) is None


@pytest.mark.parametrize("mc", [{"question_id": 12}, {"question_id": 12, "multiple_choices": None}])
def test_a_question_without_choices_in_the_multiple_choice_file_is_named(mc):
  """A multiple-choice file's question with no choices, or null ones (as absent), is one error."""
  questions = [{"question_id": 11}, {"question_id": 12}]
  mc_questions = {"questions": [{"question_id": 11, "multiple_choices": ["yes", "no"]}, mc]}
  with pytest.raises(DataFileError, match=r"^mc\.json: question_id 12 has no multiple_choices$"):
    vqa_files.attach_choices(questions, mc_questions, "mc.json")
  assert questions[0]["multiple_choices"] == ["yes", "no"]
