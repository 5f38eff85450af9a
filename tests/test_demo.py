"""`vqajax demo`: the page's logic on small fakes of the ask API, then the real page in headless
Chromium on a tiny synthetic run (skipped only when chromium / chromedriver cannot be found)."""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from PIL import Image

from vqajax import cli, demo
from vqajax.core.errors import InputError
from vqajax.features import run_images
from vqajax.features.run_images import RunImages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")

PREDICTED = [("red", 0.5), ("blue", 0.25), ("green", 0.125), ("2", 0.0625), ("yes", 0.0625)]


class FakeAnswerer(RunImages):
  """The Answerer's surface: two captioned store images without files, one with its picture
  (the uploads' kept features are the real `RunImages`')."""

  image_ids = [11, 12, 13]

  def __init__(self, photo=None, extractor=False):
    super().__init__(run=None)
    self.photo, self.extractor, self.calls, self.extracted = photo, extractor, [], 0

  def caption(self, image_id):
    return {11: "a red cube on grass", 12: "two blue balls"}.get(image_id)

  def image_path(self, image_id):
    return self.photo if image_id == 13 else None

  def features_of(self, paths):
    if not self.extractor:
      raise InputError("store.npy: no extractor settings (uploads need a store made by `vqajax features`)")
    self.extracted += len(paths)
    return np.ones((len(paths), 4), np.float32)

  def answer(self, questions, *, image_ids=None, features=None, k=5, choices=None):
    self.calls.append({"image_ids": image_ids, "features": None if features is None else features.shape, "k": k})
    return [{"question": q, "answers": PREDICTED[:k], **({"choice": choices[0][-1]} if choices else {})}
            for q in questions]


class FakeGrounder(RunImages):
  """The Grounder's surface: string ids, one shared with the VQA store (as text), one its own."""

  image_ids = ["11", "therapy_7"]

  def __init__(self, extractor=False):
    super().__init__(run=None)
    self.calls, self.extractor = [], extractor

  def image_path(self, image_id):
    return None

  def features_of(self, paths):
    if not self.extractor:
      raise InputError("grid.npy: no extractor settings")
    return np.ones((len(paths), 2, 2, 3), np.float32)

  def ground(self, question, answers, *, image_id=None, features=None):
    if len(answers) > 3:
      raise InputError(f"answers {answers!r}: expected 1 to 3 non-empty answers")
    self.calls.append((question, list(answers), image_id))
    masks = np.zeros((len(answers), 2, 2), np.float32)
    masks[:, 0, 0] = 1.0
    return {"masks": masks, "single": True if len(answers) > 1 else None, "single_from": "masks", "rle": []}


@pytest.fixture
def photo(tmp_path):
  path = tmp_path / "photo.png"
  Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(path)
  return str(path)


def test_every_store_image_is_offered_with_its_caption_then_the_mask_runs_own(monkeypatch):
  page = demo.Page(FakeAnswerer(), FakeGrounder())
  assert page.image_choices() == [("11: a red cube on grass", "11"), ("12: two blue balls", "12"), ("13", "13"),
                                  ("therapy_7 (mask run only: ground typed answers)", "therapy_7")]
  assert page.show("12", None) == (None, "store image **12**: two blue balls", "")
  assert page.offered() == "all 3 images of the VQA run's store and the mask run's 1 others; type to search by id or caption"
  many = FakeAnswerer()
  many.image_ids = list(range(1, 2001))
  assert len(demo.Page(many).image_choices()) == 2000  # not only the first few hundred


def test_asking_about_a_store_image_names_it_and_gives_the_top_answers(photo):
  answerer = FakeAnswerer(photo)
  out = demo.Page(answerer).ask("13", None, "  what color?  ")
  assert out == {"answers": dict(PREDICTED), "answered": "Answered about store image **13**", "pick": "",
                 "error": "", "call": "", "overlay": None, "legend": ""}
  assert answerer.calls == [{"image_ids": [13], "features": None, "k": demo.TOP_K}]
  pixels, what, error = demo.Page(answerer).show("13", None)
  assert pixels.shape == (6, 8, 3) and what == "store image **13**" and error == ""


def test_the_choices_field_asks_a_multiple_choice_question(photo):
  out = demo.Page(FakeAnswerer(photo)).ask("13", None, "what color?", " red, blue ,")
  assert out["pick"] == "Of the choices, the model picks **blue**" and out["answers"] == dict(PREDICTED)


@pytest.mark.parametrize("choice, upload, question, expected", [
    ("11", None, "   ", "type a question"),
    (None, None, "what?", "choose a store image or upload a picture"),
    ("99", None, "what?", "choose a store image or upload a picture"),
    (None, "notes.txt", "what?", "notes.txt is not a picture (not an image format this page reads)"),
    (None, "cut.png", "what?", "cut.png could not be read as a picture (damaged or cut short)"),
    (None, "huge.png", "what?", f"huge.png is too large a picture: at most {demo.MAX_PIXELS // 10 ** 6} million pixels"),
    (None, "photo.png", "what?", "store.npy: no extractor settings (uploads need a store made by `vqajax features`)"),
])
def test_bad_input_is_a_message_in_words(tmp_path, photo, choice, upload, question, expected):
  (tmp_path / "notes.txt").write_text("not pixels")
  Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(tmp_path / "whole.png")
  (tmp_path / "cut.png").write_bytes((tmp_path / "whole.png").read_bytes()[:6000])
  Image.new("1", (8000, 6000)).save(tmp_path / "huge.png")  # 48 million pixels in a few kB
  upload = upload and str(tmp_path / upload)
  answerer = FakeAnswerer()
  out = demo.Page(answerer).ask(choice, upload, question)
  assert out["error"] == expected and out["answers"] is None and out["answered"] == out["pick"] == ""
  assert answerer.calls == []
  if upload and upload.endswith(("txt", "huge.png")):
    assert demo.Page(answerer).show(choice, upload) == (None, "", expected)  # said when uploaded, too


def test_an_uploads_features_are_made_once_while_it_stays(photo, tmp_path):
  answerer = FakeAnswerer(extractor=True)
  page = demo.Page(answerer, FakeGrounder())
  out = page.ask("11", photo, "what color?")  # the upload wins over the choice
  assert out["answers"] == dict(PREDICTED) and out["answered"] == "Answered about your upload **photo.png**"
  assert out["call"] == "No masks: grid.npy: no extractor settings" and out["overlay"] is None
  page.ask("11", photo, "what shape?")
  assert answerer.calls[-1] == {"image_ids": None, "features": (1, 4), "k": demo.TOP_K} and answerer.extracted == 1
  other = tmp_path / "other.png"
  Image.fromarray(np.full((6, 8, 3), 10, np.uint8)).save(other)
  page.ask(None, str(other), "what?")
  assert answerer.extracted == 2
  assert page.show("11", photo)[0].shape == (6, 8, 3)
  page.forget(str(other))  # replaced or the page closed: the upload is deleted
  assert not other.exists() and os.path.exists(photo)


def test_the_last_uploads_features_are_kept_by_content(photo, tmp_path):
  answerer = FakeAnswerer(extractor=True)
  again = tmp_path / "again.png"
  shutil.copy(photo, again)
  answerer.kept_features(str(photo))
  answerer.kept_features(str(again))  # the same picture under another name: made once
  assert answerer.extracted == 1
  for n in range(run_images.KEPT):
    other = tmp_path / f"other{n}.png"
    Image.fromarray(np.full((2, 2, 3), n, np.uint8)).save(other)
    answerer.kept_features(str(other))
  assert answerer.extracted == 1 + run_images.KEPT
  answerer.kept_features(str(photo))  # pushed out by KEPT newer ones: made again
  assert answerer.extracted == 2 + run_images.KEPT


def test_masks_are_drawn_over_the_picture_each_in_its_colour_with_a_legend(photo):
  grounder = FakeGrounder()
  out = demo.Page(FakeAnswerer(photo), grounder).ask("13", None, "what color?")
  assert grounder.calls == []  # 13 is not in the mask run
  assert out["call"] == "No masks: image 13 is not in the mask run's store." and out["answers"]
  out = demo.Page(FakeAnswerer(), grounder).ask("11", None, "what color?")
  assert grounder.calls == [("what color?", ["red", "blue", "green"], "11")]  # the top GROUNDED answers
  assert out["call"] == ("The answers share **one grounding** (single), decided by the masks (single when every "
                         "pair overlaps by IoU > 0.9).")
  overlay = out["overlay"]  # no file for store image 11: a grey canvas
  assert overlay.shape == (demo.CANVAS, demo.CANVAS, 3) and (overlay[-1, -1] == 200).all()
  expected = np.full(3, 200.0)
  for colour in demo.MASK_COLOURS[:3]:
    expected = (1 - demo.MASK_OPACITY) * expected + demo.MASK_OPACITY * np.array(colour)
  np.testing.assert_array_equal(overlay[0, 0], np.round(expected))
  for i, answer in enumerate(["red", "blue", "green"]):
    assert f'rgb{demo.MASK_COLOURS[i]}"></span>{answer}' in out["legend"]


def test_an_upload_is_grounded_on_its_own_pixels(photo):
  out = demo.Page(FakeAnswerer(extractor=True), FakeGrounder(extractor=True)).ask(None, photo, "what?", "", "cat")
  assert out["call"] == "One answer: nothing to compare its grounding with."
  assert out["overlay"].shape == (6, 8, 3) and (out["overlay"][-1, -1] == 90).all()  # the picture under the mask


def test_a_grid_mask_is_stretched_bilinearly_over_the_pixel_centres():
  # 2 -> 4 cells: output centres at input 0.25, 0.75, 1.25, 1.75 (edges clamped): 1, 0.75, 0.25, 0.
  edge = np.array([1.0, 0.75, 0.25, 0.0])
  np.testing.assert_allclose(demo._resized(np.array([[1.0, 0.0], [0.0, 0.0]]), (4, 4)), np.outer(edge, edge),
                             atol=1e-6)
  np.testing.assert_allclose(demo._resized(np.array([[1.0, 0.0], [0.0, 0.0]]), (2, 4)), np.outer([1, 0], edge),
                             atol=1e-6)


def test_the_mask_runs_own_images_ground_typed_answers():
  grounder = FakeGrounder()
  page = demo.Page(FakeAnswerer(), grounder)
  assert page.ask("therapy_7", None, "where?")["error"] == (
      "image therapy_7 is in the mask run only: type the answers to ground")
  out = page.ask("therapy_7", None, "where?", "", " cat, dog ,")
  assert out["answers"] is None and out["error"] == "" and "cat" in out["legend"] and "dog" in out["legend"]
  assert out["answered"] == "Grounded on store image **therapy_7** (the VQA run does not have it)"
  assert grounder.calls == [("where?", ["cat", "dog"], "therapy_7")]
  assert page.ask("therapy_7", None, "where?", "", "a, b, c, d")["call"] == (
      "No masks: answers ['a', 'b', 'c', 'd']: expected 1 to 3 non-empty answers")


def test_a_run_of_the_embedded_set_says_once_under_the_title_that_other_pictures_mean_little():
  pytest.importorskip("gradio")
  shown = lambda page: [(c.elem_id, c.value) for c in demo.build(page).blocks.values()
                        if getattr(c, "elem_id", None) == "note"]
  assert shown(demo.Page(FakeAnswerer(), note="this run was trained on X")) == [
      ("note", "Note: this run was trained on X.")]
  assert shown(demo.Page(FakeAnswerer())) == []


def test_without_gradio_the_verb_says_how_to_install_it(monkeypatch, tmp_path, capsys):
  monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` raises ImportError
  monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "True")
  monkeypatch.setenv("GRADIO_TEMP_DIR", "/tmp/gradio")
  assert cli.main(["demo", f"--workdir={tmp_path}"]) == 2
  assert capsys.readouterr().err == "vqajax demo: error: the demo needs Gradio: pip install 'vqajax[demo]'\n"
  assert os.environ["GRADIO_TEMP_DIR"].startswith(os.path.join(tempfile.gettempdir(), "vqajax-demo-"))
  assert not os.path.exists(os.environ["GRADIO_TEMP_DIR"])  # its private folder is gone at exit


# ------------------------------------------------------------------ the real page, in Chromium

def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def page(tiny_lstm_run, tiny_therapy, tmp_path_factory):
  """`vqajax demo` serving tiny trained VQA and mask runs on the embedded datasets (a copy of
  the session's `tiny_lstm_run`, a 2-step mask run), the runs' Answerer and Grounder and a
  headless Chromium: a dict; the screenshots go to $VQAJAX_SCREENSHOTS when set
  (docs/pages/images/ holds two of them), else beside the runs."""
  if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("chromium / chromedriver not found (apt-get install -y chromium chromium-driver)")
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service

  from vqajax.answertherapy.ask import Grounder
  from vqajax.vqa.ask import Answerer
  root = tmp_path_factory.mktemp("demo")
  workdir, mask_workdir = str(root / "run"), str(root / "mask")
  shutil.copytree(tiny_lstm_run[0], workdir)
  assert cli.main(["train", f"--config={ROOT}/experiments/therapy/grounding_mask.py:runlocal",
                   f"--workdir={mask_workdir}", f"--config.data.dir={tiny_therapy}", "--config.num_train_steps=2",
                   "--verbosity=warning"]) == 0
  port = _free_port()
  private = os.path.join(tempfile.gettempdir(), "vqajax-demo-*")  # the server's own Gradio folder
  before = set(glob.glob(private))
  log = open(root / "demo.log", "w+")
  server = subprocess.Popen([sys.executable, "-m", "vqajax", "demo", f"--workdir={workdir}",
                             f"--therapy-workdir={mask_workdir}", f"--port={port}"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
  driver = None
  try:
    answerer, grounder = Answerer.from_workdir(workdir), Grounder.from_workdir(mask_workdir)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1100"):
      options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # every request the page makes
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    deadline = time.monotonic() + 180
    while f"serving on http://127.0.0.1:{port}" not in open(log.name).read():
      assert server.poll() is None and time.monotonic() < deadline, open(log.name).read()
      time.sleep(0.2)
    shots = os.environ.get("VQAJAX_SCREENSHOTS") or str(root)
    yield {"url": f"http://127.0.0.1:{port}/", "answerer": answerer, "grounder": grounder, "browser": driver,
           "shots": shots, "therapy": tiny_therapy, "server": server}
  finally:
    if driver:
      driver.quit()
    server.terminate()
    server.wait(30)
    log.close()
  assert set(glob.glob(private)) <= before  # removed when the server stopped (SIGTERM)


def _open(driver, url):
  from selenium.webdriver.common.by import By
  from selenium.webdriver.support.ui import WebDriverWait
  driver.get(url)
  # Gradio renders the components one after another: wait for every one the tests use
  controls = ("#image input", "#question textarea", "#choices textarea", "#ask")
  WebDriverWait(driver, 60).until(lambda d: all(d.find_elements(By.CSS_SELECTOR, c) for c in controls))


def _wait(driver, condition, seconds=60):
  from selenium.webdriver.support.ui import WebDriverWait
  return WebDriverWait(driver, seconds).until(condition)


def _text(driver, selector):
  from selenium.webdriver.common.by import By
  found = driver.find_elements(By.CSS_SELECTOR, selector)
  return found[0].text if found and found[0].is_displayed() else ""


def _shown_pixels(driver, selector):
  """[H, W, 3] the pixels of the picture an <img> in `selector` holds (its file, not as scaled)."""
  import base64
  import io
  url = driver.execute_script(
      "const img = document.querySelector(arguments[0] + ' img');"
      "if (!img || !img.complete || !img.naturalWidth) return null;"
      "const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;"
      "c.getContext('2d').drawImage(img, 0, 0); return c.toDataURL('image/png');", selector)
  return None if url is None else np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",")[1]))).convert("RGB"))


def _shows(driver, selector, expected):
  """Waits until the <img> in `selector` holds `expected`'s pixels, and asserts it."""
  from selenium.common.exceptions import TimeoutException
  try:
    _wait(driver, lambda d: (lambda p: p is not None and np.array_equal(p, expected))(_shown_pixels(d, selector)))
  except TimeoutException:
    np.testing.assert_array_equal(_shown_pixels(driver, selector), expected)


def _ask(driver, question, message="", choices=""):
  """Types the question (and choices), presses Ask and waits for the answers (message "")
  or that message."""
  from selenium.webdriver.common.by import By
  for selector, text in (("#question textarea", question), ("#choices textarea", choices)):
    box = driver.find_element(By.CSS_SELECTOR, selector)
    box.clear()
    box.send_keys(text)
  driver.find_element(By.CSS_SELECTOR, "#ask").click()
  if message:
    _wait(driver, lambda d: _text(d, "#message") == message)
    assert not driver.find_elements(By.CSS_SELECTOR, "#answers meter")
    return None
  bars = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#answers meter"))
  assert _text(driver, "#message") == ""
  return {bar.get_attribute("aria-label"): float(bar.get_attribute("value")) for bar in bars}


def _pick(driver, key, label):
  """Searches the picker for `key`, picks the option `label` and waits until the picker holds it.
  The list re-renders while the search narrows it: each try finds the options afresh, and an
  option replaced between finding and clicking is found again."""
  from selenium.common.exceptions import StaleElementReferenceException
  from selenium.webdriver.common.by import By
  from selenium.webdriver.support.ui import WebDriverWait
  box = driver.find_element(By.CSS_SELECTOR, "#image input")
  box.click()
  box.send_keys(key)

  def picked(d):
    options = [o for o in d.find_elements(By.CSS_SELECTOR, "ul[role=listbox] li") if o.text == label]
    if options:
      options[0].click()
    return d.find_element(By.CSS_SELECTOR, "#image input").get_attribute("value") == label

  WebDriverWait(driver, 60, ignored_exceptions=(StaleElementReferenceException,)).until(picked)


@pytest.mark.slow
def test_the_page_shows_a_store_picture_answers_it_and_says_which(page):
  from selenium.webdriver.common.by import By
  browser, answerer = page["browser"], page["answerer"]
  _open(browser, page["url"])
  assert _text(browser, "#note") == ("Note: this run was trained on the embedded synthetic dataset "  # tiny_data's
                                     "(config.data.synthetic: drawn shapes), so its answers about other pictures "
                                     "mean little.")
  _ask(browser, "   ", "type a question")
  assert browser.find_element(By.CSS_SELECTOR, "#message").value_of_css_property("border-left-color") == (
      "rgba(198, 40, 40, 1)")  # styled as an error
  question = "What color is the umbrella?"
  _ask(browser, question, "choose a store image or upload a picture")

  image_id = answerer.image_ids[-1]  # the last: every store image can be picked, found by searching
  label = demo._label(str(image_id), answerer.caption(image_id))  # the test split's images have no caption
  _pick(browser, str(image_id), label)
  with Image.open(answerer.image_path(image_id)) as file:
    expected = np.asarray(file.convert("RGB"))
  _shows(browser, "#picture", expected)  # the picture element holds the image's pixels
  assert browser.find_element(By.CSS_SELECTOR, "#picture img").size["width"] >= 400  # large enough to see
  assert _text(browser, "#caption") == f"store image {label}"

  shown = _ask(browser, question, choices="red, blue, yes")
  [asked] = answerer.answer([question], image_ids=[image_id], k=demo.TOP_K, choices=[["red", "blue", "yes"]])
  assert list(shown) == [a for a, _ in asked["answers"]]  # highest first, as the bars
  np.testing.assert_allclose(list(shown.values()), [p for _, p in asked["answers"]], rtol=1e-6)
  assert _text(browser, "#answered") == f"Answered about store image {label}"
  assert _text(browser, "#pick") == f"Of the choices, the model picks {asked['choice']}"
  assert _text(browser, "#call") == f"No masks: image {image_id} is not in the mask run's store."
  screenshot = os.path.join(page["shots"], "demo.png")
  assert browser.save_screenshot(screenshot) and Image.open(screenshot).size[0] == 1280

  requested = {json.loads(e["message"])["message"]["params"]["request"]["url"]
               for e in browser.get_log("performance")
               if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"}
  assert requested and all(u.startswith((page["url"], "data:", "blob:")) for u in requested), requested  # no CDN


@pytest.mark.slow
def test_an_upload_is_answered_and_its_masks_lie_over_it(page, tmp_path):
  from selenium.webdriver.common.by import By
  browser, answerer, grounder = page["browser"], page["answerer"], page["grounder"]
  key = next(k for k in grounder.image_ids if k < 10 ** 9)  # a COCO-like picture of the therapy set
  upload = tmp_path / "my_photo.png"  # a picture of the user's: lossless, another name
  Image.open(grounder.image_path(key)).save(upload)
  pixels = np.asarray(Image.open(upload).convert("RGB"))
  _open(browser, page["url"])
  first = answerer.image_ids[0]
  _pick(browser, str(first), demo._label(str(first), answerer.caption(first)))
  browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(upload))
  _wait(browser, lambda d: _text(d, "#caption") == "Your upload my_photo.png")
  _shows(browser, "#picture", pixels)

  question = "What is this?"
  shown = _ask(browser, question)
  [asked] = answerer.answer([question], features=answerer.features_of([str(upload)]), k=demo.TOP_K)
  assert list(shown) == [a for a, _ in asked["answers"]]
  assert _text(browser, "#answered") == "Answered about your upload my_photo.png"  # not the picked store image
  top = [a for a, _ in asked["answers"]][:demo.GROUNDED]
  grounded = grounder.ground(question, top, features=grounder.features_of([str(upload)])[0])
  expected = demo.overlaid(pixels, [demo._resized(m, pixels.shape[:2]) for m in grounded["masks"]])
  _shows(browser, "#masks", expected)  # the masks, in their colours, over the real picture
  assert _text(browser, "#legend") == "Masks: " + " ".join(top)
  assert _text(browser, "#call").startswith(("The answers share one grounding", "The answers are grounded on"))
  screenshot = os.path.join(page["shots"], "demo_masks.png")
  browser.execute_script("document.querySelector('#masks').scrollIntoView()")
  assert browser.save_screenshot(screenshot)


@pytest.mark.slow
def test_bad_uploads_are_messages_on_the_page_and_uploads_are_limited(page, tmp_path):
  import urllib.error
  import urllib.request

  from selenium.webdriver.common.by import By
  browser = page["browser"]
  (tmp_path / "notes.png").write_text("not pixels")  # the page takes image files only: a text named as one
  Image.new("1", (30000, 30000)).save(tmp_path / "bomb.png")  # under 1 MB, 900 million pixels
  for name, message in [("notes.png", "notes.png is not a picture (not an image format this page reads)"),
                        ("bomb.png", f"bomb.png is too large a picture: at most {demo.MAX_PIXELS // 10 ** 6} "
                                     "million pixels")]:
    _open(browser, page["url"])
    browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(tmp_path / name))
    _wait(browser, lambda d: _text(d, "#message") == message)  # said when uploaded
    _ask(browser, "What is this?", message)
  browser.save_screenshot(os.path.join(page["shots"], "demo_error.png"))

  def status(url, data=None, headers=None):
    try:
      with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {}), timeout=60) as r:
        return r.status
    except urllib.error.HTTPError as e:
      return e.code
  os.makedirs("/tmp/gradio", exist_ok=True)  # Gradio's shared default cache: not this server's
  with tempfile.NamedTemporaryFile(dir="/tmp/gradio", suffix=".txt") as planted:
    assert status(f"{page['url']}gradio_api/file={planted.name}") == 403
  big = b'--x\r\nContent-Disposition: form-data; name="files"; filename="big.png"\r\n\r\n' + b"0" * 9_000_000
  assert status(f"{page['url']}gradio_api/upload", big + b"\r\n--x--\r\n",
                {"Content-Type": "multipart/form-data; boundary=x"}) == 413  # over MAX_UPLOAD
