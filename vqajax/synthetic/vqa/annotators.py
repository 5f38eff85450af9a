"""Ten simulated annotators per synthetic question.

Annotators answer a question's true answer (a `Spec` from `synthetic_questions`) with
probability ~1 - hardness, sometimes in another phrasing ("sofa" for "couch"), else a
plausible wrong answer; then they write it with human surface noise: case ("Yes"),
punctuation ("yes!"), articles ("the dog"), number words ("two"), "1,000"-style commas,
stray whitespace. The official answer normalisation undoes the surface noise but not the
other phrasings, as with real VQA annotations. The multiple-choice answer is the most
frequent answer after normalisation (ties: the first given), already normalised.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from vqajax.synthetic.vqa.world import Image, weighted
from vqajax.vqa.question_types import question_type

_NUM_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def article(noun: str) -> str:
  return ("an " if noun[0] in "aeiou" else "a ") + noun


@dataclasses.dataclass(frozen=True)
class Spec:
  text: str
  answer: str
  answer_type: str
  hardness: float = 0.1
  alts: tuple = ()          # ((alternative, probability a correct annotator uses it), ...)
  wrong: tuple = ()         # ((wrong answer, weight), ...)
  noun: bool = False        # article variants ("a dog", "the dog") make sense


@dataclasses.dataclass
class Question:
  question_id: int
  image_id: int
  question: str
  question_type: str
  answer_type: str
  answer: str               # the true (latent) answer, canonical
  answers: list             # 10 x {"answer", "answer_confidence", "answer_id"}
  multiple_choice_answer: str
  template: str


SYNONYMS = {
    "couch": {"sofa": .3}, "tv": {"television": .3}, "refrigerator": {"fridge": .35}, "bicycle": {"bike": .4},
    "motorcycle": {"motorbike": .15, "bike": .1}, "airplane": {"plane": .4, "jet": .1}, "donut": {"doughnut": .25},
    "tennis racket": {"racket": .25, "racquet": .1}, "baseball bat": {"bat": .35}, "laptop": {"computer": .25},
    "phone": {"cell phone": .25, "cellphone": .1}, "cup": {"mug": .15}, "remote": {"controller": .2},
    "bag": {"purse": .15}, "soccer ball": {"ball": .3}, "skis": {"ski poles": .1}, "boat": {"ship": .1},
    "dog": {"puppy": .05}, "cat": {"kitten": .05}, "sandwich": {"sub": .05},
    "playing tennis": {"tennis": .25, "swinging": .1}, "playing baseball": {"batting": .2, "baseball": .1},
    "playing frisbee": {"throwing frisbee": .15, "frisbee": .1}, "playing soccer": {"soccer": .2},
    "skateboarding": {"skating": .15}, "riding horse": {"riding": .3}, "flying kite": {"kite flying": .2},
    "watching tv": {"watching television": .1, "relaxing": .1}, "typing": {"working": .3, "using laptop": .2},
    "laying down": {"lying down": .2, "resting": .1}, "sleeping": {"resting": .1}, "grazing": {"eating": .3},
    "talking on phone": {"talking": .2, "on phone": .1}, "black and white": {"white": .12, "black": .08},
    "daytime": {"day": .25, "afternoon": .2, "morning": .1}, "night": {"nighttime": .3, "evening": .1},
    "living room": {"den": .05}, "boy": {"child": .2, "kid": .1}, "girl": {"child": .2}, "man": {"person": .1},
    "woman": {"lady": .15, "person": .1},
}
def surface(answer: str, answer_type: str, noun: bool, r: random.Random) -> str:
  """How one annotator writes `answer`: normalisation-invariant noise."""
  s = answer
  u = r.random()
  if answer_type == "number" and answer.isdigit():
    n = int(answer)
    if n <= 10 and u < 0.07:
      s = _NUM_WORDS[n]
    elif n >= 1000 and u < 0.5:
      s = f"{n:,}"
  elif noun and u < 0.07 and answer not in ("nothing", "yes", "no"):
    if s.startswith(("on ", "in ")):
      s = s[:3] + "the " + s[3:]
    else:
      s = "the " + s if r.random() < 0.5 else article(s)
  v = r.random()
  if v < 0.04:
    s = s[0].upper() + s[1:]
  elif v < 0.045:
    s = s.upper()
  if r.random() < 0.015:
    s += r.choice(("!", ".", "!!"))
  x = r.random()
  if x < 0.002:
    s = " " + s
  elif x < 0.004:
    s += " "
  elif x < 0.006:
    s += "\t"
  return s


def annotate(spec: Spec, r: random.Random) -> tuple[list[dict], str]:
  """Ten annotators' answers and the multiple-choice answer (most frequent canonical answer)."""
  hard = min(0.95, max(0.0, spec.hardness + r.uniform(-0.04, 0.06)))
  answers, canon = [], []
  for j in range(10):
    if r.random() >= hard or not spec.wrong:
      c = spec.answer
      for alt, p in spec.alts:
        if r.random() < p:
          c = alt
          break
      ok = True
    else:
      c, ok = weighted(r, spec.wrong), False
    u = r.random()
    if ok:
      conf = "yes" if u < 0.9 - 0.5 * hard else ("maybe" if u < 0.98 - 0.1 * hard else "no")
    else:
      conf = "yes" if u < 0.35 else ("maybe" if u < 0.8 else "no")
    answers.append({"answer": surface(c, spec.answer_type, spec.noun, r), "answer_confidence": conf,
                    "answer_id": j + 1})
    canon.append(c)
  counts = Counter(canon)
  best = max(counts.values())
  mc = next(c for c in canon if counts[c] == best)  # ties: the first given
  return answers, mc


def make_question(img: Image, k: int, template: str, spec: Spec, r: random.Random) -> Question:
  text = spec.text[0].upper() + spec.text[1:]
  answers, mc = annotate(spec, r)
  return Question(question_id=img.image_id * 1000 + k, image_id=img.image_id, question=text,
                  question_type=question_type(text), answer_type=spec.answer_type, answer=spec.answer,
                  answers=answers, multiple_choice_answer=mc, template=template)
