"""JSON files with one-line errors, and the official question / annotation records.

The official VQA questions and annotations files are read by both papers (VQA-AnswerTherapy
is built from VQA v2), so their readers live here; `vqa/files.py` keeps the formats only
the VQA paper reads (multiple choice, VizWiz-VQA, captions).

Real files are accepted unchanged; a malformed one raises `DataFileError` naming the
file, the record (index and question_id) and what was expected. The training data path
and `vqajax score` both validate through here. Checks go a field at a time over all
records (C-level map/set), and record by record only to name the first bad one: on 200k
annotations they cost a small fraction of parsing the JSON.

JSON is parsed by msgspec (faster than the standard library; typed, `decode_as`, more so).
The training data's annotations are decoded typed (`load_annotations`): each answer an
`Answer` in slots instead of a dict, faster and in less memory. Where msgspec refuses a file, the standard library's
`json` decides: it accepts what msgspec alone refuses (NaN, lone surrogates) with the
same values, and words every error, so values and messages are the standard library's.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import itertools
import json
import operator
import os
import stat
from typing import Any, Callable, Collection, Iterator, TypedDict

import msgspec
import numpy as np

from vqajax.core import fs, text
from vqajax.core.errors import InputError

# Fields checked by default besides `question_id` (unique integers, always checked),
# `answers` (annotations: non-empty lists of {"answer": str, ...}, always checked) and
# `multiple_choices` (questions: when present, a non-empty list of strings).
QUESTION_FIELDS = {"image_id": int, "question": str}
ANNOTATION_FIELDS = {"image_id": int, "question_type": str, "answer_type": str,
                     "multiple_choice_answer": str}
ANSWER_FIELDS = {"answer": str}  # of each of an annotation's answers

# config.data.source: the official files, or a prepared TFDS dataset (`core/tfds_records.py`)
DATA_SOURCES = ("raw", "tfds")
_INT64 = (-(2**63), 2**63 - 1)  # ids become int64 arrays
# An input file read whole (JSON): three times the largest official file (VQA v2's train annotations, 332 MB).
# A larger one (a sparse file of zeros, say) would take twice its size in memory before the parser refused it.
MAX_INPUT_BYTES = 2**30
_KIND_NAMES = {int: "an integer", str: "a string", list: "a list"}


class DataFileError(InputError):
  """A data file that does not have the official layout."""


class Answer(msgspec.Struct, gc=False, frozen=True):
  """One annotator's answer of an annotations file (`load_annotations`). Besides the
  answer, the two other official fields as the file gives them (UNSET where absent): the
  official accuracy counts answers equal in all their fields as one. Other fields, which
  no official file has, are not kept (`vqajax score` compares whole dicts as it does)."""

  answer: str
  answer_confidence: Any = msgspec.UNSET
  answer_id: Any = msgspec.UNSET


class Annotation(TypedDict):
  """An annotation record as `load_annotations` gives it: the fields `read_annotations`
  checks by default, its answers `Answer`s."""

  question_id: int
  image_id: int
  question_type: str
  answer_type: str
  multiple_choice_answer: str
  answers: list[Answer]


class _AnnotationsFile(TypedDict):
  annotations: list[Annotation]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
  """Pause the cyclic GC: JSON trees are acyclic, and with millions of live containers
  its repeated full passes would double the loading time."""
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


def check_file(path: str, max_bytes: int | None = MAX_INPUT_BYTES) -> None:
  """DataFileError unless the local input `path` is a regular file (a fifo or a device, which
  could block or never end, is refused before it is opened) of at most `max_bytes` (None: any
  size, for files a library reads in pieces, e.g. safetensors)."""
  try:
    st = os.stat(path)
  except FileNotFoundError:
    raise DataFileError(f"{path}: file not found") from None
  except OSError as e:
    raise DataFileError(f"{path}: cannot read ({e.strerror})") from None
  if not stat.S_ISREG(st.st_mode):
    raise DataFileError(f"{path}: not a regular file (a fifo, device or folder); expected a file")
  if max_bytes is not None and st.st_size > max_bytes:
    raise DataFileError(f"{path}: {st.st_size} bytes, more than the {max_bytes} expected")


def read_bytes(path: str, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
  """The bytes of the input file `path` (a local one as `check_file` allows), refused before it
  is read when larger than `max_bytes`."""
  try:
    local = not fs.is_url(path)
    if local:
      check_file(path, max_bytes)
    with fs.open_file(path, "rb") as f:
      content = f.read() if local else f.read(max_bytes + 1)  # a local file's size is known
    if len(content) > max_bytes:
      raise DataFileError(f"{path}: more than the {max_bytes} bytes expected")
    return content
  except FileNotFoundError:
    raise DataFileError(f"{path}: file not found") from None
  except OSError as e:
    raise DataFileError(f"{path}: cannot read ({e.strerror})") from None


_GENERIC = msgspec.json.Decoder()


def load_json(path: str, content: bytes | None = None) -> Any:
  """The JSON value of the file at `path` (`content`: its bytes, if already read)."""
  if content is None:
    content = read_bytes(path)
  try:
    return _GENERIC.decode(content)
  except (msgspec.DecodeError, RecursionError):
    return _stdlib_json(path, content)


def _stdlib_json(path: str, content: bytes) -> Any:
  try:  # decoded as open(path, encoding="utf-8") would: same error positions
    return json.load(io.TextIOWrapper(io.BytesIO(content), encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise DataFileError(f"{path}: not valid JSON ({e})") from None
  except RecursionError:
    raise DataFileError(f"{path}: not valid JSON (nested too deeply)") from None
  except ValueError as e:  # e.g. an integer of more than 4300 digits
    raise DataFileError(f"{path}: not valid JSON ({e})") from None


@functools.lru_cache(maxsize=None)
def _decoder(layout: Any) -> msgspec.json.Decoder:
  return msgspec.json.Decoder(layout)


def decode_as(content: bytes, layout: Any) -> Any | None:
  """`content` decoded into `layout` (msgspec types, strict: a bool is no int, a float no
  int), or None where it does not fit: the caller then validates `load_json(path,
  content)`, which reports the error. Fields `layout` does not name are skipped unconverted."""
  try:
    return _decoder(layout).decode(content)
  except (msgspec.DecodeError, RecursionError):
    return None


def fit_int64(ids: Collection[int]) -> bool:
  """The integers `ids` fit in int64."""
  return not ids or _INT64[0] <= min(ids) <= max(ids) <= _INT64[1]


def unique_int64(ids: list[int]) -> bool:
  """The integers `ids` are distinct and fit in int64 (what `question_ids` checks)."""
  return len(set(ids)) == len(ids) and fit_int64(ids)


def records(path: str, data: Any, key: str) -> list:
  """The non-empty list under `key` of a top-level object (the official files' layout)."""
  if not isinstance(data, dict) or not isinstance(data.get(key), list) or not data[key]:
    raise DataFileError(f'{path}: expected a JSON object with a non-empty "{key}" list')
  return data[key]


def column(records: list, key: str, kind: type, where: Callable[[int], str]) -> list:
  """[record[key] for record in records], checked to be objects whose `key` has the JSON
  type `kind` (exactly: a bool is no int; a string is text, `text.check_text`). `where(i)`
  names record i in errors."""
  try:
    values = list(map(operator.itemgetter(key), records))
  except (TypeError, KeyError):
    values = None
  if values is None or not set(map(type, values)) <= {kind}:
    expected = f'{_KIND_NAMES[kind]} "{key}"'
    for i, record in enumerate(records):
      if not isinstance(record, dict):
        raise DataFileError(f"{where(i)}: expected an object, got {type(record).__name__}")
      if key not in record:
        raise DataFileError(f"{where(i)}: expected {expected}, got none")
      if type(record[key]) is not kind:
        raise DataFileError(f"{where(i)}: expected {expected}, got {record[key]!r}")
  if kind is str:
    text.check_text(values, lambda i: f'{where(i)}: "{key}"')
  if kind is int and values and not _INT64[0] <= min(values) <= max(values) <= _INT64[1]:
    i = next(i for i, v in enumerate(values) if not _INT64[0] <= v <= _INT64[1])
    raise DataFileError(f'{where(i)}: expected an integer "{key}" within 64 bits, got {values[i]}')
  return values


def question_ids(path: str, what: str, records: list) -> list[int]:
  """The records' question ids, checked to be unique integers."""
  ids = column(records, "question_id", int, lambda i: f"{path}: {what}[{i}]")
  if len(set(ids)) != len(ids):
    first: dict[int, int] = {}
    for i, qid in enumerate(ids):
      if first.setdefault(qid, i) != i:
        raise DataFileError(f"{path}: {what}[{i}]: duplicate question_id {qid} "
                            f"(first at {what}[{first[qid]}])")
  return ids


def check_answers(answer_lists: list[list], where: Callable[[int], str],
                   fields: dict[str, type] = ANSWER_FIELDS) -> None:
  """Each list non-empty, of objects with `fields` of the given types."""
  counts = np.fromiter(map(len, answer_lists), np.int64, len(answer_lists))
  if not counts.all():
    raise DataFileError(f"{where(int(np.argmin(counts)))}: expected at least one answer")
  starts = np.cumsum(counts) - counts

  def where_answer(k: int) -> str:
    i = int(np.searchsorted(starts, k, side="right")) - 1
    return f"{where(i)}: answers[{k - starts[i]}]"

  answers = list(itertools.chain.from_iterable(answer_lists))
  for name, kind in fields.items():
    column(answers, name, kind, where_answer)


def _check_choices(questions: list[dict], where: Callable[[int], str]) -> None:
  """`multiple_choices` (v1 MC files), where present, is a non-empty list of strings."""
  lists = list(map(operator.methodcaller("get", "multiple_choices"), questions))
  given = [c for c in lists if c is not None]
  if not given or (set(map(type, given)) == {list} and all(given) and set(
      map(type, itertools.chain.from_iterable(given))) == {str}):
    return
  for i, c in enumerate(lists):
    if c is not None and not (isinstance(c, list) and c and all(type(s) is str for s in c)):
      raise DataFileError(
          f'{where(i)}: expected "multiple_choices" to be a non-empty list of strings, got {c!r}')


def _identified(path: str, what: str, ids: list[int]) -> Callable[[int], str]:
  return lambda i: f"{path}: {what}[{i}] (question_id={ids[i]})"


def read_questions(path: str, fields: dict[str, type] = QUESTION_FIELDS,
                   content: bytes | None = None) -> dict:
  """A questions file (the whole JSON object): a non-empty "questions" list with unique
  integer question ids, `fields` of the given types and valid `multiple_choices`."""
  data = load_json(path, content)
  questions = records(path, data, "questions")
  where = _identified(path, "questions", question_ids(path, "questions", questions))
  for name, kind in fields.items():
    column(questions, name, kind, where)
  _check_choices(questions, where)
  return data


def read_annotations(path: str, fields: dict[str, type] = ANNOTATION_FIELDS,
                     answer_fields: dict[str, type] = ANSWER_FIELDS, content: bytes | None = None) -> dict:
  """An annotations file (the whole JSON object): a non-empty "annotations" list with
  unique integer question ids, `fields` of the given types and non-empty answers with
  `answer_fields`."""
  data = load_json(path, content)
  annotations = records(path, data, "annotations")
  where = _identified(path, "annotations", question_ids(path, "annotations", annotations))
  for name, kind in fields.items():
    column(annotations, name, kind, where)
  check_answers(column(annotations, "answers", list, where), where, answer_fields)
  return data


def load_annotations(path: str) -> list[Annotation]:
  """The records of an annotations file, checked as `read_annotations` checks them by
  default, in the typed form. An official file is decoded straight into it; any other is
  read by `read_annotations`, which names its first bad record or accepts it."""
  content = read_bytes(path)
  file = decode_as(content, _AnnotationsFile)
  if file is not None and file["annotations"]:
    annotations = file["annotations"]
    if (unique_int64(list(map(operator.itemgetter("question_id"), annotations)))
        and fit_int64(list(map(operator.itemgetter("image_id"), annotations)))
        and all(map(len, map(operator.itemgetter("answers"), annotations)))):
      return annotations
  return typed_annotations(read_annotations(path, content=content)["annotations"])


def typed_annotations(annotations: list[dict]) -> list[Annotation]:
  """Annotation records checked by `read_annotations` (or built as they would be) in the
  typed form of `load_annotations`."""
  return msgspec.convert(annotations, list[Annotation])


def join(questions: list, anns: list, questions_path: str, annotations_path: str):
  """Pairs each annotation with its question (annotation-file order)."""
  by_id = {q["question_id"]: q for q in questions}
  missing = [a["question_id"] for a in anns if a["question_id"] not in by_id]
  if missing or len(by_id) != len(anns):
    annotated = {a["question_id"] for a in anns}
    unannotated = [q for q in by_id if q not in annotated]
    raise DataFileError(
        f"{annotations_path}: {len(missing)} annotated question ids are not in {questions_path}"
        + (f" (e.g. {missing[:3]})" if missing else "") + f" and {len(unannotated)} questions have no "
        "annotation" + (f" (e.g. question_id {unannotated[:3]})" if unannotated else ""))
  for i, a in enumerate(anns):
    if by_id[a["question_id"]]["image_id"] != a["image_id"]:
      raise DataFileError(
          f"{annotations_path}: annotations[{i}] (question_id={a['question_id']}) has image_id "
          f"{a['image_id']}, {questions_path} says {by_id[a['question_id']]['image_id']}")
  return [(by_id[a["question_id"]], a) for a in anns]
