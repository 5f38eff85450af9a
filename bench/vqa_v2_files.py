"""Official-format VQA v2 files at VQA v2's real counts (or a share of them), for benchmarks.

  python bench/vqa_v2_files.py OUT [--scale 1.0] [--seed 0]

Writes into the new folder OUT, as the official files are named and shaped:
  v2_OpenEnded_mscoco_{train,val}2014_questions.json   443,757 / 214,354 questions
  v2_mscoco_{train,val}2014_annotations.json           10 answers each
  features/fc7.h5                                      [82,783 + 40,504, 4096] float16 (~1 GB)

Questions are 4-10 words drawn with Zipf frequencies from a ~15k-word vocabulary (the
first word from a few dozen question openers, as VQA's question types); each question's
answer is drawn with Zipf frequencies from ~30k answer strings (yes / no and numbers
among the most frequent), and its ten annotators give it, or another answer, as real
annotators do (~80% agreement). `--scale` multiplies every count (images, questions,
vocabulary and answers), so the cost's growth can be measured (1/8, 1/4, 1/2, 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import msgspec
import numpy as np
import record

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN = {"images": 82_783, "questions": 443_757}
VAL = {"images": 40_504, "questions": 214_354}
VOCAB, ANSWERS = 15_000, 30_000
OPENERS = ("what", "is", "how", "are", "does", "which", "where", "who", "why", "can", "do", "what color",
           "how many", "is there", "what is the", "is this", "what kind of", "are there", "what type of")


def _zipf(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
  """`size` ranks in [0, n) with probability ~ 1 / (rank + 1)."""
  p = 1.0 / np.arange(1, n + 1)
  return rng.choice(n, size=size, p=p / p.sum())


def _words(n: int) -> list[str]:
  letters = "abcdefghijklmnopqrstuvwxyz"
  return [letters[i % 26] + letters[(i // 26) % 26] + letters[(i // 676) % 26] + str(i // 17576 or "")
          for i in range(n)]


def _answers(n: int) -> list[str]:
  common = ["yes", "no", *map(str, range(10)), "white", "red", "blue", "black", "green", "brown"]
  return common + [f"{w} {v}" if i % 3 else w for i, (w, v) in enumerate(zip(_words(n), _words(n)[::-1]))][:n - len(common)]


def _answer_type(answer: str) -> str:
  return "yes/no" if answer in ("yes", "no") else "number" if answer.isdigit() else "other"


def split(rng: np.random.Generator, name: str, counts: dict, first_image: int, words: list[str],
          answers: list[str]) -> tuple[dict, dict, np.ndarray]:
  """(questions file, annotations file, image ids) of one split."""
  n_images, n = counts["images"], counts["questions"]
  image_ids = np.arange(first_image, first_image + n_images, dtype=np.int64)
  per_image = np.full(n_images, n // n_images)
  per_image[:n - per_image.sum()] += 1
  images = np.repeat(image_ids, per_image)
  question_ids = images * 10 + np.concatenate([np.arange(k) for k in per_image])
  lengths = rng.integers(4, 11, n)
  tokens = _zipf(rng, len(words), int(lengths.sum()))
  openers = rng.integers(0, len(OPENERS), n)
  truth = _zipf(rng, len(answers), n)
  given = np.where(rng.random((n, 10)) < 0.8, truth[:, None], _zipf(rng, len(answers), n * 10).reshape(n, 10))
  confident = rng.random((n, 10)) < 0.9
  questions, annotations, start = [], [], 0
  for i in range(n):
    text = " ".join(words[t] for t in tokens[start:start + lengths[i]])
    start += lengths[i]
    image_id, question_id = int(images[i]), int(question_ids[i])
    opener = OPENERS[openers[i]]
    questions.append({"image_id": image_id, "question": f"{opener} {text}?", "question_id": question_id})
    answer_list = [{"answer": answers[a], "answer_confidence": "yes" if c else "maybe", "answer_id": j + 1}
                   for j, (a, c) in enumerate(zip(given[i], confident[i]))]
    values, counts_ = np.unique(given[i], return_counts=True)
    best = answers[int(values[np.argmax(counts_)])]
    annotations.append({"question_type": opener, "multiple_choice_answer": best, "answers": answer_list,
                        "image_id": image_id, "answer_type": _answer_type(best), "question_id": question_id})
  info = {"description": "generated at VQA v2's counts (bench/vqa_v2_files.py)", "version": "2.0"}
  header = {"info": info, "license": {"name": "none"}, "data_type": "mscoco"}
  return ({**header, "task_type": "Open-Ended", "data_subtype": f"{name}2014", "questions": questions},
          {**header, "data_subtype": f"{name}2014", "annotations": annotations}, image_ids)


def generate(out: str, scale: float = 1.0, seed: int = 0) -> dict[str, float]:
  """Writes the files into the new folder `out`; returns seconds per phase."""
  from bench_pipeline import write_store
  os.makedirs(os.path.join(out, "features"))
  rng, times = np.random.default_rng(seed), {}
  words, answers = _words(max(100, round(VOCAB * scale))), _answers(max(100, round(ANSWERS * scale)))
  first, all_ids = 0, []  # image ids 0..N-1: the store's rows (`bench_pipeline.write_store`)
  for name, counts in (("train", TRAIN), ("val", VAL)):
    start = time.perf_counter()
    scaled = {k: max(10, round(v * scale)) for k, v in counts.items()}
    questions, annotations, ids = split(rng, name, scaled, first, words, answers)
    first += len(ids)
    all_ids.append(ids)
    for path, content in ((f"v2_OpenEnded_mscoco_{name}2014_questions.json", questions),
                          (f"v2_mscoco_{name}2014_annotations.json", annotations)):
      with open(os.path.join(out, path), "wb") as f:
        f.write(msgspec.json.encode(content))
    times[f"{name} files"] = time.perf_counter() - start
  start = time.perf_counter()
  write_store(os.path.join(out, "features", "fc7.h5"), int(sum(map(len, all_ids))), "float16")
  times["fc7 store"] = time.perf_counter() - start
  return times


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("out")
  parser.add_argument("--scale", type=record.amount, default=1.0)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  times = generate(args.out, args.scale, args.seed)
  print(", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
  main()
