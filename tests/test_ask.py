"""`vqajax ask` and its library API: real photos through a store extracted by the suite
give the eval path's answers, the extractor settings are recorded and enforced, batches
equal one-by-one answers, the embedded run answers about its own image ids, answer
groundings of AnswerTherapy runs, and bad input is one line with exit status 2."""

import functools
import glob
import hashlib
import json
import os
import shutil

import h5py
import jax
import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as coco_mask

from data_pipeline.features import extract
from data_pipeline.features.partial_store import ChunkedStore
from experiments.therapy import grounding_class as class_config
from experiments.therapy import grounding_mask as mask_config
from experiments.vqa import bow_q_i
from vqajax import cli
from vqajax.answertherapy import grounding_class, grounding_mask
from vqajax.answertherapy.ask import Grounder
from vqajax.core import checkpoint, evals, run_record, train, trained
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment
from vqajax.features import models, recorded, weights
from vqajax.features.keys import feature_key
from vqajax.features.store import FeatureStore, settings_path, write_store
from vqajax.vqa.ask import Answerer

SAMPLE_DATA = os.path.join(os.path.dirname(__import__("matplotlib").__file__), "mpl-data", "sample_data")
PHOTOS = [os.path.join(SAMPLE_DATA, n) for n in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png", "logo2.png")]
STAGES, HIDDEN, SIZE = ((4,), (8,), (8,)), 16, 32  # a small VGG on 32 x 32 input, as test_feature_extraction
TINY = "tiny_vgg"
STEPS = {k: 2 for k in ("num_train_steps", "eval_every_steps", "log_every_steps")}  # cheap runs


@pytest.fixture(autouse=True)
def _tiny_model(monkeypatch):
  monkeypatch.setitem(models.MODELS, TINY, functools.partial(models.VGG, STAGES, hidden=HIDDEN))


def _weights(path, seed=0):
  rng = np.random.default_rng(seed)
  layout = weights.torch_layout(models.VGG(STAGES, hidden=HIDDEN))
  np.savez(path, **{k: rng.normal(size=s).astype(np.float32) * 0.1 for k, (s, _, _) in layout.items()})
  return str(path)


def _train(config, workdir):
  train.train_and_evaluate(cli.task_of(config), config, str(workdir), devices=jax.devices()[:1])
  return str(workdir)


def _initialised(config, workdir):
  """A run whose checkpoint is its freshly initialised state (what asking reads of a run,
  without compiling a train step)."""
  task = cli.task_of(config)
  exp = Experiment.build(task, config, jax.devices()[:1])
  saver = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
  saver.save(0, exp.initial_state(), {"input_step": 0, "seed": config.seed})
  saver.close()
  digest = run_record.record_encoders(str(workdir), config.task, exp.data.encoders.tables())
  run_record.write_run_file(str(workdir), config, task.sizes(exp.data), digest)
  return str(workdir)


@pytest.fixture(scope="module")
def photo_run(tiny_data, tmp_path_factory):
  """BoW Q + I trained on a store extracted from real photos (every tiny image id is a
  link to one of three photos), with the extractor settings recorded."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setitem(models.MODELS, TINY, functools.partial(models.VGG, STAGES, hidden=HIDDEN))
    root = tmp_path_factory.mktemp("photo_run")
    npz = _weights(root / "w.npz")
    photos = root / "coco"
    photos.mkdir()
    needed = FeatureStore(os.path.join(tiny_data, "features", "fc7.h5")).image_ids.tolist()
    for i, key in enumerate(needed):
      source = PHOTOS[i % 3]
      os.symlink(source, photos / f"COCO_train2014_{key:012d}{os.path.splitext(source)[1]}")
    model = models.MODELS[TINY]()
    settings = recorded.settings(TINY, "fc7", "vqa", SIZE, "float16", npz, weights.read_state(npz))
    store = str(root / "fc7.h5")
    extract.extract(sorted(glob.glob(str(photos / "*"))), model, weights.load_params(npz, model, TINY), store,
                    settings, image_size=SIZE, batch=64)
    config = config_lib.override(bow_q_i.get_config("runlocal"), {
        **STEPS, "data.dir": tiny_data, "data.features": store, "data.feature_shape": (HIDDEN,)})
    return {"workdir": _train(config, root / "run"), "photos": str(photos), "weights": npz, "store": store,
            "name": config.name}


@pytest.fixture(scope="module")
def embedded_run(tiny_data, tmp_path_factory):
  """The image-id route: a run on the embedded tiny dataset's synthetic features."""
  config = config_lib.override(bow_q_i.get_config("runlocal"), {**STEPS, "data.dir": tiny_data})
  return _initialised(config, tmp_path_factory.mktemp("embedded_run"))


def _ask(argv, capsys):
  status = cli.main(["ask", *argv])
  out, err = capsys.readouterr()
  return status, out, err


def _one_line_error(argv, capsys, expected):
  status, _, err = _ask(argv, capsys)
  lines = err.strip().splitlines()
  assert status == 2 and lines and lines[-1].startswith("vqajax ask: error: ") and expected in lines[-1], err
  assert "Traceback" not in err


def _read(path):
  with open(path) as f:
    return json.load(f)


@pytest.mark.slow
def test_real_photos_give_the_eval_path_answers(photo_run, tiny_data, tmp_path, capsys):
  results = os.path.join(photo_run["workdir"], "results", "step_2")
  open_ended = {r["question_id"]: r["answer"] for r in _read(glob.glob(f"{results}/v2_OpenEnded_*_results.json")[0])}
  choices = {r["question_id"]: r["answer"] for r in _read(glob.glob(f"{results}/MultipleChoice_*_results.json")[0])}
  mc = {q["question_id"]: q for q in _read(os.path.join(tiny_data, "MultipleChoice_mscoco_val2014_questions.json"))["questions"]}
  val = _read(os.path.join(tiny_data, "v2_OpenEnded_mscoco_val2014_questions.json"))["questions"][:40]
  names = {int(n.split("_")[2].split(".")[0]): n for n in os.listdir(photo_run["photos"])}
  lines = [json.dumps({"image": os.path.join("coco", names[q["image_id"]]), "question": q["question"],
                       "choices": mc[q["question_id"]]["multiple_choices"]}) for q in val]
  questions = os.path.join(os.path.dirname(photo_run["photos"]), "questions.jsonl")
  with open(questions, "w") as f:
    f.write("\n".join(lines) + "\n")
  status, out, _ = _ask(["--workdir", photo_run["workdir"], "--questions", questions, "--json", "--top-k", "3"], capsys)
  assert status == 0
  answered = json.loads(out)
  assert [a["question"] for a in answered] == [q["question"] for q in val]
  assert [a["answers"][0]["answer"] for a in answered] == [open_ended[q["question_id"]] for q in val]
  assert [a["choice"] for a in answered] == [choices[q["question_id"]] for q in val]
  probs = [[x["probability"] for x in a["answers"]] for a in answered]
  assert all(p[0] >= p[1] >= p[2] > 0 for p in probs)
  # The photos' features are the store's rows (float16, as extracted), so the photos and
  # their store ids get the same probabilities.
  answerer = Answerer.from_workdir(photo_run["workdir"])
  store = FeatureStore(photo_run["store"])
  keys = [q["image_id"] for q in val]
  features = answerer.features_of([os.path.join(photo_run["photos"], names[k]) for k in keys])
  np.testing.assert_allclose(features, store.read(store.rows(keys)), rtol=2e-3, atol=1e-3)
  assert answerer.image_path(keys[0]) == os.path.join(photo_run["photos"], names[keys[0]])  # recorded
  by_id = answerer.answer([q["question"] for q in val], image_ids=keys, k=3)
  np.testing.assert_allclose([[p for _, p in a["answers"]] for a in by_id], probs, rtol=1e-3)


@pytest.mark.slow
def test_the_weights_must_be_the_recorded_ones(photo_run, tmp_path, capsys):
  record = _read(os.path.join(photo_run["workdir"], "run.json"))["extractor"]
  with np.load(photo_run["weights"]) as state:  # the tensors' digest, computed here
    digest = hashlib.sha256()
    for name in sorted(state.files):
      digest.update(f"{name} {state[name].shape}\n".encode() + state[name].astype(np.float32).tobytes())
  assert record == {"model": TINY, "layer": "fc7", "preprocess": "vqa", "image_size": SIZE, "dtype": "float16",
                    "weights": photo_run["weights"], "weights_sha256": weights.sha256(photo_run["weights"]),
                    "weights_tensors_sha256": digest.hexdigest()}
  assert FeatureStore(photo_run["store"]).settings == record
  other = _weights(tmp_path / "other.npz", seed=1)
  ask = ["--workdir", photo_run["workdir"], "--image", PHOTOS[0], "--question", "what is it?"]
  _one_line_error(ask + ["--weights", other], capsys, f"{other}: the sha256 of its tensors")
  _one_line_error(ask + ["--weights", str(tmp_path / "gone.npz")], capsys, "gone.npz: the weights the features "
                                                                            "were extracted with are not there")
  moved = shutil.copy(photo_run["weights"], tmp_path / "moved.npz")  # the same file elsewhere is accepted
  status, out, _ = _ask(ask + ["--weights", str(moved)], capsys)
  assert status == 0 and out.startswith(f"{PHOTOS[0]}: what is it?\n  1. ")
  with np.load(photo_run["weights"]) as state:  # the same tensors in another file: the same weights
    np.savez(tmp_path / "resaved.npz", **{k: state[k] for k in reversed(state.files)})
  assert weights.sha256(str(tmp_path / "resaved.npz")) != record["weights_sha256"]
  assert _ask(ask + ["--weights", str(tmp_path / "resaved.npz")], capsys)[1] == out
  bundle = str(tmp_path / "bundle")  # exported without the weights: it names no file, --weights gives it
  assert cli.main(["export", "--workdir", photo_run["workdir"], "--out", bundle]) == 0
  assert _read(os.path.join(bundle, "vqajax.json"))["extractor"]["weights"] is None
  bundled = ["--workdir", bundle, *ask[2:]]
  _one_line_error(bundled, capsys, "names no weights file of its extractor")
  assert _ask(bundled + ["--weights", str(moved)], capsys)[1] == out
  del record["weights_tensors_sha256"]  # settings without the tensors' digest are refused
  with pytest.raises(InputError, match="lack weights_tensors_sha256"):
    recorded.Extractor(record, (HIDDEN,), "old.h5", str(tmp_path / "resaved.npz"))
  with pytest.raises(InputError, match="no extractor settings recorded"):
    recorded.Extractor(None, (HIDDEN,), "synthetic.h5")


def test_a_batch_of_many_questions_equals_one_by_one(embedded_run, tiny_data):
  answerer = Answerer.from_workdir(embedded_run)
  questions = _read(os.path.join(tiny_data, "v2_OpenEnded_mscoco_val2014_questions.json"))["questions"][:70]
  texts, ids = [q["question"] for q in questions], [q["image_id"] for q in questions]
  assert answerer.batch < len(texts)  # several batches, the last one padded
  together = answerer.answer(texts, image_ids=ids, k=len(answerer.answers))
  for i in (0, 31, 32, 69):
    alone = answerer.answer([texts[i]], image_ids=[ids[i]], k=len(answerer.answers))[0]
    assert [a for a, _ in alone["answers"]] == [a for a, _ in together[i]["answers"]]
    np.testing.assert_allclose([p for _, p in alone["answers"]], [p for _, p in together[i]["answers"]], rtol=1e-5)
  assert abs(sum(p for _, p in together[0]["answers"]) - 1) < 1e-4  # every answer: a distribution


def test_the_embedded_run_answers_about_its_own_image_ids(embedded_run, tiny_data, capsys):
  answerer = Answerer.from_workdir(embedded_run)
  store = FeatureStore(os.path.join(tiny_data, "features", "fc7.h5"))
  assert answerer.image_ids == store.image_ids.tolist()
  key = answerer.image_ids[0]
  first = {}  # the first caption of each image, in file order
  for split in ("train", "val"):
    for c in _read(os.path.join(tiny_data, f"captions_{split}2014.json"))["annotations"]:
      first.setdefault(c["image_id"], c["caption"])
  picture = answerer.image_path(key)  # the embedded datasets have pictures, under official COCO names
  assert answerer.caption(key) == first[key] and os.path.basename(picture) == f"COCO_train2014_{key:012d}.jpg"
  assert os.path.samefile(picture, os.path.join(tiny_data, "train2014", os.path.basename(picture)))
  status, out, err = _ask(["--workdir", embedded_run, "--image-id", str(key), "--question", "what color is it?",
                           "--question", "is it red?", "--choices", "red,blue", "--top-k", "2"], capsys)
  lines = out.splitlines()
  assert status == 0 and err == "" and len(lines) == 8 and lines[0] == f"image_id {key}: what color is it?"
  assert lines[1].startswith("  1. ") and lines[3].startswith(("  multiple choice: red  0.", "  multiple choice: blue  0."))
  expected = answerer.answer(["is it red?"], image_ids=[key], k=2, choices=[["red", "blue"]])[0]
  assert lines[4:] == [f"image_id {key}: is it red?"] + [f"  {r}. {a}  {p:.3f}" for r, (a, p) in
                                                         enumerate(expected["answers"], 1)] + [
                                                             f"  multiple choice: {expected['choice']}  "
                                                             f"{expected['choice_probability']:.3f}"]
  top = dict(expected["answers"])
  assert expected["choice"] not in top or top[expected["choice"]] == pytest.approx(expected["choice_probability"])


def test_a_drawn_picture_is_answered_on_the_embedded_run_with_no_download(embedded_run, tmp_path, capsys):
  """The embedded stores record their extractor (colour_cells, no weights file): a PNG drawn
  here is answered from features made as the store's were; unknown words and choices the
  answer table lacks are said, and an unreadable file in a folder is reported and skipped."""
  from PIL import ImageDraw
  picture = Image.new("RGB", (320, 240), (102, 204, 102))
  ImageDraw.Draw(picture).ellipse((60, 50, 220, 190), fill=(153, 102, 51))
  folder = tmp_path / "drawn"
  folder.mkdir()
  picture.save(folder / "dog_1.png")
  (folder / "notes_2.png").write_text("not a picture")
  answerer = Answerer.from_workdir(embedded_run)
  question = "what color is the zorblax?"
  status, out, err = _ask(["--workdir", embedded_run, "--image", str(folder), "--question", question,
                           "--choices", "brown,glorp"], capsys)
  [expected] = answerer.answer([question], features=answerer.features_of([str(folder / "dog_1.png")]),
                               choices=[["brown", "glorp"]])
  assert status == 0 and err == f"unreadable, skipped: {folder / 'notes_2.png'}: UnidentifiedImageError: " \
      f"cannot identify image file '{folder / 'notes_2.png'}'\nnote: this run was trained on the embedded synthetic " \
      "dataset (config.data.synthetic: drawn shapes), so its answers about other pictures mean little\n"
  assert out.splitlines() == [f"{folder / 'dog_1.png'}: {question}"] + [
      f"  {r}. {a}  {p:.3f}" for r, (a, p) in enumerate(expected["answers"], 1)] + [
      f"  multiple choice: {expected['choice']}  {expected['choice_probability']:.3f}",
      "  note: not in the run's vocabulary (read as one unknown word): zorblax",
      "  note: not in the run's answer table (the model has no score for them): glorp"]
  assert expected["choice"] == "brown"  # the only choice it can score
  questions = tmp_path / "q.jsonl"
  questions.write_text('{"image": "drawn/dog_1.png", "question": "what?"}\n{"image": "gone.png", "question": "a?"}\n')
  _one_line_error(["--workdir", embedded_run, "--questions", str(questions)], capsys,
                  f'{questions}: records[1]: "image" {tmp_path / "gone.png"}: not found')
  questions.write_text('{"image": "drawn", "question": "what?"}\n')
  _one_line_error(["--workdir", embedded_run, "--questions", str(questions)], capsys,
                  f'{questions}: records[0]: "image" {folder}: a folder, expected an image file')
  # colour_cells is defined by its code alone: a weights file given is not silently left unread
  _one_line_error(["--workdir", embedded_run, "--image", str(folder), "--question", question, "--weights",
                   str(questions)], capsys, f"--weights {questions}: {embedded_run}'s extractor, colour_cells, takes no "
                  "weights file")


def test_bad_input_is_one_line(embedded_run, mask_run, tmp_path, capsys):
  ask = ["--workdir", embedded_run, "--question", "what?"]
  _one_line_error(ask + ["--image-id", "999999999"], capsys, "image id 999999999: not in the run's feature store")
  empty = tmp_path / "empty.json"
  empty.write_text("[]")
  _one_line_error(["--workdir", embedded_run, "--questions", str(empty)], capsys, f"{empty}: no questions")
  _one_line_error(["--workdir", embedded_run, "--image-id", "1"], capsys, "no questions: give --question")
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"image_id": 1, "question": "a?"}\n{"image_id": "x", "question": "b?"}\n')
  _one_line_error(["--workdir", embedded_run, "--questions", str(bad)], capsys,
                  f'{bad}: records[1]: "image_id" expected an integer')
  bad.write_bytes(b'{"image_id": 1, "question": "a?"}\n{"image_id": 1, "question": "\xff\xfe?"}\n')
  _one_line_error(["--workdir", embedded_run, "--questions", str(bad)], capsys,  # had been read as U+FFFD
                  f"{bad}: line 2: not valid JSON ('utf-8' codec can't decode byte 0xff")
  _one_line_error(ask + ["--image", "/dev/zero"], capsys, "/dev/zero: not an image file or folder (a fifo or device)")
  _one_line_error(["--workdir", str(tmp_path / "nothing"), "--image-id", "1", "--question", "a?"], capsys,
                  "nothing: no such run")
  # a flag of the other task's is refused, not ignored (nothing written into --out)
  for flag, value in [("--out", str(tmp_path / "masks")), ("--answers", "red"), ("--class-workdir", mask_run)]:
    _one_line_error(ask + ["--image-id", "1", flag, value], capsys,
                    f"{flag}: for grounding_mask runs; {embedded_run} is a vqa run")
  _one_line_error(["--workdir", mask_run, "--image-id", "1", "--question", "a?", "--answers", "red", "--choices",
                   "red,blue", "--out", str(tmp_path / "masks")], capsys, f"--choices: for vqa runs; {mask_run} is a "
                  "grounding_mask run")
  assert not os.path.exists(tmp_path / "masks")
  other = tmp_path / "class_run"  # a run of another task: its record is all that is read
  other.mkdir()
  record = _read(os.path.join(mask_run, "run.json"))
  record["config"]["task"] = "grounding_class"
  (other / "run.json").write_text(json.dumps(record))
  _one_line_error(["--workdir", str(other), "--image-id", "1", "--question", "a?"], capsys,
                  "a grounding_class run; expected a vqa or grounding_mask run")


@pytest.mark.slow
@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")  # the huge picture's one line, no more
def test_a_non_image_file_is_one_line(photo_run, tmp_path, capsys):
  text = tmp_path / "notes_1.jpg"
  text.write_text("not an image")
  _one_line_error(["--workdir", photo_run["workdir"], "--image", str(text), "--question", "what?"], capsys,
                  f"{text}: not a readable image (")
  huge = tmp_path / "huge_2.png"  # 490 KB of PNG, 1.7 GB decoded: refused before it is decoded
  Image.new("L", (13000, 13000)).save(huge)
  _one_line_error(["--workdir", photo_run["workdir"], "--image", str(huge), "--question", "what?"], capsys,
                  f"{huge}: not a readable image (13000 x 13000 pixels, more than the 40 million a picture may have)")


def test_stores_record_the_extractor_settings(tmp_path):
  settings = {"model": TINY, "layer": "fc7"}
  image = str(tmp_path / "7.png")
  Image.new("RGB", (4, 4)).save(image)
  for name in ("s.h5", "s.npy"):
    write_store(str(tmp_path / name), [3, 1], np.ones((2, 4), np.float16), settings, [image, "gone.png"])
    store = FeatureStore(str(tmp_path / name))
    assert store.settings == settings and (store.image_path(3), store.image_path(1)) == (image, None)
  with h5py.File(tmp_path / "s.h5") as f:
    assert json.loads(f.attrs["settings"]) == settings and f["image_paths"].asstr()[0] == image
  assert _read(settings_path(str(tmp_path / "s.npy"))) == settings
  assert _read(str(tmp_path / "s.image_paths.json")) == [image, "gone.png"]
  write_store(str(tmp_path / "s.npy"), [3], np.ones((1, 4), np.float16))  # a store without: no stale file
  assert FeatureStore(str(tmp_path / "s.npy")).settings is None and not os.path.exists(settings_path(str(tmp_path / "s.npy")))
  store = ChunkedStore(str(tmp_path / "x.npy"), {"model": "a"}, (4,), "float16")
  store.append(np.array([7]), np.ones((1, 4)))
  store.finish()
  assert FeatureStore(str(tmp_path / "x.npy")).settings == {"model": "a"}
  with pytest.raises(InputError, match=r"^[^{]*x\.npy: was extracted with other settings \(model: 'a' then, 'b' now\): "):
    ChunkedStore(str(tmp_path / "x.npy"), {"model": "b"}, (4,), "float16")  # adding to it with others


@pytest.fixture(scope="module")
def mask_run(tiny_therapy, tmp_path_factory):
  """A grounding_mask run on the tiny therapy set."""
  config = config_lib.override(mask_config.get_config("runlocal"), {"data.dir": tiny_therapy})
  return _initialised(config, tmp_path_factory.mktemp("mask_run"))


def _upsampled(grid, height, width):
  """Nearest-cell upsampling, written here: pixel row i is cell floor(i * G / height)."""
  rows = [int(i * grid.shape[0] / height) for i in range(height)]
  cols = [int(j * grid.shape[1] / width) for j in range(width)]
  return np.array([[grid[r, c] for c in cols] for r in rows])


@pytest.mark.slow
def test_groundings_of_a_mask_run(mask_run, tiny_therapy, tmp_path, capsys):
  grounder = Grounder.from_workdir(mask_run)
  key = grounder.image_ids[0]
  result = grounder.ground("what is on the table?", ["a cup", "two cups", "a mug"], image_id=key, image_size=(20, 30))
  assert result["masks"].shape == (3, grounder.grid, grounder.grid) and result["single_from"] == "masks"
  decoded = [coco_mask.decode({"size": r["size"], "counts": r["counts"].encode()}).astype(bool) for r in result["rle"]]
  for mask, probs in zip(decoded, result["masks"]):
    assert mask.shape == (20, 30) and (mask == _upsampled(probs >= 0.5, 20, 30)).all()
  ious = [(a & b).sum() / max((a | b).sum(), 1) if (a | b).any() else 1.0
          for i, a in enumerate(decoded) for b in decoded[i + 1:]]
  assert result["single"] == all(v > 0.9 for v in ious)
  # With a classifier (freshly initialised: no training needed), its call for the val
  # questions is the one its evaluation writes.
  config = config_lib.override(class_config.get_config("runlocal"), {"data.dir": tiny_therapy})
  exp = Experiment.build(grounding_class, config)
  params = exp.initial_state().params
  evals.evaluators(exp)[0].run(params, 0, str(tmp_path / "class"))  # the config's one evaluation, val
  predictions = _read(tmp_path / "class" / "results" / "step_0" / "predictions.json")
  class_run = trained.Trained(path="class", config=config, task=grounding_class, encoders=exp.data.encoders,
                              params=params, step=0, extractor=None, metrics={}, mesh=exp.mesh, model=exp.model)
  both = Grounder(trained.open_run(mask_run, {"grounding_mask": grounding_mask}), class_run)
  for p in predictions[:6]:
    call = both.ground(p["question"], p["answers"], image_id=feature_key(p["image_id"]))
    assert call["single"] == (p["predicted"] == "single") and call["single_from"] == "classifier"
  # The verb writes a PNG per answer and masks.json; never into an input.
  out = tmp_path / "masks"
  status, printed, _ = _ask(["--workdir", mask_run, "--image-id", str(key), "--question", "what is it?",
                             "--answers", "a cup", "a mug", "--out", str(out)], capsys)
  assert status == 0 and ("single grounding" in printed or "multiple groundings" in printed)
  written = _read(out / "masks.json")
  assert [(m["answer"], m["png"]) for m in written[0]["masks"]] == [("a cup", "0000_a-cup.png"),
                                                                    ("a mug", "0000_a-mug.png")]
  size = Image.open(grounder.image_path(key)).size  # the store's picture: masks at its size
  assert Image.open(out / "0000_a-mug.png").size == size
  assert written[0]["masks"][0]["rle"]["size"] == [size[1], size[0]]
  _one_line_error(["--workdir", mask_run, "--image-id", str(key), "--question", "what?", "--answers", "a",
                   "--out", os.path.join(mask_run, "masks")], capsys, "an input of this command")
  _one_line_error(["--workdir", mask_run, "--image-id", str(key), "--question", "what?", "--answers", "a",
                   "--out", str(out)], capsys, f"--out {out}: already exists; each answer's mask is written into a new")
  _one_line_error(["--workdir", mask_run, "--image-id", str(key), "--question", "what?",
                   "--out", str(tmp_path / "again")], capsys, "give --answers")
