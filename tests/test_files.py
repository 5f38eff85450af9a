import errno
import json
import os
import stat

import pytest

from vqajax.core import files
from vqajax.core.errors import InputError, RunFailed


def test_write_json_atomic_replaces_whole_file_with_default_permissions(tmp_path):
  path = tmp_path / "out.json"
  path.write_text("old")
  files.write_json_atomic(str(path), {"a": [1, 2.5]})
  assert json.loads(path.read_text()) == {"a": [1, 2.5]}
  umask = os.umask(0)
  os.umask(umask)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
  assert os.listdir(tmp_path) == ["out.json"]


def test_write_json_atomic_failures_leave_nothing(tmp_path):
  path = tmp_path / "out.json"
  path.write_text("old")
  with pytest.raises(TypeError):
    files.write_json_atomic(str(path), {"a": object()})
  assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]
  with pytest.raises(InputError, match=r"missing/x\.json: cannot write"):
    files.write_json_atomic(str(tmp_path / "missing" / "x.json"), {})
  files.write_json_atomic(str(tmp_path / "made" / "x.json"), [], make_dirs=True)
  assert json.loads((tmp_path / "made" / "x.json").read_text()) == []


def test_write_atomic_many_is_all_or_nothing(tmp_path):
  a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
  with pytest.raises(TypeError):
    files.write_atomic_many({a: {"ok": 1}, b: {"bad": {1, 2}}})
  assert os.listdir(tmp_path) == []
  with pytest.raises(InputError, match="nowhere/c.json: cannot write"):
    files.write_atomic_many({a: 1, str(tmp_path / "nowhere" / "c.json"): 2})
  assert os.listdir(tmp_path) == []
  files.write_atomic_many({a: 1, b: 2})
  assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]
  assert json.loads(open(b).read()) == 2


def test_write_atomic_binary(tmp_path):
  path = tmp_path / "x.bin"
  files.write_atomic(str(path), lambda f: f.write(b"\x00\x01"), fsync=False)
  assert path.read_bytes() == b"\x00\x01"


def test_write_atomic_many_removes_the_folders_it_made_when_it_fails(tmp_path):
  out = tmp_path / "new" / "masks"
  with pytest.raises(TypeError):  # the second file cannot be written (as a full disk would stop it)
    files.write_atomic_many({str(out / "a.json"): 1, str(out / "deeper" / "b.json"): {1, 2}}, make_dirs=True)
  assert os.listdir(tmp_path) == []  # not even the empty output folders
  (tmp_path / "mine").mkdir()
  with pytest.raises(TypeError):
    files.write_atomic_many({str(tmp_path / "mine" / "a.json"): {1}}, make_dirs=True)
  assert os.listdir(tmp_path) == ["mine"]  # a folder that was there stays


def test_a_full_disk_fails_the_run_and_leaves_no_folder_made_for_the_write(tmp_path):
  """ENOSPC / EDQUOT are a run that cannot go on (exit 3, the input was fine); other write
  errors name the output (exit 2); either way the folders made for the file are removed."""
  def full(f):
    raise OSError(errno.ENOSPC, "No space left on device")

  def denied(f):
    raise OSError(errno.EACCES, "Permission denied")

  with pytest.raises(RunFailed, match=r"new/deeper/x\.npz: cannot write: No space left on device; free space and "
                                      r"rerun$"):
    files.write_atomic(str(tmp_path / "new" / "deeper" / "x.npz"), full, make_dirs=True)
  with pytest.raises(InputError, match=r"x\.npz: cannot write: Permission denied$"):
    files.write_atomic(str(tmp_path / "new" / "x.npz"), denied, make_dirs=True)
  (tmp_path / "kept").mkdir()
  with pytest.raises(RunFailed):
    files.write_atomic(str(tmp_path / "kept" / "x.npz"), full, make_dirs=True)
  assert os.listdir(tmp_path) == ["kept"] and os.listdir(tmp_path / "kept") == []  # a folder it did not make stays
