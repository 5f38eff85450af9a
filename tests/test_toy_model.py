"""Adding a model the documented way (WORKSPACE.md, "Adding a model"): its two code blocks, the
model's module and its config file, written to a temporary folder, the registry line made by
monkeypatch, and the model trained through `vqajax train` with no file of the checkout touched."""

import importlib
import json
import os
import re
import subprocess

import pytest

from vqajax import cli
from vqajax.core import checkpoint
from vqajax.vqa import models as vqa_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _worked_example() -> dict[str, str]:
  """{path: code} of the Python blocks of WORKSPACE.md's "Adding a model", each headed `# PATH`."""
  text = open(os.path.join(ROOT, "WORKSPACE.md"), encoding="utf-8").read()
  section = text.split("## Adding a model", 1)[1].split("\n## ", 1)[0]
  blocks = re.findall(r"```python\n# (\S+)\n(.*?)```", section, re.S)
  return dict(blocks)


def _tracked_changes() -> str:
  return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                        text=True, check=True).stdout


@pytest.mark.slow
def test_a_model_added_the_documented_way_trains_through_vqajax_train(tiny_data, tmp_path, monkeypatch):
  blocks = _worked_example()
  assert sorted(blocks) == ["experiments/vqa/image_only.py", "vqajax/vqa/image_only.py"]
  (tmp_path / "image_only.py").write_text(blocks["vqajax/vqa/image_only.py"])
  (tmp_path / "image_only_row.py").write_text(blocks["experiments/vqa/image_only.py"])
  monkeypatch.syspath_prepend(str(tmp_path))
  image_only = importlib.import_module("image_only")
  monkeypatch.setitem(vqa_models.MODELS, "image_only", image_only.IMAGE_ONLY)  # the registry line
  before = _tracked_changes()

  workdir = tmp_path / "run"
  assert cli.main(["train", f"--config={tmp_path}/image_only_row.py:runlocal", f"--workdir={workdir}",
                   f"--config.data.dir={tiny_data}", "--config.num_train_steps=2", "--config.eval_every_steps=2",
                   "--verbosity=warning"]) == 0

  run = json.loads((workdir / "run.json").read_text())
  assert run["finished_step"] == 2
  assert run["config"]["model"] == {"name": "image_only", "hidden_dim": 64, "image_scale": 0.01}
  metrics = json.loads((workdir / "results" / "step_2" / "metrics.json").read_text())
  assert 0 <= metrics["accuracy"] <= 100
  params = checkpoint.read_params(str(workdir / "checkpoints"), 2)[0]
  assert params["hidden"]["kernel"].shape == (4096, 64)  # the toy's own layers over fc7, at its config's width
  assert params["classifier"]["kernel"].shape == (64, run["data"]["num_answers"])
  assert _tracked_changes() == before  # nothing of the checkout was written
