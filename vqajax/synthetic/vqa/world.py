"""The latent world behind the synthetic VQA dataset: what is in each image.

Every synthetic image is a small record of latent attributes (main object category,
its colour and count, the scene, a person and what they do, secondary objects, time
of day, weather, ...). Questions (`synthetic_questions`), captions and features
(`synthetic`) are all functions of these records plus seeded noise, so a model that
reads the features can recover what a question asks about, while each question type
keeps a language prior (most bananas are yellow, most counts are 1-3, most "is there
a" questions are asked about something that is there).

Everything here is deterministic given a `random.Random`.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import random

# --- the vocabulary of the world ---------------------------------------------------

# name, plural, kind, {colour: weight}, {scene: weight}, sport, prior weight
_C = lambda name, plural, kind, colours, scenes, sport=None, w=1.0: (  # noqa: E731
    name, plural, kind, colours, scenes, sport, w)

CATEGORIES = (
    # animals
    _C("dog", "dogs", "animal", {"brown": 4, "white": 3, "black": 3, "tan": 1},
       {"park": 3, "street": 2, "living room": 2, "beach": 1, "field": 1}, w=3.0),
    _C("cat", "cats", "animal", {"black": 3, "white": 3, "gray": 2, "orange": 1, "brown": 1},
       {"living room": 3, "bedroom": 2, "kitchen": 1, "bathroom": 1}, w=3.0),
    _C("horse", "horses", "animal", {"brown": 6, "white": 2, "black": 2},
       {"field": 4, "street": 1, "beach": 1}, w=1.5),
    _C("sheep", "sheep", "animal", {"white": 8, "black": 1, "brown": 1}, {"field": 1}, w=1.2),
    _C("cow", "cows", "animal", {"black": 4, "brown": 3, "white": 3}, {"field": 4, "street": 1}, w=1.2),
    _C("elephant", "elephants", "animal", {"gray": 9, "brown": 1}, {"zoo": 2, "field": 2}, w=1.5),
    _C("bear", "bears", "animal", {"brown": 6, "black": 3, "white": 1}, {"zoo": 2, "forest": 2}, w=0.8),
    _C("zebra", "zebras", "animal", {"black and white": 9, "white": 1}, {"zoo": 2, "field": 3}, w=1.2),
    _C("giraffe", "giraffes", "animal", {"brown": 6, "yellow": 2, "tan": 2}, {"zoo": 3, "field": 2}, w=1.5),
    _C("bird", "birds", "animal", {"white": 3, "black": 3, "brown": 2, "gray": 2, "blue": 1},
       {"beach": 2, "park": 2, "ocean": 1, "street": 1}, w=1.2),
    # vehicles
    _C("car", "cars", "vehicle", {"white": 3, "black": 3, "red": 2, "blue": 2, "silver": 2},
       {"street": 4, "city": 2, "parking lot": 2}, w=2.0),
    _C("bus", "buses", "vehicle", {"white": 3, "red": 3, "blue": 2, "yellow": 2, "green": 1},
       {"street": 3, "city": 2}, w=2.0),
    _C("truck", "trucks", "vehicle", {"white": 4, "red": 2, "blue": 2, "black": 1, "green": 1},
       {"street": 3, "parking lot": 1}, w=1.2),
    _C("train", "trains", "vehicle", {"red": 2, "blue": 2, "yellow": 2, "white": 2, "green": 1, "silver": 1},
       {"train station": 4, "city": 1}, w=2.0),
    _C("motorcycle", "motorcycles", "vehicle", {"black": 4, "red": 3, "blue": 1, "silver": 2},
       {"street": 3, "parking lot": 2}, w=1.2),
    _C("bicycle", "bicycles", "vehicle", {"black": 3, "red": 2, "blue": 2, "white": 2, "silver": 1},
       {"street": 3, "park": 2}, w=1.0),
    _C("airplane", "airplanes", "vehicle", {"white": 8, "silver": 1, "blue": 1}, {"airport": 1}, w=2.0),
    _C("boat", "boats", "vehicle", {"white": 6, "blue": 2, "red": 2, "yellow": 1},
       {"ocean": 2, "harbor": 3}, w=1.5),
    # food
    _C("pizza", "pizzas", "food", {"red": 2, "yellow": 2, "brown": 3, "white": 2},
       {"kitchen": 2, "restaurant": 3}, w=2.0),
    _C("banana", "bananas", "food", {"yellow": 8, "green": 2}, {"kitchen": 3, "restaurant": 1}, w=1.2),
    _C("sandwich", "sandwiches", "food", {"brown": 5, "white": 3, "green": 2},
       {"restaurant": 3, "kitchen": 1}, w=1.2),
    _C("cake", "cakes", "food", {"white": 6, "brown": 2, "pink": 2}, {"kitchen": 2, "restaurant": 2}, w=1.2),
    _C("donut", "donuts", "food", {"brown": 5, "pink": 2, "white": 3}, {"restaurant": 2, "kitchen": 1}, w=1.0),
    _C("broccoli", "broccoli", "food", {"green": 1}, {"kitchen": 2, "restaurant": 2}, w=1.0),
    # indoor and other objects
    _C("couch", "couches", "object", {"brown": 3, "gray": 2, "black": 2, "white": 2, "red": 1},
       {"living room": 1}, w=1.2),
    _C("tv", "tvs", "object", {"black": 9, "silver": 1}, {"living room": 3, "bedroom": 1}, w=1.2),
    _C("laptop", "laptops", "object", {"silver": 4, "black": 5, "white": 2},
       {"office": 3, "living room": 1, "bedroom": 1}, w=1.2),
    _C("clock", "clocks", "object", {"white": 4, "black": 3, "brown": 3},
       {"street": 2, "city": 2, "kitchen": 1}, w=1.2),
    _C("bed", "beds", "object", {"white": 6, "blue": 2, "brown": 2, "red": 1}, {"bedroom": 1}, w=1.2),
    _C("chair", "chairs", "object", {"brown": 4, "black": 3, "white": 2, "red": 1},
       {"kitchen": 2, "living room": 2, "office": 1}, w=0.8),
    _C("toilet", "toilets", "object", {"white": 19, "black": 1}, {"bathroom": 1}, w=1.2),
    _C("refrigerator", "refrigerators", "object", {"white": 5, "silver": 4, "black": 1}, {"kitchen": 1}, w=0.8),
    _C("umbrella", "umbrellas", "object", {"black": 3, "red": 2, "blue": 2, "pink": 1, "white": 1},
       {"street": 3, "beach": 2}, w=0.8),
    _C("kite", "kites", "object", {"red": 3, "blue": 2, "yellow": 2, "pink": 1, "green": 1, "orange": 1},
       {"beach": 3, "park": 2}, w=1.0),
    # sport equipment: the image shows someone doing that sport
    _C("tennis racket", "tennis rackets", "sport", {"black": 4, "white": 3, "red": 2, "blue": 1},
       {"tennis court": 1}, sport="tennis", w=4.0),
    _C("baseball bat", "baseball bats", "sport", {"brown": 5, "black": 3, "silver": 2},
       {"baseball field": 1}, sport="baseball", w=3.5),
    _C("skateboard", "skateboards", "sport", {"black": 4, "red": 2, "blue": 2, "white": 2},
       {"skate park": 2, "street": 1}, sport="skateboarding", w=2.0),
    _C("surfboard", "surfboards", "sport", {"white": 6, "blue": 2, "yellow": 2, "red": 1},
       {"ocean": 3, "beach": 1}, sport="surfing", w=2.0),
    _C("skis", "skis", "sport", {"red": 3, "black": 3, "white": 2, "blue": 2}, {"snow": 1}, sport="skiing", w=2.0),
    _C("snowboard", "snowboards", "sport", {"black": 3, "blue": 2, "red": 2, "white": 2},
       {"snow": 1}, sport="snowboarding", w=1.0),
    _C("frisbee", "frisbees", "sport", {"white": 4, "red": 2, "yellow": 2, "blue": 1, "orange": 1},
       {"park": 2, "beach": 1, "field": 1}, sport="frisbee", w=1.5),
    _C("soccer ball", "soccer balls", "sport", {"white": 7, "black and white": 3}, {"field": 1},
       sport="soccer", w=1.0),
)
CATEGORY_NAMES = tuple(c[0] for c in CATEGORIES)
CATEGORY_INDEX = {n: i for i, n in enumerate(CATEGORY_NAMES)}
PLURAL = {c[0]: c[1] for c in CATEGORIES}
KIND_WEIGHT = {"animal": 0.24, "vehicle": 0.22, "food": 0.13, "object": 0.19, "sport": 0.22}

COLOURS = ("white", "black", "brown", "gray", "red", "blue", "green", "yellow", "orange",
           "pink", "purple", "silver", "tan", "black and white")
# Colours an annotator may confuse with a given one.
SIMILAR_COLOURS = {"white": ("gray", "silver"), "gray": ("silver", "white", "black"),
                   "silver": ("gray", "white"), "black": ("gray", "brown"), "brown": ("tan", "black"),
                   "tan": ("brown", "yellow"), "yellow": ("orange", "tan"), "orange": ("red", "yellow"),
                   "red": ("orange", "pink"), "pink": ("red", "purple"), "blue": ("purple", "gray"),
                   "green": ("blue", "yellow"), "purple": ("blue", "pink"),
                   "black and white": ("white", "black")}

SCENES = ("kitchen", "living room", "bedroom", "bathroom", "office", "restaurant", "street", "city",
          "parking lot", "train station", "airport", "park", "field", "beach", "ocean", "harbor", "zoo",
          "forest", "snow", "tennis court", "baseball field", "skate park")
ROOMS = ("kitchen", "living room", "bedroom", "bathroom", "office")
INDOOR = frozenset(ROOMS + ("restaurant",))
# Where a thing in that scene is said to be: (canonical answer, {alternative: prob}).
LOCATION = {
    "kitchen": ("kitchen", {"counter": 0.2, "table": 0.1}), "living room": ("living room", {"couch": 0.2}),
    "bedroom": ("bedroom", {"bed": 0.3}), "bathroom": ("bathroom", {}), "office": ("desk", {"office": 0.3}),
    "restaurant": ("table", {"restaurant": 0.2, "plate": 0.2}), "street": ("street", {"road": 0.3}),
    "city": ("city", {"street": 0.3}), "parking lot": ("parking lot", {"street": 0.2}),
    "train station": ("station", {"tracks": 0.3, "train station": 0.2}),
    "airport": ("airport", {"runway": 0.3}), "park": ("park", {"grass": 0.3}),
    "field": ("field", {"grass": 0.3}), "beach": ("beach", {"sand": 0.2}),
    "ocean": ("water", {"ocean": 0.4}), "harbor": ("water", {"harbor": 0.2, "dock": 0.2}),
    "zoo": ("zoo", {"enclosure": 0.2}), "forest": ("woods", {"forest": 0.4}),
    "snow": ("mountain", {"snow": 0.4, "slope": 0.1}), "tennis court": ("tennis court", {"court": 0.4}),
    "baseball field": ("baseball field", {"field": 0.3}), "skate park": ("skate park", {"ramp": 0.2}),
}

SPORTS = ("tennis", "baseball", "skateboarding", "surfing", "skiing", "snowboarding", "frisbee", "soccer")
SPORT_ACTIVITY = {"tennis": "playing tennis", "baseball": "playing baseball", "skateboarding": "skateboarding",
                  "surfing": "surfing", "skiing": "skiing", "snowboarding": "snowboarding",
                  "frisbee": "playing frisbee", "soccer": "playing soccer"}
PERSONS = ("man", "woman", "boy", "girl")
HOLDABLES = {"phone": 4, "cup": 2, "remote": 1, "bag": 2, "book": 1, "umbrella": 1, "nothing": 1}
SHIRT_COLOURS = {"white": 4, "black": 4, "blue": 3, "red": 2, "gray": 2, "green": 1, "yellow": 1, "pink": 1}
ANIMAL_ACTIVITIES = {
    "dog": {"sitting": 3, "running": 2, "laying down": 2, "playing": 2, "sleeping": 1},
    "cat": {"sleeping": 3, "laying down": 3, "sitting": 2, "looking": 1},
    "bird": {"standing": 3, "flying": 2, "sitting": 1},
    "bear": {"walking": 2, "sitting": 2, "standing": 1},
    "elephant": {"walking": 3, "standing": 2, "eating": 2},
}
GRAZERS = {"grazing": 4, "standing": 3, "eating": 2, "walking": 1}  # horse, sheep, cow, zebra, giraffe
WEATHERS = ("sunny", "cloudy", "rainy", "snowy")
BRANDS = {"laptop": {"apple": 5, "dell": 2, "hp": 2, "sony": 1}, "tv": {"samsung": 4, "sony": 3, "lg": 2},
          "car": {"toyota": 3, "ford": 3, "honda": 2, "bmw": 1}, "truck": {"ford": 5, "chevrolet": 3, "dodge": 2},
          "motorcycle": {"honda": 4, "harley davidson": 3, "yamaha": 3}, "phone": {"apple": 5, "samsung": 3, "nokia": 1}}
CLOTHING_BRANDS = {"nike": 5, "adidas": 3, "puma": 1}

# Secondary objects: name, plural, base presence probability, where ('in', 'out', 'any').
SECONDARIES = (
    ("tree", "trees", 0.55, "out"), ("window", "windows", 0.40, "any"), ("building", "buildings", 0.40, "out"),
    ("table", "tables", 0.45, "in"), ("car", "cars", 0.30, "out"), ("sign", "signs", 0.30, "out"),
    ("cloud", "clouds", 0.30, "out"), ("light", "lights", 0.25, "any"), ("plate", "plates", 0.25, "in"),
    ("cup", "cups", 0.22, "in"), ("fence", "fences", 0.20, "out"), ("bottle", "bottles", 0.18, "in"),
    ("bench", "benches", 0.14, "out"), ("bowl", "bowls", 0.14, "in"), ("hat", "hats", 0.10, "any"),
    ("lamp", "lamps", 0.12, "in"), ("book", "books", 0.10, "in"), ("clock", "clocks", 0.08, "any"),
    ("pillow", "pillows", 0.10, "in"), ("traffic light", "traffic lights", 0.09, "out"),
    ("potted plant", "potted plants", 0.08, "in"), ("vase", "vases", 0.07, "in"), ("sink", "sinks", 0.07, "in"),
    ("mirror", "mirrors", 0.06, "in"), ("flag", "flags", 0.06, "out"), ("bird", "birds", 0.06, "out"),
    ("fork", "forks", 0.06, "in"), ("knife", "knives", 0.05, "in"), ("backpack", "backpacks", 0.05, "any"),
    ("handbag", "handbags", 0.05, "any"), ("bicycle", "bicycles", 0.05, "out"), ("curtain", "curtains", 0.05, "in"),
    ("remote", "remotes", 0.04, "in"), ("spoon", "spoons", 0.04, "in"), ("rug", "rugs", 0.04, "in"),
    ("fire hydrant", "fire hydrants", 0.04, "out"), ("towel", "towels", 0.03, "in"),
    ("basket", "baskets", 0.03, "any"), ("statue", "statues", 0.02, "out"), ("wagon", "wagons", 0.015, "out"),
)
SECONDARY_NAMES = tuple(s[0] for s in SECONDARIES)
SECONDARY_INDEX = {n: i for i, n in enumerate(SECONDARY_NAMES)}
PLURAL.update({s[0]: s[1] for s in SECONDARIES})
PLURAL.update({"person": "people"})

GRID = 7
# Labels of the boxes in the grid layout: categories, then secondaries, then "person".
BOX_LABELS = CATEGORY_NAMES + tuple("sec:" + s for s in SECONDARY_NAMES) + ("person",)
# COCO's usual sizes, halved: the pictures (`draw`) stay quick to write and to read
IMAGE_SIZES = ((320, 240), (320, 214), (240, 320), (250, 188), (320, 180), (214, 320))


@dataclasses.dataclass
class Image:
  """Latent attributes of one synthetic image."""
  image_id: int
  split: str
  category: int
  colour: str
  count: int
  scene: str
  person: str | None
  people: int
  person_activity: str | None
  holding: str | None
  hand: str
  shirt: str
  sport: str | None
  animal_activity: str | None
  night: bool
  weather: str | None
  secondaries: dict[str, int]
  number: int
  brand: str
  width: int
  height: int
  boxes: list[tuple[str, int, int, int, int]]  # (label, x0, y0, x1, y1) in grid cells, x1/y1 exclusive

  @property
  def name(self) -> str:
    return CATEGORY_NAMES[self.category]

  @property
  def kind(self) -> str:
    return CATEGORIES[self.category][2]

  @property
  def indoor(self) -> bool:
    return self.scene in INDOOR

  def has(self, noun: str) -> bool:
    return noun == self.name or noun in self.secondaries

  def how_many(self, noun: str) -> int:
    if noun == self.name:
      return self.count
    return self.secondaries.get(noun, 0)


class Table:
  """A {key: weight} dict (or (key, weight) pairs) prepared for repeated draws."""
  __slots__ = ("keys", "cum")

  def __init__(self, table):
    items = list(table.items()) if isinstance(table, dict) else list(table)
    self.keys = [k for k, _ in items]
    self.cum = list(itertools.accumulate(w for _, w in items))


def weighted(r: random.Random, table):
  """One key of `table` (a `Table`, a {key: weight} dict or (key, weight) pairs)."""
  if not isinstance(table, Table):
    table = Table(table)
  i = bisect.bisect_right(table.cum, r.random() * table.cum[-1])
  return table.keys[min(i, len(table.keys) - 1)]


_COUNT_WEIGHTS = Table({1: 22, 2: 32, 3: 18, 4: 9, 5: 6, 6: 4, 7: 3, 8: 2, 9: 2, 10: 2})
_PEOPLE_WEIGHTS = Table({1: 38, 2: 32, 3: 12, 4: 8, 5: 5, 6: 3, 8: 2})
_SEC_COUNT_WEIGHTS = Table({1: 40, 2: 35, 3: 15, 4: 10})
_CATEGORY_WEIGHTS = Table([(i, KIND_WEIGHT[c[2]] * c[6] / sum(d[6] for d in CATEGORIES if d[2] == c[2]))
                           for i, c in enumerate(CATEGORIES)])
_COLOUR_TABLES = [Table(c[3]) for c in CATEGORIES]
_SCENE_TABLES = [Table(c[4]) for c in CATEGORIES]
_ANIMAL_TABLES = {name: Table(t) for name, t in ANIMAL_ACTIVITIES.items()}
_GRAZERS = Table(GRAZERS)
_SPORT_PERSON = Table({"man": 55, "woman": 25, "boy": 12, "girl": 8})
_IDLE = Table({"standing": 4, "sitting": 3, "walking": 2, "talking on phone": 1})
_HOLDABLES = Table(HOLDABLES)
_SHIRTS = Table(SHIRT_COLOURS)
_OUTDOOR_WEATHER = Table({"sunny": 55, "cloudy": 30, "rainy": 15})
_NUMBERS = Table({n: n ** -0.7 for n in range(1, 100)})
_BRAND_TABLES = {name: Table(t) for name, t in BRANDS.items()}
_CLOTHING = Table(CLOTHING_BRANDS)


def _box(r: random.Random, lo: int, hi: int) -> tuple[int, int, int, int]:
  w, h = r.randint(lo, hi), r.randint(lo, hi)
  x0, y0 = r.randint(0, GRID - w), r.randint(0, GRID - h)
  return x0, y0, x0 + w, y0 + h


def sample_image(r: random.Random, image_id: int, split: str) -> Image:
  """Draws one image's latent attributes."""
  cat = weighted(r, _CATEGORY_WEIGHTS)
  name, _, kind, _, _, sport, _ = CATEGORIES[cat]
  colour = weighted(r, _COLOUR_TABLES[cat])
  count = weighted(r, _COUNT_WEIGHTS)
  if kind in ("sport", "object") and r.random() < 0.3:
    count = 1
  scene = weighted(r, _SCENE_TABLES[cat])
  indoor = scene in INDOOR
  p_person = {"animal": 0.3, "vehicle": 0.45, "food": 0.35, "object": 0.3, "sport": 1.0}[kind]
  person = weighted(r, _SPORT_PERSON) if r.random() < p_person else None
  people = 0
  activity = holding = None
  if person is not None:
    people = weighted(r, _PEOPLE_WEIGHTS)
    if sport is not None:
      activity = SPORT_ACTIVITY[sport]
      holding = name if sport not in ("surfing", "skateboarding", "snowboarding", "soccer") else (
          name if r.random() < 0.5 else "nothing")
    else:
      activity = "eating" if kind == "food" else "riding" if name in ("bicycle", "motorcycle") else None
      if name == "horse":
        activity = "riding horse"
      elif name == "kite":
        activity = "flying kite"
      elif name == "tv":
        activity = "watching tv"
      elif name == "laptop":
        activity = "typing"
      if activity is None:
        activity = weighted(r, _IDLE)
      holding = name if kind == "food" or name in ("umbrella", "kite") else weighted(r, _HOLDABLES)
      if activity == "talking on phone":
        holding = "phone"
  animal_activity = None
  if kind == "animal":
    animal_activity = weighted(r, _ANIMAL_TABLES.get(name, _GRAZERS))
  night = (not indoor and r.random() < 0.12) or (indoor and r.random() < 0.25)
  weather = None
  if not indoor:
    weather = "snowy" if scene == "snow" else weighted(r, _OUTDOOR_WEATHER)
  secondaries = {}
  for sec, _, p, where in SECONDARIES:
    if where == ("out" if indoor else "in") or sec == name:
      continue
    if r.random() < p:
      secondaries[sec] = weighted(r, _SEC_COUNT_WEIGHTS)
  if name == "umbrella" and weather == "sunny" and r.random() < 0.5:
    weather = "rainy"
  number = weighted(r, _NUMBERS) if r.random() < 0.96 else 100 * r.randint(10, 99)
  brand_table = _BRAND_TABLES.get(name) or (_BRAND_TABLES["phone"] if holding == "phone" else _CLOTHING)
  brand = weighted(r, brand_table)
  width, height = IMAGE_SIZES[r.randrange(len(IMAGE_SIZES))]
  boxes = []
  for _ in range(min(count, 4)):
    boxes.append((name,) + _box(r, 3, 5) if count == 1 else (name,) + _box(r, 1, 3))
  if person is not None:
    boxes.append(("person",) + _box(r, 2, 5))
  for sec in list(secondaries)[:4]:
    boxes.append(("sec:" + sec,) + _box(r, 1, 3))
  return Image(image_id=image_id, split=split, category=cat, colour=colour, count=count, scene=scene,
               person=person, people=people, person_activity=activity, holding=holding,
               hand="right" if r.random() < 0.65 else "left", shirt=weighted(r, _SHIRTS), sport=sport,
               animal_activity=animal_activity, night=night, weather=weather, secondaries=secondaries,
               number=number, brand=brand, width=width, height=height, boxes=boxes)


def box_side(image: Image, label: str) -> str | None:
  """'left' or 'right': which half of the image the first box of `label` is in."""
  for box in image.boxes:
    if box[0] == label:
      return "left" if (box[1] + box[3]) / 2 < GRID / 2 else "right"
  return None
