"""The install: only `vqajax` is a top-level package (setup.py ships data_pipeline/ and
experiments/ inside it), and an installed copy, away from the checkout, still reaches the
offline pipelines and the configs by path. The wheel is built from a copy of the sources
(building writes build/ and *.egg-info beside them)."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "vqajax", "data_pipeline", "experiments")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  """(the wheel's path, a folder it is installed into with `pip install --target`)."""
  base = tmp_path_factory.mktemp("packaging")
  source, dist, site = base / "source", base / "dist", base / "site"
  source.mkdir()
  for name in SOURCES:
    copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
    copy(os.path.join(ROOT, name), source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                      if copy is shutil.copytree else {}))
  pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
  subprocess.run([*pip, "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(dist)], check=True)
  path, = dist.glob("*.whl")
  subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(path)], check=True)
  return str(path), str(site)


def test_the_only_top_level_package_is_vqajax(wheel):
  names = zipfile.ZipFile(wheel[0]).namelist()
  assert {n.split("/")[0] for n in names} == {"vqajax", "vqajax-0.1.0.dist-info"}
  shipped = {os.path.relpath(os.path.join(folder, f), ROOT) for top in ("data_pipeline", "experiments")
             for folder, _, files in os.walk(os.path.join(ROOT, top)) for f in files if f.endswith(".py")}
  assert shipped and {f"vqajax/{p}" for p in shipped} <= set(names)  # every pipeline and config module


@pytest.mark.slow
def test_an_installed_copy_reaches_the_pipelines_and_the_configs(wheel, tmp_path):
  """From a folder outside the checkout, with only the installed copy on the path: the verbs
  of data_pipeline/ import it from inside vqajax, a config given as experiments/... loads
  (its check refuses the override: the file was found and run), so does a config of one's own
  that imports a shipped one as `experiments.*`, and a sweep file."""
  env = {**os.environ, "PYTHONPATH": wheel[1]}
  run = lambda *argv: subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True)
  where = run("-c", "import sys\nfrom vqajax import cli\ntry:\n  cli.main(['tfds', '--help'])\nexcept SystemExit:\n"
              "  pass\nimport vqajax, data_pipeline.tfds.cli as c\nprint(vqajax.__file__, c.__file__)")
  assert where.returncode == 0, where.stderr
  assert where.stdout.split()[-2:] == [os.path.join(wheel[1], "vqajax", "__init__.py"),
                                       os.path.join(wheel[1], "vqajax", "data_pipeline", "tfds", "cli.py")]
  helped = run("-m", "vqajax", "features", "--help")
  assert helped.returncode == 0 and helped.stdout.startswith("usage: vqajax features"), helped.stderr
  refused = run("-m", "vqajax", "train", "--config=experiments/vqa/bow_q.py:runlocal", "--config.batch_size=0",
                f"--workdir={tmp_path / 'run'}")
  assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
      "vqajax train: error: config.batch_size: expected a positive integer <= 2147483647, got 0")
  (tmp_path / "mine.py").write_text("from experiments.vqa import bow_q\n\n\ndef get_config(arg):\n"
                                    "  config = bow_q.get_config(arg)\n  config.batch_size = -1\n  return config\n")
  mine = run("-m", "vqajax", "train", "--config=mine.py:runlocal", f"--workdir={tmp_path / 'run'}")
  assert mine.returncode == 2 and mine.stderr.strip().splitlines()[-1] == (
      "vqajax train: error: config.batch_size: expected a positive integer <= 2147483647, got -1")
  swept = run("-m", "vqajax", "sweep", "experiments/sweeps/vqa_table2.py:runlocal", f"--workdir={tmp_path / 't2'}",
              "--print-commands")
  assert swept.returncode == 0 and "vqajax train --config=experiments/vqa/bow_q.py:runlocal" in swept.stdout, swept.stderr
  assert sorted(os.listdir(tmp_path)) == ["mine.py"]  # nothing written: no run, no sweep folder
