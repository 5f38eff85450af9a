"""Question tokens, question vocabulary, top-K tables (answers, bag-of-words words), bags of words."""

from __future__ import annotations

import collections
import itertools
import re
from typing import Iterable, Sequence

import numpy as np

PAD, UNK = 0, 1
_WORD = re.compile(r"\w+(?:'\w+)?")


def tokenize(question: str) -> list[str]:
  """Lower-case word tokens; punctuation is dropped, inner apostrophes kept ("what's")."""
  return _WORD.findall(question.lower())


def tokenize_all(questions: Iterable[str]) -> list[list[str]]:
  """`tokenize` of each question (C-level maps: no Python frame per question)."""
  return list(map(_WORD.findall, map(str.lower, questions)))


class Vocab:
  """Word -> id with PAD=0 and UNK=1; words ordered by count, then alphabetically."""

  def __init__(self, words: Sequence[str]):
    self.words = ["<pad>", "<unk>", *words]
    self._ids = {w: i for i, w in enumerate(self.words)}

  @classmethod
  def build(cls, token_lists: Iterable[list[str]], min_count: int = 1) -> "Vocab":
    counts = collections.Counter(itertools.chain.from_iterable(token_lists))
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return cls(kept)

  def __len__(self) -> int:
    return len(self.words)

  def encode(self, token_lists: Sequence[list[str]], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [N, max_len] (questions cut to their first max_len words), lengths [N]."""
    lengths = np.fromiter(map(len, token_lists), np.int32, len(token_lists))
    cut = token_lists if not len(lengths) or lengths.max() <= max_len else [t[:max_len] for t in token_lists]
    lengths = np.minimum(lengths, max_len)
    ids = np.full((len(cut), max_len), PAD, np.int32)
    words = itertools.chain.from_iterable(cut)
    ids[np.arange(max_len) < lengths[:, None]] = np.fromiter(
        map(self._ids.get, words, itertools.repeat(UNK)), np.int32, int(lengths.sum()))
    return ids, lengths  # (the mask's row-major order is the words' order)


class TopK:
  """The K most frequent strings (ties alphabetically): the answer classes (the training
  `multiple_choice_answer`s) or the words of a bag-of-words."""

  def __init__(self, answers: Sequence[str]):
    self.answers = list(answers)
    self._ids = {a: i for i, a in enumerate(self.answers)}

  @classmethod
  def build(cls, answers: Iterable[str], k: int) -> "TopK":
    counts = collections.Counter(answers)
    return cls(sorted(counts, key=lambda a: (-counts[a], a))[:k])

  def __len__(self) -> int:
    return len(self.answers)

  def index(self, answers: Iterable[str]) -> np.ndarray:
    """Index of each string, -1 when it is not in the table."""
    return np.fromiter(map(self._ids.get, answers, itertools.repeat(-1)), np.int32)


def bag_indices(word_lists: Sequence[list[str]], table: TopK, width: int) -> np.ndarray:
  """[N, width] table indices of each list's words (absent words dropped), -1 padded; a
  bag of words is then the sum of one-hots (-1 contributes nothing). Lists longer than
  `width` are cut."""
  lengths = np.fromiter(map(len, word_lists), np.int64, len(word_lists))
  ids = table.index(itertools.chain.from_iterable(word_lists))
  rows = np.repeat(np.arange(len(word_lists)), lengths)
  kept = ids >= 0
  before = np.r_[0, np.cumsum(kept)]  # kept words before each word (and after the last), over all lists
  first = np.cumsum(lengths) - lengths  # each list's first word
  rank = before[:-1] - before[first].repeat(lengths)  # kept words before a word in its own list
  take = kept & (rank < width)
  out = np.full((len(word_lists), width), -1, np.int32)
  out[rows[take], rank[take]] = ids[take]
  return out


def most_common_answer(answers: Iterable[str]) -> str:
  """Most frequent answer string; ties go to the one seen first."""
  return collections.Counter(answers).most_common(1)[0][0]
