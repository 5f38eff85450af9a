"""Bucket paths through `core/fs`, tested on TensorFlow's in-memory `ram://` file system
(no network): safe writes, the lock, feature stores, and a whole train + eval."""

import json
import os
import secrets

import jax
import numpy as np
import pytest

from bench.reference import reference_accuracy
from experiments.vqa import bow_q_i
from tests import lazy
from vqajax import cli
from vqajax.core import checkpoint, files, run_record, train
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError
from vqajax.features.store import FeatureStore, FeatureStoreError, write_store
from vqajax.vqa import reports

tf = lazy.Module("tensorflow")


@pytest.fixture
def ram():
  """A fresh ram:// folder (the file system lives as long as the process)."""
  return f"ram://{secrets.token_hex(6)}"


def _read(url):
  with tf.io.gfile.GFile(url, "rb") as f:
    return f.read()


def _tree(url):
  return sorted(os.path.relpath(os.path.join(d, f), url) for d, _, fs_ in tf.io.gfile.walk(url) for f in fs_)


def test_atomic_writes_reach_the_bucket_whole_and_leave_no_temp(ram):
  files.write_atomic_many({f"{ram}/out/a.json": {"x": 1}, f"{ram}/out/b.txt": "é"}, make_dirs=True)
  assert json.loads(_read(f"{ram}/out/a.json")) == {"x": 1} and _read(f"{ram}/out/b.txt") == "é".encode()
  with pytest.raises(TypeError):  # an unserialisable object: none of the files is written
    files.write_atomic_many({f"{ram}/out/c.json": 1, f"{ram}/out/d.json": object()})
  files.write_json_atomic(f"{ram}/out/a.json", [2])  # replaces
  assert _tree(ram) == ["out/a.json", "out/b.txt"] and json.loads(_read(f"{ram}/out/a.json")) == [2]


def test_inputs_in_a_bucket_are_never_written_over(ram):
  files.write_json_atomic(f"{ram}/data/q.json", [1], make_dirs=True)
  files.write_json_atomic(f"{ram}/other.json", [1])
  files.protect(f"{ram}/data/", f"{ram}/other.json", f"{ram}/absent")
  files.write_json_atomic(f"{ram}/folder/x.json", [1], make_dirs=True)
  for path, message in [(f"{ram}/data/q.json", "lies in"), (f"{ram}/data/new/x.json", "lies in"),
                        (f"{ram}/other.json", "is an input"), (f"{ram}/data", "is an input")]:
    with pytest.raises(InputError, match=message):
      files.write_json_atomic(path, [0])
  with pytest.raises(InputError, match="not a regular file"):  # a folder where a file goes
    files.write_json_atomic(f"{ram}/folder", [0])
  with pytest.raises(InputError, match="not a folder"):
    files.check_output(f"{ram}/folder/x.json", folder=True)
  assert files.check_output(f"{ram}/absent") == f"{ram}/absent"  # not there when protected
  assert json.loads(_read(f"{ram}/data/q.json")) == [1] and _tree(ram) == ["data/q.json", "folder/x.json", "other.json"]


def test_the_bucket_lock_refuses_a_live_holder_and_takes_over_a_dead_one(ram):
  with run_record.WorkdirLock(ram, "first"):
    holder = json.loads(_read(f"{ram}/lock"))
    assert holder["pid"] == os.getpid() and holder["command"] == "first"
    with pytest.raises(InputError, match=r"in use by another run \(first"):
      run_record.WorkdirLock(ram, "second").__enter__()
  assert not tf.io.gfile.exists(f"{ram}/lock")
  dead = {**holder, "pid": 2**22 + 1}  # above Linux's pid_max: no such process
  with tf.io.gfile.GFile(f"{ram}/lock", "w") as f:
    f.write(json.dumps(dead))
  with run_record.WorkdirLock(ram, "third"):
    assert json.loads(_read(f"{ram}/lock"))["command"] == "third"


@pytest.mark.parametrize("suffix", [".h5", ".npy"])
def test_feature_stores_read_from_a_bucket_like_from_disk(ram, tmp_path, suffix):
  ids, rows = np.array([7, 3, 11, 5]), np.arange(4 * 6, dtype=np.float16).reshape(4, 2, 3)
  local = str(tmp_path / f"f{suffix}")
  write_store(local, ids, rows)
  for name in os.listdir(tmp_path):
    tf.io.gfile.copy(str(tmp_path / name), f"{ram}/{name}")
  store = FeatureStore(f"{ram}/f{suffix}")
  assert store.shape == (2, 3) and store.dtype == np.float16
  got = store.read(store.rows([5, 7, 5, 11]))
  np.testing.assert_array_equal(got, rows[[3, 0, 3, 2]].astype(np.float32))
  store.close()
  with pytest.raises(FeatureStoreError, match="written on a local disk"):
    write_store(f"{ram}/new{suffix}", ids, rows)
  with pytest.raises(FeatureStoreError, match="not found"):
    FeatureStore(f"{ram}/missing{suffix}")


@pytest.mark.slow
def test_a_whole_run_lives_in_a_bucket(tiny_data, ram, tmp_path, monkeypatch):
  """Data, features and workdir on ram://; checkpoints on a local disk: orbax writes arrays
  through tensorstore, which serves local folders, gs:// and s3://, not TensorFlow's ram://."""
  for name in ("v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json",
               "v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json",
               "features/fc7.h5"):
    tf.io.gfile.makedirs(os.path.dirname(f"{ram}/data/{name}"))
    tf.io.gfile.copy(os.path.join(tiny_data, name), f"{ram}/data/{name}")
  local = checkpoint.Checkpointer
  monkeypatch.setattr(checkpoint, "Checkpointer",
                      lambda directory, *a, **k: local(directory.replace(ram, str(tmp_path)), *a, **k))
  config = config_lib.override(bow_q_i.get_config("runlocal"), {
      "data.dir": f"{ram}/data", "data.synthetic": False, "num_train_steps": 2, "log_every_steps": 1,
      "eval_every_steps": 2})
  workdir = f"{ram}/run"
  cli.prepare_data(config)  # what `vqajax train` does, on one device (cheaper on 2 cores)
  files.check_output(workdir, folder=True)
  metrics = train.train_and_evaluate(cli.task_of(config), config, workdir, devices=jax.devices()[:1])["val"]
  with pytest.raises(InputError, match="lies in"):  # the data stayed protected
    files.write_json_atomic(f"{ram}/data/features/fc7.h5", [])
  assert run_record.read_config(workdir).num_train_steps == 2 and run_record.finished_step(workdir) == 2
  lines = [json.loads(line) for line in _read(f"{workdir}/metrics.jsonl").decode().splitlines()]
  assert [r["step"] for r in lines if "train/loss" in r] == [1, 2]
  assert [r["step"] for r in lines if "val/accuracy" in r] == [2]
  assert any(n.startswith("events.out.tfevents") for n in tf.io.gfile.listdir(workdir))
  assert not tf.io.gfile.exists(f"{workdir}/lock")  # released
  out = f"{workdir}/results/step_2"
  results = json.loads(_read(f"{out}/v2_OpenEnded_mscoco_val2014_bow_q_i_results.json"))
  with open(os.path.join(tiny_data, "v2_mscoco_val2014_annotations.json")) as f:
    annotations = json.load(f)["annotations"]
  official, _ = reference_accuracy(annotations, {r["question_id"]: r["answer"] for r in results})
  assert json.loads(_read(f"{out}/v2_OpenEnded_mscoco_val2014_bow_q_i_accuracy.json")) == official
  assert metrics["accuracy"] == pytest.approx(official["overall"], abs=0.01)
  assert os.listdir(tmp_path / "run" / "checkpoints") == ["2"]
  assert reports.find_results(workdir) == {"run": out}  # what `vqajax report` reads, from the bucket
  assert reports.read_scores(out)["accuracy"] == official["overall"]


def test_orbax_refuses_a_scheme_it_cannot_write_clearly(ram):
  with pytest.raises(InputError, match="ram://.*checkpoints go to a local folder, gs:// or s3://"):
    checkpoint.Checkpointer(f"{ram}/checkpoints")
