"""vqajax ask: a trained model's answers about images and questions of one's own.

  vqajax ask --workdir RUN (--image FILE|FOLDER ... | --image-id N ...) --question TEXT ...
      [--choices A,B,C] [--top-k 5] [--json] [--step N] [--weights FILE]
  vqajax ask --workdir RUN --questions FILE.json|FILE.jsonl [--json]

A VQA workdir prints each question's top-k answers with their probabilities (and, with
choices, its multiple-choice pick); every --question is asked about every image. A
questions file is a JSON list (or JSON lines) of {"image": PATH (relative to the file) or
"image_id": N, "question": TEXT, optional "choices": [...], "answers": [...]}.

A VQA answer also notes the question's words the run's vocabulary does not have and the
choices its answer table does not have, and prints the pick's probability. An unreadable
file in a folder given to --image is reported and skipped.

A grounding_mask workdir (VQA-AnswerTherapy) takes the answers too (--answers, or
"answers" in the file) and writes each answer's mask into --out: a PNG named after the
answer (`0000_red.png`: the mask over the image, a store image's picture where the store
recorded it, or the mask alone) and masks.json (a COCO RLE per answer at the image size,
the grid's for a store image without a picture); it prints whether the answers share one grounding
(--class-workdir: a grounding_class run decides, else the masks by IoU > 0.9).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from typing import Sequence

import numpy as np
from PIL import Image

from vqajax import commands
from vqajax.core import files, official_files, runtime, text, trained
from vqajax.core.errors import ArgumentParser, InputError, exit_status
from vqajax.features import forward, images

_NO_PIXELS_SIDE = 224  # a store image without pixels: its mask drawn at this size
PROGRESS_EVERY = 256  # image files a progress line


def _parser(prog: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
  runtime.add_compilation_cache_flag(parser)
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="a trained vqa or grounding_mask run")
  commands.add_checkpoint_flags(parser)
  parser.add_argument("--image", action="append", default=[], help="an image file or a folder of them (repeatable)")
  parser.add_argument("--image-id", action="append", default=[], type=int,
                      help="an image id of the run's feature store (repeatable)")
  parser.add_argument("--question", action="append", default=[], help="a question (repeatable)")
  parser.add_argument("--questions", help="JSON list / JSON lines of {image | image_id, question, choices, answers}")
  parser.add_argument("--choices", help="comma-separated multiple-choice candidates for every --question")
  parser.add_argument("--answers", nargs="+", help="grounding_mask runs: the answers to ground")
  parser.add_argument("--top-k", type=int, default=5, help="answers printed per question (default: 5)")
  parser.add_argument("--json", action="store_true", help="print JSON instead of text")
  parser.add_argument("--weights", help="the extractor's weights file, if it moved since the store was made")
  parser.add_argument("--class-workdir", type=files.path_arg, help="grounding_mask runs: a grounding_class run for single / multiple")
  parser.add_argument("--out", type=files.path_arg, help="grounding_mask runs: a new (or empty) folder for the masks (PNG + masks.json)")
  commands.add_data_dir_flag(parser)
  return parser


# ------------------------------------------------------------------ the questions

def _records_of_file(path: str) -> list:
  if path.endswith(".jsonl"):
    out = []
    for n, line in enumerate(official_files.read_bytes(path).splitlines(), 1):
      if line.strip():
        try:
          out.append(json.loads(line.decode("utf-8")))
        except ValueError as e:  # UnicodeDecodeError is one
          raise InputError(f"{path}: line {n}: not valid JSON ({e})") from None
    return out
  data = official_files.load_json(path)
  if not isinstance(data, list):
    raise InputError(f"{path}: expected a JSON list of questions, got {type(data).__name__}")
  return data


def _strings(value, where: str, field: str) -> list[str]:
  if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
    raise InputError(f'{where}: "{field}" expected a non-empty list of strings')
  text.check_text(value, lambda i: f'{where}: "{field}"[{i}]')
  return value


def read_questions(path: str) -> list[dict]:
  """The questions file's records, checked: {image | image_id, question, choices?, answers?}."""
  records = _records_of_file(path)
  if not records:
    raise InputError(f"{path}: no questions")
  base = os.path.dirname(path)
  out = []
  for i, record in enumerate(records):
    where = f"{path}: records[{i}]"
    if not isinstance(record, dict):
      raise InputError(f"{where}: expected an object, got {type(record).__name__}")
    if not isinstance(record.get("question"), str):
      raise InputError(f'{where}: "question" expected a string')
    text.check_text([record["question"]], lambda _: f'{where}: "question"')
    item = {"question": record["question"]}
    if ("image" in record) == ("image_id" in record):
      raise InputError(f'{where}: expected one of "image" (a path) and "image_id" (an integer)')
    if "image" in record:
      if not isinstance(record["image"], str):
        raise InputError(f'{where}: "image" expected a path')
      item["image"] = os.path.join(base, record["image"])
      if not os.path.isfile(item["image"]):
        found = "a folder, expected an image file" if os.path.isdir(item["image"]) else "not found"
        raise InputError(f'{where}: "image" {item["image"]}: {found}')
    else:
      if type(record["image_id"]) is not int:
        raise InputError(f'{where}: "image_id" expected an integer')
      item["image_id"] = record["image_id"]
    for field in ("choices", "answers"):
      if field in record:
        item[field] = _strings(record[field], where, field)
    out.append(item)
  return out


def _image_files(sources: list[str]) -> list[str]:
  """The files named and the readable images of the folders named (an unreadable one is
  reported on stderr and skipped, as `vqajax features` does)."""
  out = []
  for source in sources:
    if os.path.isdir(source):
      found = images.list_images(source)
      if not found:
        raise InputError(f"{source}: no image files (extensions {', '.join(images.EXTENSIONS)})")
      readable = [path for path in found if _readable(path)]
      if not readable:
        raise InputError(f"{source}: none of its {len(found)} image files can be read")
      out.extend(readable)
    elif os.path.isfile(source):
      out.append(source)
    elif os.path.exists(source):
      raise InputError(f"{source}: not an image file or folder (a fifo or device)")
    else:
      raise InputError(f"{source}: no such image file or folder")
  return out


def _readable(path: str) -> bool:
  try:
    images.decode(path)
    return True
  except images.UnreadableImage as e:
    print(f"unreadable, skipped: {path}: {e}", file=sys.stderr)
    return False


def asked(args) -> list[dict]:
  """Every (image, question) to answer, from the flags or the questions file."""
  if args.questions:
    if args.question or args.image or args.image_id:
      raise InputError("--questions names the images and questions: give no --question / --image / --image-id")
    return read_questions(args.questions)
  if not args.question:
    raise InputError("no questions: give --question TEXT (repeatable) or --questions FILE")
  for flag in ("question", "choices", "answers"):
    given = getattr(args, flag) or []
    text.check_text([given] if isinstance(given, str) else given, lambda _: f"--{flag}")
  if not args.image and not args.image_id:
    raise InputError("no image: give --image FILE|FOLDER or --image-id N")
  targets = [{"image": path} for path in _image_files(args.image)] + [{"image_id": i} for i in args.image_id]
  extra = {}
  if args.choices:
    extra["choices"] = [c.strip() for c in args.choices.split(",") if c.strip()]
  if args.answers:
    extra["answers"] = args.answers
  return [{**target, "question": q, **extra} for target in targets for q in args.question]


def _features(model, items: list[dict]) -> dict[str, np.ndarray]:
  """{path: features} of every distinct image file among the items; more than
  `PROGRESS_EVERY` files (long work) print progress lines with an ETA on stderr."""
  paths = list(dict.fromkeys(item["image"] for item in items if "image" in item))
  if not paths:
    return {}
  say = lambda line: print(f"image features: {line}", file=sys.stderr, flush=True)
  # the rate counts from the first batch on (it paid compiling)
  progress = forward.Progress(len(paths), PROGRESS_EVERY, 1, say) if len(paths) > PROGRESS_EVERY else None
  batches = []
  for batch in model.feature_batches(paths):
    batches.append(batch)
    if progress is not None:
      progress.add(len(batch))
  return dict(zip(paths, np.concatenate(batches)))


def _label(item: dict) -> str:
  return item["image"] if "image" in item else f"image_id {item['image_id']}"


# -------------------------------------------------------------------------- VQA

def answer_all(answerer, items: list[dict], k: int) -> list[dict]:
  """The answers of every item, through the answerer in as few calls as possible: one for
  the store images and one for the image files (with and without choices apart)."""
  features = _features(answerer, items)
  out: list[dict | None] = [None] * len(items)
  groups: dict[tuple[bool, bool], list[int]] = {}
  for i, item in enumerate(items):
    groups.setdefault(("image" in item, "choices" in item), []).append(i)
  for (is_file, with_choices), rows in groups.items():
    chosen = [items[i] for i in rows]
    given = ({"features": np.stack([features[x["image"]] for x in chosen])} if is_file
             else {"image_ids": [x["image_id"] for x in chosen]})
    answers = answerer.answer([x["question"] for x in chosen], k=k,
                              choices=[x["choices"] for x in chosen] if with_choices else None, **given)
    for i, result in zip(rows, answers):
      out[i] = result
  return out


def notes(answerer, item: dict) -> dict[str, list[str]]:
  """What the run cannot read in an item: question words its vocabulary lacks, choices
  its answer table lacks (the model has no score for them)."""
  table = set(answerer.answers)
  return {"unknown_words": answerer.unknown_words(item["question"]),
          "choices_not_in_answer_table": [c for c in item.get("choices", []) if c not in table]}


def _print_answers(answerer, items: list[dict], results: list[dict], as_json: bool) -> None:
  if as_json:
    print(json.dumps([{**{k: v for k, v in item.items() if k in ("image", "image_id")},
                       "question": r["question"],
                       "answers": [{"answer": a, "probability": p} for a, p in r["answers"]],
                       **({"choice": r["choice"], "choice_probability": r["choice_probability"]} if "choice" in r
                          else {}),
                       **notes(answerer, item)}
                      for item, r in zip(items, results)], indent=1))
    return
  for item, r in zip(items, results):
    print(f"{_label(item)}: {r['question']}")
    for rank, (answer, p) in enumerate(r["answers"], 1):
      print(f"  {rank}. {answer}  {p:.3f}")
    if "choice" in r:
      print(f"  multiple choice: {r['choice']}  {r['choice_probability']:.3f}")
    unknown, outside = notes(answerer, item).values()
    if unknown:
      print(f"  note: not in the run's vocabulary (read as one unknown word): {', '.join(unknown)}")
    if outside:
      print(f"  note: not in the run's answer table (the model has no score for them): {', '.join(outside)}")


# ----------------------------------------------------------------- AnswerTherapy

def _overlay(path: str | None, mask: np.ndarray, probs: np.ndarray) -> bytes:
  """PNG bytes: the mask in red over the image (half opaque), or the cell probabilities
  in grey where there are no pixels."""
  if path is None:
    grey = Image.fromarray(np.uint8(np.clip(probs, 0, 1) * 255)).resize(
        (_NO_PIXELS_SIDE, _NO_PIXELS_SIDE), Image.NEAREST)
    picture = grey.convert("RGB")
  else:
    pixels = np.asarray(images.decode(path), np.float32)
    red = np.zeros_like(pixels)
    red[..., 0] = 255
    pixels = np.where(mask[..., None], 0.5 * pixels + 0.5 * red, pixels)
    picture = Image.fromarray(np.uint8(pixels))
  buffer = io.BytesIO()
  picture.save(buffer, format="PNG")
  return buffer.getvalue()


def _slug(answer: str) -> str:
  """A file-name part from an answer: lower-case letters, digits and '-' only."""
  return re.sub(r"[^a-z0-9]+", "-", answer.lower()).strip("-")[:40] or "answer"


def ground_all(grounder, items: list[dict], out: str) -> list[dict]:
  """Grounds every item; writes its PNGs and masks.json into `out` (all or none)."""
  from pycocotools import mask as coco_mask
  features = _features(grounder, items)
  outputs, records = {}, []
  for n, item in enumerate(items):
    if "answers" not in item:
      raise InputError(f"{_label(item)}: {item['question']!r}: a grounding_mask run grounds answers: give --answers "
                       '(or "answers" in the questions file)')
    image = {"features": features[item["image"]]} if "image" in item else {"image_id": item["image_id"]}
    path = item["image"] if "image" in item else grounder.image_path(item["image_id"])  # a store's picture
    size = None
    if path is not None:
      width, height = images.decode(path).size
      size = (height, width)
    result = grounder.ground(item["question"], item["answers"], image_size=size, **image)
    masks_out, names = [], set()
    for a, (answer, rle, probs) in enumerate(zip(item["answers"], result["rle"], result["masks"])):
      name = f"{n:04d}_{_slug(answer)}.png"
      name = name if name not in names else f"{n:04d}_{_slug(answer)}_{a}.png"
      names.add(name)
      binary = coco_mask.decode({"size": rle["size"], "counts": rle["counts"].encode("ascii")}).astype(bool)
      outputs[os.path.join(out, name)] = _overlay(path, binary, probs)
      masks_out.append({"answer": answer, "png": name, "rle": rle})
    records.append({**{k: item[k] for k in ("image", "image_id") if k in item}, "question": item["question"],
                    "single": result["single"], "single_from": result["single_from"], "masks": masks_out})
  outputs[os.path.join(out, "masks.json")] = records
  files.write_atomic_many(outputs, make_dirs=True)
  return records


def _print_groundings(records: list[dict], out: str, as_json: bool) -> None:
  if as_json:
    print(json.dumps(records, indent=1))
    return
  for record in records:
    call = {True: "single grounding", False: "multiple groundings", None: "one answer"}[record["single"]]
    by = f" (by the {record['single_from']})" if record["single_from"] else ""
    print(f"{_label(record)}: {record['question']}: {call}{by}; "
          + ", ".join(f"{m['answer']} -> {os.path.join(out, m['png'])}" for m in record["masks"]))
  print(f"masks: {os.path.join(out, 'masks.json')}")


def _say_synthetic(config, items: list[dict]) -> None:
  """Once, on stderr: a run of the embedded synthetic dataset asked about a picture of the user's."""
  note = trained.synthetic_note(config)
  if note and any("image" in item for item in items):
    print(f"note: {note}", file=sys.stderr)


def run(args) -> None:
  if args.top_k < 1:
    raise InputError(f"--top-k {args.top_k}: expected a positive integer")
  config = trained.read_config(args.workdir, commands.tasks(answering=True), args.data_dir)
  other, flags = ("grounding_mask", ("answers", "class_workdir", "out")) if config.task == "vqa" else ("vqa", ("choices",))
  given = [f for f in flags if getattr(args, f)]  # the other task's flags: refused, never left unread
  if given:
    raise InputError(f"--{given[0].replace('_', '-')}: for {other} runs; {args.workdir} is a {config.task} run")
  files.protect(args.workdir, *(p for p in (args.questions, args.weights, args.class_workdir) if p), *args.image)
  items = asked(args)
  files.protect(*(item["image"] for item in items if "image" in item))
  # the store (the embedded dataset's, written if absent) only where an image id is asked about
  by_id = any("image" not in i for i in items)  # the run's store is read
  data_dir = commands.prepare_run_data(config, args.workdir, args.data_dir) if by_id else None
  runtime.use_compilation_cache(args.compilation_cache_dir)
  answering = commands.registry()[config.task].answering  # vqa.ask.Answerer | answertherapy.ask.Grounder
  runtime.freeze_imported()
  if config.task == "vqa":
    answerer = answering.from_workdir(args.workdir, args.step, best=args.best, weights=args.weights, data_dir=data_dir)
    answers = answer_all(answerer, items, args.top_k)
    _say_synthetic(config, items)
    _print_answers(answerer, items, answers, args.json)
    return
  if not args.out:
    raise InputError("a grounding_mask run writes masks: give --out FOLDER")
  files.check_new_folder(args.out, "each answer's mask")  # never over a user's files of those names
  files.check_output(args.out, folder=True)
  grounder = answering.from_workdir(args.workdir, args.step, best=args.best, class_workdir=args.class_workdir,
                                  weights=args.weights, data_dir=data_dir)
  records = ground_all(grounder, items, args.out)
  _say_synthetic(config, items)
  _print_groundings(records, args.out, args.json)


def main(argv: Sequence[str], prog: str = "vqajax ask") -> int:
  args = _parser(prog).parse_args(argv)
  return exit_status(prog, lambda: run(args))
