"""Questions about synthetic images, from templates keyed to the official question types.

Each template reads an image's latent attributes (`synthetic_world.Image`) and returns a
`Spec`: the question text, its true (canonical, already normalised) answer, the answer
type, alternative phrasings a correct annotator may use ("sofa" for "couch"), the wrong
answers a mistaken annotator picks from, and a hardness in [0, 1].

Language priors come from the world and from how questions are asked: "is there a"
questions are mostly asked about things that are there, counts are mostly 1-3, most
buses are white or red. "why", "what brand", "what is the name" questions are hard:
annotators disagree a lot.

The ten answers per question come from `synthetic_annotators`.
"""

from __future__ import annotations

import dataclasses
import random

from vqajax.synthetic.vqa import world as W
from vqajax.synthetic.vqa.annotators import SYNONYMS, Spec, article
from vqajax.synthetic.vqa.world import Image, weighted

ANSWER_TYPE_SHARES = {"yes/no": 0.38, "number": 0.12, "other": 0.50}
_SHARES = W.Table(ANSWER_TYPE_SHARES)


ACTIVITIES = ("standing", "sitting", "walking", "playing", "eating", "riding", "talking on phone",
              "playing tennis", "skateboarding", "surfing", "skiing", "playing frisbee", "looking")
FILLERS = {"": 40, " in the picture": 6, " in this photo": 4, " in the image": 4, " here": 3,
           " in this picture": 3, " in the photo": 2, " in this image": 2, " shown": 1, " pictured": 1,
           " visible": 1, " in this scene": .7, " in the photograph": .5, " in this shot": .4, " in the pic": .3,
           " in this snapshot": .2, " in the frame": .2, " on display": .15, " in view": .1}
ADJECTIVES = {"": 30, "small ": 2, "large ": 2, "little ": 1.5, "big ": 1.5, "cute ": .5, "old ": .5,
              "tiny ": .3, "fluffy ": .2, "shiny ": .2, "adorable ": .15, "enormous ": .1, "wooden ": .1}
_FILLERS, _ADJECTIVES = W.Table(FILLERS), W.Table(ADJECTIVES)
REASONS = {"animal": ("resting", "hungry", "waiting", "curious"), "vehicle": ("parked", "waiting", "transportation"),
           "food": ("lunch", "dinner", "for sale", "party"), "object": ("decoration", "for sale", "storage", "display"),
           "sport": ("practice", "fun", "competition", "exercise")}
NAMES = ("main street", "broadway", "elm", "park avenue", "ocean view", "queen mary", "sunset")
SIGN_TEXT = ("stop", "no parking", "exit", "open", "closed", "yield", "do not enter")


def _other(r: random.Random, options, true: str) -> str:
  options = [o for o in options if o != true]
  return options[r.randrange(len(options))]


def _yes_no(text: str, truth: bool, hardness: float = 0.05) -> Spec:
  return Spec(text, "yes" if truth else "no", "yes/no", hardness, wrong=(("no" if truth else "yes", 1),))


def _noun_for_presence(img: Image, r: random.Random, p_present: float) -> str:
  present = [img.name] * 3 + list(img.secondaries)
  if r.random() < p_present:
    return present[r.randrange(len(present))]
  absent = [s for s in W.SECONDARY_NAMES if not img.has(s)] + [c for c in W.CATEGORY_NAMES[:34] if not img.has(c)]
  return absent[r.randrange(len(absent))]


def _colour_wrong(colour: str) -> tuple:
  return tuple((c, 3.0) for c in W.SIMILAR_COLOURS[colour]) + tuple(
      (c, 1.0) for c in ("white", "black", "brown", "blue", "red") if c != colour)


def _person_word(img: Image, r: random.Random) -> str:
  return "person" if r.random() < 0.15 else img.person


def _count_spec(text: str, n: int) -> Spec:
  wrong = tuple((str(m), 1.0 / (1 + abs(m - n))) for m in range(max(0, n - 2), n + 3) if m != n)
  return Spec(text, str(n), "number", 0.04 + 0.035 * n, wrong=wrong)


# --- yes/no ------------------------------------------------------------------------

def t_is_there(img, r):
  noun = _noun_for_presence(img, r, 0.7)
  return _yes_no(f"is there {article(weighted(r, _ADJECTIVES) + noun)}{weighted(r, _FILLERS)}?", img.has(noun))


def t_are_there(img, r):
  noun = _noun_for_presence(img, r, 0.65)
  any_ = "any " if r.random() < 0.3 else ""
  return _yes_no(f"are there {any_}{W.PLURAL[noun]}{weighted(r, _FILLERS)}?", img.has(noun))


def t_is_the_colour(img, r):
  asked = img.colour if r.random() < 0.55 else weighted(r, _colour_wrong(img.colour))
  hard = 0.3 if img.colour == "black and white" and asked in ("black", "white") else 0.08
  return _yes_no(f"is the {img.name} {asked}?", asked == img.colour, hard)


def t_is_this_a(img, r):
  if img.indoor and r.random() < 0.3:
    asked = img.scene if r.random() < 0.6 else _other(r, W.ROOMS, img.scene)
    return _yes_no(f"is this {article(asked)}?", asked == img.scene)
  same_kind = [c[0] for c in W.CATEGORIES if c[2] == img.kind]
  asked = img.name if r.random() < 0.6 else _other(r, same_kind, img.name)
  that = "that" if r.random() < 0.1 else "this"
  return _yes_no(f"is {that} {article(asked)}{weighted(r, _FILLERS)}?", asked == img.name)


def t_is_it(img, r):
  if img.weather is None or r.random() < 0.3:
    asked = r.choice(("daytime", "nighttime", "night"))
    return _yes_no(f"is it {asked}?", img.night == (asked != "daytime"), 0.1)
  asked = img.weather if r.random() < 0.55 else _other(r, W.WEATHERS, img.weather)
  word = {"sunny": "sunny", "cloudy": "cloudy", "rainy": "raining", "snowy": "snowing"}[asked]
  return _yes_no(f"is it {word} outside?" if r.random() < 0.3 else f"is it {word}?", asked == img.weather, 0.15)


def t_is_the_person(img, r):
  if img.person is None:
    return None
  if r.random() < 0.15:
    asked, truth = "wearing a hat", "hat" in img.secondaries
  else:
    asked = img.person_activity if r.random() < 0.6 else _other(r, ACTIVITIES, img.person_activity)
    truth = asked == img.person_activity
  pronoun = {"man": "he", "boy": "he", "woman": "she", "girl": "she"}[img.person]
  who = r.choice((f"the {_person_word(img, r)}", "this person", pronoun))
  return _yes_no(f"is {who} {asked}?", truth, 0.1)


def t_does_the(img, r):
  if img.person is not None and img.holding not in (None, "nothing") and r.random() < 0.6:
    asked = img.holding if r.random() < 0.6 else _other(r, list(W.HOLDABLES)[:-1] + [img.name], img.holding)
    return _yes_no(f"does the {img.person} have {article(asked)}?", asked == img.holding)
  place = "room" if img.indoor else "place"
  # Subjective: the truth is a coin the annotators only mostly agree on.
  return _yes_no(f"does this {place} look clean?", r.random() < 0.7, 0.35)


def t_can_you(img, r):
  noun = _noun_for_presence(img, r, 0.65)
  if r.random() < 0.5:
    return _yes_no(f"can you see {article(noun)}{weighted(r, _FILLERS)}?", img.has(noun))
  return _yes_no(f"do you see {W.PLURAL[noun]}{weighted(r, _FILLERS)}?", img.has(noun))


def t_are_the(img, r):
  if img.count >= 2:
    asked = img.colour if r.random() < 0.55 else weighted(r, _colour_wrong(img.colour))
    first = "are these" if r.random() < 0.2 else "are the"
    return _yes_no(f"{first} {W.PLURAL[img.name]} {asked}?", asked == img.colour, 0.1)
  if img.indoor:
    return _yes_no("are the lights on?", img.night or r.random() < 0.4, 0.2)
  return None


def t_are_these(img, r):
  if img.count < 2:
    return None
  same_kind = [c[0] for c in W.CATEGORIES if c[2] == img.kind]
  asked = img.name if r.random() < 0.6 else _other(r, same_kind, img.name)
  return _yes_no(f"are these {W.PLURAL[asked]}?", asked == img.name)


def t_is_this_photo(img, r):
  v = r.random()
  if v < 0.4:
    return _yes_no("is this photo taken indoors?" if v < 0.2 else "is this indoors?", img.indoor)
  if v < 0.6:
    return _yes_no("was this photo taken at night?", img.night, 0.12)
  if v < 0.75:
    asked = img.scene if r.random() < 0.5 else _other(r, W.SCENES, img.scene)
    return _yes_no(f"could this be {article(asked)}?", asked == img.scene, 0.2)
  if v < 0.85 and img.people >= 2:
    asked = img.person_activity if r.random() < 0.6 else _other(r, ACTIVITIES, img.person_activity)
    return _yes_no(f"are they {asked}?", asked == img.person_activity, 0.12)
  if img.kind == "food":
    if r.random() < 0.5:
      return _yes_no(f"has the {img.name} been eaten?", r.random() < 0.4, 0.3)
    return _yes_no("is this food healthy?", img.name in ("banana", "broccoli", "sandwich"), 0.3)
  return _yes_no(f"is the {img.name} in the {W.LOCATION[img.scene][0]}?", True, 0.25)


YES_NO = (("is_there", 8, t_is_there), ("are_there", 4, t_are_there), ("is_the_colour", 4, t_is_the_colour),
          ("is_this_a", 4, t_is_this_a), ("is_it", 3, t_is_it), ("is_the_person", 4, t_is_the_person),
          ("does_the", 2, t_does_the), ("can_you", 2.5, t_can_you), ("are_the", 3, t_are_the),
          ("are_these", 1.5, t_are_these), ("is_this_photo", 3, t_is_this_photo))


# --- number ------------------------------------------------------------------------

def t_how_many(img, r):
  plural = W.PLURAL[img.name]
  text = weighted(r, {f"how many {plural} are there{weighted(r, _FILLERS)}?": 5,
                      f"how many {plural} are in the picture?": 2, f"how many {plural} can you see?": 1,
                      f"how many {plural}?": 1})
  return _count_spec(text, img.count)


def t_how_many_secondary(img, r):
  present = list(img.secondaries)
  noun = present[r.randrange(len(present))] if present and r.random() < 0.75 else \
      W.SECONDARY_NAMES[r.randrange(len(W.SECONDARY_NAMES))]
  return _count_spec(f"how many {W.PLURAL[noun]} are there{weighted(r, _FILLERS)}?", img.how_many(noun))


def t_how_many_people(img, r):
  if img.person is None and r.random() < 0.85:
    return None
  text = "how many people are there?" if r.random() < 0.5 else f"how many people are in the {r.choice(('photo', 'picture', 'image'))}?"
  return _count_spec(text, img.people)


def t_what_number(img, r):
  thing = r.choice(("bus", "train", "sign", "jersey", "shirt", "plane") if img.kind != "vehicle" else (img.name,))
  spec = _count_spec(f"what number is on the {thing}?", img.number)
  wrong = tuple((str(n), 1.0) for n in (1, 2, 3, 4, 5, 7, 10, 12, 21, 100, 1000) if n != img.number)
  return dataclasses.replace(spec, hardness=0.3, wrong=wrong)


NUMBER = (("how_many", 6, t_how_many), ("how_many_secondary", 2, t_how_many_secondary),
          ("how_many_people", 3, t_how_many_people), ("what_number", 1, t_what_number))


# --- other -------------------------------------------------------------------------

def _other_spec(text, answer, hardness, wrong, noun=False, alts=None):
  alts = tuple((SYNONYMS.get(answer) or {}).items()) if alts is None else tuple(alts.items())
  return Spec(text, answer, "other", hardness, alts, tuple(wrong.items()) if isinstance(wrong, dict) else wrong, noun)


def t_colour(img, r):
  wrong = _colour_wrong(img.colour)
  if img.person is not None and r.random() < 0.2:
    wrong = _colour_wrong(img.shirt)
    text = r.choice((f"what color is the {img.person}'s shirt?", f"what color shirt is the {img.person} wearing?",
                     "what color is his shirt?" if img.person in ("man", "boy") else "what color is her shirt?"))
    return _other_spec(text, img.shirt, 0.15, wrong)
  if img.count >= 2 and r.random() < 0.4:
    return _other_spec(f"what color are the {W.PLURAL[img.name]}?", img.colour, 0.18, wrong)
  if r.random() < 0.12:
    return _other_spec(f"what is the color of the {img.name}?", img.colour, 0.15, wrong)
  return _other_spec(f"what color is the {weighted(r, _ADJECTIVES)}{img.name}{weighted(r, _FILLERS)}?",
                     img.colour, 0.15, wrong)


def t_what_is_person(img, r):
  if img.person is None:
    return None
  who = _person_word(img, r)
  if img.holding is not None and r.random() < 0.5:
    wrong = {h: 1.0 for h in ("phone", "umbrella", "frisbee", "racket", "bat", "nothing", "cup") if h != img.holding}
    return _other_spec(f"what is the {who} holding?", img.holding, 0.15, wrong, noun=img.holding != "nothing")
  wrong = {a: 1.0 for a in ACTIVITIES if a != img.person_activity}
  text = f"what is the {who} doing?" if r.random() < 0.85 else "what are they doing?"
  return _other_spec(text, img.person_activity, 0.25, wrong)


def t_what_sport(img, r):
  if img.sport is None:
    return None
  text = weighted(r, {"what sport is this?": 4, "what sport is being played?": 3,
                      f"what sport is the {img.person} playing?": 2, "what game is being played?": 1})
  return _other_spec(text, img.sport, 0.06, {s: 1.0 for s in ("tennis", "baseball", "frisbee") if s != img.sport})


def t_what_room(img, r):
  if img.scene not in W.ROOMS:
    return None
  text = "what room is this?" if r.random() < 0.75 else "what type of room is this?"
  return _other_spec(text, img.scene, 0.08, {s: 1.0 for s in W.ROOMS if s != img.scene})


def t_where(img, r):
  loc, alts = W.LOCATION[img.scene]
  if img.kind == "food":
    loc, alts = "plate", {"table": 0.3}
  text = f"where are the {W.PLURAL[img.name]}?" if img.count >= 2 else f"where is the {img.name}?"
  wrong = {loc2: 1.0 for loc2 in ("street", "field", "table", "water", "grass", "kitchen") if loc2 != loc}
  return _other_spec(text, loc, 0.3, wrong, noun=True, alts=alts)


def t_what_is_this(img, r):
  kind_word = {"animal": "animal", "vehicle": "vehicle", "food": "food", "object": "object", "sport": "equipment"}
  same_kind = {c[0]: 1.0 for c in W.CATEGORIES if c[2] == img.kind and c[0] != img.name}
  text = weighted(r, {"what is this?": 3, "what is in the picture?": 1, "what is shown?": 1,
                      f"what kind of {kind_word[img.kind]} is this?": 3,
                      f"what type of {kind_word[img.kind]} is {r.choice(('this', 'shown', 'pictured'))}?": 2,
                      "what is on the plate?" if img.kind == "food" else "what is this object?": 1,
                      f"what animal is {r.choice(('this', 'shown', 'in the picture'))}?" if img.kind == "animal"
                      else "what is this thing?": 3})
  return _other_spec(text, img.name, 0.1, same_kind, noun=True)


def t_what_doing(img, r):
  if img.animal_activity is None:
    return None
  wrong = {a: 1.0 for a in ("standing", "eating", "sleeping", "walking", "sitting") if a != img.animal_activity}
  text = f"what are the {W.PLURAL[img.name]} doing?" if img.count >= 2 else f"what is the {img.name} doing?"
  return _other_spec(text, img.animal_activity, 0.3, wrong)


def t_time_weather(img, r):
  v = r.random()
  if img.weather is None or v < 0.35:
    text = "what time of day is it?" if r.random() < 0.7 else "what time is it?"
    return _other_spec(text, "night" if img.night else "daytime", 0.4, {"afternoon": 2, "morning": 1, "evening": 1})
  if v < 0.8:
    truth = {"sunny": "sunny", "cloudy": "cloudy", "rainy": "rainy", "snowy": "snowy"}[img.weather]
    text = "how is the weather?" if r.random() < 0.5 else "what is the weather like?"
    return _other_spec(text, truth, 0.3, {"clear": 2, "cold": 1, "overcast": 1, "sunny": 1, "cloudy": 1},
                       alts={"sunny": {"clear": .2}, "cloudy": {"overcast": .2}, "rainy": {"raining": .35},
                             "snowy": {"cold": .2}}[truth])
  truth = "winter" if img.scene == "snow" else "summer"
  return _other_spec("what season is it?", truth, 0.5, {"spring": 2, "fall": 2, "winter": 1, "summer": 1})


def t_brand(img, r):
  if img.name in W.BRANDS:
    text, table = f"what brand is the {img.name}?", W.BRANDS[img.name]
  elif img.holding == "phone":
    text, table = "what brand is the phone?", W.BRANDS["phone"]
  elif img.person is not None:
    text, table = f"what brand are the {img.person}'s shoes?", W.CLOTHING_BRANDS
  else:
    return None
  wrong = {b: 1.0 for b in table if b != img.brand}
  wrong.update({"unknown": 2.0, "not sure": 1.0})
  return _other_spec(text, img.brand, 0.55, wrong)


def t_hard_misc(img, r):
  v = r.random()
  if v < 0.35:
    thing = r.choice(("boat", "street", "restaurant", "store"))
    answer = NAMES[img.number % len(NAMES)]
    return _other_spec(f"what is the name of the {thing}?", answer, 0.75,
                       {n: 1.0 for n in NAMES if n != answer} | {"unknown": 3.0})
  if v < 0.6 and "sign" in img.secondaries:
    answer = SIGN_TEXT[img.number % len(SIGN_TEXT)]
    return _other_spec("what does the sign say?", answer, 0.45, {s: 1.0 for s in SIGN_TEXT if s != answer})
  if img.person is not None:
    text = r.choice((f"who is holding the {img.holding}?" if img.holding not in (None, "nothing")
                     else "who is in the picture?", "who is in the photo?"))
    return _other_spec(text, img.person, 0.2, {p: 1.0 for p in W.PERSONS if p != img.person} | {"nobody": .5})
  return None


def t_which(img, r):
  if img.person is not None and img.holding not in (None, "nothing") and r.random() < 0.6:
    text = f"which hand is the {img.person} holding the {img.holding} with?"
    return _other_spec(text, img.hand, 0.25, {"right" if img.hand == "left" else "left": 1.0, "both": 0.3})
  for box in img.boxes:
    if box[0].startswith("sec:"):
      noun = box[0][4:]
      side = W.box_side(img, box[0])
      return _other_spec(f"which side of the picture is the {noun} on?", side, 0.25,
                         {"right" if side == "left" else "left": 1.0, "middle": 0.5})
  return None


def t_why(img, r):
  """Genuinely ambiguous questions: many valid answers, much disagreement."""
  options = []
  if img.person is not None and (img.sport in ("baseball", "skateboarding", "skiing", "snowboarding")
                                 or img.name in ("bicycle", "motorcycle")):
    options.append(Spec(f"why is the {img.person} wearing a helmet?", "safety", "other", 0.5,
                        (("protection", .3), ("to protect head", .1)), (("riding", 1), ("law", 1), ("sport", 1))))
  if img.name == "umbrella" or img.holding == "umbrella":
    rain = img.weather == "rainy"
    options.append(Spec(f"why is the {img.person or 'umbrella'} {'holding an umbrella' if img.person else 'open'}?",
                        "raining" if rain else "shade", "other", 0.55,
                        (("rain", .35), ("to stay dry", .1)) if rain else (("sun", .3), ("sunny", .1)),
                        (("shade", 1), ("rain", 1), ("fashion", 1))))
  if img.night:
    if img.indoor:
      options.append(Spec("why are the lights on?", "dark", "other", 0.55, (("night", .3), ("nighttime", .1)),
                          (("to see", 1), ("reading", 1))))
    else:
      options.append(Spec("why is it dark?", "night", "other", 0.45, (("nighttime", .3), ("evening", .1)),
                          (("lights off", 1), ("cloudy", 1))))
  if img.animal_activity is not None:
    answer = {"sleeping": "tired", "laying down": "tired", "grazing": "hungry", "eating": "hungry",
              "playing": "playing", "running": "playing"}.get(img.animal_activity, "resting")
    options.append(Spec(f"why is the {img.name} {img.animal_activity}?", answer, "other", 0.6,
                        (("resting", .25), ("sleepy", .1)) if answer == "tired" else (("fun", .2),),
                        (("tired", 1), ("hungry", 1), ("bored", 1), ("waiting", 1))))
  if img.person is not None:
    options.append(Spec(f"why is the {img.person} smiling?", "happy", "other", 0.6,
                        (("posing", .2), ("having fun", .2)), (("joke", 1), ("picture", 1), ("unknown", 1))))
  reasons = REASONS[img.kind]
  answer = reasons[img.number % len(reasons)]
  options.append(Spec(f"why is there {article(img.name)} here?", answer, "other", 0.7, (),
                      tuple((x, 1.0) for x in reasons if x != answer) + (("unknown", 2.0), ("no reason", 1.0))))
  return options[r.randrange(len(options))]


OTHER = (("colour", 10, t_colour), ("what_is_person", 5, t_what_is_person), ("what_sport", 4, t_what_sport),
         ("what_room", 2.5, t_what_room), ("where", 3, t_where), ("what_is_this", 6, t_what_is_this),
         ("what_doing", 2, t_what_doing), ("time_weather", 2, t_time_weather), ("brand", 0.8, t_brand),
         ("hard_misc", 1.2, t_hard_misc), ("which", 1, t_which), ("why", 2.5, t_why))

TEMPLATES = {"yes/no": YES_NO, "number": NUMBER, "other": OTHER}
_FALLBACK = {"yes/no": t_is_there, "number": t_how_many, "other": t_colour}
_PICK = {t: W.Table([(i, w) for i, (_, w, _) in enumerate(table)]) for t, table in TEMPLATES.items()}


def ask(img: Image, r: random.Random, n: int) -> list[tuple[str, Spec]]:
  """`n` questions about `img`, with distinct texts: (template name, spec) pairs."""
  out, texts = [], set()
  for _ in range(n):
    answer_type = weighted(r, _SHARES)
    table = TEMPLATES[answer_type]
    found = None
    for _attempt in range(12):
      name, _, fn = table[weighted(r, _PICK[answer_type])]
      spec = fn(img, r)
      if spec is not None and spec.text not in texts:
        found = (name, spec)
        break
    if found is None:
      for _attempt in range(20):
        spec = _FALLBACK[answer_type](img, r)
        found = ("fallback", spec)
        if spec.text not in texts:
          break
    texts.add(found[1].text)
    out.append(found)
  return out
