"""Question tokens, question vocabulary and the top-K answer table."""

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
    ids = np.full((len(token_lists), max_len), PAD, np.int32)
    lengths = np.zeros(len(token_lists), np.int32)
    for i, tokens in enumerate(token_lists):
      row = [self._ids.get(t, UNK) for t in tokens[:max_len]]
      ids[i, : len(row)] = row
      lengths[i] = len(row)
    return ids, lengths


class AnswerTable:
  """The K most frequent training answers (`multiple_choice_answer`), the softmax classes."""

  def __init__(self, answers: Sequence[str]):
    self.answers = list(answers)
    self._ids = {a: i for i, a in enumerate(self.answers)}

  @classmethod
  def build(cls, answers: Iterable[str], k: int) -> "AnswerTable":
    counts = collections.Counter(answers)
    return cls(sorted(counts, key=lambda a: (-counts[a], a))[:k])

  def __len__(self) -> int:
    return len(self.answers)

  def index(self, answers: Iterable[str]) -> np.ndarray:
    """Class index of each answer, -1 when it is not in the table."""
    return np.array([self._ids.get(a, -1) for a in answers], np.int32)


def confident_only(annotations: list[dict], min_confident: int = 5) -> list[dict]:
  """The paper's filtered set: questions with >= min_confident answers of confidence 'yes'."""
  return [a for a in annotations
          if sum(x.get("answer_confidence") == "yes" for x in a["answers"]) >= min_confident]
