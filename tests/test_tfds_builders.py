"""TFDS builders (data_pipeline/tfds): exact round trips of the official files, feature
joins, bad input, per-host splits, and the TFDS route of vqajax feeding the batches of
the raw-file route."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jax
import numpy as np
import pytest

from experiments.therapy import grounding_mask
from experiments.vqa import deeper_lstm_norm_i
from tests import lazy
from tests.digests import digests
from vqajax import cli
from vqajax.answertherapy import configs as therapy_configs
from vqajax.answertherapy import dataset as therapy_dataset
from vqajax.core import config as config_lib
from vqajax.core import pipeline, sharding, train
from vqajax.core.experiment import Experiment
from vqajax.core.official_files import DataFileError
from vqajax.features.keys import feature_key
from vqajax.features.store import FeatureStore, FeatureStoreError, write_store
from vqajax.vqa import dataset as vqa_dataset

tfds = lazy.Module("tensorflow_datasets")
tfds_cli = lazy.Module("data_pipeline.tfds.cli")
tfds_records = lazy.Module("vqajax.vqa.tfds_records")
therapy_tfds_records = lazy.Module("vqajax.answertherapy.tfds_records")

V2_FILES = {
    "train": ("v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json",
              "MultipleChoice_mscoco_train2014_questions.json"),
    "val": ("v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json",
            "MultipleChoice_mscoco_val2014_questions.json"),
}


def _json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _examples(tfds_dir, split, **kwargs):
  builder = tfds.builder_from_directory(tfds_dir)
  return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False, **kwargs)))


@pytest.fixture(scope="module")
def vqa_v2(tiny_data, tmp_path_factory):
  """vqa/v2 built from the tiny synthetic files (v2 questions and annotations, v1 MC files)."""
  return tfds_cli.build("vqa/v2", tiny_data, str(tmp_path_factory.mktemp("tfds")))


@pytest.mark.slow
def test_vqa_v2_round_trips_the_official_files(tiny_data, vqa_v2):
  assert vqa_v2.endswith(os.path.join("vqa", "v2", "1.0.0"))
  builder = tfds.builder_from_directory(vqa_v2)
  assert sorted(builder.info.splits) == ["test", "test_dev", "train", "val"]
  for split, names in V2_FILES.items():
    questions, annotations, choices = (_json(os.path.join(tiny_data, name)) for name in names)
    assert builder.info.splits[split].num_examples == len(annotations["annotations"]) > 0
    assert tfds_records.vqa_objects(vqa_v2, split) == (questions, annotations, choices)
  for split, subtype in (("test", "test2015"), ("test_dev", "test-dev2015")):  # questions only
    questions = _json(os.path.join(tiny_data, f"v2_OpenEnded_mscoco_{subtype}_questions.json"))
    assert builder.info.splits[split].num_examples == len(questions["questions"]) > 0
    assert tfds_records.vqa_objects(vqa_v2, split)[:2] == (questions, None)
  first = _examples(vqa_v2, "val[:1]")[0]
  annotation = _json(os.path.join(tiny_data, V2_FILES["val"][1]))["annotations"][0]
  assert first["question_id"] == annotation["question_id"]
  assert [a.decode() for a in first["answers"]["answer"]] == [a["answer"] for a in annotation["answers"]]
  assert len(first["multiple_choices"]) == 18


@pytest.mark.slow
def test_v1_files_test_splits_and_multiple_choice(tiny_data, tmp_path, monkeypatch):
  scratch = tmp_path / "tmp"  # the temporary folder of the build: nothing is left in it
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  manual = tmp_path / "manual"
  manual.mkdir()
  names = {"OpenEnded_mscoco_train2014_questions.json": V2_FILES["train"][0],
           "mscoco_train2014_annotations.json": V2_FILES["train"][1],
           "MultipleChoice_mscoco_train2014_questions.json": V2_FILES["train"][2],
           "OpenEnded_mscoco_test-dev2015_questions.json": V2_FILES["val"][0]}
  for name, source in names.items():
    shutil.copy(os.path.join(tiny_data, source), manual / name)
  path = tfds_cli.build("vqa/v1", str(manual), str(tmp_path / "data"))
  assert not os.listdir(scratch)  # TFDS leaves an empty folder per builder that looks on its GCS bucket
  assert sorted(tfds.builder_from_directory(path).info.splits) == ["test_dev", "train"]
  questions, annotations, choices = tfds_records.vqa_objects(path, "train")
  assert choices == _json(manual / "MultipleChoice_mscoco_train2014_questions.json")
  assert all(len(q["multiple_choices"]) == 18 for q in choices["questions"])
  assert annotations == _json(manual / "mscoco_train2014_annotations.json")
  test = tfds_records.vqa_objects(path, "test_dev")
  assert test == (_json(manual / "OpenEnded_mscoco_test-dev2015_questions.json"), None, None)
  config = _config(tiny_data, source="tfds", tfds_dir=path)
  with pytest.raises(DataFileError, match=r"\[test_dev\]: the split has no annotations"):
    tfds_records.read_vqa(path, "test_dev", with_choices=False)
  with pytest.raises(DataFileError, match=r"no split 'val' \(it has test_dev, train\)"):
    vqa_dataset.load(config.data)


def _config(data_dir, **data):
  return config_lib.override(deeper_lstm_norm_i.get_config("runlocal"),
                          {f"data.{k}": v for k, v in dict(data, dir=data_dir).items()})


@pytest.mark.slow
def test_tfds_route_feeds_the_batches_and_losses_of_the_files(tiny_data, vqa_v2):
  raw = Experiment.build(cli.task_of(_config(tiny_data)), _config(tiny_data), devices=jax.devices()[:1])
  via_tfds = Experiment.build(cli.task_of(_config(tiny_data, source="tfds", tfds_dir=vqa_v2)), _config(tiny_data, source="tfds", tfds_dir=vqa_v2), devices=jax.devices()[:1])
  for split in ("train", "val"):
    a, b = getattr(raw.data, split), getattr(via_tfds.data, split)
    assert sorted(a) == sorted(b)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=f"{split} {key}")
  assert "choice_index" in via_tfds.data.val  # the multiple-choice task reads the choices too
  assert raw.data.val_records == via_tfds.data.val_records and raw.data.val_info == via_tfds.data.val_info
  assert raw.data.vocab.words == via_tfds.data.vocab.words
  assert raw.data.answers.answers == via_tfds.data.answers.answers

  def train_batches(exp):
    batches = pipeline.train_batches(exp.data.train, exp.data.store, 32, seed=0, start_step=3,
                                     keys=exp.task.TRAIN_KEYS)
    return [next(batches), next(batches)]

  def eval_batches(exp):
    return list(pipeline.eval_batches(exp.data.val, exp.data.store, 64, ("tokens", "length", "label")))

  for batches in (train_batches, eval_batches):
    for x, y in zip(batches(raw), batches(via_tfds), strict=True):
      assert sorted(x) == sorted(y)
      for key in x:
        np.testing.assert_array_equal(x[key], y[key])

  def first_loss(exp):
    step = train.make_train_step(exp.model, exp.tx, exp.mesh, exp.task.make_loss(exp.config))
    batch = next(pipeline.train_batches(exp.data.train, exp.data.store, 32, seed=0, start_step=0,
                                        keys=exp.task.TRAIN_KEYS))
    _, metrics = step(exp.initial_state(), sharding.to_global(batch, exp.mesh))
    return float(metrics["loss"])

  assert first_loss(raw) == first_loss(via_tfds)


@pytest.mark.slow
def test_feature_join_holds_each_images_store_row(tiny_data, tmp_path):
  store_path = os.path.join(tiny_data, "features", "conv5_grid.npy")
  path = tfds_cli.build("vqa/v2", tiny_data, str(tmp_path), features=store_path)
  assert path.endswith(os.path.join("vqa", "v2+conv5_grid", "1.0.0"))
  examples = _examples(path, "val")
  assert len(examples) == len(_json(os.path.join(tiny_data, V2_FILES["val"][1]))["annotations"])
  for ex in examples[::7]:
    expected = np.load(store_path)[list(np.load(store_path[:-4] + ".image_ids.npy")).index(ex["image_id"])]
    assert ex["image_features"].dtype == expected.dtype == np.float16
    np.testing.assert_array_equal(ex["image_features"], expected)
  # vqajax reads the records of a joined dataset like those of a plain one
  assert tfds_records.vqa_objects(path, "val")[1] == _json(os.path.join(tiny_data, V2_FILES["val"][1]))


def test_an_image_missing_from_the_store_is_one_error_and_writes_nothing(tiny_data, tmp_path):
  store = FeatureStore(os.path.join(tiny_data, "features", "fc7.h5"))
  missing = _json(os.path.join(tiny_data, V2_FILES["train"][0]))["questions"][5]["image_id"]
  keep = store.image_ids != missing
  partial = str(tmp_path / "partial.h5")
  write_store(partial, store.image_ids[keep], store.read(np.flatnonzero(keep)).astype(np.float16))
  with pytest.raises(FeatureStoreError) as error:
    tfds_cli.build("vqa/v2", tiny_data, str(tmp_path / "data"), features=partial)
  assert str(error.value) == (f"{partial}: no features for image_id {missing} "
                              f"(needed by {os.path.join(tiny_data, V2_FILES['train'][0])})")
  assert not os.path.exists(tmp_path / "data")  # nothing prepared, no empty folder left


@pytest.mark.slow
def test_bad_files_give_the_readers_one_line_errors(tiny_data, tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  for name in V2_FILES["train"][:2]:
    shutil.copy(os.path.join(tiny_data, name), manual / name)
  annotations = _json(manual / V2_FILES["train"][1])
  qid = annotations["annotations"][3]["question_id"]
  del annotations["annotations"][3]["answers"][2]["answer_confidence"]
  (manual / V2_FILES["train"][1]).write_text(json.dumps(annotations))
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  run = subprocess.run([sys.executable, "-m", "vqajax", "tfds", "build", "vqa/v2", "--manual_dir", str(manual),
                        "--data_dir", str(tmp_path / "data")], capture_output=True, text=True, env=env, check=False)
  assert run.returncode == 2
  assert run.stderr.strip().splitlines()[-1] == (
      f"vqajax tfds: error: {manual / V2_FILES['train'][1]}: annotations[3] "
      f'(question_id={qid}): answers[2]: expected a string "answer_confidence", got none')
  assert not os.path.exists(tmp_path / "data" / "vqa" / "v2" / "1.0.0")
  with pytest.raises(DataFileError, match="none of the vqa files"):
    tfds_cli.build("vqa/v2", str(tmp_path), str(tmp_path / "data"))
  with pytest.raises(DataFileError, match="not a prepared TFDS dataset"):
    vqa_dataset.load(_config(tiny_data, source="tfds", tfds_dir=str(tmp_path)).data)
  with pytest.raises(Exception, match=r"config.data.source 'tfrecord' is not one of \('raw', 'tfds'\)"):
    vqa_dataset.load(_config(tiny_data, source="tfrecord").data)


@pytest.mark.slow
def test_even_splits_give_each_host_its_share_in_order(vqa_v2):
  every = [ex["question_id"] for ex in _examples(vqa_v2, "train")]
  shares = [[ex["question_id"] for ex in _examples(vqa_v2, part)] for part in tfds.even_splits("train", n=3)]
  assert sum(shares, []) == every and max(map(len, shares)) - min(map(len, shares)) <= 1
  host = tfds.split_for_jax_process("train")  # one process here: all of it
  assert [ex["question_id"] for ex in _examples(vqa_v2, host)] == every


def test_help_lists_every_builders_configs_without_importing_tensorflow():
  code = ("import sys\nfrom vqajax import cli\ntry:\n  cli.main(['tfds', 'build', '--help'])\nexcept SystemExit as e:\n"
          "  print(e.code, 'tensorflow' in sys.modules, 'tensorflow_datasets' in sys.modules)")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert done.stdout.splitlines()[-1] == "0 False False", done.stderr[-2000:]  # TensorFlow: seconds, for a help
  listed = re.search(r"NAME/CONFIG: (.*?)\. `--features`", done.stdout, re.S)[1]
  builders = lazy.Module("data_pipeline.tfds.builders").BUILDERS
  assert sorted(re.split(r",\s+", listed)) == sorted(f"{name}/{config.name}" for name, builder in builders.items()
                                                       for config in builder.BUILDER_CONFIGS)


def test_a_command_loads_tensorflow_without_keras(tmp_path):
  # TensorFlow imports Keras 3 at its own import unless told otherwise (runtime.init): ~1.5 s of a
  # command's start. This build refuses its missing store after loading TensorFlow and TFDS, in one
  # line (TFDS's warning about the config joined with a store is a known notice: not shown).
  code = ("import runpy, sys\nsys.argv = ['vqajax', 'tfds', 'build', 'vqa/v2', '--manual_dir', *sys.argv[1:]]\ntry:\n"
          "  runpy.run_module('vqajax', run_name='__main__')\nexcept SystemExit as e:\n"
          "  print(e.code, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
  (tmp_path / "manual").mkdir()
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "manual"), "--data_dir", str(tmp_path / "data"),
                         "--features", str(tmp_path / "gone.h5")], capture_output=True, text=True, timeout=300, env=env)
  assert done.stdout.splitlines()[-1] == "2 True False", done.stderr[-2000:]
  assert done.stderr == f"vqajax tfds: error: {tmp_path / 'gone.h5'}: feature store not found\n"


@pytest.mark.parametrize("name, message", [("vqa/v9", "vqa has no config 'v9' (expected one of v2, v1)"),
                                           ("coco/v2", "unknown dataset 'coco' (expected one of vqa, vizwiz_vqa, "),
                                           ("vqa\n/v2", "unknown dataset 'vqa\\n' (expected one of ")])
def test_an_unknown_builder_or_config_is_one_line_and_writes_nothing(tiny_data, tmp_path, capsys, name, message):
  out = tmp_path / "prepared"
  assert cli.main(["tfds", "build", name, "--manual_dir", tiny_data, "--data_dir", str(out)]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"vqajax tfds: error: {message}") and err.count("\n") == 1, err
  assert not out.exists()


@pytest.mark.parametrize("manual, message", [("missing", "no such directory"), ("empty", "an empty directory")])
def test_a_manual_dir_without_files_is_one_line_and_writes_nothing(tmp_path, capsys, manual, message):
  (tmp_path / "empty").mkdir()
  out = tmp_path / "prepared"
  assert cli.main(["tfds", "build", "vqa/v2", "--manual_dir", str(tmp_path / manual), "--data_dir", str(out)]) == 2
  assert capsys.readouterr().err == (f"vqajax tfds: error: {tmp_path / manual}: {message} (the manual_dir with the "
                                     "official files)\n")
  assert not out.exists()


def test_a_data_dir_whose_dataset_folder_lies_in_the_manual_files_is_refused(tiny_data, tmp_path, capsys):
  manual = tmp_path / "vqa"  # data_dir tmp_path prepares into tmp_path/vqa/v2/1.0.0: inside the official files
  shutil.copytree(tiny_data, manual)
  before = digests(manual)
  assert cli.main(["tfds", "build", "vqa/v2", "--manual_dir", str(manual), "--data_dir", str(tmp_path)]) == 2
  assert capsys.readouterr().err == (f"vqajax tfds: error: {manual}/v2/1.0.0: lies in {manual}, an input of this "
                                     "command; write the output elsewhere\n")
  assert digests(manual) == before


def test_tfds_never_looks_at_gcs(tiny_data, tmp_path, monkeypatch):
  assert tfds.core.utils.gcs_utils._is_gcs_disabled

  def no_network(*args):
    raise AssertionError(f"TFDS looked at GCS: {args}")

  monkeypatch.setattr(tfds.core.utils.gcs_utils, "exists", no_network)
  path = tfds_cli.build("vqa/v2", tiny_data, str(tmp_path))
  assert tfds_records.vqa_objects(path, "val")[0]["questions"]


@pytest.mark.slow
def test_vizwiz_round_trips_and_feeds_the_arrays_of_the_files(tiny_data, tiny_vizwiz, tmp_path):
  manual = tiny_vizwiz
  store_path = os.path.join(tiny_data, "features", "fc7.h5")
  path = tfds_cli.build("vizwiz_vqa", str(manual), str(tmp_path / "data"), features=store_path)
  assert path.endswith(os.path.join("vizwiz_vqa", "default+fc7", "1.0.0"))
  for split in ("train", "val", "test"):
    assert tfds_records.vizwiz_file(path, split) == _json(manual / f"{split}.json")
  store = FeatureStore(store_path)
  for ex in _examples(path, "test")[::11]:
    image_id = int(ex["image"].decode()[len("VizWiz_test_"):-len(".jpg")])
    np.testing.assert_array_equal(ex["image_features"], store.read(store.rows([image_id]))[0].astype(np.float16))
  files = {"format": "vizwiz", "train_questions": str(manual / "train.json"),
           "val_questions": str(manual / "val.json"), "val_mc_questions": ""}
  raw = vqa_dataset.load(_config(tiny_data, **files).data)
  via_tfds = vqa_dataset.load(_config(tiny_data, source="tfds", tfds_dir=path, **files).data)
  assert raw.val_records == via_tfds.val_records and raw.val_info == via_tfds.val_info == {
      "data_type": "mscoco", "data_subtype": "val"}
  for split in ("train", "val"):
    a, b = getattr(raw, split), getattr(via_tfds, split)
    assert sorted(a) == sorted(b)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_vizwiz_bad_records_name_file_and_record(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  record = {"image": "VizWiz_val_00000001.jpg", "question": "What?", "answer_type": "other", "answerable": 1,
            "answers": [{"answer": "cat", "answer_confidence": "yes"}] * 10}
  (manual / "val.json").write_text(json.dumps([record, dict(record, answerable="yes")]))
  with pytest.raises(DataFileError, match=r'val.json: records\[1\]: expected an integer "answerable", got \'yes\''):
    tfds_cli.build("vizwiz_vqa", str(manual), str(tmp_path / "data"))
  (manual / "val.json").write_text(json.dumps([record, dict(record, image="photo.jpg")]))
  with pytest.raises(DataFileError, match=r"val.json: records\[1\] image 'photo.jpg' has no numeric id"):
    tfds_cli.build("vizwiz_vqa", str(manual), str(tmp_path / "data"))


THERAPY_DIR = therapy_configs.THERAPY_DIR  # the released train files


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(THERAPY_DIR, "VizWiz_train.json")),
                    reason="the released AnswerTherapy train files are not there")
def test_answer_therapy_round_trips_the_released_files(tmp_path):
  path = tfds_cli.build("answer_therapy", THERAPY_DIR, str(tmp_path))
  splits = tfds.builder_from_directory(path).info.splits
  assert sorted(splits) == ["VQA_train", "VizWiz_train"]
  for split in splits:
    records = _json(os.path.join(THERAPY_DIR, f"{split}.json"))
    assert splits[split].num_examples == len(records)
    assert therapy_tfds_records.therapy_file(path, split) == records
  assert (splits["VQA_train"].num_examples, splits["VizWiz_train"].num_examples) == (1648, 2146)
  record = _json(os.path.join(THERAPY_DIR, "VQA_train.json"))[0]
  example = _examples(path, "VQA_train[:1]")[0]
  assert [a.decode() for a in example["answers"]] == record["answers"] == ["resting", "relaxing"]
  assert example["binary_label"].decode() == record["binary_label"] == "same"
  assert example["question_id"].decode() == record["question_id"] and example["source"] == b"VQAv2"
  points = [(p["x"], p["y"]) for polygon in record["grounding_labels"] for p in polygon]
  assert example["points"].tolist() == [list(p) for p in points]
  assert example["polygon_sizes"].tolist() == [len(p) for p in record["grounding_labels"]]


@pytest.mark.slow
def test_answer_therapy_synthetic_features_and_the_tfds_route(tiny_therapy, tmp_path):
  store_path = os.path.join(tiny_therapy, "features", "therapy_grid.npy")
  path = tfds_cli.build("answer_therapy", tiny_therapy, str(tmp_path), features=store_path)
  for split in therapy_tfds_records.THERAPY_SPLITS:
    assert therapy_tfds_records.therapy_file(path, split) == _json(os.path.join(tiny_therapy, f"{split}.json"))
  store = FeatureStore(store_path)
  features, ids = np.load(store_path), np.load(store_path[:-4] + ".image_ids.npy").tolist()
  for ex in _examples(path, "VizWiz_val+VQA_val")[::5]:
    np.testing.assert_array_equal(ex["image_features"], features[ids.index(feature_key(ex["image_id"].decode()))])
  assert store.dtype == np.float16
  raw = therapy_dataset.load(_therapy_config(tiny_therapy), grid_targets=True)
  via_tfds = therapy_dataset.load(_therapy_config(tiny_therapy, source="tfds", tfds_dir=path), grid_targets=True)
  for split in ("train", "val"):
    a, b = getattr(raw, split), getattr(via_tfds, split)
    assert sorted(a) == sorted(b) and len(a["label"]) > 0
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  assert [s.answers for s in raw.val_samples] == [s.answers for s in via_tfds.val_samples]


def _therapy_config(data_dir, **data):
  return config_lib.override(grounding_mask.get_config("runlocal"),
                          {f"data.{k}": v for k, v in dict(data, dir=data_dir).items()})
