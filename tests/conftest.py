"""Test session setup: fake CPU devices (before jax is imported), the workers' scheduling and
shared fixtures."""

import atexit
import collections
import fcntl
import os
import resource
import shutil
import tempfile
import time

from tests import devices

# A test with "eight_devices" in its name (the FSDP mesh, 8-way sharding) runs on pytest-xdist's
# first worker, or without workers, on 8 fake devices; the other workers have 2: every run there
# still splits its batch, and the workers' own CPU falls ~14% (2026-12-06, WORKSPACE.md).
EIGHT_DEVICES = "eight_devices"
_FIRST_WORKER = "gw0"
DEVICES = 8 if os.environ.get("PYTEST_XDIST_WORKER", _FIRST_WORKER) == _FIRST_WORKER else 2
os.environ["XLA_FLAGS"] = devices.flags(DEVICES)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # TensorFlow without Keras 3, as the commands start it (runtime.init)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# One persistent XLA compilation cache for the session and its subprocesses: the many
# short training runs compile the same steps again and again (8.6 s -> 1.9 s a run).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  devices.remove_orphaned_caches(tempfile.gettempdir())
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"{devices.CACHE_PREFIX}{os.getpid()}-")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# A size limit makes jax lock the cache while reading or writing an entry: the pytest-xdist
# workers and their subprocesses share it.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(16 * 2**30))

import pytest

# The modules that take longest go first, longest first (from a clean clone's --durations), so
# that pytest-xdist's workers (one module each at a time, setup.cfg) end on short ones together;
# test_models and test_vilt, the fast tier's longest (~30 s each there), before those whose
# tests are mostly slow (the fast tier had ended on them: 119 s with one worker 25 s behind).
_FIRST = ("test_bench.py", "test_learning.py", "test_sweep.py", "test_slurm.py", "test_multihost.py", "test_sharding.py",
          "test_paligemma.py", "test_models.py", "test_vilt.py", "test_demo.py", "test_docs_commands.py",
          "test_clipseg_rows.py", "test_clipseg.py", "test_vilt_hostile.py", "test_cli.py", "test_trained.py",
          "test_packaging.py", "test_train.py", "test_reliability.py", "test_vilt_rows.py", "test_baselines.py")
# The modules whose work runs in subprocesses on devices of their own (`one_device_env`,
# `devices.env`): the first worker's 8 devices cost them nothing, where the same in-process tests
# take ~13% more CPU there than on 2 (2026-12-07). The first worker takes them after the 8-device
# tests, the others only when nothing else is left.
_OWN_DEVICES = ("test_bench.py", "test_learning.py", "test_sweep.py")


def pytest_xdist_auto_num_workers(config):
  """`-n auto`: a worker more than the cores, which tests waiting on their subprocesses leave
  idle (on 2 cores: 811 s with 2 workers, 704 s with 3, 721 s with 4)."""
  del config
  return (os.cpu_count() or 1) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """`--dist loadfile` (setup.cfg), with the tests that need eight devices as one unit of work
  that the first worker takes first, then the modules of `_OWN_DEVICES`."""
  if config.getvalue("dist") != "loadfile":
    return None
  from xdist.scheduler import LoadFileScheduling

  class EightDevicesOnTheFirstWorker(LoadFileScheduling):
    def add_node(self, node):
      super().add_node(node)
      if node.gateway.id == _FIRST_WORKER:  # first: the scheduler shuts down spare workers from the end
        self.assigned_work = {node: self.assigned_work.pop(node), **self.assigned_work}

    def _split_scope(self, nodeid):
      return EIGHT_DEVICES if EIGHT_DEVICES in nodeid else super()._split_scope(nodeid)

    def _assign_work_unit(self, node):
      first = node.gateway.id == _FIRST_WORKER
      for scope in [s for s in self.workqueue if os.path.basename(s) in _OWN_DEVICES][::-1 if first else 1]:
        self.workqueue.move_to_end(scope, last=not first)
      if EIGHT_DEVICES in self.workqueue:  # another worker takes it only if nothing else is left (gw0 died)
        self.workqueue.move_to_end(EIGHT_DEVICES, last=not first)
      super()._assign_work_unit(node)

  return EightDevicesOnTheFirstWorker(config, log)


def pytest_addoption(parser):
  parser.addoption("--cpu-times", metavar="FOLDER",
                   help="append each test's CPU seconds (its process's, and its waited-for subprocesses'), "
                        "wall seconds, and its process's XLA compiling (seconds, compilation cache hits and "
                        "misses) to FOLDER/cpu-PID.tsv, one file per worker: what the suite's time is made of")


def pytest_configure(config):
  folder = config.getoption("--cpu-times")
  if folder:
    try:
      os.makedirs(folder, exist_ok=True)
    except OSError as e:
      raise pytest.UsageError(f"--cpu-times {folder!r}: expected a folder to write into ({e.strerror})") from None
    import jax.monitoring
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: _COMPILING.update({event: seconds}))
    jax.monitoring.register_event_listener(lambda event, **_: _COMPILING.update({event: 1}))


_COMPILING = collections.Counter()  # jax's events in this process: seconds or counts
_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_hits",
                   "/jax/compilation_cache/cache_misses")


def _cpu_seconds() -> tuple[float, float]:
  """This process's CPU seconds and those of the subprocesses it has waited for."""
  return tuple(sum(resource.getrusage(who)[:2]) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  folder = item.config.getoption("--cpu-times")
  if not folder:
    yield
    return
  cpu, wall, compiling = _cpu_seconds(), time.time(), [_COMPILING[e] for e in _COMPILE_EVENTS]
  yield
  own, children = (after - before for after, before in zip(_cpu_seconds(), cpu))
  compile_seconds, hits, misses = (_COMPILING[e] - before for e, before in zip(_COMPILE_EVENTS, compiling))
  with open(os.path.join(folder, f"cpu-{os.getpid()}.tsv"), "a") as f:
    f.write(f"{item.nodeid}\t{own:.2f}\t{children:.2f}\t{time.time() - wall:.2f}\t{compile_seconds:.2f}\t{hits:.0f}"
            f"\t{misses:.0f}\n")


def pytest_runtest_setup(item):
  if EIGHT_DEVICES in item.nodeid and DEVICES != 8:
    pytest.fail(f"needs the first worker's 8 fake devices, and this worker has {DEVICES}: run it with -n0 or "
                "--dist loadfile (tests/conftest.py)", pytrace=False)


def pytest_collection_modifyitems(items):
  items.sort(key=lambda item: _FIRST.index(item.path.name) if item.path.name in _FIRST else len(_FIRST))


@pytest.fixture(autouse=True)
def _fresh_command_state():
  """Each test starts at absl's default verbosity (a `vqajax train` run in the same process
  raises it to INFO) and with no inputs protected (a command's own, `core/files.protect`)."""
  from absl import logging

  from vqajax.core import files
  logging.set_verbosity(logging.WARNING)
  files.unprotect_all()


@pytest.fixture(scope="session")
def one_device_env():
  """The environment for a subprocess on one CPU device (this session's without the 8 fake
  devices): long runs with 8 fake devices on 2 cores can starve XLA's CPU collectives, and
  compiling for one device is ~35% cheaper. The compilation cache stays shared."""
  return devices.env(1)


def _made_once(tmp_path_factory, name: str, make) -> str:
  """The folder `make(folder)` makes, once per pytest run: pytest-xdist's workers share what
  the first one made (a file lock, and a marker written when it is complete)."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # the run's folder, above each worker's own
  folder, done = root / name, root / f"{name}.done"
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed making it left
      make(str(folder))
      done.touch()
  return str(folder)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
  """The embedded synthetic dataset at scale 'tiny', written once per pytest run."""
  from vqajax.synthetic.vqa import write as synthetic
  return _made_once(tmp_path_factory, "synthetic_tiny", lambda out: synthetic.generate(out, seed=0, scale="tiny"))


def _train_lstm(workdir: str, data_dir: str, steps: int, eval_every: int, log_every: int) -> None:
  """`vqajax train` of deeper LSTM Q + norm I (runlocal) on `data_dir`, in this process."""
  from vqajax import cli
  config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "vqa",
                        "deeper_lstm_norm_i.py")
  assert cli.main(["train", f"--config={config}:runlocal", f"--workdir={workdir}", f"--config.data.dir={data_dir}",
                   f"--config.num_train_steps={steps}", f"--config.eval_every_steps={eval_every}",
                   f"--config.log_every_steps={log_every}"]) == 0


@pytest.fixture(scope="session")
def tiny_lstm_run(tiny_data, tmp_path_factory):
  """A finished `vqajax train` run of deeper LSTM Q + norm I (runlocal) on the tiny set,
  trained once per pytest run: 4 steps, evaluated and checkpointed at steps 2 and 4
  (results/step_2, results/step_4). Returns (workdir, what the command printed). Only read
  it; a test that writes into a run (eval, damage) takes `tiny_lstm_run_copy`."""
  import contextlib
  import io

  def train(folder):
    os.makedirs(folder)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
      _train_lstm(f"{folder}/run", tiny_data, steps=4, eval_every=2, log_every=1)
    with open(os.path.join(folder, "printed.txt"), "w") as f:
      f.write(printed.getvalue())

  folder = _made_once(tmp_path_factory, "tiny_lstm_run", train)
  with open(os.path.join(folder, "printed.txt")) as f:
    return os.path.join(folder, "run"), f.read()


@pytest.fixture(scope="session")
def twenty_step_run(tiny_data, tmp_path_factory):
  """`tiny_lstm_run`'s model trained 20 steps instead (past the first epoch, 11.25 steps of batch
  32), logged every 5, evaluated and checkpointed at steps 10 and 20; the uninterrupted run
  that resumed ones are compared with, one per device count (this worker's: over other devices
  the sums' order changes the last bits). Only read it."""
  return _made_once(tmp_path_factory, f"twenty_step_run_{DEVICES}_devices",
                    lambda folder: _train_lstm(folder, tiny_data, steps=20, eval_every=10, log_every=5))


@pytest.fixture
def tiny_lstm_run_copy(tiny_lstm_run, tmp_path):
  """A copy of `tiny_lstm_run`'s workdir for this test alone."""
  return shutil.copytree(tiny_lstm_run[0], str(tmp_path / "run"))


@pytest.fixture(scope="session")
def tiny_therapy(tmp_path_factory):
  """The synthetic VQA-AnswerTherapy dataset at scale 'tiny', written once per pytest run."""
  from vqajax.synthetic.answertherapy import write as synthetic_therapy
  return _made_once(tmp_path_factory, "therapy_tiny", lambda out: synthetic_therapy.generate(out, seed=0, scale="tiny"))


@pytest.fixture(scope="module")
def therapy_copy(tiny_therapy, tmp_path_factory):
  """`tiny_therapy` copied for one module, which may write into it (pixel stores are made on first use)."""
  out = tmp_path_factory.mktemp("therapy_copy") / "tiny"
  shutil.copytree(tiny_therapy, out)
  return str(out)


@pytest.fixture(scope="session")
def tiny_vizwiz(tiny_data, tmp_path_factory):
  """The tiny synthetic v2 train / val as VizWiz-VQA files (images named by their COCO
  id, so the tiny set's fc7 store serves them), and the test2015 questions as the test
  file (questions only, as VizWiz's test.json)."""
  import json
  out = tmp_path_factory.mktemp("vizwiz_tiny")
  files = {"train": ("v2_OpenEnded_mscoco_train2014_questions.json", "v2_mscoco_train2014_annotations.json"),
           "val": ("v2_OpenEnded_mscoco_val2014_questions.json", "v2_mscoco_val2014_annotations.json")}
  for split, (questions_file, annotations_file) in files.items():
    with open(os.path.join(tiny_data, questions_file)) as f:
      questions = {q["question_id"]: q for q in json.load(f)["questions"]}
    with open(os.path.join(tiny_data, annotations_file)) as f:
      annotations = json.load(f)["annotations"]
    records = [{"image": f"VizWiz_{split}_{a['image_id']:08d}.jpg", "question": questions[a["question_id"]]["question"],
                "answers": [{"answer": x["answer"], "answer_confidence": x["answer_confidence"]} for x in a["answers"]],
                "answer_type": a["answer_type"], "answerable": int(a["answer_type"] != "unanswerable")}
               for a in annotations]
    (out / f"{split}.json").write_text(json.dumps(records))
  with open(os.path.join(tiny_data, "v2_OpenEnded_mscoco_test2015_questions.json")) as f:
    test = [{"image": f"VizWiz_test_{q['image_id']:08d}.jpg", "question": q["question"]} for q in json.load(f)["questions"]]
  (out / "test.json").write_text(json.dumps(test))
  return out
