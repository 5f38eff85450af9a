"""On the synthetic default, the paper's ordering: prior "yes" < question-only < Q + norm I.

Runs `vqajax-train` in subprocesses on one real CPU device (long runs with 8 fake devices
on 2 cores can starve XLA's CPU collectives; see WORKSPACE.md).
"""

import json
import os
import subprocess
import sys

import pytest

from vqajax.data import synthetic
from vqajax.metrics.reference import reference_accuracy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 1000


@pytest.fixture(scope="module")
def medium_data(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("synthetic_medium"))
  synthetic.generate(out, seed=0, scale="medium")
  return out


def _train(data_dir, workdir, use_image):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  subprocess.run(
      [sys.executable, "-c", "from vqajax.main import train_entry; train_entry()",
       f"--config={ROOT}/experiments/vqa/deeper_lstm_norm_i.py:cpu", f"--workdir={workdir}",
       f"--config.data.dir={data_dir}", f"--config.model.use_image={use_image}",
       f"--config.num_train_steps={STEPS}", f"--config.eval_every_steps={STEPS}"],
      check=True, env=env, capture_output=True)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if "val/accuracy" in r][-1]["val/accuracy"]


def test_image_model_beats_question_only_and_prior_yes(medium_data, tmp_path):
  with open(os.path.join(medium_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  prior_yes = reference_accuracy(annotations, {a["question_id"]: "yes" for a in annotations})[0]["overall"]
  question_only = _train(medium_data, str(tmp_path / "q"), use_image=False)
  with_image = _train(medium_data, str(tmp_path / "qi"), use_image=True)
  print(f"prior yes {prior_yes:.2f}, deeper LSTM Q {question_only:.2f}, + norm I {with_image:.2f}")
  assert question_only > prior_yes + 20
  assert with_image > question_only + 4
