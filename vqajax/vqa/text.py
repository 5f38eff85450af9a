"""The VQA paper's text encodings over `core/text.py`: the BoW Q bins and the
confidence-filtered training set."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from vqajax.core.text import Coded, TopK, bag_indices, most_common_answer


class QuestionBag:
  """The paper's BoW Q bins: the top-`words` question words, then for each of the first
  three positions the top-`lead` words seen there (1000 + 3 x 10 = 1030 on VQA)."""

  def __init__(self, words: TopK, leads: Sequence[TopK]):
    self.words, self.leads = words, list(leads)
    self.offsets = np.cumsum([len(words)] + [len(t) for t in self.leads])
    self.size = int(self.offsets[-1])

  @classmethod
  def build(cls, token_lists: Coded | Iterable[list[str]], words: int = 1000, lead: int = 10) -> "QuestionBag":
    coded = Coded.of(token_lists)
    return cls(TopK.top(coded.counts(), words), [TopK.top(coded.counts(coded.word_at(p)[1]), lead) for p in range(3)])

  def indices(self, token_lists: Coded | Sequence[list[str]], max_len: int) -> np.ndarray:
    """[N, max_len + 3] bin indices (-1 padded) of the first max_len words and the leads."""
    coded = Coded.of(token_lists)
    out = np.full((len(coded.lengths), max_len + 3), -1, np.int32)
    out[:, :max_len] = bag_indices(coded.cut(max_len), self.words, max_len)
    for p, (table, offset) in enumerate(zip(self.leads, self.offsets)):
      long, codes = coded.word_at(p)
      ids = table.index(coded.words)[codes]
      out[long, max_len + p] = np.where(ids >= 0, ids + offset, -1)
    return out


MIN_CONFIDENT = 5  # the paper's confidence filter: answers with confidence 'yes' a question needs


def confident_only(annotations: list[dict], min_confident: int = MIN_CONFIDENT) -> list[dict]:
  """The paper's confidence-filtered training set: only the answers with confidence 'yes',
  and only questions with >= min_confident of them; `multiple_choice_answer` becomes the
  most frequent confident answer. Returns new annotation dicts (answers:
  `official_files.Answer`s)."""
  out = []
  for a in annotations:
    confident = [x for x in a["answers"] if x.answer_confidence == "yes"]
    if len(confident) >= min_confident:
      out.append(dict(a, answers=confident, multiple_choice_answer=most_common_answer(x.answer for x in confident)))
  return out
