"""The four non-neural baselines of VQA (ICCV 2015, section 6 / Table II).

"Training" is counting on the training split:

* `random`: an answer drawn uniformly (seeded) from the 1000 most frequent training
  answers (`multiple_choice_answer`; ties in frequency ordered alphabetically, as
  `text.TopK`);
* `prior`: always the most frequent training answer ("yes" on VQA);
* `q_type_prior`: the most frequent training answer of the question's type. The type is
  the official `question_type` field of the annotations (the 65 mscoco types, first
  words of the question; VizWiz: computed from the text by `question_types`). As in the
  paper only types with at least 30 training questions get their own prior; a question of
  any other type (or of a type unseen in training) gets the global prior;
* `nearest_neighbour`: see `vqajax.vqa.baselines_nn` (k=4 by question, then the nearest
  image; default sentence representation: bag of words over the question vocabulary).

Multiple choice, for every baseline (the paper does this for the last two; for random and
prior it is the natural reading): the choice most similar to the open-ended answer. First
a choice equal to it after the official normalisation (`metrics.normalize`); else, with
word vectors (word2vec/GloVe text format, `read_word_vectors`), the highest cosine between
mean word vectors (the paper: word2vec); else -- no vectors given, or none for the answer
or for any choice -- the highest Jaccard similarity of the normalised strings' character
trigrams. Ties go to the first choice in file order.

Training records: `VQAData` keeps only numeric arrays of the training split (and drops
questions whose answer is outside the top K), while the baselines count the raw answer
strings of every training question. So `run_and_write` re-reads the training files with
the same reader as `vqa_dataset.load` (`read_train_records`; same confidence filter) and
takes the vocabulary, the feature store and the val records from `VQAData`. The baseline
functions themselves only take (question, annotation) record lists, so they run on
hand-built records too. Everything is scored by `vqajax.vqa.accuracy.score.accuracy_of`, the official
accuracy used for the neural models.
"""

from __future__ import annotations

import collections
import functools
import os
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from absl import logging

from vqajax.core import run_record, text
from vqajax.core.errors import InputError
from vqajax.vqa import dataset as vqa_dataset
from vqajax.vqa import reports, results
from vqajax.vqa import task as vqa_task
from vqajax.vqa.accuracy.normalize import clean, normalize
from vqajax.vqa.baselines_nn import nearest_neighbour_answers

Records = Sequence[tuple[dict, dict]]  # (question, annotation), as from vqa_files.join
Results = dict[int, str]
WordVectors = Mapping[str, np.ndarray]
MIN_TYPE_QUESTIONS = 30  # the paper: a question type needs >= 30 training questions
NUM_RANDOM_ANSWERS = 1000


def top_answers(records: Records, k: int) -> list[str]:
  """The k most frequent `multiple_choice_answer`s (ties alphabetically)."""
  return text.TopK.build((a["multiple_choice_answer"] for _, a in records), k).answers


def random_answers(train: Records, val: Records, seed: int = 0,
                   top: int = NUM_RANDOM_ANSWERS) -> Results:
  answers = top_answers(train, top)
  picks = np.random.default_rng(seed).integers(len(answers), size=len(val))
  return {q["question_id"]: answers[i] for (q, _), i in zip(val, picks)}


def prior_answers(train: Records, val: Records) -> Results:
  answer = top_answers(train, 1)[0]
  return {q["question_id"]: answer for q, _ in val}


def type_priors(train: Records, min_questions: int = MIN_TYPE_QUESTIONS) -> dict[str, str]:
  """{question_type: most frequent answer} of the types with >= min_questions questions."""
  by_type = collections.defaultdict(list)
  for q, a in train:
    by_type[a["question_type"]].append((q, a))
  return {t: top_answers(records, 1)[0] for t, records in by_type.items()
          if len(records) >= min_questions}


def q_type_prior_answers(train: Records, val: Records,
                         min_questions: int = MIN_TYPE_QUESTIONS) -> Results:
  priors, fallback = type_priors(train, min_questions), top_answers(train, 1)[0]
  return {q["question_id"]: priors.get(a["question_type"], fallback) for q, a in val}


# ----------------------------------------------------------------------------- multiple choice

class WordVectorError(InputError):
  """A word-vector file that is not in the word2vec/GloVe text format."""


def read_word_vectors(path: str, keep: Iterable[str] | None = None) -> dict[str, np.ndarray]:
  """Word vectors of a word2vec/GloVe text file: `word v1 ... vd` per line, optionally after
  a `count dim` header line. Words are keyed lower-cased (a lower-case entry wins over
  other casings); with `keep`, only those (lower-case) words are parsed."""
  keep = None if keep is None else set(keep)
  vectors: dict[str, np.ndarray] = {}
  dim = None
  try:
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        parts = line.rstrip().split(" ")
        if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
          dim = int(parts[1])  # word2vec header: count dim
          continue
        if parts == [""]:
          continue
        if dim is None:
          dim = len(parts) - 1
        word = " ".join(parts[:-dim]) if len(parts) > dim else ""
        if not word:
          raise WordVectorError(f"{path}:{number}: expected a word and {dim} numbers")
        key = word.lower()
        if (keep is not None and key not in keep) or (key != word and key in vectors):
          continue
        try:
          vectors[key] = np.array(parts[-dim:], np.float32)
        except ValueError:
          raise WordVectorError(f"{path}:{number}: expected {dim} numbers after {word!r}") from None
  except OSError as e:
    raise WordVectorError(f"{path}: cannot read ({e.strerror})") from None
  except UnicodeDecodeError as e:
    raise WordVectorError(f"{path}: not UTF-8 text ({e})") from None
  return vectors


def answer_words(answer: str) -> list[str]:
  return text.tokenize(clean(answer))


def answer_vector(answer: str, vectors: WordVectors) -> np.ndarray | None:
  """Mean vector of the answer's known words; None when it has none."""
  found = [vectors[w] for w in answer_words(answer) if w in vectors]
  return np.mean(found, axis=0) if found else None


@functools.lru_cache(maxsize=1 << 16)
def _normalized(answer: str) -> str:
  return normalize(clean(answer))


@functools.lru_cache(maxsize=1 << 16)
def _trigrams(answer: str) -> frozenset[str]:
  padded = f" {_normalized(answer)} "
  return frozenset(padded[i : i + 3] for i in range(len(padded) - 2))


def trigram_similarity(a: str, b: str) -> float:
  """Jaccard similarity of the character trigrams of the normalised, space-padded strings."""
  x, y = _trigrams(a), _trigrams(b)
  return len(x & y) / len(x | y) if x | y else 1.0


def choose(answer: str, choices: Sequence[str], vectors: WordVectors | None = None) -> str:
  """The choice most similar to `answer` (see the module docstring); ties -> first."""
  target = _normalized(answer)
  for choice in choices:
    if _normalized(choice) == target:
      return choice
  if vectors:
    mine = answer_vector(answer, vectors)
    theirs = [answer_vector(c, vectors) for c in choices]
    if mine is not None and any(v is not None for v in theirs):
      unit = lambda v: v / (np.linalg.norm(v) or 1.0)
      cosines = [-np.inf if v is None else float(unit(mine) @ unit(v)) for v in theirs]
      return choices[int(np.argmax(cosines))]
  return choices[int(np.argmax([trigram_similarity(answer, c) for c in choices]))]


def multiple_choice_answers(results: Mapping[int, str], val: Records,
                            vectors: WordVectors | None = None) -> Results:
  """{question_id: choice} for the open-ended `results`; needs `multiple_choices`."""
  out = {}
  for q, _ in val:
    if not q.get("multiple_choices"):
      raise InputError(f"question_id {q['question_id']}: no multiple_choices (set "
                       f"config.data.val_mc_questions to a multiple-choice questions file)")
    out[q["question_id"]] = choose(results[q["question_id"]], q["multiple_choices"], vectors)
  return out


# ----------------------------------------------------------------------------- registry, runner

def _store_features(store) -> Callable[[np.ndarray], np.ndarray]:
  return lambda image_ids: store.read(store.rows(image_ids))


def _random(train, data, seed):
  return random_answers(train, data.val_records, seed=seed)


def _prior(train, data, seed):
  del seed
  return prior_answers(train, data.val_records)


def _q_type_prior(train, data, seed):
  del seed
  return q_type_prior_answers(train, data.val_records)


def _nearest_neighbour(train, data, seed):
  del seed
  return nearest_neighbour_answers(train, data.val_records, _store_features(data.store),
                                   vocab=data.vocab)


# name -> fn(train_records, VQAData, seed) -> {val question_id: answer}
BASELINES: dict[str, Callable[[Records, vqa_dataset.VQAData, int], Results]] = {
    "random": _random,
    "prior": _prior,
    "q_type_prior": _q_type_prior,
    "nearest_neighbour": _nearest_neighbour,
}


def predict_baseline(name: str, data: vqa_dataset.VQAData, train: Records,
                     word_vectors: str | WordVectors | None = None, seed: int = 0) -> dict[str, Results]:
  """{'OpenEnded': results, 'MultipleChoice': results (when the val split has choices)}.

  `word_vectors`: a word2vec/GloVe text file or a loaded {word: vector} map (MC only).
  """
  if name not in BASELINES:
    raise InputError(f"unknown baseline {name!r}; expected one of {sorted(BASELINES)}")
  results = BASELINES[name](train, data, seed)
  predicted = {"OpenEnded": results}
  if data.val_records and data.val_records[0][0].get("multiple_choices"):
    if isinstance(word_vectors, str):
      strings = {s for q, _ in data.val_records for s in q["multiple_choices"]} | set(results.values())
      path, word_vectors = word_vectors, read_word_vectors(word_vectors, keep={w for s in strings
                                                                              for w in answer_words(s)})
      covered = sum(answer_vector(s, word_vectors) is not None for s in strings)
      (logging.info if covered else logging.warning)(
          "%s: %d of %d answer strings have a word vector%s", path, covered, len(strings),
          "" if covered else " (is it a word2vec / GloVe text file?)")
    predicted["MultipleChoice"] = multiple_choice_answers(results, data.val_records, word_vectors)
  return predicted


def run_and_write(config, workdir: str, names: Sequence[str],
                  word_vectors: str | None = None) -> dict[str, dict[str, float]]:
  """`vqajax baselines`: official results files under WORKDIR/results/<name>/ and a table."""
  unknown = [n for n in names if n not in BASELINES]
  if unknown or not names:
    raise InputError(f"--baselines {','.join(names)!r}: expected some of {sorted(BASELINES)}")
  if word_vectors is not None and not os.path.isfile(word_vectors):
    raise InputError(f"--word_vectors {word_vectors}: file not found")
  recorded = run_record.read_record(workdir)
  if recorded is not None and "encoders" in recorded:  # what training records, never the baselines
    raise InputError(f"{workdir}: holds a trained run; the baselines go into a workdir of their own")
  run_record.check_same_run(workdir, config, None, "use another --workdir")
  data = vqa_task.load(config)
  train = vqa_dataset.read_train_records(config.data)[0]
  run_record.write_run_file(workdir, config, vqa_task.sizes(data))
  rows = {}
  for name in names:
    predicted = predict_baseline(name, data, train, word_vectors, config.seed)
    scores = results.write_official(os.path.join(workdir, "results", name), config, data, name,
                                     predicted, {"baseline": name})
    rows[name] = reports.metrics_from_official(scores)
  return rows
