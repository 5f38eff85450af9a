"""Feature extraction end to end on real photos (matplotlib's sample data) with a small
random-weight VGG: odd image modes, EXIF orientation, unreadable files, resume after a
subset and after kill -9, and a store that trains."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest
from PIL import Image

from data_pipeline.features import cli, extract, partial_store
from experiments.vqa import i as image_only
from tests import devices
from tests.digests import digests
from vqajax import ask_cli
from vqajax import cli as front_door
from vqajax.core import train
from vqajax.core.errors import InputError
from vqajax.features import forward, images, models, weights
from vqajax.features.store import FeatureStore

SAMPLE_DATA = os.path.join(os.path.dirname(__import__("matplotlib").__file__), "mpl-data", "sample_data")
GRACE = os.path.join(SAMPLE_DATA, "grace_hopper.jpg")  # RGB JPEG, 512 x 600
STAGES, HIDDEN, SIZE = ((4,), (8,), (8,)), 16, 32  # a small VGG on 32 x 32 input
SETTINGS = {"model": "tiny"}
READABLE = [1, 2, 3, 4, 5, 6, 7, 8, 11]


def _tiny(layer="fc7"):
  model = models.VGG(STAGES, layer=layer, hidden=HIDDEN)
  return model, model.init(jax.random.key(0), np.zeros((1, SIZE, SIZE, 3), np.float32))["params"]


def _expected(model, params, rgbs: list[Image.Image]) -> np.ndarray:
  """The features of RGB images, preprocessed here by hand (VQA paper: BGR minus mean)."""
  pixels = np.stack([np.asarray(rgb.resize((SIZE, SIZE), Image.BILINEAR), np.float32) for rgb in rgbs])
  inputs = pixels[..., ::-1] - np.array([103.939, 116.779, 123.68], np.float32)
  return np.asarray(jax.jit(model.apply)({"params": params}, inputs))


@pytest.fixture
def photos(tmp_path):
  """Real photos and copies in other modes, rotated, truncated, not images."""
  out = tmp_path / "images"
  out.mkdir()
  grace = Image.open(GRACE).convert("RGB")
  (out / "COCO_val2014_000000000001.jpg").write_bytes(open(GRACE, "rb").read())
  for i, name in ((2, "Minduka_Present_Blue_Pack.png"), (3, "logo2.png")):  # RGBA
    (out / f"COCO_val2014_{i:012d}.png").write_bytes(open(os.path.join(SAMPLE_DATA, name), "rb").read())
  grace.convert("L").save(out / "grey_4.png")
  grace.convert("CMYK").save(out / "cmyk_5.jpg")
  grace.convert("P").save(out / "palette_6.png")
  grace.save(out / "upright_7.png")
  exif = Image.Exif()
  exif[0x0112] = 6  # orientation: the stored image is to be turned 90 degrees clockwise
  grace.transpose(Image.Transpose.ROTATE_90).save(out / "rotated_8.png", exif=exif)
  (out / "truncated_9.jpg").write_bytes(open(GRACE, "rb").read()[:20000])
  (out / "notanimage_10.jpg").write_text("not an image")
  grace.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(out / "mirror_11.png")
  (out / "notes.txt").write_text("ignored: not an image extension")
  return str(out)


def _rows(path) -> dict[int, np.ndarray]:
  store_ = FeatureStore(path)
  return dict(zip(store_.image_ids.tolist(), store_.read(np.arange(len(store_.image_ids)))))


def _assert_same_rows(path, reference):
  """Same ids and rows as `reference`, up to a float16 rounding (the batches differ)."""
  got, expected = _rows(path), _rows(reference)
  assert sorted(got) == sorted(expected) == READABLE
  for key, row in expected.items():
    np.testing.assert_allclose(got[key], row, rtol=1e-3, atol=1e-3 * np.abs(row).max())


@pytest.mark.slow
def test_real_photos_in_every_mode_and_the_unreadable_ones(photos, tmp_path, caplog):
  model, params = _tiny()
  out = str(tmp_path / "fc7.h5")
  caplog.set_level("WARNING")
  summary = extract.extract(images.list_images(photos), model, params, out, SETTINGS,
                            image_size=SIZE, batch=8, dtype="float32")  # 8 devices: 2 batches, 1 padded
  assert [(os.path.basename(p), r.split(":")[0]) for p, r in summary.unreadable] == [
      ("notanimage_10.jpg", "UnidentifiedImageError"), ("truncated_9.jpg", "OSError")]
  assert "truncated" in summary.unreadable[1][1] and "truncated_9.jpg: unreadable, skipped" in caplog.text
  assert (summary.images, summary.already, summary.extracted, summary.rows) == (11, 0, 9, 9)
  rows = _rows(out)
  assert sorted(rows) == READABLE and rows[1].shape == (HIDDEN,) and np.abs(rows[1]).max() > 1
  grace = Image.open(GRACE).convert("RGB")
  grey = np.asarray(Image.open(GRACE).convert("L"))
  expected = {
      1: grace, 7: grace,
      4: Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2)),
      5: Image.open(os.path.join(photos, "cmyk_5.jpg")).convert("RGB"),
      6: Image.open(os.path.join(photos, "palette_6.png")).convert("RGB"),
      8: grace,  # the EXIF orientation turns the rotated copy upright
      11: grace.transpose(Image.Transpose.FLIP_LEFT_RIGHT)}
  unturned = Image.open(os.path.join(photos, "rotated_8.png")).convert("RGB")
  *features, unturned = _expected(model, params, list(expected.values()) + [unturned])
  for key, row in zip(expected, features):
    np.testing.assert_allclose(rows[key], row, rtol=1e-4, atol=1e-3)
  assert np.abs(unturned - rows[8]).max() > 100 * np.abs(rows[7] - rows[8]).max() + 1e-3
  # Transparent pixels read as white: the RGBA logo composited by hand.
  rgba = np.asarray(Image.open(os.path.join(SAMPLE_DATA, "logo2.png")), np.float64)
  alpha = rgba[:, :, 3:] / 255
  composite = rgba[:, :, :3] * alpha + 255 * (1 - alpha)
  decoded = np.asarray(images.decode(os.path.join(photos, "COCO_val2014_000000000003.png")), np.float64)
  assert (alpha < 1).any() and np.abs(decoded - composite).max() <= 1


@pytest.mark.parametrize("given", ["folder", "list file"])
def test_a_fifo_or_a_broken_link_is_counted_unreadable_never_waited_on(given, tmp_path):
  """Issue 22.4: opening a fifo would wait forever for a writer; a broken link was left out silently."""
  folder = tmp_path / "images"
  folder.mkdir()
  (folder / "COCO_val2014_000000000001.jpg").write_bytes(open(GRACE, "rb").read())
  os.mkfifo(folder / "fifo_2.jpg")
  os.symlink(tmp_path / "missing.jpg", folder / "broken_3.jpg")
  (tmp_path / "list.txt").write_text("images/COCO_val2014_000000000001.jpg\nimages/fifo_2.jpg\nimages/broken_3.jpg\n")
  paths = images.list_images(str(folder if given == "folder" else tmp_path / "list.txt"))
  assert sorted(map(os.path.basename, paths)) == ["COCO_val2014_000000000001.jpg", "broken_3.jpg", "fifo_2.jpg"]
  model, params = _tiny()
  done = []
  worker = threading.Thread(target=lambda: done.append(extract.extract(
      paths, model, params, str(tmp_path / "fc7.h5"), SETTINGS, image_size=SIZE, batch=8, dtype="float32")),
      daemon=True)
  worker.start()
  worker.join(timeout=300)
  assert done, "the extraction hung"
  unreadable = {os.path.basename(p): r for p, r in done[0].unreadable}
  assert unreadable["fifo_2.jpg"] == "not a regular file" and "FileNotFoundError" in unreadable["broken_3.jpg"]
  assert done[0].rows == 1


def test_ask_over_many_files_prints_progress_with_an_eta(tmp_path, capsys, monkeypatch):
  """Issue 22.4: `vqajax ask --image DIR` over many images says how far it is (stderr), as
  `features` does: the command counts the extractor's batches (`forward.feature_batches`)."""
  model, params = _tiny()
  model_forward = forward.Forward(model, params, 8)  # batches of 8

  class Asked:  # what `vqajax ask` reads of an Answerer / Grounder for image files
    def feature_batches(self, paths):
      return forward.feature_batches(paths, model_forward, "vqa", SIZE, "float32")

  monkeypatch.setattr(ask_cli, "PROGRESS_EVERY", 8)
  copies = [str(tmp_path / f"grace_{i}.jpg") for i in range(20)]
  for path in copies:
    shutil.copy(GRACE, path)
  rows = ask_cli._features(Asked(), [{"image": path, "question": "q"} for path in copies])
  lines = capsys.readouterr().err.strip().splitlines()
  assert [line.split(",")[0] for line in lines] == [f"image features: {n} / 20 images" for n in (8, 16, 20)]
  assert list(rows) == copies and rows[copies[-1]].shape == (HIDDEN,) and all(", ETA " in line for line in lines)
  ask_cli._features(Asked(), [{"image": path, "question": "q"} for path in copies[:8]])
  assert capsys.readouterr().err == ""  # short work: no progress lines
  os.mkfifo(tmp_path / "fifo_1.jpg")  # an ask questions file naming a fifo: one line, not a hang
  with pytest.raises(InputError, match=r"fifo_1.jpg: not a readable image \(not a regular file\)"):
    list(forward.feature_batches([GRACE, str(tmp_path / "fifo_1.jpg")], model_forward, "vqa", SIZE, "float32"))


def test_a_progress_line_counts_only_the_images_whose_features_are_back(tmp_path, monkeypatch):
  """`vqajax features`' "N / total images" (and the rate and ETA from it) counts images whose
  features came back from the device, not a batch still in flight: counted at dispatch, the
  first ETA predicted 0.73x of the time the rest took (bench_extract, 96 images, batch 16)."""
  fetched, said = [0], []
  get = jax.device_get

  def counting_get(outputs):
    out = get(outputs)
    fetched[0] += 8  # every batch here is full: 24 images, batches of 8
    return out

  monkeypatch.setattr(extract.jax, "device_get", counting_get)
  monkeypatch.setattr(extract.Progress, "__init__", functools.partialmethod(
      forward.Progress.__init__, say=lambda line: said.append((line.split(" images")[0], fetched[0]))))
  paths = []
  for i in range(24):
    paths.append(str(tmp_path / f"COCO_val2014_{i + 1:012d}.jpg"))
    shutil.copy(GRACE, paths[-1])
  model, params = _tiny()
  extract.extract(paths, model, params, str(tmp_path / "fc7.npy"), SETTINGS, image_size=SIZE, batch=8, log_every=8)
  assert said == [("8 / 24", 8), ("16 / 24", 16), ("24 / 24", 24)]


def test_resume_after_a_subset_equals_one_run(photos, tmp_path):
  model, params = _tiny()
  one = str(tmp_path / "one.npy")
  extract.extract(images.list_images(photos), model, params, one, SETTINGS, image_size=SIZE, batch=8)
  subset = tmp_path / "subset.txt"
  subset.write_text("".join(f"images/{name}\n" for name in ("grey_4.png", "upright_7.png", "mirror_11.png")))
  resumed = str(tmp_path / "resumed.npy")
  first = extract.extract(images.list_images(str(subset)), model, params, resumed, SETTINGS, image_size=SIZE)
  assert (first.extracted, first.rows) == (3, 3) and not os.path.exists(resumed + ".partial")
  second = extract.extract(images.list_images(photos), model, params, resumed, SETTINGS, image_size=SIZE)
  assert (second.already, second.extracted, len(second.unreadable), second.rows) == (3, 6, 2, 9)
  assert FeatureStore(resumed).dtype == np.float16
  _assert_same_rows(resumed, one)
  again = extract.extract(images.list_images(photos), model, params, resumed, SETTINGS, image_size=SIZE)
  assert (again.already, again.extracted) == (9, 0)  # the unreadable two are tried again


_KILLED_RUN = """
import sys, time
import jax, numpy as np
from data_pipeline.features import extract
from vqajax.features import images
from vqajax.features import models
load = images.load
images.load = lambda *args: (time.sleep(0.15), load(*args))[1]
model = models.VGG({stages}, hidden={hidden})
params = model.init(jax.random.key(0), np.zeros((1, {size}, {size}, 3), np.float32))["params"]
extract.extract(images.list_images(sys.argv[1]), model, params, sys.argv[2], {settings},
                image_size={size}, batch=1, chunk=1)
"""


@pytest.mark.slow
def test_kill_9_loses_at_most_the_chunk_in_flight(photos, tmp_path):
  model, params = _tiny()
  out = str(tmp_path / "killed.h5")
  script = tmp_path / "run.py"
  script.write_text(_KILLED_RUN.format(stages=STAGES, hidden=HIDDEN, size=SIZE, settings=SETTINGS))
  env = dict(devices.env(1), PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
  process = subprocess.Popen([sys.executable, str(script), photos, out], env=env)
  chunks = lambda: [n for n in os.listdir(out + ".partial") if n.startswith("chunk_")] if os.path.isdir(out + ".partial") else []
  deadline = time.monotonic() + 60
  while len(chunks()) < 3 and process.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()
  done = len(chunks())
  assert 3 <= done < 9 and not os.path.exists(out)  # killed mid-run; no store written yet
  summary = extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  assert (summary.already, summary.extracted, summary.rows) == (done, 9 - done, 9)
  one = str(tmp_path / "one.h5")
  extract.extract(images.list_images(photos), model, params, one, SETTINGS, image_size=SIZE)
  _assert_same_rows(out, one)


def test_a_merge_killed_between_its_moves_is_completed_by_the_next_run(photos, tmp_path, monkeypatch):
  model, params = _tiny()
  out = str(tmp_path / "f.npy")
  list_file = tmp_path / "two.txt"
  list_file.write_text("images/grey_4.png\nimages/upright_7.png\n")
  extract.extract(images.list_images(str(list_file)), model, params, out, SETTINGS, image_size=SIZE)
  replace = os.replace

  def die_before_features(src, dst):  # the merged ids are moved in place, the features not yet
    if dst == out:
      raise KeyboardInterrupt
    replace(src, dst)

  monkeypatch.setattr(os, "replace", die_before_features)
  with pytest.raises(KeyboardInterrupt):
    extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  with pytest.raises(InputError, match="9 image ids for 2 feature rows"):
    FeatureStore(out)
  monkeypatch.setattr(os, "replace", replace)
  summary = extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  assert (summary.already, summary.extracted, summary.rows) == (9, 0, 9)
  assert sorted(_rows(out)) == READABLE and not os.path.exists(out + ".partial")


@pytest.mark.parametrize("kill_at", ["removing the chunks", "removing the folder"])
def test_a_merge_killed_after_its_store_is_complete_gives_each_row_once(photos, tmp_path, monkeypatch, kill_at):
  model, params = _tiny()
  out = str(tmp_path / "f.h5")
  extract.extract(images.list_images(str(photos)), model, params, str(tmp_path / "one.h5"), SETTINGS, image_size=SIZE,
                  chunk=4)
  remove, rmtree = os.remove, shutil.rmtree

  def die(real, path, *args, **kwargs):
    if path.startswith(out + ".partial"):
      raise KeyboardInterrupt
    real(path, *args, **kwargs)

  if kill_at == "removing the chunks":
    monkeypatch.setattr(os, "remove", functools.partial(die, remove))
  else:
    monkeypatch.setattr(shutil, "rmtree", functools.partial(die, rmtree))
  with pytest.raises(KeyboardInterrupt):
    extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE, chunk=4)
  monkeypatch.undo()
  summary = extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE, chunk=4)
  assert (summary.already, summary.extracted, summary.rows) == (9, 0, 9) and not os.path.exists(out + ".partial")
  _assert_same_rows(out, str(tmp_path / "one.h5"))


def test_chunks_that_the_store_already_holds_are_refused_not_merged_twice(photos, tmp_path):
  model, params = _tiny()
  out = str(tmp_path / "f.h5")
  extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  os.makedirs(out + ".partial")  # an extraction's leftovers put back beside its finished store
  with open(os.path.join(out + ".partial", "meta.json"), "w") as f:
    json.dump(SETTINGS, f)
  store = FeatureStore(out)
  np.savez(os.path.join(out + ".partial", "chunk_000000.npz"), image_ids=store.image_ids[:2],
           features=store.read(np.arange(2)), paths=np.array(["", ""]))
  before = digests(tmp_path)
  with pytest.raises(InputError, match=rf"chunk_000000\.npz: holds rows \(image id {min(store.image_ids[:2])}\) that "
                                       r".*f\.h5 or an earlier chunk already has: not this extraction's chunk; move "):
    extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  assert digests(tmp_path) == before


def test_a_second_extraction_into_a_store_being_written_is_refused(photos, tmp_path):
  model, params = _tiny()
  out = str(tmp_path / "f.h5")
  with partial_store.ChunkedStore(out, SETTINGS, (HIDDEN,), "float16"):  # another run's, still extracting
    with pytest.raises(InputError, match=r"f\.h5: another extraction is writing this store \(.*f\.h5\.partial is "
                                         r"locked\): wait for it to end, or extract into another store"):
      extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  summary = extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  assert summary.rows == 9 and not os.path.exists(out + ".partial")


def test_other_settings_or_shapes_are_refused(photos, tmp_path):
  model, params = _tiny()
  out = str(tmp_path / "f.h5")
  os.makedirs(out + ".partial")
  with open(os.path.join(out + ".partial", "meta.json"), "w") as f:
    f.write('{"model": "vgg19"}')
  with pytest.raises(InputError, match=r"meta\.json: this extraction was started with other settings \(model: "
                                       r"'vgg19' then, 'tiny' now\): rerun with those settings"):
    extract.extract(images.list_images(photos), model, params, out, SETTINGS, image_size=SIZE)
  out = str(tmp_path / "g.h5")
  extract.extract([os.path.join(photos, "upright_7.png")], model, params, out, SETTINGS, image_size=SIZE)
  grid, grid_params = _tiny("conv5")
  with pytest.raises(InputError, match=r"g\.h5: holds float16 features of shape \(16,\), this run makes "
                                       r"float16 \(8, 8, 8\)"):
    extract.extract(images.list_images(photos), grid, grid_params, out, SETTINGS, image_size=SIZE)


def test_a_partial_folder_no_extraction_began_is_never_written_into_or_removed(photos, tmp_path):
  model, params = _tiny()
  paths = images.list_images(photos)
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "notes.txt").write_text("kept")
  os.symlink(mine, tmp_path / "f.h5.partial")  # a link to a folder of the user's
  with pytest.raises(InputError, match=r"f\.h5\.partial: a link; this store's chunks go into a folder of that name"):
    extract.extract(paths, model, params, str(tmp_path / "f.h5"), SETTINGS, image_size=SIZE)
  shutil.copytree(mine, tmp_path / "g.h5.partial")  # a folder of the user's of that name
  with pytest.raises(InputError, match=r"g\.h5\.partial: holds files but no meta\.json, so no extraction began it"):
    extract.extract(paths, model, params, str(tmp_path / "g.h5"), SETTINGS, image_size=SIZE)
  assert os.listdir(mine) == os.listdir(tmp_path / "g.h5.partial") == ["notes.txt"]
  assert not os.path.exists(tmp_path / "f.h5") and not os.path.exists(tmp_path / "g.h5")
  (tmp_path / "h.h5.partial").mkdir()  # what a writer killed before its meta.json left: begun afresh
  (tmp_path / "h.h5.partial" / ".meta.json.123.0123abcd.tmp").write_text("{")
  extract.extract(paths, model, params, str(tmp_path / "h.h5"), SETTINGS, image_size=SIZE)
  assert FeatureStore(str(tmp_path / "h.h5")).shape == (HIDDEN,) and not os.path.exists(tmp_path / "h.h5.partial")


def test_a_npy_stores_own_files_are_outputs(photos, tmp_path, capsys):
  listed = tmp_path / "q.image_ids.npy"  # a list of images named as the store's ids file
  listed.write_text("\n".join(images.list_images(photos)) + "\n")
  before = listed.read_bytes()
  argv = ["--images", str(listed), "--model", "colour_cells", "--layer", "grid7", "--out", str(tmp_path / "q.npy")]
  assert cli.main(argv) == 2
  assert capsys.readouterr().err == f"vqajax features: error: {listed}: is an input of this command; refusing to write over it\n"
  assert listed.read_bytes() == before
  assert not os.path.exists(tmp_path / "q.npy") and not os.path.exists(tmp_path / "q.npy.partial")


def test_image_ids_from_file_names():
  assert images.image_id("/x/COCO_val2014_000000123456.jpg") == 123456
  assert images.image_id("COCO_test-dev2015_000000000042.png") == 42
  assert images.image_id("VizWiz_val_00000123.jpg") == 2_000_000_123
  assert images.image_id("frame_0099.png") == 99 and images.image_id("7.jpg") == 7
  with pytest.raises(InputError, match=r"cat\.jpg: no image id in the file name"):
    images.image_id("/x/cat.jpg")
  assert images.image_id("img_9223372036854775807.jpg") == 2**63 - 1  # a store's ids are int64
  for name in ("img_9223372036854775808.jpg", "COCO_val2014_99999999999999999999999.jpg"):
    with pytest.raises(InputError, match=rf"^{name}: image_id \d+: expected at most 2\*\*63 - 1 \(a feature store's "
                                         r"ids are int64\)$"):
      extract.checked_ids(["a/1.jpg", name])  # had wrapped to a negative id, or been an OverflowError
  with pytest.raises(InputError, match=r"b/COCO_val2014_000000000001\.png: image id 1 is also the id of a/1\.jpg"):
    extract.checked_ids(["a/1.jpg", "b/COCO_val2014_000000000001.png"])
  with pytest.raises(InputError, match=r"^2 files have no image id in their name .*: a/cat\.jpg, b/dog\.png$"):
    extract.checked_ids(["a/cat.jpg", "a/2.jpg", "b/dog.png"])  # every one named, not just the first


def test_command_exit_status_and_convert_free_npz(photos, tmp_path, monkeypatch, capsys):
  monkeypatch.setitem(models.MODELS, "vgg16", functools.partial(models.VGG, STAGES, hidden=HIDDEN))
  monkeypatch.setattr(weights, "IMAGE_SIZE", SIZE)
  rng = np.random.default_rng(0)
  npz = str(tmp_path / "w.npz")
  np.savez(npz, **{k: rng.normal(size=s).astype(np.float32) * 0.1
                   for k, (s, _, _) in weights.torch_layout(models.MODELS["vgg16"]()).items()})
  command = lambda images_, layer, out: [
      "--images", images_, "--layer", layer, "--model", "vgg16", "--weights", npz, "--out", str(tmp_path / out)]
  assert cli.main(command(photos, "fc7", "f.h5") + ["--batch", "8"]) == 0
  printed = capsys.readouterr().out
  assert "unreadable, skipped: " + os.path.join(photos, "notanimage_10.jpg") in printed
  assert "11 images: 0 already in the store, 9 extracted" in printed
  assert FeatureStore(str(tmp_path / "f.h5")).shape == (HIDDEN,)
  # the rerun finds the store complete but for the unreadable file: as the first run, exit 0
  assert cli.main(command(photos, "fc7", "f.h5") + ["--batch", "8"]) == 0
  assert "11 images: 9 already in the store, 0 extracted" in capsys.readouterr().out
  bad = tmp_path / "bad"
  bad.mkdir()
  (bad / "1.jpg").write_text("no")
  assert cli.main(command(str(bad), "fc7", "g.h5")) == 1  # nothing could be read
  assert not os.path.exists(tmp_path / "g.h5") and not os.path.exists(tmp_path / "g.h5.partial")
  assert cli.main(command(photos, "cls", "h.h5")) == 2
  assert "--layer cls: vgg16 has layers fc7, conv5" in capsys.readouterr().err


def test_convert_never_writes_over_its_input(tmp_path, capsys):
  """`features convert X X` (and OUT a link to IN, or not a .npz) is refused in one line, IN byte-identical."""
  npz = tmp_path / "w.npz"
  np.savez(npz, a=np.arange(3, dtype=np.float32))
  (tmp_path / "link.npz").symlink_to(npz)
  before = npz.read_bytes()
  for out, expected in [(npz, "is an input of this command"), (tmp_path / "link.npz", "is an input of this command"),
                        (tmp_path / "w.pth", "the output is a .npz file")]:
    assert cli.main(["convert", str(npz), str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert npz.read_bytes() == before
  assert sorted(os.listdir(tmp_path)) == ["link.npz", "w.npz"]
  assert cli.main(["convert", str(npz), str(tmp_path / "copy.npz")]) == 0  # a new output beside it is the user's
  with np.load(tmp_path / "copy.npz") as copy:
    np.testing.assert_array_equal(copy["a"], [0, 1, 2])


def test_the_embedded_extractor_needs_no_weights_and_matches_the_embedded_store(tiny_data, tmp_path, capsys):
  """`vqajax features --model colour_cells` over the embedded pictures rebuilds the embedded
  grid store row for row, with the same recorded settings."""
  embedded = FeatureStore(os.path.join(tiny_data, "features/conv5_grid.npy"))
  folder = os.path.join(tiny_data, "val2014")
  out = str(tmp_path / "grid.npy")
  assert cli.main(["--images", folder, "--model", "colour_cells", "--layer", "grid7", "--out", out]) == 0
  made = FeatureStore(out)
  assert made.settings == embedded.settings and len(made.image_ids) == len(os.listdir(folder)) == 60
  np.testing.assert_array_equal(made.read(made.rows(made.image_ids)), embedded.read(embedded.rows(made.image_ids)))
  capsys.readouterr()  # the extraction's progress lines
  command = ["--images", folder, "--layer", "grid7", "--out", str(tmp_path / "x.npy")]
  for extra, message in [(["--model", "colour_cells", "--weights", out], "--weights: colour_cells takes none"),
                         (["--model", "vgg16", "--layer", "fc7"], "--weights: vgg16 needs its weights file"),
                         (["--model", "colour_cells", "--preprocess", "torchvision"],
                          "--preprocess torchvision: colour_cells reads the vqa preprocessing")]:
    assert cli.main(command + extra) == 2
    assert capsys.readouterr().err == f"vqajax features: error: {message}\n"
  assert not os.path.exists(tmp_path / "x.npy")


@pytest.mark.slow
def test_the_extracted_store_trains(tiny_data, tmp_path):
  config = image_only.get_config("runlocal")  # the image-only row: the features are all it sees
  config.data.dir = tiny_data
  needed = FeatureStore(os.path.join(tiny_data, config.data.features)).image_ids  # every image asked for
  photos_dir = tmp_path / "coco"
  photos_dir.mkdir()
  sources = [GRACE] + [os.path.join(SAMPLE_DATA, n) for n in ("Minduka_Present_Blue_Pack.png", "logo2.png")]
  for i, key in enumerate(needed.tolist()):
    source = sources[i % 3]
    os.symlink(source, photos_dir / f"COCO_train2014_{key:012d}{os.path.splitext(source)[1]}")
  model, params = _tiny()
  out = str(tmp_path / "fc7.h5")
  summary = extract.extract(images.list_images(str(photos_dir)), model, params, out, SETTINGS,
                            image_size=SIZE, batch=64)
  assert summary.rows == len(needed) and not summary.unreadable
  config.data.features, config.data.feature_shape = out, (HIDDEN,)
  config.num_train_steps, config.eval_every_steps, config.log_every_steps = 4, 4, 2
  metrics = train.train_and_evaluate(front_door.task_of(config), config, str(tmp_path / "run"), devices=jax.devices()[:1])["val"]
  with open(tmp_path / "run" / "metrics.jsonl") as f:
    losses = [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]
  assert len(losses) == 2 and np.isfinite(losses).all() and metrics


@pytest.mark.slow
def test_a_full_disk_fails_the_extraction_in_one_line_leaving_nothing(tmp_path, capsys):
  """A pixel store on a 600 KiB tmpfs (root only): a 512-pixel image (1 MiB) fits no chunk,
  so exit 3 and nothing left (no OUT.partial/); a 300-pixel one (352 KiB) fits its chunk but
  not the merged store beside it: exit 3, the chunk kept for the rerun that resumes."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], capture_output=True).returncode:
    pytest.skip("mounting a small tmpfs needs root")
  (tmp_path / "images").mkdir()
  shutil.copy(GRACE, tmp_path / "images" / "COCO_val2014_000000000001.jpg")
  extract_to = lambda out, size: front_door.main(["features", "--images", str(tmp_path / "images"), "--model", "pixels",
                                                  "--layer", "pixels", "--out", str(disk / out), "--size", str(size)])
  try:
    codes = [extract_to("big.h5", 512)]
    left = [sorted(os.listdir(disk))]
    errors = [capsys.readouterr().err.strip().splitlines()]
    codes.append(extract_to("small.h5", 300))
    left.append(sorted(os.listdir(disk / "small.h5.partial")))
    errors.append(capsys.readouterr().err.strip().splitlines())
  finally:
    subprocess.run(["umount", str(disk)], check=True)
  assert codes == [3, 3] and left == [[], ["chunk_000000.npz", "meta.json"]], (codes, left)
  for err in errors:
    assert err[-1].startswith("vqajax features: failed: ") and "No space left on device; free space and rerun" in err[-1]
    assert not [line for line in err if "Traceback" in line or ": error: " in line], err
