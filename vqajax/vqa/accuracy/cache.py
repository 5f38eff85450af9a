"""What `vqajax score` needs of the annotations and questions files, and its disk cache.

Reading an official annotations file is most of `vqajax score`'s time (decoding, checking
and encoding its answers), while its encoding (`EncodedAnnotations`: id arrays, question and
answer types, the interned strings predictions are matched against) is a tenth of its size
and loads in milliseconds. Scoring many results files against one val set therefore keeps
the encoding on disk, one pickle per file:

    $VQAJAX_CACHE/  (default $XDG_CACHE_HOME/vqajax/score, i.e. ~/.cache/vqajax/score)
        annotations-<hash of the absolute path>.pickle
        questions-<hash of the absolute path>.pickle

An entry is used only if its stored key equals the file's current one: its real path,
device, inode, size, mtime_ns and ctime_ns, and a fingerprint of the code that validates and
encodes it (`official_files` and this folder). The mtime alone can be put back (`cp -p`,
`touch -r`); the ctime cannot without changing the clock, and a copy renamed into place is
another inode. A file modified less than `RACY_SECONDS` before it is read, or while it is
read, is not cached (git's "racy clean" rule: a same-size rewrite within the timestamp
granularity could keep both times). Entries are written atomically, only from files that
passed validation; one that cannot be read is logged, ignored and rebuilt. Cached or not,
the numbers are bit-identical.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import itertools
import logging
import operator
import os
import pickle
import time
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np

from vqajax.core import files, official_files
from vqajax.core.errors import InputError
from vqajax.core.text import unique_codes
from vqajax.vqa.accuracy.kernel import Interner, Labels, encode_answers, encode_targets, labels

RACY_SECONDS = 2.0  # coarsest common mtime granularity (FAT); ext4 and tmpfs are finer

logger = logging.getLogger(__name__)

T = TypeVar("T", "EncodedAnnotations", "QuestionInfo")


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
  return os.path.join(cache_dir(), f"{kind}-{name[:32]}.pickle")


def _key(kind: str, path: str) -> tuple:
  s = os.stat(path)
  return kind, os.path.realpath(path), s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns, _code_fingerprint()


def _load(entry: str, key: tuple) -> Any:
  try:
    with open(entry, "rb") as f:
      stored, value = pickle.load(f)
  except FileNotFoundError:
    return None
  except Exception as e:  # noqa: BLE001  (any damage: the entry is only a cache)
    logger.warning("ignoring unreadable score cache entry %s (%s: %s); rebuilding it", entry, type(e).__name__, e)
    return None
  if stored != key:
    logger.info("score cache entry %s is stale; rebuilding it", entry)
    return None
  return value


def cached(kind: str, path: str, build: Callable[[], T], enabled: bool = True) -> T:
  """`build()` (which reads and encodes `path`), or its cached value for the file as it
  is now; a fresh value is stored unless the file changed while or just before it was read."""
  try:
    key, now_ns = _key(kind, path), time.time_ns()
  except OSError:
    enabled = False  # build() reports the missing or unreadable file
  if not enabled:
    return build()
  entry = entry_path(kind, path)
  value = _load(entry, key)
  if value is not None:
    return value
  value = build()
  try:
    unchanged = _key(kind, path) == key
  except OSError:
    unchanged = False
  if not unchanged or key[5] > now_ns - RACY_SECONDS * 1e9:
    logger.info("not caching %s: modified while or just before it was read", path)
    return value
  try:
    files.write_atomic(entry, lambda f: pickle.dump((key, value), f, protocol=pickle.HIGHEST_PROTOCOL), fsync=False,
                       make_dirs=True)
  except InputError as e:
    logger.warning("cannot write score cache entry: %s", e)
  return value
