"""The nearest-neighbour baseline of VQA (ICCV 2015, section 6 and appendix), vectorised.

For each test question: the k (=4) training questions nearest by cosine similarity of a
sentence representation, then among those k the one whose image is nearest to the test
image (cosine of the image features); the answer is that training question's most
common ground-truth answer (`multiple_choice_answer`).

The paper's representation is Skip-Thought (it also tried bag of words and word2vec); the
default here is a bag of words over the question vocabulary (`bag_of_words`), and any
`represent(tokens: list[str]) -> vector` can be plugged in. Identical training
representations are merged first (templated questions repeat a lot), and similarities
are computed a chunk of test questions at a time (dense chunk x sparse bag of words), so
memory stays at chunk x distinct-training-questions floats. Images are read once per
block of test questions (each distinct image once), within `image_budget` bytes.

Ties are broken deterministically: among training questions equally similar to the test
question the earlier ones (training-file order) are kept, and among the k candidates
equally similar by image the earlier one wins. Bag-of-words dot products are exact
integer sums, so identical questions always tie exactly. A question with no known word
(or a zero vector) is equally similar to every training question: its candidates are the
first k training questions.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import scipy.sparse

from vqajax.core import text

Represent = Callable[[list[str]], np.ndarray]
# image ids [n] -> features [n, ...] (float); e.g. store.read(store.rows(ids)).
ImageFeatures = Callable[[np.ndarray], np.ndarray]


def bag_of_words(token_lists: Sequence[list[str]], vocab: text.Vocab) -> scipy.sparse.csr_matrix:
  """Word counts [N, len(vocab)] (float32, sparse); PAD, UNK and unknown words count nothing."""
  max_len = max((len(t) for t in token_lists), default=0) or 1
  ids, _ = vocab.encode(token_lists, max_len)  # PAD after the last word
  rows, cols = np.nonzero(ids > text.UNK)
  counts = scipy.sparse.coo_matrix((np.ones(len(rows), np.float32), (rows, ids[rows, cols])),
                                   shape=(len(token_lists), len(vocab)))
  return counts.tocsr()  # duplicates summed: counts


def _embed(token_lists, vocab, represent):
  if represent is None:
    return bag_of_words(token_lists, vocab)
  vectors = [np.asarray(represent(list(t)), np.float32).ravel() for t in token_lists]
  return np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)


def _norms(m) -> np.ndarray:
  if scipy.sparse.issparse(m):
    squares = np.asarray(m.multiply(m).sum(axis=1), np.float64).ravel()
  else:
    squares = np.einsum("ij,ij->i", m, m, dtype=np.float64)
  norms = np.sqrt(squares).astype(np.float32)
  return np.where(norms > 0, norms, 1.0).astype(np.float32)  # zero vectors: similarity 0


def _groups(m) -> tuple[np.ndarray, np.ndarray]:
  """(representative row of each distinct row, group of each row); groups in order of
  first occurrence."""
  if scipy.sparse.issparse(m):
    m = m.tocsr()
    m.sum_duplicates()
    m.sort_indices()
    keys = [m.indices[a:b].tobytes() + m.data[a:b].tobytes() for a, b in zip(m.indptr[:-1], m.indptr[1:])]
    first: dict[bytes, int] = {}
    inverse = np.fromiter((first.setdefault(key, len(first)) for key in keys), np.int64, len(keys))
  else:
    _, index, inverse = np.unique(m, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(index)  # renumber groups by first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    inverse = rank[inverse.ravel()]
  representative = np.zeros(inverse.max() + 1 if len(inverse) else 0, np.int64)
  representative[inverse[::-1]] = np.arange(len(inverse))[::-1]
  return representative, inverse


def top_k_grouped(sim: np.ndarray, members: np.ndarray, n: int, k: int) -> np.ndarray:
  """The k best rows of an expanded similarity matrix, in increasing row order [c, k].

  `sim` [c, G]: similarity to each group of identical training rows; `members` [G, k]:
  the first k rows of each group, ascending, padded with n (a group has >= 1 row, and
  there are n >= k rows in all). Rows are ranked by similarity, ties -> lower row.
  """
  c, num_groups = sim.shape
  sizes = (members < n).sum(axis=1)
  kk = min(k, num_groups)
  top = np.argpartition(sim, num_groups - kk, axis=1)[:, num_groups - kk:]
  top_sim = np.take_along_axis(sim, top, axis=1)
  order = np.argsort(-top_sim, axis=1, kind="stable")
  top_sim = np.take_along_axis(top_sim, order, axis=1)
  reached = np.cumsum(sizes[np.take_along_axis(top, order, axis=1)], axis=1) >= k
  kth = top_sim[np.arange(c), np.argmax(reached, axis=1)][:, None]  # k-th best similarity
  above = sim > kth  # every row of these groups is in (fewer than k rows in all)
  rows, groups = np.nonzero(above)
  rows = np.repeat(rows, k)
  picked = members[groups].ravel()
  need = k - np.bincount(rows[picked < n], minlength=c)
  rows, picked = rows[picked < n], picked[picked < n]
  # The rest: the `need` lowest rows among the groups tied at the k-th similarity.
  pointer = np.zeros((c, num_groups), np.int16)
  heads = np.where(sim == kth, members[:, 0][None, :], n)
  extra_rows, extra = [], []
  for step in range(k):
    group = np.argmin(heads, axis=1)
    take = np.flatnonzero(need > step)
    extra_rows.append(take)
    extra.append(heads[take, group[take]])
    at = np.arange(c)
    pointer[at, group] += 1
    nxt = np.minimum(pointer[at, group], k - 1)
    heads[at, group] = np.where(pointer[at, group] < k, members[group, nxt], n)
  rows = np.concatenate([rows, *extra_rows])
  picked = np.concatenate([picked, *extra])
  order = np.lexsort((picked, rows))
  return picked[order].reshape(c, k)


def _unit(features: np.ndarray) -> np.ndarray:
  flat = np.asarray(features, np.float32).reshape(len(features), -1)
  return flat / _norms(flat)[:, None]


def nearest_neighbours(train_tokens: Sequence[list[str]], train_image_ids: np.ndarray,
                       val_tokens: Sequence[list[str]], val_image_ids: np.ndarray,
                       image_features: ImageFeatures, *, k: int = 4,
                       vocab: text.Vocab | None = None, represent: Represent | None = None,
                       chunk: int = 512, image_budget: int = 1 << 30) -> np.ndarray:
  """Index into the training set of the neighbour chosen for each val question [n_val].

  `vocab` (bag of words only) defaults to every word of the training questions.
  `image_features` is called on blocks of distinct image ids whose float32 features take
  at most about `image_budget` bytes.
  """
  if not len(train_tokens):
    raise ValueError("nearest neighbour needs at least one training question")
  if represent is None and vocab is None:
    vocab = text.Vocab.build(train_tokens)
  k = min(k, len(train_tokens))
  if not len(val_tokens):
    return np.zeros(0, np.int64)
  train = _embed(train_tokens, vocab, represent)
  representative, group = _groups(train)  # identical training rows share a column
  train = train[representative]
  inverse_norms = 1.0 / _norms(train)
  if represent is None:
    train_t = train.T.tocsr()  # sparse [V, G]; dots are exact integer sums
  else:
    train_t = (train * inverse_norms[:, None]).T.copy()  # dense [D, G]
  order = np.argsort(group, kind="stable")
  starts = np.searchsorted(group[order], np.arange(len(representative)))
  sizes = np.bincount(group, minlength=len(representative))
  members = np.stack([np.where(j < sizes, order[np.minimum(starts + j, len(order) - 1)], len(order))
                      for j in range(k)], axis=1)
  train_image_ids = np.asarray(train_image_ids)
  val_image_ids = np.asarray(val_image_ids)
  candidates = np.zeros((len(val_tokens), k), np.int64)
  for start in range(0, len(val_tokens), chunk):
    queries = _embed(val_tokens[start : start + chunk], vocab, represent)
    if represent is None:  # the query's norm does not change its ranking
      sim = np.ascontiguousarray(queries.toarray() @ train_t) * inverse_norms[None, :]
    else:
      sim = (queries / _norms(queries)[:, None]) @ train_t
    candidates[start : start + chunk] = top_k_grouped(sim, members, len(order), k)
  # Images: each block reads its distinct images once.
  chosen = np.zeros(len(val_tokens), np.int64)
  probe = np.asarray(image_features(val_image_ids[:1]))
  block = max(1, image_budget // (4 * probe[0].size * (k + 1)))
  for start in range(0, len(val_tokens), block):
    stop = min(start + block, len(val_tokens))
    wanted = np.concatenate([val_image_ids[start:stop], train_image_ids[candidates[start:stop].ravel()]])
    distinct, where = np.unique(wanted, return_inverse=True)
    features = _unit(image_features(distinct))
    queries, neighbours = where[: stop - start], where[stop - start :].reshape(stop - start, k)
    for a in range(0, stop - start, chunk):
      q, nb = queries[a : a + chunk], neighbours[a : a + chunk]
      best = np.argmax(np.einsum("cd,ckd->ck", features[q], features[nb]), axis=1)  # ties -> first
      rows = slice(start + a, start + a + len(q))
      chosen[rows] = candidates[rows][np.arange(len(q)), best]
  return chosen


def nearest_neighbour_answers(train_records, val_records, image_features: ImageFeatures, *,
                              k: int = 4, vocab: text.Vocab | None = None,
                              represent: Represent | None = None, chunk: int = 512) -> dict[int, str]:
  """{val question_id: answer}: the `multiple_choice_answer` of the chosen neighbour.

  Records are (question, annotation) pairs as from `vqa_files.join`; questions are
  tokenised with `text.tokenize` (the same tokens the models see).
  """
  tokens = lambda records: [text.tokenize(q["question"]) for q, _ in records]
  ids = lambda records: np.array([q["image_id"] for q, _ in records], np.int64)
  chosen = nearest_neighbours(tokens(train_records), ids(train_records), tokens(val_records),
                              ids(val_records), image_features, k=k, vocab=vocab,
                              represent=represent, chunk=chunk)
  answers = [a["multiple_choice_answer"] for _, a in train_records]
  return {q["question_id"]: answers[i] for (q, _), i in zip(val_records, chosen)}
