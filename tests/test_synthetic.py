"""The embedded synthetic dataset: formats, determinism, atomicity and the structure
that makes the VQA paper's comparisons meaningful (priors < image-aware answers)."""

import collections
import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from vqajax import cli as front_door
from vqajax.core.errors import InputError
from vqajax.features.recorded import Extractor
from vqajax.features.store import FeatureStore
from vqajax.synthetic import cli, pictures
from vqajax.synthetic.vqa import world as W
from vqajax.synthetic.vqa import write as synthetic
from vqajax.vqa.question_types import MSCOCO_QUESTION_TYPES, question_type

SPLITS = ("train", "val")
_NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                 "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}


def norm(answer: str) -> str:
  """A small independent version of the official answer normalisation (enough here)."""
  a = answer.replace("\n", " ").replace("\t", " ").strip().lower()
  a = re.sub(r"(\d),(\d)", r"\1\2", a)
  a = re.sub(r"[!?.,;]", " ", a)
  return " ".join(_NUMBER_WORDS.get(w, w) for w in a.split() if w not in ("a", "an", "the"))


def _load(path):
  with open(path) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("synthetic")
  paths = synthetic.generate(str(root / "a"), seed=0, scale="tiny")
  return {"root": root, "paths": paths, "dir": str(root / "a"),
          "json": {role: _load(p) for role, p in paths.items() if p.endswith(".json")}}


@pytest.fixture(scope="module")
def world():
  return synthetic.sample(seed=0, scale="tiny")


def _files(directory):
  out = {}
  for base, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(base, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, directory)] = f.read()
  return out


def test_question_type_examples():
  assert len(MSCOCO_QUESTION_TYPES) == 65 == len(set(MSCOCO_QUESTION_TYPES))
  assert MSCOCO_QUESTION_TYPES[0] == "how many" and MSCOCO_QUESTION_TYPES[-1] == "none of the above"
  cases = {
      "what color is the bus?": "what color is the",
      "What color are the cars?": "what color are the",
      "what is the man holding?": "what is the man",
      "why is it dark?": "why",
      "Why is the man smiling?": "why is the",
      "How many people are in the photo?": "how many people are in",
      "How many people are there?": "how many people are",
      "How many dogs?": "how many",
      "Is this an apple?": "is this an",
      "Is there an apple?": "is there",
      "Is there a dog?": "is there a",
      "What is this?": "what is this",
      "what colour is it?": "what",   # only "what" is a word-prefix
      "Who was there?": "none of the above",
      "": "none of the above",
  }
  for question, expected in cases.items():
    assert question_type(question) == expected, question
  # A custom list: the longest matching prefix wins; word boundaries matter.
  assert question_type("is there a cat", types=("is", "is there", "none of the above")) == "is there"
  assert question_type("isthere a cat", types=("is", "is there", "none of the above")) == "none of the above"


@pytest.mark.slow
def test_same_seed_same_bytes_other_seed_differs(data):
  again = synthetic.generate(str(data["root"] / "b"), seed=0, scale="tiny")
  other = synthetic.generate(str(data["root"] / "c"), seed=1, scale="tiny")
  first, second, third = _files(data["dir"]), _files(os.path.dirname(again["manifest"])), \
      _files(os.path.dirname(other["manifest"]))
  assert first == second
  pictures_of = lambda files: sorted(n for n in files if n.endswith(".jpg"))  # noqa: E731
  assert len(pictures_of(first)) == len(pictures_of(third)) == 220
  assert pictures_of(first) != pictures_of(third)  # other image ids
  assert first.keys() - set(pictures_of(first)) == third.keys() - set(pictures_of(third))
  for role in ("train_questions", "val_annotations", "train_mc_questions", "train_captions", "features",
               "grid_features"):
    rel = synthetic.FILES[role]
    assert first[rel] != third[rel], role


def test_manifest_and_paths(data):
  paths, d = data["paths"], data["dir"]
  assert set(paths) == set(synthetic.FILES) | {"manifest"}
  assert all(os.path.isfile(p) for p in paths.values())
  leftovers = [n for n in os.listdir(d) + os.listdir(os.path.join(d, "features")) if n.startswith((".tmp", "tmp"))]
  assert not leftovers
  manifest = synthetic.read_manifest(d)
  assert manifest["scale"] == "tiny" and manifest["seed"] == 0
  assert manifest["counts"] == {"train_images": 120, "train_questions": 360, "val_images": 60,
                                "val_questions": 180, "test_images": 40, "test_questions": 120,
                                "test-dev_questions": 30, "feature_rows": 220}
  assert synthetic.read_manifest(str(data["root"] / "nowhere")) is None


@pytest.mark.slow
def test_interrupted_run_leaves_no_manifest(tmp_path, monkeypatch):
  out = str(tmp_path / "d")
  synthetic.generate(out, seed=0, scale="tiny")
  assert synthetic.read_manifest(out) is not None
  before = {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)}
  with pytest.raises(InputError, match="not an empty folder"):  # never over existing files
    synthetic.generate(out, seed=1, scale="tiny")
  assert {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)} == before

  def broken(*args, **kwargs):
    raise OSError("disk full")
  monkeypatch.setattr(pictures, "write_store", broken)
  with pytest.raises(OSError, match="disk full"):
    synthetic.generate(str(tmp_path / "e"), seed=1, scale="tiny")
  assert os.listdir(tmp_path) == ["d"]  # neither "e" nor its partial sibling is left


def test_unknown_scale():
  with pytest.raises(ValueError, match="tiny"):
    synthetic.sample(0, "huge")


def test_open_ended_and_annotation_formats(data):
  js = data["json"]
  image_ids = {}
  for split in SPLITS:
    q, a = js[f"{split}_questions"], js[f"{split}_annotations"]
    assert q["task_type"] == "Open-Ended" and q["data_type"] == "mscoco"
    assert q["data_subtype"] == a["data_subtype"] == f"{split}2014"
    assert {"info", "license"} <= q.keys() and {"info", "license"} <= a.keys()
    for entry in q["questions"]:
      assert set(entry) == {"image_id", "question", "question_id"}
      assert isinstance(entry["image_id"], int) and isinstance(entry["question"], str)
      assert entry["question_id"] // 1000 == entry["image_id"] and entry["question_id"] % 1000 < 3
      assert entry["question"].endswith("?") and entry["question"][0].isupper()
    ids = [e["question_id"] for e in q["questions"]]
    assert len(ids) == len(set(ids))
    assert ids == [e["question_id"] for e in a["annotations"]]
    text = {e["question_id"]: e["question"] for e in q["questions"]}
    for ann in a["annotations"]:
      assert set(ann) == {"question_type", "multiple_choice_answer", "answers", "image_id", "answer_type",
                          "question_id"}
      assert ann["answer_type"] in ("yes/no", "number", "other")
      assert ann["question_type"] in MSCOCO_QUESTION_TYPES
      assert ann["question_type"] == question_type(text[ann["question_id"]])
      assert [x["answer_id"] for x in ann["answers"]] == list(range(1, 11))
      assert all(set(x) == {"answer", "answer_confidence", "answer_id"} for x in ann["answers"])
      assert all(x["answer_confidence"] in ("yes", "maybe", "no") for x in ann["answers"])
      # The MC answer is the most frequent answer (after normalisation), already normalised.
      counts = collections.Counter(norm(x["answer"]) for x in ann["answers"])
      mc = ann["multiple_choice_answer"]
      assert norm(mc) == mc and counts[mc] == max(counts.values())
      if ann["answer_type"] == "yes/no":
        assert mc in ("yes", "no")
      if ann["answer_type"] == "number":
        assert mc.isdigit()
    image_ids[split] = {e["image_id"] for e in q["questions"]}
  assert not image_ids["train"] & image_ids["val"]
  assert len(image_ids["train"]) == 120 and len(image_ids["val"]) == 60


def test_multiple_choice_format(data):
  js = data["json"]
  train_mc = collections.Counter(a["multiple_choice_answer"] for a in js["train_annotations"]["annotations"])
  popular = {a for a, _ in sorted(train_mc.items(), key=lambda kv: (-kv[1], kv[0]))[:10]}
  for split in SPLITS:
    mc, oe = js[f"{split}_mc_questions"], js[f"{split}_questions"]
    assert mc["task_type"] == "Multiple-Choice" and mc["data_subtype"] == f"{split}2014"
    answers = {a["question_id"]: a["multiple_choice_answer"] for a in js[f"{split}_annotations"]["annotations"]}
    assert [(e["question_id"], e["image_id"], e["question"]) for e in mc["questions"]] == \
        [(e["question_id"], e["image_id"], e["question"]) for e in oe["questions"]]
    positions = collections.Counter()
    for entry in mc["questions"]:
      choices = entry["multiple_choices"]
      assert len(choices) == 18 == len(set(choices)) and all(isinstance(c, str) for c in choices)
      assert answers[entry["question_id"]] in choices
      assert popular <= set(choices)  # the paper's "10 most popular answers"
      positions[choices.index(answers[entry["question_id"]])] += 1
    assert len(positions) >= 10  # shuffled: the right answer is not always in one place


def test_captions_format(data, world):
  js = data["json"]
  caption_ids = []
  for split in SPLITS:
    c = js[f"{split}_captions"]
    assert {"info", "licenses", "images", "annotations"} <= c.keys()
    question_images = {e["image_id"] for e in js[f"{split}_questions"]["questions"]}
    assert {im["id"] for im in c["images"]} == question_images
    for im in c["images"]:
      assert im["file_name"] == f"COCO_{split}2014_{im['id']:012d}.jpg"
      assert im["width"] > 0 and im["height"] > 0
    per_image = collections.Counter(a["image_id"] for a in c["annotations"])
    assert set(per_image.values()) == {5}
    caption_ids += [a["id"] for a in c["annotations"]]
    # Captions describe the image: most name its main object (or a synonym) or its person.
    by_image = collections.defaultdict(list)
    for a in c["annotations"]:
      by_image[a["image_id"]].append(a["caption"].lower())
    synonyms = synthetic._CAPTION_SYNONYMS
    hits = []
    for img in world.images[split]:
      words = {img.name.split()[-1], synonyms.get(img.name, img.name).split()[-1]}
      if img.person:
        words.add(img.person)
      hits += [any(w in cap for w in words) for cap in by_image[img.image_id]]
    assert np.mean(hits) > 0.85
  assert len(caption_ids) == len(set(caption_ids))


def test_feature_stores(data):
  js = data["json"]
  all_ids = {e["image_id"] for role in [f"{s}_questions" for s in SPLITS] + ["test2015_v2_OpenEnded"]
             for e in js[role]["questions"]}  # the test images too
  fc7 = FeatureStore(data["paths"]["features"])
  try:
    assert fc7.shape == (4096,) and fc7.dtype == np.float16
    assert set(fc7.image_ids.tolist()) == all_ids
    x = fc7.read(fc7.rows(sorted(all_ids)))
    assert (x >= 0).all() and 0.3 < (x == 0).mean() < 0.95 and np.isfinite(x).all()
  finally:
    fc7.close()
  grid = FeatureStore(data["paths"]["grid_features"])
  assert grid.shape == (7, 7, 64) and grid.dtype == np.float16
  assert set(grid.image_ids.tolist()) == all_ids
  layout = _load(data["paths"]["grid_layout"])
  assert set(map(int, layout["images"])) == all_ids
  for boxes in layout["images"].values():
    for label, x0, y0, x1, y1 in boxes:
      assert isinstance(label, str) and 0 <= x0 < x1 <= 7 and 0 <= y0 < y1 <= 7


def _covered(boxes):
  m = np.zeros((7, 7), bool)
  for _, x0, y0, x1, y1 in boxes:
    m[y0:y1, x0:x1] = True
  return m


def test_grid_cells_show_the_objects(data, world):
  """A linear readout of grid cells (train images) finds the object cells on val images."""
  grid = FeatureStore(data["paths"]["grid_features"])
  layout = _load(data["paths"]["grid_layout"])["images"]

  def xy(split):
    ids = [img.image_id for img in world.images[split]]
    x = grid.read(grid.rows(ids)).reshape(-1, 64)
    y = np.stack([_covered(layout[str(i)]) for i in ids]).reshape(-1)
    return x, y
  (xt, yt), (xv, yv) = xy("train"), xy("val")
  w = np.linalg.lstsq(np.c_[xt, np.ones(len(xt))], yt * 2.0 - 1, rcond=None)[0]
  accuracy = ((np.c_[xv, np.ones(len(xv))] @ w > 0) == yv).mean()
  majority = max(yv.mean(), 1 - yv.mean())
  assert accuracy > majority + 0.1


def _prior_yes_oracle(train, val, oracle):
  prior = collections.defaultdict(collections.Counter)
  for a in train:
    prior[a["question_type"]][a["multiple_choice_answer"]] += 1
  overall = collections.Counter(a["multiple_choice_answer"] for a in train).most_common(1)[0][0]

  def accuracy(predict):
    return np.mean([predict(a) == a["multiple_choice_answer"] for a in val])
  return (accuracy(lambda a: prior[a["question_type"]].most_common(1)[0][0] if a["question_type"] in prior
                   else overall),
          accuracy(lambda a: "yes"),
          accuracy(lambda a: oracle[a["question_id"]]))


def test_question_type_prior_beats_yes_but_not_the_image(data, world):
  """(a) a per-question-type prior > "always yes", and < an oracle that sees the image."""
  oracle = {q.question_id: q.answer for s in SPLITS for q in world.questions[s]}
  prior, yes, image = _prior_yes_oracle(data["json"]["train_annotations"]["annotations"],
                                        data["json"]["val_annotations"]["annotations"], oracle)
  assert 0.1 < yes < 0.35
  assert prior > yes + 0.05
  assert image > prior + 0.4 and image > 0.85
  # With more data the prior's margin over "yes" is clearer (in memory, no files).
  small = synthetic.sample(seed=0, scale="small")
  as_ann = lambda qs: [{"question_type": q.question_type, "multiple_choice_answer": q.multiple_choice_answer,
                        "question_id": q.question_id} for q in qs]  # noqa: E731
  prior, yes, image = _prior_yes_oracle(as_ann(small.questions["train"]), as_ann(small.questions["val"]),
                                        {q.question_id: q.answer for q in small.questions["val"]})
  assert prior > yes + 0.1 and image > prior + 0.4


def test_fc7_carries_the_main_object(data, world):
  """(b) ridge readout from fc7 (train images) to the main category, scored on val images."""
  store = FeatureStore(data["paths"]["features"])

  def xy(split):
    x = store.read(store.rows([img.image_id for img in world.images[split]]))
    return x, np.array([img.category for img in world.images[split]])
  (xt, yt), (xv, yv) = xy("train"), xy("val")
  store.close()
  majority = collections.Counter(yv).most_common(1)[0][1] / len(yv)
  assert _ridge_accuracy(xt, yt, xv, yv) > max(0.3, 3 * majority)  # 120 images, ~3 per category


def _near(pixels, rgb, tolerance=24):
  """[H, W] whether each pixel is `rgb` up to JPEG's error."""
  return (np.abs(pixels.astype(int) - rgb) <= tolerance).all(-1)


@pytest.mark.slow
def test_pictures_show_the_world(data, world):
  """Each picture has its image's size and name; its scene and (unless covered) the main
  object's colour and marker show; the marker of a category it does not show is absent."""
  images = world.images["train"] + world.images["val"] + world.images["test"]
  shown = scene = colour = other = 0
  for img in images:
    path = os.path.join(data["dir"], synthetic.picture_path(img))
    assert re.fullmatch(r"(train2014|val2014|test2015)/COCO_\1_\d{12}\.jpg", synthetic.picture_path(img))
    with Image.open(path) as picture:
      assert picture.size == (img.width, img.height)
      pixels = np.asarray(picture.convert("RGB"))
    shown += _near(pixels, pictures.marker(img.name)).sum() > 20
    scene += _near(pixels, pictures.SCENES[img.scene]).sum() > 20
    colour += all(_near(pixels, c).sum() > 20 for c in pictures.colours(img.colour))
    absent = W.CATEGORY_NAMES[(img.category + 1) % len(W.CATEGORY_NAMES)]
    other += _near(pixels, pictures.marker(absent), 8).sum() > 20
  assert shown > 0.95 * len(images) and scene > 0.9 * len(images) and colour > 0.9 * len(images)
  assert other < 0.05 * len(images)


def test_an_uploaded_picture_gets_the_store_row(data, world, tmp_path):
  """The recorded extractor settings reproduce a store row from the picture's file (what
  `vqajax ask --image` and the demo's uploads do), also from a copy under another name."""
  for role in ("features", "grid_features"):
    store = FeatureStore(data["paths"][role])
    img = world.images["val"][3]
    assert store.settings["model"] == "colour_cells" and store.settings["weights"] is None
    copy = str(tmp_path / "upload.png")
    Image.open(os.path.join(data["dir"], synthetic.picture_path(img))).save(copy)
    features = Extractor(store.settings, store.shape, store.path)([store.image_path(img.image_id), copy])
    row = store.read(store.rows([img.image_id]))[0]
    np.testing.assert_array_equal(features[0], row)
    np.testing.assert_array_equal(features[1], row)  # the same pixels, lossless
    store.close()


def _ridge_accuracy(xt, yt, xv, yv, ridge=100.0):
  """Dual-form ridge regression onto one-hot labels (train -> val), argmax accuracy."""
  mean, std = xt.mean(0), xt.std(0) + 1e-3
  xt, xv = (xt - mean) / std, (xv - mean) / std
  classes = int(max(yt.max(), yv.max())) + 1
  alpha = np.linalg.solve(xt @ xt.T + ridge * np.eye(len(xt)), np.eye(classes)[yt])
  return ((xv @ xt.T @ alpha).argmax(1) == yv).mean()


def test_answers_disagree_like_people(data):
  """(c) disagreement, surface variants that only normalisation reconciles, confidences."""
  anns = [a for s in SPLITS for a in data["json"][f"{s}_annotations"]["annotations"]]
  raw_multi = np.mean([len({x["answer"] for x in a["answers"]}) > 1 for a in anns])
  norm_multi = np.mean([len({norm(x["answer"]) for x in a["answers"]}) > 1 for a in anns])
  assert 0.5 < raw_multi < 0.97
  assert 0.25 < norm_multi < raw_multi - 0.1  # normalisation reconciles some, not all
  raw = [x["answer"] for a in anns for x in a["answers"]]
  kinds = {
      "capitalised": lambda s: s.strip() != s.strip().lower(),
      "punctuation": lambda s: s.strip()[-1:] in "!.",
      "number word": lambda s: s.strip().lower() in _NUMBER_WORDS,
      "article": lambda s: s.strip().lower().startswith(("a ", "an ", "the ")),
      "whitespace": lambda s: s != s.strip(),
  }
  for kind, test in kinds.items():
    assert any(test(s) and norm(s) != s for s in raw), kind
  # Synonyms are real disagreement the normalisation does not undo.
  pairs = [(word, alt) for word, alts in synthetic.SA.SYNONYMS.items() for alt in alts]
  per_question = [{norm(x["answer"]) for x in a["answers"]} for a in anns]
  with_synonyms = sum(any(w in ns and alt in ns for w, alt in pairs) for ns in per_question)
  assert with_synonyms >= 10
  # "1,000"-style answers (rare; look at a bigger in-memory sample).
  small = synthetic.sample(seed=0, scale="small")
  assert any(re.search(r"\d,\d{3}", x["answer"]) for q in small.questions["train"] for x in q.answers)
  # Confidence goes with agreement; hard question types ("why") disagree more than yes/no.
  agree = [x["answer_confidence"] == "yes" for a in anns for x in a["answers"]
           if norm(x["answer"]) == a["multiple_choice_answer"]]
  disagree = [x["answer_confidence"] == "yes" for a in anns for x in a["answers"]
              if norm(x["answer"]) != a["multiple_choice_answer"]]
  assert np.mean(agree) > np.mean(disagree) + 0.2

  def agreement(types):
    return np.mean([np.mean([norm(x["answer"]) == a["multiple_choice_answer"] for x in a["answers"]])
                    for a in anns if a["question_type"] in types])
  assert agreement({"why", "why is the"}) < agreement({"is there a", "is the", "is this a"}) - 0.25


def test_shares_types_and_vocabulary(data):
  anns = [a for s in SPLITS for a in data["json"][f"{s}_annotations"]["annotations"]]
  shares = collections.Counter(a["answer_type"] for a in anns)
  assert 0.30 < shares["yes/no"] / len(anns) < 0.46
  assert 0.07 < shares["number"] / len(anns) < 0.18
  assert 0.42 < shares["other"] / len(anns) < 0.58
  assert len({a["question_type"] for a in anns}) >= 40
  yes_no = [a["multiple_choice_answer"] for a in anns if a["answer_type"] == "yes/no"]
  assert 0.5 < yes_no.count("yes") / len(yes_no) < 0.7
  # Long-tailed question words: min-count thresholds 5 and 11 really cut the vocabulary.
  words = collections.Counter(w for e in data["json"]["train_questions"]["questions"]
                              for w in re.findall(r"[a-z']+", e["question"].lower()))
  kept5 = sum(c >= 5 for c in words.values())
  kept11 = sum(c >= 11 for c in words.values())
  assert kept11 < kept5 < 0.8 * len(words) and kept11 >= 20


@pytest.mark.slow
def test_cli_synth(tmp_path, capsys):
  out = str(tmp_path / "cli")
  assert front_door.main(["data", "synth", "--out", out, "--scale", "tiny", "--seed", "2"]) == 0
  printed = capsys.readouterr()
  text = printed.out
  assert "train: 120 images, 360 questions" in text and "val: 60 images, 180 questions" in text
  pictures = synthetic.read_manifest(out)["counts"]["feature_rows"]
  for phase in ("pictures drawn", "features extracted"):  # progress with a count and an ETA, to the last one
    assert re.search(rf"{phase}: {pictures} / {pictures} images, [\d.]+ images/s, ETA 00:00:00", printed.err)
  assert "yes/no" in text and out in text
  assert synthetic.read_manifest(out)["seed"] == 2
  with pytest.raises(SystemExit):
    cli.main(["synth", "--out", out, "--scale", "huge"])


def test_multiple_choice_answer_is_the_official_majority(data):
  """Cross-check with the suite's official-style normalisation: the MC answer is the most
  frequent normalised answer, and the normalisation leaves it unchanged."""
  normalize = pytest.importorskip("vqajax.vqa.accuracy.normalize").normalize
  for split in SPLITS:
    for ann in data["json"][f"{split}_annotations"]["annotations"]:
      counts = collections.Counter(normalize(x["answer"]) for x in ann["answers"])
      mc = ann["multiple_choice_answer"]
      assert normalize(mc) == mc and counts[mc] == max(counts.values()), ann["question_id"]


def test_a_full_disk_while_writing_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
  def full(*args, **kwargs):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(pictures.Image.Image, "save", full)
  assert front_door.main(["data", "synth", "--out", str(tmp_path / "d"), "--scale", "tiny"]) == 3
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("vqajax data: failed: ") and "No space left on device" in err[-1], err
  assert not any("Traceback" in line for line in err) and os.listdir(tmp_path) == []
