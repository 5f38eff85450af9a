"""Failures mid-run: damaged checkpoints, NaN losses, NaN features (issue 7's catalogue)."""

import gc
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests import devices
from tests.test_train import _config, _losses, _params
from vqajax import cli
from vqajax.core import checkpoint, errors, train
from vqajax.core.errors import InputError
from vqajax.core.experiment import Experiment


def _damage(checkpoint_dir):
  """Truncates every array data file of a checkpoint to half (a half-copied checkpoint)."""
  files = [f for f in glob.glob(f"{checkpoint_dir}/state/**/d/*", recursive=True) if os.path.isfile(f)]
  assert files
  for f in files:
    with open(f, "r+b") as handle:
      handle.truncate(os.path.getsize(f) // 2)


@pytest.mark.slow
def test_damaged_newest_checkpoint_resumes_from_the_previous_one(tiny_data, twenty_step_run, tmp_path, caplog):
  config = _config(tiny_data, num_train_steps=20, log_every_steps=5, eval_every_steps=10)
  run = shutil.copytree(twenty_step_run, str(tmp_path / "damaged"))
  _damage(os.path.join(run, "checkpoints", "20"))
  caplog.clear()
  train.train_and_evaluate(cli.task_of(config), config, run)  # the newest (20) cannot be read: back to 10
  out = caplog.text
  assert "checkpoint at step 20 cannot be restored" in out and "resuming from step 10" in out
  assert os.path.isdir(os.path.join(run, "checkpoints.unreadable", "20"))  # kept for inspection
  # steps 11..20 ran again and gave what the uninterrupted run gave
  jax.tree.map(np.testing.assert_array_equal, _params(run, config), _params(twenty_step_run, config))
  assert _losses(run)[-2:] == _losses(twenty_step_run)[-2:]


def _flip(path, at, count=400):
  with open(path, "r+b") as f:
    f.seek(at)
    data = f.read(count)
    f.seek(at)
    f.write(bytes(b ^ 0xFF for b in data))


def _flip_unnoticed_by_orbax(checkpoints, step, config):
  """Flips 400 bytes inside the largest array data file of `step` where orbax reads them back
  without complaint (inside an uncompressed zstd block), so that only the checksum can tell.

  The middle of the file is tried first; where the bytes land on compression headers orbax
  fails to decode and the flip is undone and moved."""
  files = [f for f in glob.glob(f"{checkpoints}/{step}/state/**/d/*", recursive=True) if os.path.isfile(f)]
  largest = max(files, key=os.path.getsize)
  ckpt = checkpoint.Checkpointer(checkpoints)
  target = Experiment.build(cli.task_of(config), config).initial_state(abstract=True)
  try:
    for fraction in (0.5, 0.4, 0.6, 0.3, 0.7):
      at = int(os.path.getsize(largest) * fraction)
      _flip(largest, at)
      try:
        ckpt.restore(step, target)
      except checkpoint.DamagedCheckpointError:
        return
      except Exception:  # orbax noticed: not the case under test
        pass
      _flip(largest, at)  # undo
  finally:
    ckpt.close()
  pytest.fail(f"no flip in {largest} that orbax restores silently")


def test_a_checkpoint_step_that_is_a_link_is_refused_not_deleted_through(tmp_path):
  checkpoints, precious = tmp_path / "run" / "checkpoints", tmp_path / "precious"
  precious.mkdir()
  (precious / "mine.txt").write_text("keep")
  (checkpoints / "10").mkdir(parents=True)
  os.symlink(precious, checkpoints / "20")  # planted: a save past keep_checkpoints had failed on it every time
  with pytest.raises(InputError, match=rf"^{checkpoints}/20: a link; a run's checkpoints are the folders it saved: "):
    checkpoint.complete_steps(str(checkpoints))
  assert (precious / "mine.txt").read_text() == "keep"


def test_a_reader_names_the_damaged_file_of_the_run_itself(tmp_path):
  """ask, submit and export read a step through private hard links (`checkpoint._pinned`): a
  damaged file is the reader's bad input, named by its place in the run."""
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(3, {"params": {"w": jax.numpy.arange(6.0)}}, {"input_step": 3})
  ckpt.close()
  _damage(str(tmp_path / "checkpoints" / "3"))
  with pytest.raises(InputError) as refused:
    checkpoint.read_params(str(tmp_path / "checkpoints"), 3)
  assert str(refused.value).startswith(f"{tmp_path}/checkpoints/3/state/") and str(refused.value).endswith(
      f": its sha256 is not the one saved in {checkpoint.MANIFEST} (damaged after saving)")


@pytest.mark.parametrize("manifest", [[], {}, {"state/x": 3}, {"../../outside": "0" * 64}, {"/etc/hostname": "0" * 64}])
def test_a_manifest_that_parses_but_is_not_one_is_named_as_damaged(tmp_path, manifest):
  """A manifest of another shape, or naming files outside its step, is itself the damage (not
  its own sha256; no file outside the step is read)."""
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(3, {"w": jax.numpy.arange(6.0)}, {"input_step": 3})
  ckpt.close()
  path = tmp_path / "checkpoints" / "3" / checkpoint.MANIFEST
  path.write_text(json.dumps(manifest))
  with pytest.raises(checkpoint.DamagedCheckpointError) as refused:
    checkpoint.verify(str(path.parent))
  assert str(refused.value) == (f"{path}: not a manifest, expected an object of the step's files (relative paths "
                                "inside it) and their sha256 (damaged after saving)")


@pytest.mark.slow
def test_flipped_bytes_in_the_newest_checkpoint_fail_its_checksum(tiny_data, twenty_step_run, tmp_path, caplog):
  config = _config(tiny_data, num_train_steps=20, log_every_steps=5, eval_every_steps=10)
  run = shutil.copytree(twenty_step_run, str(tmp_path / "damaged"))
  _flip_unnoticed_by_orbax(os.path.join(run, "checkpoints"), 20, config)
  caplog.clear()
  train.train_and_evaluate(cli.task_of(config), config, run)
  out = caplog.text
  assert ("checkpoint at step 20 cannot be restored (DamagedCheckpointError)" in out
          and "resuming from step 10" in out)
  assert os.path.isdir(os.path.join(run, "checkpoints.unreadable", "20"))
  jax.tree.map(np.testing.assert_array_equal, _params(run, config), _params(twenty_step_run, config))
  assert _losses(run)[-2:] == _losses(twenty_step_run)[-2:]


def test_a_checkpoint_is_verified_and_shape_checked_before_orbax_reads_it(tmp_path, monkeypatch):
  """Damaged files, a missing manifest and other shapes are refused before orbax reads an
  array, so no read is left failing in the background (nothing reaches the unraisable hook)."""
  unraisable = []
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  state = {"w": jax.numpy.arange(6.0).reshape(2, 3), "step": jax.numpy.int32(7)}
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(7, state, {"input_step": 7})
  restored, meta = ckpt.restore(7, state)
  assert meta == {"input_step": 7}
  jax.tree.map(np.testing.assert_array_equal, restored, state)
  with pytest.raises(InputError, match=r"/checkpoints/7/state: its arrays do not have the shapes"):
    ckpt.restore(7, {"w": jax.numpy.zeros((3, 3)), "step": jax.numpy.int32(0)})
  step = tmp_path / "checkpoints" / "7"
  meta_file = step / "meta" / "metadata"
  saved = meta_file.read_text()
  meta_file.write_text(json.dumps({**json.loads(saved), "input_step": 8}))  # valid JSON, wrong input position
  with pytest.raises(checkpoint.DamagedCheckpointError, match=r"/7/meta/metadata: its sha256 is not the one saved"):
    ckpt.restore(7, state)
  meta_file.write_text(saved)
  _damage(str(step))
  with pytest.raises(checkpoint.DamagedCheckpointError, match=r"/7/state/.*: its sha256 is not the one saved"):
    ckpt.restore(7, state)
  os.remove(step / checkpoint.MANIFEST)  # as a bucket's step killed before its manifest
  with pytest.raises(checkpoint.DamagedCheckpointError, match=r"no vqajax.sha256.json"):
    ckpt.restore(7, state)
  ckpt.close()
  gc.collect()
  assert unraisable == []


def test_a_step_appears_with_its_manifest_and_keeps_what_it_was_given(tmp_path, monkeypatch):
  """The save runs in the background: the manifest is written while the step is still orbax's
  temporary folder (a kill -9 at any moment leaves no listed step without one), and the arrays
  the step was given may go (a donated train state) before the save is complete."""
  sealed, write = [], checkpoint.write_manifest

  def sealing(step_dir):
    sealed.append((os.path.basename(step_dir), checkpoint.complete_steps(str(tmp_path / "checkpoints"))))
    write(step_dir)

  monkeypatch.setattr(checkpoint, "write_manifest", sealing)
  expected = {"w": np.arange(6.0).reshape(2, 3), "step": np.int32(7)}
  state = jax.tree.map(jax.numpy.asarray, expected)
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(7, state, {"input_step": 7})
  jax.tree.map(lambda x: x.delete(), state)
  ckpt.wait()
  assert len(sealed) == 1 and sealed[0][0].startswith("7.orbax-checkpoint-tmp") and sealed[0][1] == []
  restored, _ = ckpt.restore(7, jax.tree.map(jax.numpy.zeros_like, expected))
  jax.tree.map(np.testing.assert_array_equal, restored, expected)
  ckpt.close()


@pytest.mark.slow
def test_no_restorable_checkpoint_is_a_clear_error_and_moves_nothing(tiny_data, tmp_path):
  run = str(tmp_path / "run")
  train.train_and_evaluate(cli.task_of(_config(tiny_data, num_train_steps=10, eval_every_steps=10)), _config(tiny_data, num_train_steps=10, eval_every_steps=10), run)
  wider = _config(tiny_data, num_train_steps=20, eval_every_steps=10, **{"model.fused_dim": 96})
  with pytest.raises(InputError, match=r"holds a run with other settings \(model.fused_dim \d+ -> 96\)"):
    train.train_and_evaluate(cli.task_of(wider), wider, run)  # another run: refused before anything
  with pytest.raises(InputError, match=r"no checkpoint can be restored \(step 10: "):
    train.train_and_evaluate(cli.task_of(wider), wider, run, allow_changed_run=True)  # the shapes do not fit
  assert os.listdir(os.path.join(run, "checkpoints")) == ["10"]
  assert not os.path.exists(os.path.join(run, "checkpoints.unreadable"))


@pytest.mark.slow
def test_non_finite_loss_names_its_step_and_saves_nothing_after_it(tiny_data, tmp_path):
  run = str(tmp_path / "run")
  config = _config(tiny_data, num_train_steps=30, log_every_steps=10, eval_every_steps=10)
  train.train_and_evaluate(cli.task_of(config), config, run)
  diverging = _config(tiny_data, num_train_steps=60, log_every_steps=10, eval_every_steps=10,
                      **{"optimizer.learning_rate": float("inf")})
  # step 31 computes a finite loss, then its update makes the parameters inf / NaN
  with pytest.raises(train.NonFiniteLossError, match=r"non-finite loss at step 32; nothing was saved "
                                                     r"after it \(newest checkpoint: 30\)"):
    train.train_and_evaluate(cli.task_of(diverging), diverging, run, allow_changed_run=True)
  assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["10", "20", "30"]


@pytest.mark.slow
def test_a_diverged_run_fails_with_its_own_status_and_message(tiny_data, tmp_path, capsys):
  config = _config(tiny_data, num_train_steps=10, log_every_steps=5, eval_every_steps=10,
                   **{"optimizer.learning_rate": float("inf")})
  status = errors.exit_status("vqajax train", lambda: train.train_and_evaluate(
      cli.task_of(config), config, str(tmp_path / "run"), devices=jax.devices()[:1]))
  err = capsys.readouterr().err
  assert status == errors.RUN_FAILED == 3, err  # not bad input (2), not a bug (a traceback)
  assert err.strip().splitlines()[-1].startswith("vqajax train: failed: non-finite ") and "Traceback" not in err


def test_a_bugs_missing_file_keeps_its_traceback():
  def bug():
    with open("/nonexistent/vqajax-internal-file"):
      pass

  with pytest.raises(FileNotFoundError):
    errors.exit_status("vqajax x", bug)


@pytest.mark.slow
def test_nan_features_are_one_clear_error(tiny_data, tmp_path):
  data = str(tmp_path / "data")
  shutil.copytree(tiny_data, data)
  store = os.path.join(data, "features", "fc7.h5")
  with h5py.File(store, "r+") as f:
    f["features"][3, 7] = np.nan
    bad_image = int(f["image_ids"][3])
  config = _config(data, num_train_steps=200, log_every_steps=200, eval_every_steps=200)
  with pytest.raises(InputError) as error:
    train.train_and_evaluate(cli.task_of(config), config, str(tmp_path / "run"))
  assert str(error.value) == f"{store}: the features of image_id {bad_image} are not finite (NaN or inf)"


@pytest.mark.slow
def test_empty_very_long_and_non_ascii_questions_train_and_evaluate(tiny_data, tmp_path):
  data = str(tmp_path / "data")
  shutil.copytree(tiny_data, data)
  path = os.path.join(data, "v2_OpenEnded_mscoco_val2014_questions.json")
  with open(path) as f:
    questions = json.load(f)
  texts = ["", "why " * 100, "¿De qué color es el coche? 车是什么颜色？"]
  for q, text in zip(questions["questions"], texts):
    q["question"] = text
  with open(path, "w") as f:
    json.dump(questions, f)
  config = _config(data, num_train_steps=2, log_every_steps=2, eval_every_steps=2)
  metrics = train.train_and_evaluate(cli.task_of(config), config, str(tmp_path / "run"))["val"]
  assert 0 <= metrics["accuracy"] <= 100
  from vqajax.vqa import dataset as vqa_dataset
  lengths = vqa_dataset.load(config.data).val["length"][:3]
  # empty -> 0 words (encodes to zeros); 100 words -> cut at 26; unicode words are words:
  # de, qué, color, es, el, coche + the unspaced Chinese run as one word = 7
  np.testing.assert_array_equal(lengths, [0, 26, 7])


def test_the_compilation_cache_of_a_killed_test_session_goes_with_the_next_one(tmp_path):
  ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  names = {"killed": f"{devices.CACHE_PREFIX}{ended.stdout.strip()}-x1", "running": f"{devices.CACHE_PREFIX}{os.getpid()}-x2",
           "unnamed": f"{devices.CACHE_PREFIX}abc", "other": "unrelated"}
  for name in names.values():
    (tmp_path / name / "entry").mkdir(parents=True)
  devices.remove_orphaned_caches(str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == sorted(names[k] for k in ("running", "unnamed", "other"))


def test_a_reader_keeps_its_step_when_the_training_deletes_it_midway(tmp_path, monkeypatch):
  """`read_params` pins the step's files before orbax reads them: the training deleting the
  step between the check and the read takes nothing from under it, and the private copy goes."""
  unraisable = []
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  os.makedirs(tmp_path / "tmp")
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(3, {"params": {"w": jax.numpy.arange(6.0).reshape(2, 3)}, "step": jax.numpy.int32(3)}, {"input_step": 3})
  ckpt.close()
  restore = ocp.PyTreeCheckpointer.restore

  def deleted_first(self, *args, **kwargs):
    shutil.rmtree(tmp_path / "checkpoints" / "3")  # the training's rotation, mid-read
    return restore(self, *args, **kwargs)

  monkeypatch.setattr(ocp.PyTreeCheckpointer, "restore", deleted_first)
  params, meta, step = checkpoint.read_params(str(tmp_path / "checkpoints"), 3)
  np.testing.assert_array_equal(params["w"], np.arange(6.0).reshape(2, 3))
  assert (step, meta) == (3, {"input_step": 3}) and not os.path.exists(tmp_path / "checkpoints" / "3")
  assert os.listdir(tmp_path / "tmp") == []
  gc.collect()
  assert unraisable == []
