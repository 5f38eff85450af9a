"""The official VQA (MSCOCO) question types and the rule that assigns them.

`MSCOCO_QUESTION_TYPES` is the 65-entry list released with VQA
(`QuestionTypes/mscoco_question_types.txt`), in file order. A question's type is the
longest listed type whose words are a prefix of the question's words: when a type of
n words and one of n+k words share their first n words, the shorter one only gets the
questions the longer one does not. Questions matching no type are
'none of the above' (itself the last entry of the list).
"""

from __future__ import annotations

import re

MSCOCO_QUESTION_TYPES: tuple[str, ...] = (
    "how many",
    "is the",
    "what",
    "what color is the",
    "what is the",
    "is this",
    "is this a",
    "what is",
    "are the",
    "what kind of",
    "is there a",
    "what type of",
    "is it",
    "what are the",
    "where is the",
    "is there",
    "does the",
    "what color are the",
    "are these",
    "are there",
    "which",
    "is",
    "what is the man",
    "is the man",
    "are",
    "how",
    "does this",
    "what is on the",
    "what does the",
    "how many people are",
    "what is in the",
    "what is this",
    "do",
    "what are",
    "are they",
    "what time",
    "what sport is",
    "are there any",
    "is he",
    "what color is",
    "why",
    "where are the",
    "what color",
    "who is",
    "what animal is",
    "is the woman",
    "is this an",
    "do you",
    "how many people are in",
    "what room is",
    "has",
    "is this person",
    "what is the woman",
    "can you",
    "why is the",
    "is the person",
    "what is the color of the",
    "what is the person",
    "could",
    "was",
    "is that a",
    "what number is",
    "what is the name",
    "what brand",
    "none of the above",
)

NONE_OF_THE_ABOVE = "none of the above"

_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> tuple[str, ...]:
  # Lower-case; punctuation ("bus?", "dark.") is not part of a word.
  return tuple(_WORD.findall(text.lower()))


_INDEX_CACHE: dict[tuple[str, ...], tuple[dict[tuple[str, ...], str], int]] = {}


def _index(types) -> tuple[dict[tuple[str, ...], str], int]:
  key = tuple(types)
  found = _INDEX_CACHE.get(key)
  if found is None:
    table = {_words(t): t for t in key if t != NONE_OF_THE_ABOVE}
    found = (table, max((len(w) for w in table), default=0))
    _INDEX_CACHE[key] = found
  return found


def question_type(question: str, types=MSCOCO_QUESTION_TYPES) -> str:
  """The longest type in `types` that is a word-prefix of `question` (case-insensitive).

  >>> question_type("What color is the bus?")
  'what color is the'
  >>> question_type("Why is it dark?")
  'why'
  """
  table, longest = _index(types)
  words = _words(question)
  for n in range(min(longest, len(words)), 0, -1):
    found = table.get(words[:n])
    if found is not None:
      return found
  return NONE_OF_THE_ABOVE
