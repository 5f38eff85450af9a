"""`vqajax demo`: the page's logic on small fakes of the ask API, then the real page in headless
Chromium on a tiny synthetic run (skipped only when chromium / chromedriver cannot be found)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from vqajax import cli, demo
from vqajax.core.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")

PREDICTED = [("red", 0.5), ("blue", 0.25), ("green", 0.125), ("2", 0.0625), ("yes", 0.0625)]


class FakeAnswerer:
  """The Answerer's surface: two captioned store images without pixels, one with pixels."""

  image_ids = [11, 12, 13]

  def __init__(self, photo=None, extractor=False):
    self.photo, self.extractor, self.calls = photo, extractor, []

  def caption(self, image_id):
    return {11: "a red cube on grass", 12: "two blue balls"}.get(image_id)

  def image_path(self, image_id):
    return self.photo if image_id == 13 else None

  def features_of(self, paths):
    if not self.extractor:
      raise InputError("store.npy: no extractor settings (uploads need a store made by `vqajax features`)")
    return np.ones((len(paths), 4), np.float32)

  def answer(self, questions, *, image_ids=None, features=None, k=5, choices=None):
    self.calls.append({"image_ids": image_ids, "features": None if features is None else features.shape, "k": k})
    return [{"question": q, "answers": PREDICTED[:k]} for q in questions]


class FakeGrounder:
  """The Grounder's surface: string ids, one shared with the VQA store (as text), one its own."""

  image_ids = ["11", "therapy_7"]

  def __init__(self):
    self.calls = []

  def features_of(self, paths):
    raise InputError("grid.npy: no extractor settings")

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


def test_store_images_are_offered_with_their_captions_then_the_mask_runs_own():
  page = demo.Page(FakeAnswerer(), FakeGrounder())
  assert page.image_choices() == [("11: a red cube on grass", "11"), ("12: two blue balls", "12"), ("13", "13"),
                                  ("therapy_7 (mask run only: ground typed answers)", "therapy_7")]
  assert page.preview("12", None) == (None, "two blue balls")
  assert page.offered() == "3 of the VQA run's 3 store images, 1 of the mask run's 1 others"
  assert demo.Page(FakeAnswerer()).offered() == "3 of the VQA run's 3 store images"


def test_asking_about_a_store_image_gives_the_top_answers(photo):
  answerer = FakeAnswerer(photo)
  answers, message, call, overlay = demo.Page(answerer).ask("13", None, "  what color?  ")
  assert answers == dict(PREDICTED) and message == call == "" and overlay is None
  assert answerer.calls == [{"image_ids": [13], "features": None, "k": demo.TOP_K}]
  pixels, caption = demo.Page(answerer).preview("13", None)
  assert pixels.shape == (6, 8, 3) and caption == ""


@pytest.mark.parametrize("choice, upload, question, expected", [
    ("11", None, "   ", "**type a question**"),
    (None, None, "what?", "**choose a store image or upload one**"),
    ("99", None, "what?", "**choose a store image or upload one**"),
    (None, "notes.txt", "what?", "**notes.txt: not an image (UnidentifiedImageError)**"),
    (None, "photo.png", "what?", "**store.npy: no extractor settings (uploads need a store made by `vqajax features`)**"),
])
def test_bad_input_is_a_message_on_the_page(tmp_path, photo, choice, upload, question, expected):
  (tmp_path / "notes.txt").write_text("not pixels")
  upload = upload and str(tmp_path / upload)
  answerer = FakeAnswerer()
  assert demo.Page(answerer).ask(choice, upload, question) == (None, expected, "", None)
  assert answerer.calls == []


def test_an_upload_is_asked_through_its_extracted_features(photo):
  answerer = FakeAnswerer(extractor=True)
  page = demo.Page(answerer, FakeGrounder())
  answers, message, call, overlay = page.ask("11", photo, "what color?")  # the upload wins over the choice
  assert answers == dict(PREDICTED) and message == "" and overlay is None
  assert call == "no grounding: grid.npy: no extractor settings"
  assert answerer.calls == [{"image_ids": None, "features": (1, 4), "k": demo.TOP_K}]
  assert page.preview("11", photo)[0].shape == (6, 8, 3)


def test_grounding_draws_each_answers_mask_stretched_over_the_image():
  grounder = FakeGrounder()
  page = demo.Page(FakeAnswerer(), grounder)
  answers, message, call, (base, masks) = page.ask("11", None, "what color?")
  assert grounder.calls == [("what color?", ["red", "blue", "green"], "11")]  # the top GROUNDED answers
  assert call == "the answers share one grounding (single), decided by the masks: every pair IoU > 0.9 is single"
  assert answers == dict(PREDICTED)
  assert base.shape == (demo.CANVAS, demo.CANVAS, 3) and [a for _, a in masks] == ["red", "blue", "green"]
  for mask, _ in masks:
    assert mask.shape == (demo.CANVAS, demo.CANVAS) and mask[0, 0] == 1.0 and mask[-1, -1] == 0.0


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
  assert page.ask("therapy_7", None, "where?")[1] == (
      "**image therapy_7 is in the mask run only: type the answers to ground**")
  answers, message, call, (_, masks) = page.ask("therapy_7", None, "where?", " cat, dog ,")
  assert answers is None and message == "" and [a for _, a in masks] == ["cat", "dog"]
  assert grounder.calls == [("where?", ["cat", "dog"], "therapy_7")]
  assert page.ask("therapy_7", None, "where?", "cat")[2] == "one answer: nothing to compare its grounding with"
  assert page.ask("therapy_7", None, "where?", "a, b, c, d")[1:3] == (
      "", "no grounding: answers ['a', 'b', 'c', 'd']: expected 1 to 3 non-empty answers")
  assert page.ask("12", None, "where?")[2] == "no grounding: image 12 is not in the mask run's store"


def test_without_gradio_the_verb_says_how_to_install_it(monkeypatch, tmp_path, capsys):
  monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` raises ImportError
  monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "True")
  assert cli.main(["demo", f"--workdir={tmp_path}"]) == 2
  assert capsys.readouterr().err == "vqajax demo: error: the demo needs Gradio: pip install 'vqajax[demo]'\n"


# ------------------------------------------------------------------ the real page, in Chromium

def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def page(tiny_data, tmp_path_factory):
  """`vqajax demo` serving a tiny trained run, the run's Answerer and a headless Chromium:
  (url, answerer, driver); the Answerer and the browser start while the server does."""
  if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("chromium / chromedriver not found (apt-get install -y chromium chromium-driver)")
  from selenium import webdriver  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.chrome.service import Service  # pylint: disable=g-import-not-at-top

  from vqajax.vqa.ask import Answerer  # pylint: disable=g-import-not-at-top
  workdir = str(tmp_path_factory.mktemp("demo") / "run")
  assert cli.main(["train", f"--config={ROOT}/experiments/vqa/deeper_lstm_norm_i.py:runlocal", f"--workdir={workdir}",
                   f"--config.data.dir={tiny_data}", "--config.num_train_steps=2", "--verbosity=warning"]) == 0
  port = _free_port()
  log = open(os.path.join(os.path.dirname(workdir), "demo.log"), "w+")
  server = subprocess.Popen([sys.executable, "-m", "vqajax", "demo", f"--workdir={workdir}", f"--port={port}"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
  driver = None
  try:
    answerer = Answerer.from_workdir(workdir)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
      options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # every request the page makes
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    deadline = time.monotonic() + 180
    while f"serving on http://127.0.0.1:{port}" not in open(log.name).read():
      assert server.poll() is None and time.monotonic() < deadline, open(log.name).read()
      time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/", answerer, driver
  finally:
    if driver:
      driver.quit()
    server.terminate()
    server.wait(30)
    log.close()


def _open(driver, url):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  driver.get(url)
  WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#image input"))


def _ask(driver, question, message):
  """Types the question, presses Ask and waits for the answers (message "") or that message."""
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  box = driver.find_element(By.CSS_SELECTOR, "#question textarea")
  box.clear()
  box.send_keys(question)
  driver.find_element(By.CSS_SELECTOR, "#ask").click()
  if message:
    WebDriverWait(driver, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, "#message").text == message)
    assert not driver.find_elements(By.CSS_SELECTOR, "#answers meter")
    return None
  bars = WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#answers meter"))
  assert driver.find_element(By.CSS_SELECTOR, "#message").text == ""
  return {bar.get_attribute("aria-label"): float(bar.get_attribute("value")) for bar in bars}


def test_the_page_answers_a_store_image_and_says_what_is_wrong(page, tmp_path):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  url, answerer, browser = page
  _open(browser, url)
  _ask(browser, "   ", "type a question")
  question = "What color is the umbrella?"
  _ask(browser, question, "choose a store image or upload one")

  image_id = answerer.image_ids[1]
  label = f"{image_id}: {answerer.caption(image_id)}"
  browser.find_element(By.CSS_SELECTOR, "#image input").click()
  option = WebDriverWait(browser, 30).until(
      lambda d: [o for o in d.find_elements(By.CSS_SELECTOR, "ul[role=listbox] li") if o.text == label])
  option[0].click()
  WebDriverWait(browser, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, "#caption").text
                                   == answerer.caption(image_id))  # no pixels: the synthetic caption
  shown = _ask(browser, question, "")
  [expected] = answerer.answer([question], image_ids=[image_id], k=demo.TOP_K)
  assert list(shown) == [a for a, _ in expected["answers"]]  # highest first, as the bars
  np.testing.assert_allclose(list(shown.values()), [p for _, p in expected["answers"]], rtol=1e-6)
  screenshot = tmp_path / "demo.png"
  assert browser.save_screenshot(str(screenshot)) and Image.open(screenshot).size[0] == 1280

  requested = {json.loads(e["message"])["message"]["params"]["request"]["url"]
               for e in browser.get_log("performance")
               if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"}
  assert requested and all(u.startswith((url, "data:", "blob:")) for u in requested), requested  # no CDN


def test_uploads_that_cannot_be_answered_are_messages_on_the_page(page, tmp_path):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  url, answerer, browser = page
  (tmp_path / "notes.txt").write_text("not pixels")
  Image.fromarray(np.full((32, 48, 3), 120, np.uint8)).save(tmp_path / "photo.png")
  with pytest.raises(InputError) as refused:  # synthetic features: no extractor to compute an upload's with
    answerer.features_of([str(tmp_path / "photo.png")])
  for name, message in [("notes.txt", "notes.txt: not an image (UnidentifiedImageError)"),
                        ("photo.png", str(refused.value))]:
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(tmp_path / name))
    WebDriverWait(browser, 30).until(  # uploaded: its name, or why it is no image, under the preview
        lambda d: d.find_element(By.CSS_SELECTOR, "#caption").text == (message if name == "notes.txt" else name))
    _ask(browser, "What is this?", message)
