"""What `vqajax score` needs of the annotations and questions files, and its disk cache.

Reading an official annotations file costs over a second (155 MiB for the 200k questions
of bench/bench_score.py: decoding, checking and encoding 2M answers), while its encoding
(`EncodedAnnotations`: id arrays, question and answer types, the interned strings that
predictions are matched against) is a tenth of its size and loads in milliseconds.
Scoring many results files against one val set therefore keeps the encoding on disk:

    $VQAJAX_CACHE/  (default $XDG_CACHE_HOME/vqajax/score, i.e. ~/.cache/vqajax/score)
        annotations-<hash of the absolute path>.npz
        questions-<hash of the absolute path>.npz

An entry is used only if its stored key equals the file's current key: format version,
absolute path, device, inode, size, mtime_ns, ctime_ns and a fingerprint of the code that
validates and encodes the file (`official_files` and this folder: a fix to the
normalisation never meets stale ids). The mtime alone can be put back (`cp -p`, `touch -r`
after a same-size rewrite); the ctime cannot without changing the clock, and a copy
renamed into place is another inode. The key costs the one `stat` the cache already made
(~6 us); a content digest would cost a pass over the file, measured 0.29 s (sha256) for the
155 MiB of bench_score's annotations, against milliseconds to load the cached encoding. A changed file, or a newer version of the code, rewrites the entry in place.
Entries are written atomically and only from files that passed validation; one that
cannot be read is logged, ignored and rebuilt. As in git's "racy clean" rule, a file
modified less than `RACY_SECONDS` before it is read is not cached: a same-size rewrite
within the file system's timestamp granularity could still leave its mtime unchanged.
Cached or not, the numbers are bit-identical: the same arrays, and an interner rebuilt
with the same ids.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import itertools
import json
import logging
import operator
import os
import time
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np

from vqajax.core import files, official_files
from vqajax.core.errors import InputError
from vqajax.core.text import unique_codes
from vqajax.vqa.accuracy.kernel import Interner, Labels, encode_answers, encode_targets, labels

FORMAT_VERSION = 2  # 2: the key holds device, inode and ctime
RACY_SECONDS = 2.0  # coarsest common mtime granularity (FAT); ext4 and tmpfs are finer

logger = logging.getLogger(__name__)

T = TypeVar("T", "EncodedAnnotations", "QuestionInfo")


def _blob(obj: Any) -> np.ndarray:
  return np.frombuffer(json.dumps(obj).encode("utf-8"), np.uint8)


def _unblob(array: np.ndarray) -> Any:
  return json.loads(array.tobytes())


@dataclasses.dataclass
class EncodedAnnotations:
  """Annotation records as the scorer uses them, in file order."""

  question_ids: list[int]
  targets: dict[str, np.ndarray]  # `encode_targets`: gt_ids, gt_dup, gt_valid, unanimous
  question_types: Labels
  answer_types: Labels
  strings: list[str]  # the interner's strings, in id order

  def interner(self) -> Interner:
    """An Interner with exactly the ids the targets were encoded with."""
    return Interner.of(self.strings)

  def to_arrays(self) -> dict[str, np.ndarray]:
    t = self.targets
    dup_index = np.flatnonzero(t["gt_dup"] != 1)
    return {
      "question_ids": np.array(self.question_ids, np.int64),
      "counts": t["gt_valid"].sum(axis=1),
      "gt_ids": t["gt_ids"][t["gt_valid"]],
      "max_answers": np.array(t["gt_valid"].shape[1]),
      "dup_index": dup_index,
      "dup_value": t["gt_dup"].ravel()[dup_index],
      "unanimous": t["unanimous"],
      "question_type_codes": self.question_types.codes,
      "answer_type_codes": self.answer_types.codes,
      "tables": _blob(
        {"strings": self.strings, "question_types": self.question_types.names, "answer_types": self.answer_types.names}
      ),
    }

  @classmethod
  def from_arrays(cls, a: dict[str, np.ndarray]) -> EncodedAnnotations:
    tables = _unblob(a["tables"])
    counts, n = a["counts"], len(a["question_ids"])
    gt_valid = np.arange(int(a["max_answers"])) < counts[:, None]
    gt_ids = np.full(gt_valid.shape, -1, np.int32)
    gt_ids[gt_valid] = a["gt_ids"]
    gt_dup = np.ones(gt_valid.shape, np.int32)
    gt_dup.ravel()[a["dup_index"]] = a["dup_value"]
    question_types = Labels(tables["question_types"], a["question_type_codes"])
    answer_types = Labels(tables["answer_types"], a["answer_type_codes"])
    shapes_ok = len(counts) == len(a["unanimous"]) == len(question_types.codes) == len(answer_types.codes) == n
    codes_ok = all(_codes_ok(c, names) for names, c in (question_types, answer_types, (tables["strings"], a["gt_ids"])))
    if not (shapes_ok and codes_ok):
      raise ValueError("inconsistent arrays")
    return cls(
      question_ids=a["question_ids"].tolist(),
      targets={"gt_ids": gt_ids, "gt_dup": gt_dup, "gt_valid": gt_valid, "unanimous": a["unanimous"].astype(bool)},
      question_types=question_types,
      answer_types=answer_types,
      strings=tables["strings"],
    )


def _codes_ok(codes: np.ndarray, names: Sequence[Any]) -> bool:
  return bool((0 <= codes).all() and (codes < len(names)).all())


def encode_annotations(annotations: Sequence[dict[str, Any]]) -> EncodedAnnotations:
  """Encodes annotation records (with `question_id`, `question_type`, `answer_type` and
  a non-empty `answers` list of {"answer": str, ...} each; not re-validated here)."""
  interner = Interner()
  targets = encode_targets(
    annotations, interner, max_answers=max(map(len, map(operator.itemgetter("answers"), annotations)))
  )
  return EncodedAnnotations(
    question_ids=list(map(operator.itemgetter("question_id"), annotations)),
    targets=targets,
    question_types=labels(map(operator.itemgetter("question_type"), annotations)),
    answer_types=labels(map(operator.itemgetter("answer_type"), annotations)),
    strings=interner.strings(),
  )


def encode_answer_columns(
  question_ids: list[int],
  question_types: Labels,
  answer_types: Labels,
  counts: np.ndarray,
  answers: Iterable[str],
  answer_ids: np.ndarray | None,
  rest: Callable[[int], list],
) -> EncodedAnnotations:
  """`encode_annotations` of validated columns (`kernel.encode_answers` says which)."""
  interner = Interner()
  targets = encode_answers(counts, answers, answer_ids, rest, interner, int(counts.max()))
  return EncodedAnnotations(question_ids, targets, question_types, answer_types, interner.strings())


@dataclasses.dataclass
class QuestionInfo:
  """Question ids in file order and the `multiple_choices` of each question."""

  question_ids: list[int]
  has_choices: np.ndarray  # [N] bool: the question has "multiple_choices"
  choice_counts: np.ndarray  # [N] int64: its length (0 where has_choices is False)
  choice_codes: np.ndarray  # [sum(choice_counts)] int32: indices into `choices`
  choices: list[str]  # distinct choice strings

  def to_arrays(self) -> dict[str, np.ndarray]:
    return {
      "question_ids": np.array(self.question_ids, np.int64),
      "has_choices": self.has_choices,
      "choice_counts": self.choice_counts,
      "choice_codes": self.choice_codes,
      "tables": _blob(self.choices),
    }

  @classmethod
  def from_arrays(cls, a: dict[str, np.ndarray]) -> QuestionInfo:
    choices = _unblob(a["tables"])
    n, codes = len(a["question_ids"]), a["choice_codes"]
    if not (
      len(a["has_choices"]) == len(a["choice_counts"]) == n
      and a["choice_counts"].sum() == len(codes)
      and (0 <= codes).all()
      and (codes < len(choices)).all()
    ):
      raise ValueError("inconsistent arrays")
    return cls(
      question_ids=a["question_ids"].tolist(),
      has_choices=a["has_choices"].astype(bool),
      choice_counts=a["choice_counts"],
      choice_codes=codes,
      choices=choices,
    )


def question_info(question_ids: list[int], choice_lists: Sequence[list[str] | None]) -> QuestionInfo:
  """QuestionInfo of validated questions: unique integer ids, and each question's
  `multiple_choices` (a non-empty list of strings) or None."""
  has = np.fromiter(map(operator.is_not, choice_lists, itertools.repeat(None)), bool, len(choice_lists))
  kept = [c or [] for c in choice_lists] if has.any() else []
  choices, codes = unique_codes(itertools.chain.from_iterable(kept), np.int32)
  return QuestionInfo(
    question_ids=question_ids,
    has_choices=has,
    choice_counts=np.fromiter(map(len, kept), np.int64, len(kept)) if kept else np.zeros(len(has), np.int64),
    choice_codes=codes,
    choices=choices,
  )


# ---------------------------------------------------------------------------- cache


def cache_dir() -> str:
  if os.environ.get("VQAJAX_CACHE"):
    return os.environ["VQAJAX_CACHE"]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "vqajax", "score")


@functools.lru_cache(maxsize=None)
def _code_fingerprint() -> str:
  digest = hashlib.sha256()
  here = os.path.dirname(os.path.abspath(__file__))  # what validates and encodes: this folder too
  for path in [official_files.__file__] + sorted(glob.glob(os.path.join(here, "*.py"))):
    with open(path, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def entry_path(kind: str, path: str) -> str:
  """Where the cache entry of `kind` ('annotations' or 'questions') for `path` lives."""
  name = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()
  return os.path.join(cache_dir(), f"{kind}-{name[:32]}.npz")


def _key(kind: str, path: str, stat: os.stat_result) -> dict[str, Any]:
  return {
    "version": FORMAT_VERSION,
    "kind": kind,
    "path": os.path.abspath(path),
    "device": stat.st_dev,
    "inode": stat.st_ino,
    "size": stat.st_size,
    "mtime_ns": stat.st_mtime_ns,
    "ctime_ns": stat.st_ctime_ns,
    "code": _code_fingerprint(),
  }


_KINDS: dict[str, type] = {"annotations": EncodedAnnotations, "questions": QuestionInfo}


def _load(entry: str, key: dict[str, Any], cls: type[T]) -> T | None:
  try:
    with np.load(entry, allow_pickle=False) as npz:
      if _unblob(npz["key"]) != key:
        logger.info("score cache entry %s is stale; rebuilding it", entry)
        return None
      return cls.from_arrays({name: npz[name] for name in npz.files})
  except FileNotFoundError:
    return None
  except Exception as e:  # noqa: BLE001  (any damage: the entry is only a cache)
    logger.warning("ignoring unreadable score cache entry %s (%s: %s); rebuilding it", entry, type(e).__name__, e)
    return None


def _store(entry: str, key: dict[str, Any], value: EncodedAnnotations | QuestionInfo) -> None:
  try:
    arrays = value.to_arrays()
  except OverflowError:  # question ids beyond int64: valid JSON, but not cacheable
    logger.info("not caching %s: question ids do not fit in int64", key["path"])
    return
  arrays["key"] = _blob(key)
  try:
    files.write_atomic(entry, lambda f: np.savez(f, **arrays), fsync=False, make_dirs=True)
  except InputError as e:
    logger.warning("cannot write score cache entry: %s", e)


def cached(kind: str, path: str, build: Callable[[], T], enabled: bool = True) -> T:
  """`build()` (which reads and encodes `path`), or its cached value for the file as it
  is now; a fresh value is stored unless the file changed while it was being read."""
  cls = _KINDS[kind]
  try:
    before, now_ns = os.stat(path), time.time_ns()
  except OSError:
    enabled = False  # build() reports the missing or unreadable file
  if not enabled:
    return build()
  key, entry = _key(kind, path, before), entry_path(kind, path)
  value = _load(entry, key, cls)
  if value is not None:
    logger.debug("%s: using cached %s", path, entry)
    return value
  value = build()
  try:
    unchanged = _key(kind, path, os.stat(path)) == key
  except OSError:
    unchanged = False
  if not unchanged:
    logger.info("not caching %s: it changed while it was read", path)
  elif before.st_mtime_ns > now_ns - RACY_SECONDS * 1e9:
    logger.info("not caching %s: modified too recently to trust its mtime", path)
  else:
    _store(entry, key, value)
  return value
