"""On the synthetic default, the paper's ordering: prior "yes" < question-only < Q + norm I."""

import json
import os

import jax
import pytest

from experiments.vqa import deeper_lstm_norm_i
from vqajax import train
from vqajax.data import synthetic
from vqajax.metrics.reference import reference_accuracy


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("synthetic_small"))
  synthetic.generate(out, seed=0, scale="small")
  return out


def _train(data_dir, workdir, use_image):
  config = deeper_lstm_norm_i.get_config("cpu")
  config.data.dir = data_dir
  config.model.use_image = use_image
  config.num_train_steps = config.eval_every_steps = 800
  # one device: long runs with 8 fake devices on 2 cores can starve XLA's CPU collectives
  return train.train_and_evaluate(config, workdir, devices=jax.devices()[:1])


def test_image_model_beats_question_only_and_prior_yes(small_data, tmp_path):
  with open(os.path.join(small_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  prior_yes = reference_accuracy(annotations, {a["question_id"]: "yes" for a in annotations})[0]["overall"]
  question_only = _train(small_data, str(tmp_path / "q"), use_image=False)["accuracy"]
  with_image = _train(small_data, str(tmp_path / "qi"), use_image=True)["accuracy"]
  print(f"prior yes {prior_yes:.2f}, deeper LSTM Q {question_only:.2f}, + norm I {with_image:.2f}")
  assert question_only > prior_yes + 10
  assert with_image > question_only + 8
