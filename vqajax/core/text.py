"""Question tokens, question vocabulary, top-K tables (answers, bag-of-words) and answer filters."""

from __future__ import annotations

import collections
import itertools
import operator
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


class QuestionBag:
  """The paper's BoW Q bins: the top-`words` question words, then for each of the first
  three positions the top-`lead` words seen there (1000 + 3 x 10 = 1030 on VQA)."""

  def __init__(self, words: TopK, leads: Sequence[TopK]):
    self.words, self.leads = words, list(leads)
    self.offsets = np.cumsum([len(words)] + [len(t) for t in self.leads])
    self.size = int(self.offsets[-1])

  @classmethod
  def build(cls, token_lists: Iterable[list[str]], words: int = 1000, lead: int = 10) -> "QuestionBag":
    lists = list(token_lists)
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    return cls(TopK.build(itertools.chain.from_iterable(lists), words),
               [TopK.build(map(operator.itemgetter(p), itertools.compress(lists, lengths > p)), lead)
                for p in range(3)])

  def indices(self, token_lists: Sequence[list[str]], max_len: int) -> np.ndarray:
    """[N, max_len + 3] bin indices (-1 padded) of the first max_len words and the leads."""
    out = np.full((len(token_lists), max_len + 3), -1, np.int32)
    lengths = np.fromiter(map(len, token_lists), np.int64, len(token_lists))
    cut = token_lists if not len(lengths) or lengths.max() <= max_len else [t[:max_len] for t in token_lists]
    out[:, :max_len] = bag_indices(cut, self.words, max_len)
    for p, (table, offset) in enumerate(zip(self.leads, self.offsets)):
      long = lengths > p
      ids = table.index(map(operator.itemgetter(p), itertools.compress(token_lists, long)))
      out[long, max_len + p] = np.where(ids >= 0, ids + offset, -1)
    return out


def most_common_answer(answers: list[dict]) -> str:
  """Most frequent answer string; ties go to the one seen first."""
  return collections.Counter(a["answer"] for a in answers).most_common(1)[0][0]


def confident_only(annotations: list[dict], min_confident: int = 5) -> list[dict]:
  """The paper's confidence-filtered training set: only the answers with confidence 'yes',
  and only questions with >= min_confident of them; `multiple_choice_answer` becomes the
  most frequent confident answer. Returns new annotation dicts."""
  out = []
  for a in annotations:
    confident = [x for x in a["answers"] if x.get("answer_confidence") == "yes"]
    if len(confident) >= min_confident:
      out.append(dict(a, answers=confident, multiple_choice_answer=most_common_answer(confident)))
  return out
