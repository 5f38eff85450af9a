"""Benchmark: `vqajax score` vs the plain reference loop on 200k synthetic questions.

Run from the repository root (CPU is fine, about 3 minutes):

    python bench/bench_score.py [--questions 200000] [--seed 0] [--rounds 3]

Writes official-format questions/annotations/results files to a temp dir, then times
  1. end to end, JSON loading included: `vqajax.vqa.accuracy.score.evaluate_files` (what the CLI runs)
     vs loading the same files with the standard library's `json` (as the official
     `vqaEval.py` does) + `bench/reference.py`'s `reference_accuracy`. Both sides run with
     the cyclic GC paused, as `evaluate_files` pauses it; the reference is also timed with
     it on (as `vqaEval.py` runs);
  2. the jitted `question_accuracy` kernel alone (encoded arrays already on device) vs the
     reference loop alone, the median of each.
Every timing of part 1 (and the phases and parsing below) runs in a process of its own,
forked from this one before it has held any dataset: as a user's `vqajax score` or
`vqaEval.py` starts. (Timed in the process that had generated and freed the dataset,
vqajax's side ran 1.7x slower, its objects scattered among the freed ones; the
reference's 4%.) Each round times every variant once; figures
are medians over rounds, ratios the medians of each round's ratio. Asserts identical
overall / per-type / per-question numbers for every variant and prints the ratios, each
with its target, the end-to-end ones last. Also prints JSON parsing alone (the standard
library's, which the reference pays, and msgspec's, generic and typed as the fast path
decodes) and where one run spends its time, phase by phase.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402
import record  # noqa: E402

from bench.reference import reference_accuracy  # noqa: E402
from vqajax.core import official_files  # noqa: E402
from vqajax.vqa.accuracy import inputs  # noqa: E402
from vqajax.vqa.accuracy.kernel import (  # noqa: E402
  Interner,
  encode_predictions,
  encode_targets,
  question_accuracy,
  question_accuracy_exact,
)
from vqajax.vqa.accuracy.score import evaluate_files, score_encoded  # noqa: E402

_OBJECTS = [
  "dog",
  "cat",
  "man",
  "woman",
  "car",
  "bus",
  "tree",
  "table",
  "pizza",
  "horse",
  "frisbee",
  "kite",
  "umbrella",
  "train",
  "clock",
  "bench",
  "sheep",
  "laptop",
]
_COLORS = ["red", "blue", "green", "white", "black", "brown", "yellow", "gray", "orange"]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_QUESTION_TYPES = {
  "yes/no": [
    "is the",
    "is this",
    "are there",
    "does the",
    "is there a",
    "can you",
    "do you",
    "are the",
    "is it",
    "has the",
  ],
  "number": ["how many", "how many people are", "what number is", "how many people are in"],
  "other": [
    "what color is the",
    "what is the",
    "what",
    "what is",
    "what is the man",
    "where is the",
    "what kind of",
    "what type of",
    "why",
    "who is",
    "which",
  ],
}


def _variants(rng: random.Random, answer_type: str) -> tuple[str, list[str]]:
  """A canonical answer and spellings annotators and models use for it."""
  if answer_type == "yes/no":
    word = rng.choice(["yes", "no"])
    return word, [word, word.capitalize(), f"{word}!", f"{word} .", f" {word}\n"]
  if answer_type == "number":
    n = rng.randrange(11) if rng.random() < 0.9 else rng.randrange(11, 3000)
    forms = [str(n), f"{n}.", f"{n} "]
    if n <= 10:
      forms += [_NUMBER_WORDS[n], _NUMBER_WORDS[n].capitalize()]
    if n >= 1000:
      forms.append(f"{n // 1000},{n % 1000:03d}")
    return str(n), forms
  obj, color = rng.choice(_OBJECTS), rng.choice(_COLORS)
  phrase = rng.choice(
    [
      obj,
      f"{color} {obj}",
      f"{obj}s",
      f"{obj}'s",
      f"{color} and white",
      f"{obj}-{rng.choice(_OBJECTS)}",
      "don't know",
      f"on {obj}",
    ]
  )
  return phrase, [
    phrase,
    f"a {phrase}",
    f"the {phrase}.",
    phrase.upper(),
    f"{phrase}?",
    f"({phrase})",
    phrase.replace(" ", "  "),
  ]


def make_dataset(n: int, seed: int) -> tuple[dict, dict, list]:
  rng = random.Random(seed)
  questions, annotations, results = [], [], []
  for i in range(n):
    qid, image_id = 1000 * i + rng.randrange(3), i // 3
    answer_type = rng.choices(list(_QUESTION_TYPES), weights=[38, 12, 50])[0]
    canonical, forms = _variants(rng, answer_type)
    _, other_forms = _variants(rng, answer_type)
    agreement = rng.random()
    answers = []
    for j in range(10):
      pool = forms if rng.random() < agreement else other_forms
      answer = canonical if rng.random() < 0.5 else rng.choice(pool)
      answers.append(
        {"answer": answer, "answer_confidence": rng.choice(["yes", "yes", "maybe", "no"]), "answer_id": j + 1}
      )
    questions.append({"question_id": qid, "image_id": image_id, "question": f"question {i}?"})
    annotations.append(
      {
        "question_id": qid,
        "image_id": image_id,
        "question_type": rng.choice(_QUESTION_TYPES[answer_type]),
        "answer_type": answer_type,
        "multiple_choice_answer": canonical,
        "answers": answers,
      }
    )
    guess = rng.choice(forms + other_forms + [canonical] * 4)
    results.append({"question_id": qid, "answer": guess})
  rng.shuffle(results)
  return (
    {"questions": questions, "task_type": "Open-Ended", "data_subtype": "synthetic"},
    {"annotations": annotations},
    results,
  )


def _load(path: str):
  with open(path, "rb") as f:
    return json.loads(f.read())


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


@contextlib.contextmanager
def _gc(enabled: bool):
  was = gc.isenabled()
  (gc.enable if enabled else gc.disable)()
  try:
    yield
  finally:
    (gc.enable if was else gc.disable)()


def in_fresh_process(fn, *args):
  """`fn(*args)` in a process forked from this one for the call alone."""
  with multiprocessing.get_context("fork").Pool(1) as pool:
    return pool.apply(fn, args)


def write_dataset(paths: list[str], questions: int, seed: int) -> None:
  for path, obj in zip(paths, make_dataset(questions, seed)):
    with open(path, "w") as f:
      json.dump(obj, f)


def _scored(accuracy: dict, per_question: dict) -> tuple[dict, str]:
  """The accuracy and a digest of it with every per-question value, for comparing."""
  text = json.dumps([accuracy, sorted(per_question.items())], sort_keys=True)
  return accuracy, hashlib.sha256(text.encode()).hexdigest()


def time_score(paths: list[str]) -> tuple[float, tuple[dict, str]]:
  """Seconds of `evaluate_files`."""
  scored, t = _timed(lambda: evaluate_files(*paths))
  return t, _scored(*scored)


def time_reference(paths: list[str], gc_enabled: bool) -> tuple[float, float, tuple[dict, str]]:
  """Seconds of the reference end to end and of its loop alone."""

  def run():
    _load(paths[0])
    annotations = _load(paths[1])["annotations"]
    results = {r["question_id"]: r["answer"] for r in _load(paths[2])}
    return _timed(lambda: reference_accuracy(annotations, results))

  with _gc(gc_enabled):
    (scored, t_loop), t = _timed(run)
  return t, t_loop, _scored(*scored)


def phases_of_a_run(paths: list[str]) -> dict[str, float]:
  """Seconds per phase of an `evaluate_files` run (the GC paused, as there)."""
  with _gc(False):
    content, t_read = _timed(lambda: official_files.read_bytes(paths[1]))
    decoded, t_decode = _timed(lambda: inputs.decode_annotations(content))
    encoded, t_encode = _timed(lambda: inputs.encode_decoded(decoded))
    t_free = _timed(decoded.clear)[1]
    assert encoded is not None, "the benchmark's annotations left the fast path"
    questions, t_questions = _timed(lambda: inputs.read_questions(paths[0]))
    t_score = _timed(lambda: score_encoded(encoded, inputs.read_results(paths[2], questions.question_ids)))[1]
  return {
    "reading the annotations file": t_read,
    "decoding it (msgspec, typed)": t_decode,
    "checking and encoding it": t_encode,
    "freeing its records": t_free,
    "the questions file": t_questions,
    "the results file and scoring": t_score,
  }


def parse_times(paths: list[str]) -> dict[str, float]:
  """Seconds to parse the three files (read as bytes first; the GC paused)."""
  contents = [official_files.read_bytes(p) for p in paths]
  generic = msgspec.json.Decoder()
  typed = [inputs._Questions, inputs._Annotations, list[inputs._Result]]
  parsers = {
    "json": lambda: [json.loads(c) for c in contents],
    "msgspec": lambda: [generic.decode(c) for c in contents],
    "msgspec typed": lambda: [msgspec.json.decode(c, type=t) for c, t in zip(contents, typed)],
  }
  with _gc(False):
    return {name: _timed(parse)[1] for name, parse in parsers.items()}


def kernel_seconds(paths: list[str]) -> tuple[float, str]:
  """Median seconds of the jitted kernel on encoded arrays on the device (and the
  device's platform), its accuracies checked against the host scorer's exact ones."""
  import jax  # noqa: PLC0415  (after the forks: jax is multithreaded)

  annotations = _load(paths[1])["annotations"]
  results = {r["question_id"]: r["answer"] for r in _load(paths[2])}
  interner = Interner()
  targets = encode_targets(annotations, interner)
  pred = encode_predictions([results[a["question_id"]] for a in annotations], targets["unanimous"], interner)
  host = (pred, targets["gt_ids"], targets["gt_dup"], targets["gt_valid"])
  arrays = jax.device_put(host)
  kernel = jax.jit(question_accuracy)
  kernel(*arrays).block_until_ready()
  t_kernel = float(np.median([_timed(lambda: kernel(*arrays).block_until_ready())[1] for _ in range(20)]))
  assert np.abs(np.asarray(kernel(*arrays), np.float64) - question_accuracy_exact(*host)).max() < 1e-6
  return t_kernel, jax.devices()[0].platform


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--questions", type=record.count, default=200_000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--rounds", type=record.count, default=3)
  record.add_flag(parser)
  args = parser.parse_args()
  record.begin(args.json)

  times: dict[str, list[float]] = {k: [] for k in ("score", "ref", "ref_gc", "loop")}
  with tempfile.TemporaryDirectory() as tmp:
    paths = [os.path.join(tmp, name) for name in ("q.json", "a.json", "r.json")]
    in_fresh_process(write_dataset, paths, args.questions, args.seed)
    sizes = ", ".join(f"{os.path.basename(p)} {os.path.getsize(p) / 2**20:.0f} MiB" for p in paths)
    print(f"{args.questions} questions ({sizes}); {args.rounds} rounds, medians", flush=True)

    for r in range(args.rounds):
      t, scored_here = in_fresh_process(time_score, paths)
      times["score"].append(t)
      t, t_loop, ref = in_fresh_process(time_reference, paths, False)
      times["ref"].append(t)
      times["loop"].append(t_loop)
      t, _, ref_gc = in_fresh_process(time_reference, paths, True)
      times["ref_gc"].append(t)
      for scored in (scored_here, ref_gc):
        assert scored == ref, (scored, ref)
      print(f"round {r + 1}: reference {times['ref'][-1]:.2f} s (GC on: {times['ref_gc'][-1]:.2f} s), "
            f"vqajax score {times['score'][-1]:.2f} s", flush=True)
    phases = in_fresh_process(phases_of_a_run, paths)
    parse = in_fresh_process(parse_times, paths)
    accuracy = ref[0]
    print(
      f"identical: overall {accuracy['overall']}, perAnswerType {accuracy['perAnswerType']}, "
      f"{len(accuracy['perQuestionType'])} question types, every one of the {args.questions} questions' accuracies"
    )
    t_kernel, platform = kernel_seconds(paths)

  med = {k: float(np.median(v)) for k, v in times.items()}
  ratios = lambda k, ref="ref": np.array(times[ref]) / np.array(times[k])
  ratio = lambda k, ref="ref": float(np.median(ratios(k, ref)))
  total = sum(phases.values())
  print(
    f"one run by phase ({total:.2f} s): "
    + ", ".join(f"{name} {t:.2f} s ({t / total:.0%})" for name, t in phases.items())
  )
  print("JSON parsing alone, all three files: " + ", ".join(f"{name} {t:.2f} s" for name, t in parse.items()))
  print(f"reference loop alone   {med['loop']:8.3f} s (median of {args.rounds})")
  print(f"jitted kernel alone    {t_kernel * 1e3:8.3f} ms (median of 20) on {platform}")
  print(f"kernel speedup {med['loop'] / t_kernel:.0f}x, median vs median (target >= 1000x)")
  print(f"reference end to end   {med['ref']:8.3f} s (JSON loading included; GC on: {med['ref_gc']:.3f} s)")
  print(f"vqajax score           {med['score']:8.3f} s (JSON loading included)")
  print(f"end-to-end speedup {ratio('score'):5.1f}x (target >= 10x); "
        f"vs the reference with the GC on {ratio('score', 'ref_gc'):5.1f}x")
  n = f"{args.questions} questions"
  record.write(args.json, "bench_score", [
    record.row(f"the accuracy kernel alone vs the official loop alone, {n}", med["loop"] / t_kernel, "x", ">= 1000x"),
    record.row(f"`vqajax score` vs the official loop, end to end, {n}", ratio("score"), "x", ">= 10x",
               ratios("score")),
    record.row(f"`vqajax score`, end to end, {n}", med["score"], "s", rounds=times["score"]),
    record.row(f"the official loop, end to end, {n}", med["ref"], "s", rounds=times["ref"]),
  ])


if __name__ == "__main__":
  main()
