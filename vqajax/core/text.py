"""Question tokens, question vocabulary, top-K tables (answers, bag-of-words words), bags of words.

Token lists are coded once (`Coded`: each word hashed a single time, into its index
among the distinct words); counting, vocabulary ids and bag-of-words bins are then
numpy on those codes, with one dictionary look-up per distinct word.
"""

from __future__ import annotations

import collections
import itertools
import operator
import re
from typing import Any, Callable, Hashable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from vqajax.core.errors import InputError

PAD, UNK = 0, 1
_WORD = re.compile(r"\w+(?:'\w+)?")


def unique_codes(values: Iterable[Hashable], dtype=np.int64) -> tuple[list[Any], np.ndarray]:
  """Distinct values (first-appearance order) and each input's index among them."""
  values = values if isinstance(values, list) else list(values)
  first = dict.fromkeys(values)  # each value hashed here, once (strings keep their hash)
  first.update(zip(first, itertools.count()))
  return list(first), np.fromiter(map(first.__getitem__, values), dtype, len(values))


def check_text(values: Sequence[str], where: Callable[[int], str]) -> None:
  """InputError naming (`where(i)`) the first of the strings `values` that is not Unicode text: a
  lone surrogate (a JSON `\\ud800` escape, undecodable bytes of a command line) is no character,
  so no tokenizer reads it and no terminal prints it. ASCII strings cost nothing to check."""
  try:
    "".join(itertools.compress(values, map(operator.not_, map(str.isascii, values)))).encode("utf-8")
  except UnicodeEncodeError:
    i = next(i for i, value in enumerate(values) if not _encodes(value))
    raise InputError(f"{where(i)}: expected text, got {values[i]!r} (a lone surrogate is no character)") from None


def _encodes(value: str) -> bool:
  try:
    value.encode("utf-8")
    return True
  except UnicodeEncodeError:
    return False


def tokenize(question: str) -> list[str]:
  """Lower-case word tokens; punctuation is dropped, inner apostrophes kept ("what's")."""
  return _WORD.findall(question.lower())


def tokenize_all(questions: Iterable[str]) -> list[list[str]]:
  """`tokenize` of each question (C-level maps: no Python frame per question)."""
  return list(map(_WORD.findall, map(str.lower, questions)))


class Coded(NamedTuple):
  """Token lists as codes: `words[codes[k]]` is the k-th word of the lists read in turn,
  and list i has `lengths[i]` words."""

  words: list[str]  # the distinct words, in order of first appearance
  codes: np.ndarray  # [sum(lengths)] int64
  lengths: np.ndarray  # [N] int64

  @classmethod
  def of(cls, token_lists: Coded | Iterable[list[str]]) -> Coded:
    if isinstance(token_lists, Coded):
      return token_lists
    token_lists = token_lists if isinstance(token_lists, list) else list(token_lists)
    lengths = np.fromiter(map(len, token_lists), np.int64, len(token_lists))
    return cls(*unique_codes(itertools.chain.from_iterable(token_lists)), lengths)

  def starts(self) -> np.ndarray:
    """Where each list's words begin in `codes`."""
    return np.cumsum(self.lengths) - self.lengths

  def cut(self, max_len: int) -> Coded:
    """Each list's first `max_len` words."""
    if not len(self.lengths) or self.lengths.max() <= max_len:
      return self
    position = np.arange(len(self.codes)) - np.repeat(self.starts(), self.lengths)
    return Coded(self.words, self.codes[position < max_len], np.minimum(self.lengths, max_len))

  def word_at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
    """Which lists have a word at `position` ([N] bool), and its code in each of them."""
    has = self.lengths > position
    return has, self.codes[self.starts()[has] + position]

  def counts(self, codes: np.ndarray | None = None) -> dict[str, int]:
    """{word: occurrences} of the words that occur (in `codes`; default: all)."""
    counts = np.bincount(self.codes if codes is None else codes, minlength=len(self.words))
    return {w: c for w, c in zip(self.words, counts.tolist()) if c}


def ranked(counts: Mapping[str, int]) -> list[str]:
  """Most frequent first, ties alphabetically."""
  return sorted(counts, key=lambda w: (-counts[w], w))


class Vocab:
  """Word -> id with PAD=0 and UNK=1; words ordered by count, then alphabetically."""

  def __init__(self, words: Sequence[str]):
    self.words = ["<pad>", "<unk>", *words]
    self._ids = {w: i for i, w in enumerate(self.words)}

  @classmethod
  def build(cls, token_lists: Coded | Iterable[list[str]], min_count: int = 1) -> "Vocab":
    counts = Coded.of(token_lists).counts()
    return cls(ranked({w: c for w, c in counts.items() if c >= min_count}))

  def __len__(self) -> int:
    return len(self.words)

  def encode(self, token_lists: Coded | Sequence[list[str]], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [N, max_len] (questions cut to their first max_len words), lengths [N]."""
    coded = Coded.of(token_lists).cut(max_len)
    word_ids = np.fromiter(map(self._ids.get, coded.words, itertools.repeat(UNK)), np.int32, len(coded.words))
    ids = np.full((len(coded.lengths), max_len), PAD, np.int32)
    ids[np.arange(max_len) < coded.lengths[:, None]] = word_ids[coded.codes]
    return ids, coded.lengths.astype(np.int32)  # (the mask's row-major order is the words' order)


class TopK:
  """The K most frequent strings (ties alphabetically): the answer classes (the training
  `multiple_choice_answer`s) or the words of a bag-of-words."""

  def __init__(self, answers: Sequence[str]):
    self.answers = list(answers)
    self._ids = {a: i for i, a in enumerate(self.answers)}

  @classmethod
  def build(cls, answers: Iterable[str], k: int) -> "TopK":
    return cls.top(collections.Counter(answers), k)

  @classmethod
  def top(cls, counts: Mapping[str, int], k: int) -> "TopK":
    """The `k` most frequent of counted strings."""
    return cls(ranked(counts)[:k])

  def __len__(self) -> int:
    return len(self.answers)

  def index(self, answers: Iterable[str]) -> np.ndarray:
    """Index of each string, -1 when it is not in the table."""
    return np.fromiter(map(self._ids.get, answers, itertools.repeat(-1)), np.int32)


def bag_indices(word_lists: Coded | Sequence[list[str]], table: TopK, width: int) -> np.ndarray:
  """[N, width] table indices of each list's words (absent words dropped), -1 padded; a
  bag of words is then the sum of one-hots (-1 contributes nothing). Lists longer than
  `width` are cut."""
  coded = Coded.of(word_lists)
  lengths = coded.lengths
  ids = table.index(coded.words)[coded.codes]
  rows = np.repeat(np.arange(len(lengths)), lengths)
  kept = ids >= 0
  before = np.r_[0, np.cumsum(kept)]  # kept words before each word (and after the last), over all lists
  first = coded.starts()
  rank = before[:-1] - before[first].repeat(lengths)  # kept words before a word in its own list
  take = kept & (rank < width)
  out = np.full((len(lengths), width), -1, np.int32)
  out[rows[take], rank[take]] = ids[take]
  return out


def most_common_answer(answers: Iterable[str]) -> str:
  """Most frequent answer string; ties go to the one seen first."""
  return collections.Counter(answers).most_common(1)[0][0]
