"""Answer normalisation of the official VQA evaluator (`vqaEval.py`), quirks included.

The official code is Python 2; where Python 2 and 3 differ we follow Python 2:
`\\d` in its regexes is ASCII-only (they are compiled without `re.UNICODE`), so
digits here are `[0-9]`. Every quirk below is deliberate:

- punctuation is removed (rather than replaced by a space) when the ORIGINAL string has
  that character next to a space, or has any `digit,digit` anywhere;
- the period pattern `(?!<=\\d)(\\.)(?!\\d)` has a broken look-behind, so it removes
  every period not followed by a digit, and `re.UNICODE` (== 32) is passed as the
  `count` argument: only the first 32 such periods are removed;
- the contraction table keeps its capitalised keys ("Im", "Ive", ...) that can never
  match lower-cased words, and the backwards entry "somebody'd" -> "somebodyd".
"""

from __future__ import annotations

import re

_PUNCTUATION = (
  ";",
  "/",
  "[",
  "]",
  '"',
  "{",
  "}",
  "(",
  ")",
  "=",
  "+",
  "\\",
  "_",
  "-",
  ">",
  "<",
  "@",
  "`",
  ",",
  "?",
  "!",
)
_DIGIT_COMMA_DIGIT = re.compile(r"[0-9],[0-9]")
_PERIOD = re.compile(r"\.(?![0-9])")
_PERIOD_COUNT = 32  # re.UNICODE, passed positionally as `count` by the official code

NUMBER_WORDS = {
  "none": "0",
  "zero": "0",
  "one": "1",
  "two": "2",
  "three": "3",
  "four": "4",
  "five": "5",
  "six": "6",
  "seven": "7",
  "eight": "8",
  "nine": "9",
  "ten": "10",
}
ARTICLES = frozenset({"a", "an", "the"})

# One line per replacement: the replacement first, then every spelling mapped to it.
_CONTRACTION_LINES = """
ain't aint
aren't arent
can't cant
could've couldve
couldn't couldnt
couldn't've couldn'tve couldnt've
didn't didnt
doesn't doesnt
don't dont
hadn't hadnt
hadn't've hadnt've hadn'tve
hasn't hasnt
haven't havent
he'd hed
he'd've hed've he'dve
he's hes
how'd howd
how'll howll
how's hows
I'd've Id've I'dve
I'm Im
I've Ive
isn't isnt
it'd itd
it'd've itd've it'dve
it'll itll
let's let's
ma'am maam
mightn't mightnt
mightn't've mightnt've mightn'tve
might've mightve
mustn't mustnt
must've mustve
needn't neednt
not've notve
o'clock oclock
oughtn't oughtnt
'ow's'at ow's'at 'ows'at 'ow'sat
shan't shant
she'd've shed've she'dve
she's she's
should've shouldve
shouldn't shouldnt
shouldn't've shouldnt've shouldn'tve
somebodyd somebody'd
somebody'd've somebodyd've somebody'dve
somebody'll somebodyll
somebody's somebodys
someone'd someoned
someone'd've someoned've someone'dve
someone'll someonell
someone's someones
something'd somethingd
something'd've somethingd've something'dve
something'll somethingll
that's thats
there'd thered
there'd've thered've there'dve
there're therere
there's theres
they'd theyd
they'd've theyd've they'dve
they'll theyll
they're theyre
they've theyve
'twas twas
wasn't wasnt
we'd've wed've we'dve
we've weve
weren't werent
what'll whatll
what're whatre
what's whats
what've whatve
when's whens
where'd whered
where's wheres
where've whereve
who'd whod
who'd've whod've who'dve
who'll wholl
who's whos
who've whove
why'll whyll
why're whyre
why's whys
won't wont
would've wouldve
wouldn't wouldnt
wouldn't've wouldnt've wouldn'tve
y'all yall
y'all'll yall'll y'allll
y'all'd've yall'd've y'alld've y'all'dve
you'd youd
you'd've youd've you'dve
you'll youll
you're youre
you've youve
"""
CONTRACTIONS = {
  spelling: line.split()[0] for line in _CONTRACTION_LINES.strip().splitlines() for spelling in line.split()[1:]
}


def clean(s: str) -> str:
  """Newlines and tabs to spaces, then strip (applied to every answer and prediction)."""
  return s.replace("\n", " ").replace("\t", " ").strip()


def process_punctuation(s: str) -> str:
  """The official `processPunctuation`."""
  remove_all = _DIGIT_COMMA_DIGIT.search(s) is not None
  table = {ord(p): "" if remove_all or p + " " in s or " " + p in s else " " for p in _PUNCTUATION if p in s}
  return _PERIOD.sub("", s.translate(table), count=_PERIOD_COUNT)


def process_digit_article(s: str) -> str:
  """The official `processDigitArticle`: lower-case, number words, articles, contractions."""
  words = (NUMBER_WORDS.get(w, w) for w in s.lower().split())
  return " ".join(CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES)


def normalize(s: str) -> str:
  """Full normalisation applied when a question's annotators disagree."""
  return process_digit_article(process_punctuation(s))
