"""ViLT checkpoints as hostile input (vqajax/nn/vilt_hub.py, nn/hub.py): every file regular and
bounded, every config.json field bounded, the weights checked before a run is recorded (a refused
`init_from` leaves the workdir as it was), from-scratch sizes that cannot be built, and Hub ids
resolved from the Hugging Face cache."""

import json
import os
import shlex
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from huggingface_hub import constants as hf_constants
from safetensors import numpy as safetensors_numpy

from experiments.vqa import vilt as vilt_row
from tests.digests import digests
from tests.vilt_checkpoint import tiny_hub
from vqajax import cli
from vqajax.core.errors import InputError
from vqajax.nn import hub, vilt_hub
from vqajax.synthetic import embedded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VILT = f"{ROOT}/experiments/vqa/vilt.py:runlocal"
WORDS = ["what", "is", "the", "colour", "of", "?"] + [f"w{i}" for i in range(19)]  # 30 tokens with the 5 special
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def data(tiny_data, tmp_path_factory):
  """The tiny set with its pixel store (written into the copy once)."""
  out = str(tmp_path_factory.mktemp("vilt_hostile") / "tiny")
  shutil.copytree(tiny_data, out)
  config = vilt_row.get_config("runlocal")
  config.data.dir = out
  embedded.prepare(config)
  return out


@pytest.fixture(scope="module")
def good(tmp_path_factory):
  """A tiny ViLT Hub folder (2 layers, no head) and its tensors."""
  folder = tmp_path_factory.mktemp("hub") / "good"
  return str(folder), tiny_hub(folder, 2, WORDS)


def _variant(good, tmp_path, tensors=None, config=None, **files) -> str:
  """A copy of the good folder with other tensors, config.json fields (None: removed) or files
  (name -> bytes; None: removed; a callable: made by it at the path)."""
  out = str(tmp_path / "variant")
  shutil.copytree(good[0], out)
  if tensors is not None:
    safetensors_numpy.save_file(tensors, os.path.join(out, vilt_hub.WEIGHTS))
  if config is not None:
    raw = json.loads(open(os.path.join(out, "config.json")).read())
    raw.update(config)
    with open(os.path.join(out, "config.json"), "w") as f:
      json.dump({k: v for k, v in raw.items() if v is not None}, f)
  for name, content in files.items():
    path = os.path.join(out, name.replace("__", "."))
    if os.path.exists(path):
      os.remove(path)
    if callable(content):
      content(path)
    elif content is not None:
      with open(path, "wb") as f:
        f.write(content)
  return out


def _weights(good) -> bytes:
  return open(os.path.join(good[0], vilt_hub.WEIGHTS), "rb").read()


def _train(argv, capsys) -> tuple[int, list[str]]:
  """The exit status and the last line on stderr (after the log's), none of them a traceback."""
  code = cli.main(argv)
  err = capsys.readouterr().err.strip().splitlines()
  assert err and not any("Traceback" in line for line in err), err
  return code, err[-1:]


def _fifo(path):
  os.mkfifo(path)


def _zero(path):
  os.symlink("/dev/zero", path)


# (name, variant of the good folder, what the line says): weights-level problems, found before anything is written
WEIGHT_CASES = [
    ("zero-byte weights", lambda g, t: _variant(g, t, model__safetensors=b""),
     "model.safetensors: not a readable safetensors file (SafetensorError: Error while deserializing header: header "
     "too small)"),
    ("truncated weights", lambda g, t: _variant(g, t, model__safetensors=_weights(g)[:-100]),
     "model.safetensors: not a readable safetensors file"),
    ("a header longer than the file", lambda g, t: _variant(
        g, t, model__safetensors=struct.pack("<Q", 10**12) + _weights(g)[8:]), "header too large"),
    ("a wrong-shaped tensor", lambda g, t: _variant(g, t, {**g[1], "pooler.dense.bias": np.zeros(3, "f4")}),
     "model.safetensors: tensor vilt.pooler.dense.bias has shape (3,); the model expects (16,)"),
    ("a missing tensor", lambda g, t: _variant(g, t, {k: v for k, v in g[1].items() if k != "pooler.dense.bias"}),
     "model.safetensors: 1 backbone tensors missing (vilt.pooler.dense.bias)"),
    ("a complex tensor", lambda g, t: _variant(g, t, {**g[1], "pooler.dense.bias": np.zeros(16, "c8")}),
     "model.safetensors: tensor vilt.pooler.dense.bias is of dtype C64; expected one of ['BF16', 'F16', 'F32', 'F64']"),
    ("an index naming a file outside", lambda g, t: _variant(
        g, t, model__safetensors=None, model__safetensors__index__json=b'{"weight_map": {"a": "../x.safetensors"}}'),
     "model.safetensors.index.json: expected a safetensors index"),
    ("an index of a missing shard", lambda g, t: _variant(
        g, t, model__safetensors=None, model__safetensors__index__json=b'{"weight_map": {"a": "m-1.safetensors"}}'),
     "m-1.safetensors: file not found"),
    ("pytorch_model.bin only", lambda g, t: _variant(g, t, model__safetensors=None, pytorch_model__bin=b"PK"),
     "has pytorch_model.bin only; convert it to model.safetensors once: python -c"),
    ("config.json with only model_type", lambda g, t: _variant(g, t, config__json=b'{"model_type": "vilt"}'),
     "tensor vilt.embeddings.text_embeddings.word_embeddings.weight has shape (30, 16); the model expects (30522, 768)"),
    ("a fifo as the weights", lambda g, t: _variant(g, t, model__safetensors=_fifo),
     "model.safetensors: not a regular file (a fifo, device or folder)"),
    ("/dev/zero as the weights", lambda g, t: _variant(g, t, model__safetensors=_zero),
     "model.safetensors: not a regular file"),
    ("/dev/zero as config.json", lambda g, t: _variant(g, t, config__json=_zero), "config.json: not a regular file"),
    ("a fifo as the tokenizer", lambda g, t: _variant(g, t, vocab__txt=_fifo), "vocab.txt: not a regular file"),
    ("no such folder", lambda g, t: str(t / "absent" / "vilt"), "absent/vilt': no such folder, nor a Hugging Face"),
]


@pytest.mark.parametrize("name, folder, expected", WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_a_refused_checkpoint_leaves_the_workdir_as_it_was(name, folder, expected, data, good, tmp_path, capsys):
  del name
  init_from = folder(good, tmp_path)
  workdir = tmp_path / "w"
  before = {"data": digests(data), "hub": digests(good[0])}
  code, err = _train(["train", f"--config={VILT}", f"--workdir={workdir}", f"--config.data.dir={data}",
                      f"--config.model.init_from={init_from}"], capsys)
  assert code == 2 and len(err) == 1 and err[0].startswith("vqajax train: error: ") and expected in err[0], err
  assert not os.path.exists(workdir)  # no run.json, encoders.json or checkpoints/
  assert {"data": digests(data), "hub": digests(good[0])} == before


@pytest.mark.parametrize("setting, expected, code", [
    ("model.num_attention_heads=3", "config.model: hidden_size 32 is not a multiple of num_attention_heads 3", 2),
    ("model.patch_size=64", "config.model: patch_size 64 is larger than image_size 32 (no whole patch)", 2),
])
def test_a_from_scratch_vilt_that_cannot_be_built_is_one_line(setting, expected, code, data, tmp_path, capsys):
  workdir = tmp_path / "w"
  code_, err = _train(["train", f"--config={VILT}", f"--workdir={workdir}", f"--config.data.dir={data}",
                       f"--config.{setting}"], capsys)
  assert code_ == code and len(err) == 1 and expected in err[0], err
  assert not os.path.exists(workdir)


def test_a_vilt_whose_train_state_cannot_fit_is_a_failed_run_before_anything_is_written(data, tmp_path, capsys):
  workdir = tmp_path / "w"
  code, err = _train(["train", f"--config={VILT}", f"--workdir={workdir}", f"--config.data.dir={data}",
                      "--config.model.hidden_size=8192", "--config.model.num_hidden_layers=64",
                      "--config.model.num_attention_heads=64", "--config.model.intermediate_size=32768"], capsys)
  # a layer: 4 (8192 x 8192 + 8192) attention, 2 x 8192 x 32768 + 32768 + 8192 feed-forward, 4 x 8192 norms: 805M
  # parameters, 64 of them 51.5G; float32 parameters + AdamW's two moments: 618 GB, far past any one device
  assert code == 3 and len(err) == 1, err
  assert err[0].startswith("vqajax train: failed: the train state (parameters and optimizer state) needs "), err
  assert not os.path.exists(workdir)


def _config_json(good, tmp_path, text: str) -> str:
  return _variant(good, tmp_path, config__json=text.encode())


BASE = '{"model_type": "vilt", "hidden_size": 16, "num_attention_heads": 2, "image_size": 32, "patch_size": 8, '


@pytest.mark.parametrize("text, expected", [
    (BASE + '"num_hidden_layers": 1000000}', "field num_hidden_layers: expected a positive integer <= 256, got 1000000"),
    (BASE + '"max_position_embeddings": 1000000000}',
     "field max_position_embeddings: expected a positive integer <= 4096, got 1000000000"),
    (BASE + '"num_labels": 1000000000}', "field num_labels: expected a positive integer <= 100000, got 1000000000"),
    ('{"model_type": "vilt", "hidden_size": 1000000000}',
     "field hidden_size: expected a positive integer <= 16384, got 1000000000"),
    ('{"model_type": "vilt", "hidden_size": 1180591620717411303424}',
     "field hidden_size: expected a positive integer <= 16384, got 1180591620717411303424"),
    (BASE + '"vocab_size": 1000000000000}', "field vocab_size: expected a positive integer <= 1000000, got"),
    (BASE + '"hidden_dropout_prob": 5.0}', "field hidden_dropout_prob: expected a number in [0, 1), got 5.0"),
    (BASE + '"attention_probs_dropout_prob": NaN}', "field attention_probs_dropout_prob: expected a number in [0, 1)"),
    (BASE + '"layer_norm_eps": 0}', "field layer_norm_eps: expected a number in (0, 1), got 0"),
    (BASE + '"num_channels": 4}', "field num_channels: expected 3 (RGB pictures), got 4"),
    (BASE + '"hidden_act": "tanh"}', "field hidden_act: expected one of"),
    (BASE + '"qkv_bias": 1}', "field qkv_bias: expected true or false, got 1"),
    (BASE + '"id2label": {"0": "yes", "2": "no"}}', "field id2label: expected an object mapping every id 0..n-1"),
    ('{"model_type": "vilt", "hidden_size": 12, "num_attention_heads": 5}',
     "hidden_size 12 is not a multiple of num_attention_heads 5"),
    ('{"model_type": "vilt", "a": ' + "[" * 100_000 + "]" * 100_000 + "}", "config.json: not valid JSON (nested too deeply)"),
    ('{"model_type": "vilt", "hidden_size": ' + "7" * 5000 + "}", "config.json: not valid JSON (Exceeds the limit"),
    (None, "bytes, more than the 16777216 expected"),  # None: a label of 17 MiB
], ids=lambda case: None if case is None or len(case) < 80 else case[:40] + "..." + case[-20:])
def test_every_config_json_field_is_bounded(text, expected, good, tmp_path):
  folder = _config_json(good, tmp_path, text or '{"model_type": "vilt", "id2label": {"0": "' + "x" * 17 * 2**20 + '"}}')
  with pytest.raises(InputError) as refused:
    vilt_hub.read_config(folder)
  line = str(refused.value)
  assert line.startswith(os.path.join(folder, "config.json") + ": ") and expected in line and "\n" not in line, line


@pytest.mark.parametrize("name, make, expected", [
    ("tokenizer.json", _fifo, "tokenizer.json: not a regular file (a fifo, device or folder)"),
    ("tokenizer.json", _zero, "tokenizer.json: not a regular file"),
    ("vocab.txt", _fifo, "vocab.txt: not a regular file"),
    ("tokenizer_config.json", _zero, "tokenizer_config.json: not a regular file"),
])
def test_tokenizer_files_are_regular_files(name, make, expected, good, tmp_path):
  folder = _variant(good, tmp_path, **{name.replace(".", "__"): make})
  with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
    vilt_hub.read_tokenizer(folder, 12, 30)


def test_a_vocabulary_past_the_embedding_table_is_refused(good, tmp_path):
  words = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["extra"]) + "\n"  # 31 tokens, ids 0..30
  folder = _variant(good, tmp_path, vocab__txt=words.encode())
  with pytest.raises(InputError, match="vocab.txt: token id 30 is past config.json's vocab_size 30 "):
    vilt_hub.read_tokenizer(folder, 12, 30)
  assert vilt_hub.read_tokenizer(folder, 12, 31).tokenizer.get_vocab_size() == 31


@pytest.mark.parametrize("architecture", ["ViltForQuestionAnswering", "ViltModel; import os; os.system('touch z')"])
def test_the_convert_hint_quotes_the_folder_for_the_shell(architecture, tmp_path):
  folder = tmp_path / "x$(touch y)'`touch q`"
  os.makedirs(folder)
  (folder / "config.json").write_text(json.dumps({"model_type": "vilt", "architectures": [architecture]}))
  (folder / "pytorch_model.bin").write_bytes(b"PK")
  with pytest.raises(InputError) as refused:
    vilt_hub.headers(str(folder))
  command = str(refused.value).partition("once: ")[2].removesuffix(" (needs torch and transformers)")
  stub = tmp_path / "bin" / "python"  # records what the pasted command runs
  os.makedirs(stub.parent)
  stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$ARGS"\n')
  stub.chmod(0o755)
  env = dict(os.environ, PATH=f"{stub.parent}:{os.environ['PATH']}", ARGS=str(tmp_path / "args"))
  subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, check=True)
  args = (tmp_path / "args").read_bytes().split(b"\0")[:-1]
  name = "ViltForQuestionAnswering" if architecture == "ViltForQuestionAnswering" else "ViltModel"
  literal = json.dumps(str(folder))
  assert [a.decode() for a in args] == ["-c", f"import transformers; transformers.{name}.from_pretrained({literal})"
                                                f".save_pretrained({literal})"]
  assert sorted(os.listdir(tmp_path)) == sorted(["args", "bin", folder.name])  # no y, q or z made


def _hub_cache(root, good, repo: str = "org/name") -> str:
  """A Hugging Face cache holding `repo` at COMMIT (refs/main) as huggingface_hub lays one out:
  the snapshot's files are links to blobs/, here copies of `good`'s files."""
  models = root / "hub" / f"models--{repo.replace('/', '--')}"
  snapshot = models / "snapshots" / COMMIT
  for folder in (models / "blobs", snapshot, models / "refs"):
    os.makedirs(folder)
  for i, name in enumerate(sorted(os.listdir(good[0]))):
    shutil.copy(os.path.join(good[0], name), models / "blobs" / f"blob{i}")
    os.symlink(f"../../blobs/blob{i}", snapshot / name)
  (models / "refs" / "main").write_text(COMMIT)
  return str(snapshot)


@pytest.fixture
def offline(monkeypatch, tmp_path):
  """huggingface_hub offline on an empty cache under tmp_path/hub; this process resolves afresh."""
  monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
  monkeypatch.setattr(hub, "_RESOLVED", {})
  return tmp_path


def test_a_hub_id_resolves_to_its_cached_snapshot_and_its_commit(offline, good):
  snapshot = _hub_cache(offline, good)
  for value in ("org/name", "org/name@main", f"org/name@{COMMIT}"):
    assert hub.resolve(value, vilt_hub.FILES, "config.model.init_from") == hub.Checkpoint(snapshot,
                                                                                          f"org/name@{COMMIT}")
  assert hub.resolve(good[0], vilt_hub.FILES, "f") == hub.Checkpoint(good[0], good[0])  # a folder stays itself


def test_a_hub_model_without_safetensors_is_refused_with_the_conversion_of_its_id(offline, good, tmp_path):
  snapshot = _hub_cache(offline, good)
  os.remove(os.path.join(snapshot, vilt_hub.WEIGHTS))
  checkpoint = vilt_hub.checkpoint("org/name")
  with pytest.raises(InputError) as refused:
    vilt_hub.headers(checkpoint.folder, checkpoint.name)
  code = f'import transformers; transformers.ViltModel.from_pretrained("org/name", revision="{COMMIT}")' \
         '.save_pretrained("name")'
  assert str(refused.value) == (f"org/name@{COMMIT}: has no model.safetensors (nor model.safetensors.index.json); "
                                "if it has pytorch_model.bin only, convert it once: python -c "
                                f"{shlex.quote(code)} (needs torch and transformers), and start from that folder")


@pytest.mark.parametrize("value, expected", [
    ("org/absent", "config.model.init_from org/absent: no such folder, and the Hub model is not in the Hugging Face "
                   "cache ({cache}) while HF_HUB_OFFLINE is set; download it where the Hub can be reached "
                   "(hf download org/absent), or name a folder"),
    ("org/name@v2", "(hf download org/name --revision v2)"),
    ("not an id", "config.model.init_from 'not an id': no such folder, nor a Hugging Face Hub model id "
                  "(ORG/NAME or ORG/NAME@REVISION)"),
    ("org/../name", "no such folder, nor a Hugging Face Hub model id"),
    ("org/na--me", "no such folder, nor a Hugging Face Hub model id"),
    ("org/name..", "no such folder, nor a Hugging Face Hub model id"),
    ("org/name@", "no such folder, nor a Hugging Face Hub model id"),
])
def test_a_hub_id_not_in_the_cache_while_offline_is_one_line(value, expected, offline, good):
  _hub_cache(offline, good)
  with pytest.raises(InputError) as refused:
    hub.resolve(value, vilt_hub.FILES, "config.model.init_from")
  assert expected.format(cache=offline / "hub") in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.slow
def test_a_run_from_a_hub_id_records_the_id_and_commit_after_a_refused_folder(data, good, tmp_path, one_device_env):
  """The acceptance run: a refused folder leaves nothing; the same command from a Hub id in an
  offline cache trains, and the run and its bundle name the id and commit, never the cache."""
  home = tmp_path / "hf"
  snapshot = _hub_cache(home, good)
  env = dict(one_device_env, HF_HOME=str(home), HF_HUB_OFFLINE="1",
             PYTHONPATH=os.pathsep.join(filter(None, [ROOT, one_device_env.get("PYTHONPATH")])))
  workdir = tmp_path / "run"
  base = [sys.executable, "-m", "vqajax", "train", f"--config={VILT}", f"--workdir={workdir}",
          f"--config.data.dir={data}", "--config.num_train_steps=2"]
  bad = _variant(good, tmp_path, {k: v for k, v in good[1].items() if k != "pooler.dense.bias"})
  refused = subprocess.run(base + [f"--config.model.init_from={bad}"], capture_output=True, text=True, env=env)
  assert refused.returncode == 2 and "1 backbone tensors missing" in refused.stderr and not os.path.exists(workdir)
  done = subprocess.run(base + ["--config.model.init_from=org/name"], capture_output=True, text=True, env=env)
  assert done.returncode == 0, done.stderr[-2000:]
  record = json.loads((workdir / "run.json").read_text())
  assert record["finished_step"] == 2 and record["config"]["model"]["init_from"] == f"org/name@{COMMIT}"
  bundle = tmp_path / "bundle"
  exported = subprocess.run([sys.executable, "-m", "vqajax", "export", "--workdir", str(workdir), "--out", str(bundle)],
                            capture_output=True, text=True, env=env)
  assert exported.returncode == 0, exported.stderr[-2000:]
  for folder in (workdir, bundle):
    for name in ("run.json", "encoders.json", "config.json", "README.md"):
      if (folder / name).exists():
        assert str(home) not in (folder / name).read_text() and snapshot not in (folder / name).read_text()
