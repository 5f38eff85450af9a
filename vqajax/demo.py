"""vqajax demo: a local web page (Gradio) asking a VQA run about an image.

  vqajax demo --workdir VQA_WORKDIR [--therapy-workdir MASK_WORKDIR [--therapy-class-workdir CLASS_WORKDIR]]
              [--data_dir DIR] [--host 127.0.0.1] [--port 7860]

Choose any of the run's store images (a searchable list, each with its caption where the
data has captions; shown as a picture where the store recorded its file, as the embedded
datasets' do) or upload a picture (its features computed once, as the store's were:
`RunImages.kept_features`), type a question, optionally the choices of a multiple-choice
question, and see the top answers as bars, the pick among the choices and which image
was answered. With a VQA-AnswerTherapy mask run beside it, each answer's mask is drawn
over the picture in a colour of its own, with a legend and whether the answers share one
grounding (from a grounding_class run when given, else from the masks). Bad input in the
page is a message on the page, in words. A run trained on the embedded synthetic dataset says
once, under the title, that its answers about other pictures mean little.

On a shared machine: Gradio's files (uploads, the pictures it shows) live in a temporary
folder of this server's own, removed at exit, and the page serves nothing else; uploads
are limited to `MAX_UPLOAD` and deleted when another replaces them or the page closes;
pictures of more than `MAX_PIXELS` pixels are refused before they are decoded. Needs the
`demo` extra (`pip install 'vqajax[demo]'`); served on localhost only unless `--host`
says otherwise, with Gradio's telemetry off and nothing fetched from the internet.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import signal
import tempfile
from typing import Sequence

import numpy as np

from vqajax.core import files, runtime
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.features import images

TOP_K = 5
GROUNDED = 3  # the top answers grounded when the page names none
CANVAS = 224  # the side of the blank image masks are drawn on when a store image has no file
MAX_UPLOAD = "8mb"
MAX_PIXELS = images.MAX_PIXELS  # a picture larger than this is refused before it is decoded
MASK_COLOURS = ((230, 25, 75), (0, 130, 200), (60, 180, 75), (245, 130, 48), (145, 30, 180))
MASK_OPACITY = 0.55
CSS = """
#message .prose, #message p {color: #8a1c1c;}
#message {background: #fdecec; border: 1px solid #e5a3a3; border-left: 6px solid #c62828; border-radius: 6px;
          padding: 2px 12px;}
#answered {font-size: 1.05em;}
#picture img, #masks img {width: 100%; height: 100%; object-fit: contain;}
.legend span.swatch {display: inline-block; width: 1em; height: 1em; border-radius: 3px; margin: 0 0.35em -0.15em 0.8em;}
"""


class Page:
  """What the page does, apart from Gradio: the images offered, showing, asking, grounding.
  Store images are keyed by their id as text (VQA ids are integers, AnswerTherapy's
  strings); an upload by its path, its features cached by its content."""

  def __init__(self, answerer, grounder=None, note: str = ""):
    self.answerer, self.grounder, self.note = answerer, grounder, note
    self._asked = {str(i): i for i in answerer.image_ids}
    self._grounded = {str(i): i for i in grounder.image_ids} if grounder else {}

  def image_choices(self) -> list[tuple[str, str]]:
    """(label, key): every image of the VQA run's store with its caption, then every image of
    the mask run's store that the VQA run does not have."""
    asked = [(_label(key, self.answerer.caption(i)), key) for key, i in self._asked.items()]
    only_grounded = [key for key in self._grounded if key not in self._asked]
    return asked + [(f"{key} (mask run only: ground typed answers)", key) for key in only_grounded]

  def offered(self) -> str:
    """What the picker offers."""
    own = sum(key not in self._asked for key in self._grounded)
    text = f"all {len(self._asked)} images of the VQA run's store"
    return text + (f" and the mask run's {own} others" if own else "") + "; type to search by id or caption"

  def show(self, choice: str | None, upload: str | None) -> tuple[np.ndarray | None, str, str]:
    """(pixels or None, what the picture is, an error): the image the page will ask about."""
    try:
      if upload:
        return _pixels(upload), f"Your upload **{html.escape(os.path.basename(upload))}**", ""
      if choice in self._asked or choice in self._grounded:
        return self._store_pixels(choice), self._name(choice), ""
      return None, "", ""
    except InputError as e:
      return None, "", str(e)

  def ask(self, choice: str | None, upload: str | None, question: str | None, choices_text: str = "",
          ground_text: str = "") -> dict:
    """{"answers": answer -> probability or None, "answered": which image, "pick": the
    multiple-choice line, "error", "call": single / multiple in words, "overlay": pixels with
    the masks or None, "legend": HTML}; bad input is the error alone."""
    out = {"answers": None, "answered": "", "pick": "", "error": "", "call": "", "overlay": None, "legend": ""}
    question = (question or "").strip()
    choices = [c.strip() for c in (choices_text or "").split(",") if c.strip()]
    named = [a.strip() for a in (ground_text or "").split(",") if a.strip()]
    try:
      if not question:
        raise InputError("type a question")
      if upload:
        key, pixels, image = None, _pixels(upload), {"features": self.answerer.kept_features(upload)[None]}
        out["answered"] = f"Answered about your upload **{html.escape(os.path.basename(upload))}**"
      elif choice in self._asked or choice in self._grounded:
        key, pixels, image = choice, self._store_pixels(choice), {"image_ids": [self._asked.get(choice)]}
        out["answered"] = f"Answered about {self._name(choice)}"
      else:
        raise InputError("choose a store image or upload a picture")
      if key is None or key in self._asked:
        [asked] = self.answerer.answer([question], k=TOP_K, choices=[choices] if choices else None, **image)
        out["answers"] = dict(asked["answers"])
        if choices:
          out["pick"] = f"Of the choices, the model picks **{html.escape(asked['choice'])}**"
      elif not named:
        raise InputError(f"image {key} is in the mask run only: type the answers to ground")
      else:
        out["answered"] = f"Grounded on {self._name(key)} (the VQA run does not have it)"
      if self.grounder is not None:
        answers = named or list(out["answers"])[:GROUNDED]
        out["call"], overlay = self._ground(question, answers, key, upload, pixels)
        if overlay is not None:
          out["overlay"], out["legend"] = overlay, legend(answers)
    except InputError as e:
      return {**out, "answers": None, "answered": "", "pick": "", "error": str(e)}
    return out

  def forget(self, upload: str | None) -> None:
    """Deletes an upload that is no longer shown (its file and Gradio's folder for it)."""
    if upload and os.path.isfile(upload):
      os.remove(upload)
      folder = os.path.dirname(upload)
      if not os.listdir(folder):
        os.rmdir(folder)

  def _name(self, key: str) -> str:
    caption = self.answerer.caption(self._asked[key]) if key in self._asked else None
    return f"store image **{html.escape(key)}**" + (f": {html.escape(caption)}" if caption else "")

  def _store_pixels(self, key):
    path = (self.answerer.image_path(self._asked[key]) if key in self._asked
            else self.grounder.image_path(self._grounded[key]))
    return _pixels(path) if path else None

  def _ground(self, question, answers, key, upload, pixels):
    """(the single / multiple call in words, the overlay); what cannot be grounded is the call alone."""
    try:
      if upload:
        image = {"features": self.grounder.kept_features(upload)}
      elif key in self._grounded:
        image = {"image_id": self._grounded[key]}
      else:
        return f"No masks: image {key} is not in the mask run's store.", None
      grounded = self.grounder.ground(question, answers, **image)
    except InputError as e:
      return f"No masks: {e}", None
    base = pixels if pixels is not None else np.full((CANVAS, CANVAS, 3), 200, np.uint8)
    overlay = overlaid(base, [_resized(mask, base.shape[:2]) for mask in grounded["masks"]])
    if grounded["single"] is None:
      return "One answer: nothing to compare its grounding with.", overlay
    call = ("The answers share **one grounding** (single)" if grounded["single"]
            else "The answers are grounded on **different regions** (multiple)")
    by = {"classifier": "the grounding_class run", "masks": "the masks (single when every pair overlaps by IoU > 0.9)"}
    return f"{call}, decided by {by[grounded['single_from']]}.", overlay


def overlaid(pixels: np.ndarray, masks: list[np.ndarray]) -> np.ndarray:
  """The picture with mask i (probabilities at its size) blended in `MASK_COLOURS[i]`, in order."""
  out = pixels.astype(np.float32)
  for i, mask in enumerate(masks):
    alpha = MASK_OPACITY * mask[..., None]
    out = (1 - alpha) * out + alpha * np.asarray(MASK_COLOURS[i % len(MASK_COLOURS)], np.float32)
  return np.round(out).astype(np.uint8)


def legend(answers: list[str]) -> str:
  """HTML: each answer after a swatch of its mask's colour."""
  items = " ".join(f'<span class="swatch" style="background: rgb{MASK_COLOURS[i % len(MASK_COLOURS)]}"></span>'
                   f"{html.escape(a)}" for i, a in enumerate(answers))
  return f'<div class="legend">Masks: {items}</div>'


def _label(key: str, caption: str | None) -> str:
  return f"{key}: {caption}" if caption else key


def _pixels(path: str) -> np.ndarray:
  """[H, W, 3] uint8 of an image file; an InputError in words when it is none or too large."""
  from PIL import Image, UnidentifiedImageError
  name = os.path.basename(path)
  try:
    with Image.open(path) as image:
      if image.width * image.height > MAX_PIXELS:
        raise Image.DecompressionBombError(image.size)
      return np.asarray(image.convert("RGB"))
  except Image.DecompressionBombError:
    raise InputError(f"{name} is too large a picture: at most {MAX_PIXELS // 10 ** 6} million pixels") from None
  except UnidentifiedImageError:
    raise InputError(f"{name} is not a picture (not an image format this page reads)") from None
  except (OSError, ValueError):
    raise InputError(f"{name} could not be read as a picture (damaged or cut short)") from None


def _resized(mask, shape) -> np.ndarray:
  """A grid of probabilities stretched to an image's [H, W] (bilinear), in [0, 1]."""
  from PIL import Image
  grid = Image.fromarray(np.asarray(mask, np.float32), mode="F")
  return np.clip(np.asarray(grid.resize((shape[1], shape[0]), Image.BILINEAR)), 0.0, 1.0)


def build(page: Page):
  """The Gradio Blocks of the page (not launched)."""
  import gradio as gr
  grounding = page.grounder is not None

  def show(choice, upload):
    pixels, what, error = page.show(choice, upload)
    return (gr.update(value=pixels, visible=pixels is not None), what,
            gr.update(value=error, visible=bool(error)))

  def keep(upload, shown):
    if shown and shown != upload:
      page.forget(shown)
    return upload

  def ask(choice, upload, question, choices_text, ground_text):
    out = page.ask(choice, upload, question, choices_text, ground_text)
    return (gr.update(value=out["answers"], visible=out["answers"] is not None), out["answered"], out["pick"],
            gr.update(value=out["error"], visible=bool(out["error"])), out["call"],
            gr.update(value=out["overlay"], visible=out["overlay"] is not None), out["legend"])

  with gr.Blocks(title="vqajax demo", analytics_enabled=False) as blocks:
    gr.Markdown("# vqajax: ask the model about a picture")
    if page.note:
      gr.Markdown(f"Note: {html.escape(page.note)}.", elem_id="note")
    with gr.Row():
      with gr.Column(scale=5):
        choice = gr.Dropdown(choices=page.image_choices(), value=None, label="Store image", elem_id="image",
                             info=page.offered(), filterable=True)
        upload = gr.File(label="...or upload a picture (used while it is here)", type="filepath", elem_id="upload",
                         file_types=["image"], height=120)
        shown = gr.State(None, delete_callback=page.forget)  # the upload on this page, deleted when it closes
        picture = gr.Image(label="Picture", interactive=False, visible=False, elem_id="picture", format="png",
                           height=420, buttons=["fullscreen"])
        what = gr.Markdown(elem_id="caption")
      with gr.Column(scale=4):
        question = gr.Textbox(label="Question", placeholder="What color is the ...?", elem_id="question")
        choices = gr.Textbox(label="Choices (optional, comma-separated): the model picks one", elem_id="choices",
                             placeholder="red, blue, green")
        ground_text = gr.Textbox(label=f"Answers to ground (comma-separated; default: the top {GROUNDED})",
                                 visible=grounding, elem_id="ground")
        ask_button = gr.Button("Ask", variant="primary", elem_id="ask")
        message = gr.Markdown(elem_id="message", visible=False)
        answered = gr.Markdown(elem_id="answered")
        answers = gr.Label(num_top_classes=TOP_K, label="Top answers", elem_id="answers", visible=False)
        pick = gr.Markdown(elem_id="pick")
        call = gr.Markdown(visible=grounding, elem_id="call")
        masks = gr.Image(label="Each answer's grounding", interactive=False, visible=False, elem_id="masks",
                         format="png", height=420, buttons=["fullscreen"])
        key = gr.HTML(elem_id="legend", visible=grounding)
    upload.change(keep, [upload, shown], shown)
    for event in (choice.change, upload.change):
      event(show, [choice, upload], [picture, what, message])
    for event in (ask_button.click, question.submit):
      event(ask, [choice, upload, question, choices, ground_text], [answers, answered, pick, message, call, masks, key])
  return blocks


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  runtime.add_compilation_cache_flag(parser)
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="a trained VQA run")
  parser.add_argument("--therapy-workdir", type=files.path_arg, help="a trained VQA-AnswerTherapy mask run (draws the groundings)")
  parser.add_argument("--therapy-class-workdir", type=files.path_arg, help="a grounding_class run deciding single / multiple "
                      "(default: decided from the masks)")
  parser.add_argument("--step", type=int, help="the VQA run's checkpoint step (default: latest)")
  from vqajax import commands
  commands.add_data_dir_flag(parser)
  parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default: %(default)s, this machine only)")
  parser.add_argument("--port", type=int, default=7860, help="port (default: %(default)s)")
  return parser


def page_of(args) -> Page:
  """The page's logic over the runs the flags name; the VQA run's store is found as `vqajax ask`
  finds it (a bundle's in `--data_dir`; the embedded dataset written first if absent)."""
  from vqajax import commands
  from vqajax.core import trained
  from vqajax.vqa import task as vqa_task
  from vqajax.vqa.ask import Answerer
  if args.therapy_class_workdir and not args.therapy_workdir:
    raise InputError("--therapy-class-workdir decides single / multiple beside --therapy-workdir: give both")
  config = trained.read_config(args.workdir, {"vqa": vqa_task}, args.data_dir)
  data_dir = commands.prepare_run_data(config, args.workdir, args.data_dir)
  answerer = Answerer.from_workdir(args.workdir, step=args.step, data_dir=data_dir)
  grounder = None
  if args.therapy_workdir:
    from vqajax.answertherapy.ask import Grounder
    grounder = Grounder.from_workdir(args.therapy_workdir, class_workdir=args.therapy_class_workdir)
  return Page(answerer, grounder, trained.synthetic_note(config))


def _private_gradio_folder() -> str:
  """A new temporary folder for Gradio's files (before gradio is imported: it reads the
  environment then), and only it: no extra allowed paths, examples cached inside it."""
  folder = tempfile.mkdtemp(prefix="vqajax-demo-")
  os.environ.update({"GRADIO_TEMP_DIR": folder, "GRADIO_EXAMPLES_CACHE": os.path.join(folder, "examples"),
                     "GRADIO_ALLOWED_PATHS": "", "GRADIO_ANALYTICS_ENABLED": "False"})
  return folder


def _interrupt(signum, frame):
  raise KeyboardInterrupt


def main(argv: Sequence[str], prog: str = "vqajax demo") -> int:
  args = _parser(prog).parse_args(argv)
  folder = None

  def run() -> None:
    nonlocal folder
    folder = _private_gradio_folder()
    try:
      import gradio  # noqa: F401
    except ImportError:
      raise InputError("the demo needs Gradio: pip install 'vqajax[demo]'") from None
    runtime.use_compilation_cache(args.compilation_cache_dir)
    blocks = build(page_of(args))
    try:
      blocks.launch(server_name=args.host, server_port=args.port, quiet=True, prevent_thread_lock=True,
                    max_file_size=MAX_UPLOAD, css=CSS, allowed_paths=[], show_error=False)
    except OSError as e:  # the port is taken, the host is not this machine's
      raise InputError(f"--host {args.host} --port {args.port}: cannot serve there ({e})") from None
    print(f"{prog}: serving on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM stops it as Ctrl-C does: the folder is removed
    try:
      blocks.block_thread()
    finally:
      blocks.close()

  try:
    return exit_status(prog, run)
  finally:
    if folder:
      shutil.rmtree(folder, ignore_errors=True)
