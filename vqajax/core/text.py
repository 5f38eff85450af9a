"""Question tokens, question vocabulary, top-K tables (answers, bag-of-words words), bags of words."""

from __future__ import annotations

import collections
import re
from typing import Iterable, Sequence

import numpy as np

PAD, UNK = 0, 1
_WORD = re.compile(r"\w+(?:'\w+)?")


def tokenize(question: str) -> list[str]:
  """Lower-case word tokens; punctuation is dropped, inner apostrophes kept ("what's")."""
  return _WORD.findall(question.lower())


class Vocab:
  """Word -> id with PAD=0 and UNK=1; words ordered by count, then alphabetically."""

  def __init__(self, words: Sequence[str]):
    self.words = ["<pad>", "<unk>", *words]
    self._ids = {w: i for i, w in enumerate(self.words)}

  @classmethod
  def build(cls, token_lists: Iterable[list[str]], min_count: int = 1) -> "Vocab":
    counts = collections.Counter(t for tokens in token_lists for t in tokens)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return cls(kept)

  def __len__(self) -> int:
    return len(self.words)

  def encode(self, token_lists: Sequence[list[str]], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [N, max_len] (questions cut to their first max_len words), lengths [N]."""
    cut = [tokens[:max_len] for tokens in token_lists]
    lengths = np.fromiter(map(len, cut), np.int32, len(cut))
    ids = np.full((len(cut), max_len), PAD, np.int32)
    ids[np.arange(max_len) < lengths[:, None]] = [self._ids.get(t, UNK) for tokens in cut for t in tokens]
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
    return np.array([self._ids.get(a, -1) for a in answers], np.int32)


def bag_indices(word_lists: Sequence[list[str]], table: TopK, width: int) -> np.ndarray:
  """[N, width] table indices of each list's words (absent words dropped), -1 padded; a
  bag of words is then the sum of one-hots (-1 contributes nothing). Lists longer than
  `width` are cut."""
  lengths = np.fromiter(map(len, word_lists), np.int64, len(word_lists))
  ids = table.index(w for words in word_lists for w in words)
  rows = np.repeat(np.arange(len(word_lists)), lengths)
  kept = ids >= 0
  before = np.r_[0, np.cumsum(kept)]  # kept words before each word (and after the last), over all lists
  first = np.cumsum(lengths) - lengths  # each list's first word
  rank = before[:-1] - before[first].repeat(lengths)  # kept words before a word in its own list
  take = kept & (rank < width)
  out = np.full((len(word_lists), width), -1, np.int32)
  out[rows[take], rank[take]] = ids[take]
  return out


def most_common_answer(answers: list[dict]) -> str:
  """Most frequent answer string; ties go to the one seen first."""
  return collections.Counter(a["answer"] for a in answers).most_common(1)[0][0]
