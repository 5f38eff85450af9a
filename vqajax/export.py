"""`vqajax export`: one checkpoint of a workdir as a bundle to share (`core/bundle.py`).

The bundle holds what answering needs and nothing of the training: the parameters (no
optimizer state), the config, the encoders, the extractor settings (with
`with_weights`, the extractor's weights as `.npz`), checksums and a model card.
"""

from __future__ import annotations

import io
import os
from typing import Any, Mapping

import jax
import numpy as np
import yaml

from vqajax.core import bundle, files, run_record, trained
from vqajax.core.errors import InputError
from vqajax.features import weights


def _metrics_table(metrics: Mapping[str, float]) -> str:
  if not metrics:
    return "No val metrics were recorded with this checkpoint.\n"
  rows = "\n".join(f"| {name} | {value:.2f} |" for name, value in sorted(metrics.items()))
  return f"| metric | value |\n|---|---:|\n{rows}\n"


_METRIC_NAMES = {"accuracy": "open-ended accuracy", "mc_accuracy": "multiple-choice accuracy"}


def _dataset(config) -> dict:
  """The card's dataset entry: what the run was evaluated on, by name, never a local path."""
  if config.data.get("synthetic"):
    return {"type": "vqajax-synthetic", "name": f"vqajax embedded synthetic ({config.data.get('synthetic_scale')})",
            "split": "val"}
  val = str(config.data.get("val_questions") or config.data.get("val_files") or "val")
  return {"type": str(config.data.get("format") or config.task), "name": os.path.basename(val.split(",")[0]),
          "split": "val"}


def card_metadata(saved: trained.Checkpoint, name: str) -> dict:
  """The card's YAML metadata in the Hugging Face Hub's model-index shape: one result, every
  top-level val metric in it."""
  pipeline = saved.task.PIPELINE_TAG
  metrics = [{"type": k, "name": _METRIC_NAMES.get(k, k), "value": round(float(v), 4)}
             for k, v in sorted(saved.metrics.items()) if "/" not in k]
  result = {"task": {"type": pipeline}, "dataset": _dataset(saved.config), "metrics": metrics}
  return {"library_name": "vqajax", "pipeline_tag": pipeline, "tags": ["vqajax", "jax", "flax", saved.config.task],
          "model-index": [{"name": name, "results": [result]}]}


def model_card(saved: trained.Checkpoint, name: str, with_weights: bool) -> str:
  """README.md: Hub metadata (YAML front matter) and what a user needs to know and type."""
  config, task = saved.config, saved.config.task
  data = ("the embedded synthetic dataset (drawn shapes: its answers about other pictures mean little)"
          if config.data.get("synthetic") else f"`{_dataset(config)['name']}`")
  ask = ("vqajax ask --workdir=BUNDLE --image=photo.jpg --question='what color is the bus?'" if task == "vqa" else
         "vqajax ask --workdir=BUNDLE --image=photo.jpg --question='what is it?' --answers red blue --out=masks")
  return f"""---
{yaml.safe_dump(card_metadata(saved, name), sort_keys=False)}---

# {name}

A vqajax `{task}` model (`config.model`: see `config.json`), exported at step {saved.step}.
Trained on {data}; the files it read are named in `config.json` (`data`).

## Val metrics at step {saved.step}

{_metrics_table(saved.metrics)}
## Use

vqajax is on no package index: install it from a clone of its repository, then ask the bundle:

```bash
git clone <the vqajax repository> vqajax && pip install -e ./vqajax
{ask}
vqajax submit QUESTIONS.json --workdir=BUNDLE --out=submission
```

```python
import vqajax
model = vqajax.load("BUNDLE")  # an Answerer (VQA) or a Grounder (AnswerTherapy masks)
```

Asking about an image file computes its features as the training store's were (the
extractor settings in `vqajax.json`){", with the weights shipped in `extractor/`" if with_weights else
"; an extractor with weights needs them given with `--weights`"}.
Asking by image id, `submit` and the demo's store pictures read the run's feature store: in the data folder
`config.json` names (`data.dir`, a folder under the home folder as `~/...`), or the one given with `--data_dir`.

## Files

`flax_model.msgpack` (parameters), `config.json`, `encoders.json` (vocabulary, answers),
`vqajax.json` (step, metrics, extractor settings, sha256 of every file).
"""


def export(path: str, tasks: Mapping[str, Any], out: str, step: int | None = None, best: bool = False,
           with_weights: bool = False) -> list[str]:
  """Writes the bundle of `path`'s checkpoint into the new folder `out`; returns its files."""
  if bundle.is_bundle(path):
    raise InputError(f"{path}: already a bundle (copy the folder to share it)")
  run_record.protect(path)  # the output rule: nothing into the run or its data folder
  files.check_new_folder(out, "a bundle")
  files.check_output(out, folder=True)
  saved = trained.read(path, tasks, step, best)
  extractor, weights = saved.record.get("extractor"), None
  if with_weights:
    if not extractor:
      raise InputError(f"{path}: its features were not extracted by vqajax features (no extractor settings): "
                       "there are no weights to ship; export without --with-weights")
    extractor, weights = _weights(extractor, path)
  name = os.path.basename(os.path.normpath(path)) or saved.config.name
  card = model_card(saved, f"{saved.config.name} ({name})", with_weights)
  if extractor and not weights and extractor.get("weights"):  # not shipped: given with --weights where it is used
    extractor = {**extractor, "weights": None}
  return bundle.write(out, task=saved.config.task, config=portable(saved.config.to_dict()), tables=saved.tables,
                      params=saved.params, step=saved.step, metrics=saved.metrics,
                      sizes=saved.record.get("data", {}), extractor=extractor, card=card, weights=weights)


def portable(config: dict) -> dict:
  """The config as a bundle records it, naming no path of this machine: a folder or file under
  the home folder as `~/...` (expanded where the bundle is read), any other `data.dir` /
  `data.tfds_dir` as "" (a reader then takes `--data_dir`), any other data file by its name
  inside `data.dir` (or its base name), `model.init_from` as "" (the bundle holds the weights)."""
  data = config["data"]
  folder = data["dir"] if os.path.isabs(data["dir"]) else None

  def file(path: str) -> str:
    if folder and os.path.commonpath([folder, path]) == folder:
      return os.path.relpath(path, folder)
    return _home_relative(path) or os.path.basename(path)

  def local(value):
    if isinstance(value, str) and "://" not in value and os.path.isabs(value):
      return ",".join(file(name) for name in value.split(","))  # one file or comma-separated ones
    return value

  out = jax.tree.map(local, config)
  for group, name in (("data", "dir"), ("data", "tfds_dir")):
    value = config[group].get(name)
    if isinstance(value, str) and os.path.isabs(value):
      out[group][name] = _home_relative(value)
  if "init_from" in out.get("model", {}):
    out["model"]["init_from"] = ""
  return out


def _home_relative(path: str) -> str:
  """`path` as `~/...` when it is under the home folder, else ""."""
  home = os.path.expanduser("~")
  if home in ("", "/", "~") or os.path.commonpath([home, os.path.abspath(path)]) != home:
    return ""
  return os.path.join("~", os.path.relpath(path, home))


def _weights(extractor: dict, run: str) -> tuple[dict, tuple[str, bytes]]:
  """The extractor's weights as `.npz` bytes, and its settings with their tensors' digest."""
  path = extractor.get("weights")
  if not path:
    raise InputError(f"{run}: its extractor ({extractor.get('model')}) has no weights file: export without "
                     "--with-weights")
  if not os.path.isfile(path):
    raise InputError(f"{path}: the extractor's weights are not there; export without --with-weights")
  if weights.sha256(path) != extractor["weights_sha256"]:
    raise InputError(f"{path}: not the file the features were extracted with (its sha256 differs)")
  state = weights.read_state(path)
  buffer = io.BytesIO()
  np.savez(buffer, **state)
  name = os.path.splitext(os.path.basename(path))[0] + ".npz"
  return {**extractor, "weights_tensors_sha256": weights.tensors_sha256(state)}, (name, buffer.getvalue())
