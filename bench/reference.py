"""Plain per-question re-implementation of the official `VQAEval.evaluate` loop.

This is the benchmark baseline and the test oracle for `vqa_accuracy` (tests import it
from bench/; bench imports nothing from tests/): it follows the official control flow
step by step (including the leave-one-out by dict inequality and the left-to-right float
sums) and favours obviousness over speed. Its answer processing
is its own, written from the official `vqaEval.py` (`processPunctuation`,
`processDigitArticle` and their tables), not the library's. Like the official code it is
Python 2 where that matters: `\\d` is an ASCII digit, `round` ties go away from zero and
sums are plain left-to-right additions (not Python >= 3.12's compensated `sum`).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

# vqaEval.py's tables, as they stand there (its capitalised keys can never match a
# lower-cased word; "somebody'd" maps backwards to "somebodyd").
CONTRACTIONS = {
  "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
  "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't", "dont": "don't",
  "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't", "havent": "haven't",
  "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's", "howd": "how'd", "howll": "how'll",
  "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm", "Ive": "I've", "isnt": "isn't", "itd": "it'd",
  "itd've": "it'd've", "it'dve": "it'd've", "itll": "it'll", "let's": "let's", "maam": "ma'am", "mightnt": "mightn't",
  "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've", "mustnt": "mustn't",
  "mustve": "must've", "neednt": "needn't", "notve": "not've", "oclock": "o'clock", "oughtnt": "oughtn't",
  "ow's'at": "'ow's'at", "'ows'at": "'ow's'at", "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've",
  "she'dve": "she'd've", "she's": "she's", "shouldve": "should've", "shouldnt": "shouldn't",
  "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd",
  "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've", "somebodyll": "somebody'll",
  "somebodys": "somebody's", "someoned": "someone'd", "someoned've": "someone'd've", "someone'dve": "someone'd've",
  "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
  "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's", "thered": "there'd",
  "thered've": "there'd've", "there'dve": "there'd've", "therere": "there're", "theres": "there's", "theyd": "they'd",
  "theyd've": "they'd've", "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're", "theyve": "they've",
  "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've", "weve": "we've", "werent": "weren't",
  "whatll": "what'll", "whatre": "what're", "whats": "what's", "whatve": "what've", "whens": "when's",
  "whered": "where'd", "wheres": "where's", "whereve": "where've", "whod": "who'd", "whod've": "who'd've",
  "who'dve": "who'd've", "wholl": "who'll", "whos": "who's", "whove": "who've", "whyll": "why'll", "whyre": "why're",
  "whys": "why's", "wont": "won't", "wouldve": "would've", "wouldnt": "wouldn't", "wouldnt've": "wouldn't've",
  "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll", "y'allll": "y'all'll",
  "yall'd've": "y'all'd've", "y'alld've": "y'all'd've", "y'all'dve": "y'all'd've", "youd": "you'd",
  "youd've": "you'd've", "you'dve": "you'd've", "youll": "you'll", "youre": "you're", "youve": "you've",
}
MANUAL_MAP = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
              "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
ARTICLES = ["a", "an", "the"]
PUNCT = [";", r"/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!"]
PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)", re.ASCII)
COMMA_STRIP = re.compile(r"(\d)(\,)(\d)", re.ASCII)


def clean(text: str) -> str:
  """Newlines and tabs to spaces, then stripped (every answer and prediction)."""
  return text.replace("\n", " ").replace("\t", " ").strip()


def process_punctuation(text: str) -> str:
  out = text
  for p in PUNCT:
    if (p + " " in text or " " + p in text) or COMMA_STRIP.search(text) is not None:
      out = out.replace(p, "")
    else:
      out = out.replace(p, " ")
  return PERIOD_STRIP.sub("", out, re.UNICODE)  # the official call: re.UNICODE lands in `count` (32)


def process_digit_article(text: str) -> str:
  words = [MANUAL_MAP.get(word, word) for word in text.lower().split()]
  words = [word for word in words if word not in ARTICLES]
  return " ".join(CONTRACTIONS.get(word, word) for word in words)


def normalize(text: str) -> str:
  return process_digit_article(process_punctuation(text))


def round_official(x: float, ndigits: int = 2) -> float:
  """Python 2 `round`: nearest multiple of 10**-ndigits of the exact binary value,
  ties away from zero (Python 3's `round` sends ties to even, e.g. 0.125 -> 0.12)."""
  return float(Decimal(x).quantize(Decimal(1).scaleb(-ndigits), rounding=ROUND_HALF_UP))


def mean_percent(values: list[float]) -> float:
  total = 0
  for v in values:
    total += v
  return round_official(100 * float(total) / len(values))


def reference_accuracy(
  annotations: list[dict[str, Any]], results: Mapping[int, str]
) -> tuple[dict[str, Any], dict[int, float]]:
  """Official accuracy of `results` ({question_id: answer}) on parsed annotation records.

  Returns the official `accuracy` dict and `evalQA` ({question_id: rounded percent}).
  The inputs are not modified (answer dicts are copied before the in-place cleaning).
  """
  all_acc: list[float] = []
  by_question_type: dict[str, list[float]] = {}
  by_answer_type: dict[str, list[float]] = {}
  per_question: dict[int, float] = {}
  for ann in annotations:
    answers = [dict(a) for a in ann["answers"]]
    for a in answers:
      a["answer"] = clean(a["answer"])
    prediction = clean(results[ann["question_id"]])
    if len({a["answer"] for a in answers}) > 1:
      for a in answers:
        a["answer"] = normalize(a["answer"])
      prediction = normalize(prediction)
    total = 0
    for gt in answers:
      others = [a for a in answers if a != gt]
      matches = [a for a in others if a["answer"] == prediction]
      total += min(1, float(len(matches)) / 3)
    acc = float(total) / len(answers)
    all_acc.append(acc)
    by_question_type.setdefault(ann["question_type"], []).append(acc)
    by_answer_type.setdefault(ann["answer_type"], []).append(acc)
    per_question[ann["question_id"]] = round_official(100 * acc)
  accuracy = {
    "overall": mean_percent(all_acc),
    "perQuestionType": {t: mean_percent(v) for t, v in by_question_type.items()},
    "perAnswerType": {t: mean_percent(v) for t, v in by_answer_type.items()},
  }
  return accuracy, per_question
