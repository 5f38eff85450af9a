"""vqajax demo: a local web page (Gradio) asking a VQA run about an image.

  vqajax demo --workdir VQA_WORKDIR [--therapy-workdir MASK_WORKDIR [--therapy-class-workdir CLASS_WORKDIR]]
              [--host 127.0.0.1] [--port 7860]

Choose one of the run's store images (shown with its caption where the store has no
pixels, as on the embedded synthetic data) or upload an image (its features computed as the
store's were: `Answerer.features_of`), type a question and see the top answers as bars.
With a VQA-AnswerTherapy mask run beside it, each answer's mask is drawn over the image,
with whether the answers share one grounding (from a grounding_class run when given, else
from the masks). Bad input in the page (no image, an empty question, a file that is not an
image) is a message on the page. Needs the `demo` extra
(`pip install 'vqajax[demo]'`); served on localhost only unless `--host` says otherwise,
with Gradio's telemetry off and nothing fetched from the internet.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

import numpy as np

from vqajax.core.errors import InputError, exit_status

TOP_K = 5
GROUNDED = 3  # the top answers grounded when the page names none
MAX_CHOICES = 500  # store images offered in the dropdown
CANVAS = 224  # the side of the blank image masks are drawn on when the store has no pixels


class Page:
  """What the page does, apart from Gradio: the images offered, asking, grounding. Images are
  keyed by their id as text (VQA ids are integers, AnswerTherapy's strings)."""

  def __init__(self, answerer, grounder=None):
    self.answerer, self.grounder = answerer, grounder
    self._asked = {str(i): i for i in answerer.image_ids}
    self._grounded = {str(i): i for i in grounder.image_ids} if grounder else {}

  def image_choices(self) -> list[tuple[str, str]]:
    """(label, key): the VQA run's first MAX_CHOICES images with their captions, then as many of
    the mask run's images that the VQA run does not have."""
    asked = [(_label(key, self.answerer.caption(i)), key) for key, i in list(self._asked.items())[:MAX_CHOICES]]
    only_grounded = [key for key in self._grounded if key not in self._asked][:MAX_CHOICES]
    return asked + [(f"{key} (mask run only: ground typed answers)", key) for key in only_grounded]

  def offered(self) -> str:
    """How many of each store's images the dropdown offers."""
    own = sum(key not in self._asked for key in self._grounded)
    text = f"{min(len(self._asked), MAX_CHOICES)} of the VQA run's {len(self._asked)} store images"
    return text + (f", {min(own, MAX_CHOICES)} of the mask run's {own} others" if self.grounder else "")

  def preview(self, choice: str | None, upload: str | None):
    """(pixels or None, caption text) of the image the page will ask about."""
    if upload:
      try:
        return _pixels(upload), os.path.basename(upload)
      except InputError as e:
        return None, f"**{e}**"
    if choice in self._asked:
      return self._store_pixels(choice), self.answerer.caption(self._asked[choice]) or ""
    return None, ""

  def ask(self, choice: str | None, upload: str | None, question: str | None, ground_text: str = ""):
    """(answer -> probability or None, message, grounding call, (image, [(mask, answer)]) or None);
    bad input is the message alone."""
    question = (question or "").strip()
    named = [a.strip() for a in (ground_text or "").split(",") if a.strip()]
    try:
      if not question:
        raise InputError("type a question")
      if upload:
        key, pixels = None, _pixels(upload)
        answers = self._answers(question, features=self.answerer.features_of([upload]))
      elif choice in self._asked or choice in self._grounded:
        key, pixels = choice, self._store_pixels(choice)
        answers = self._answers(question, image_ids=[self._asked[key]]) if key in self._asked else None
      else:
        raise InputError("choose a store image or upload one")
      if self.grounder is None:
        return answers, "", "", None
      if answers is None and not named:
        raise InputError(f"image {key} is in the mask run only: type the answers to ground")
      call, overlay = self._ground(question, named or list(answers)[:GROUNDED], key, upload, pixels)
      return answers, "", call, overlay
    except InputError as e:
      return None, f"**{e}**", "", None

  def _answers(self, question, **image) -> dict[str, float]:
    [asked] = self.answerer.answer([question], k=TOP_K, **image)
    return dict(asked["answers"])

  def _store_pixels(self, key):
    path = self.answerer.image_path(self._asked[key]) if key in self._asked else None
    return _pixels(path) if path else None

  def _ground(self, question, answers, key, upload, pixels):
    """(the single / multiple call, the overlay); what cannot be grounded is the call alone."""
    try:
      if upload:
        image = {"features": self.grounder.features_of([upload])[0]}
      elif key in self._grounded:
        image = {"image_id": self._grounded[key]}
      else:
        return f"no grounding: image {key} is not in the mask run's store", None
      grounded = self.grounder.ground(question, answers, **image)
    except InputError as e:
      return f"no grounding: {e}", None
    base = pixels if pixels is not None else np.full((CANVAS, CANVAS, 3), 200, np.uint8)
    masks = [(_resized(mask, base.shape[:2]), answer) for mask, answer in zip(grounded["masks"], answers)]
    if grounded["single"] is None:
      return "one answer: nothing to compare its grounding with", (base, masks)
    call = "share one grounding (single)" if grounded["single"] else "have different groundings (multiple)"
    by = {"classifier": "the grounding_class run", "masks": "the masks: every pair IoU > 0.9 is single"}
    return f"the answers {call}, decided by {by[grounded['single_from']]}", (base, masks)


def _label(key: str, caption: str | None) -> str:
  return f"{key}: {caption}" if caption else key


def _pixels(path: str) -> np.ndarray:
  """[H, W, 3] uint8 of an image file; InputError naming the file when it is not one."""
  from PIL import Image, UnidentifiedImageError  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as image:
      return np.asarray(image.convert("RGB"))
  except (UnidentifiedImageError, OSError, ValueError) as e:
    raise InputError(f"{os.path.basename(path)}: not an image ({type(e).__name__})") from None


def _resized(mask, shape) -> np.ndarray:
  """A grid of probabilities stretched to an image's [H, W] (bilinear), in [0, 1]."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  grid = Image.fromarray(np.asarray(mask, np.float32), mode="F")
  return np.clip(np.asarray(grid.resize((shape[1], shape[0]), Image.BILINEAR)), 0.0, 1.0)


def build(page: Page):
  """The Gradio Blocks of the page (not launched)."""
  import gradio as gr  # pylint: disable=g-import-not-at-top
  grounding = page.grounder is not None

  def preview(choice, upload):
    pixels, caption = page.preview(choice, upload)
    return gr.update(value=pixels, visible=pixels is not None), caption

  with gr.Blocks(title="vqajax demo", analytics_enabled=False) as blocks:
    gr.Markdown("# vqajax: ask the model about an image")
    with gr.Row():
      with gr.Column():
        choice = gr.Dropdown(choices=page.image_choices(), value=None, label="Store image", elem_id="image",
                             info=page.offered())
        upload = gr.File(label="...or upload an image (used while it is there)", type="filepath", elem_id="upload")
        image = gr.Image(label="Image", interactive=False, visible=False, elem_id="preview")
        caption = gr.Markdown(elem_id="caption")
      with gr.Column():
        question = gr.Textbox(label="Question", placeholder="What color is the ...?", elem_id="question")
        ground_text = gr.Textbox(label=f"Answers to ground (comma-separated; default: the top {GROUNDED})",
                                 visible=grounding, elem_id="ground")
        ask = gr.Button("Ask", variant="primary", elem_id="ask")
        message = gr.Markdown(elem_id="message")
        answers = gr.Label(num_top_classes=TOP_K, label="Top answers", elem_id="answers")
        call = gr.Markdown(visible=grounding, elem_id="call")
        masks = gr.AnnotatedImage(label="Each answer's grounding", visible=grounding, elem_id="masks")
    for event in (choice.change, upload.change):
      event(preview, [choice, upload], [image, caption])
    for event in (ask.click, question.submit):
      event(page.ask, [choice, upload, question, ground_text], [answers, message, call, masks])
  return blocks


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True, help="a trained VQA run")
  parser.add_argument("--therapy-workdir", help="a trained VQA-AnswerTherapy mask run (draws the groundings)")
  parser.add_argument("--therapy-class-workdir", help="a grounding_class run deciding single / multiple "
                      "(default: decided from the masks)")
  parser.add_argument("--step", type=int, help="the VQA run's checkpoint step (default: latest)")
  parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default: %(default)s, this machine only)")
  parser.add_argument("--port", type=int, default=7860, help="port (default: %(default)s)")
  return parser


def main(argv: Sequence[str], prog: str = "vqajax demo") -> int:
  args = _parser(prog).parse_args(argv)

  def run() -> None:
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio is imported: no telemetry, no version check
    try:
      import gradio  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      raise InputError("the demo needs Gradio: pip install 'vqajax[demo]'") from None
    from vqajax.vqa.ask import Answerer  # pylint: disable=g-import-not-at-top
    answerer = Answerer.from_workdir(args.workdir, step=args.step)
    grounder = None
    if args.therapy_workdir:
      from vqajax.answertherapy.ask import Grounder  # pylint: disable=g-import-not-at-top
      grounder = Grounder.from_workdir(args.therapy_workdir, class_workdir=args.therapy_class_workdir)
    elif args.therapy_class_workdir:
      raise InputError("--therapy-class-workdir decides single / multiple beside --therapy-workdir: give both")
    blocks = build(Page(answerer, grounder))
    try:
      blocks.launch(server_name=args.host, server_port=args.port, quiet=True, prevent_thread_lock=True)
    except OSError as e:  # the port is taken, the host is not this machine's
      raise InputError(f"--host {args.host} --port {args.port}: cannot serve there ({e})") from None
    print(f"{prog}: serving on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    blocks.block_thread()

  return exit_status(prog, run)
