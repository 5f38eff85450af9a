"""PaliGemma's zero-shot grounding rows (`nn/paligemma_ground.py`, experiments/therapy/paligemma_ground.py):
the prompts per input variant, crafted reply tokens through the grounding task's evaluation (device step, the tokenizer,
host reading, pixel scoring) against hand-computed IoUs, a bad mask decoder refused through the config,
and the runlocal row end to end."""

import json
import os
import types

import jax
import ml_collections
import numpy as np
import pytest
import tokenizers
from pycocotools import mask as coco_mask

from experiments.sweeps import therapy_grounding
from experiments.therapy import paligemma_ground as row
from vqajax import cli
from vqajax.answertherapy import grounding_mask
from vqajax.answertherapy.files import Sample
from vqajax.nn import paligemma_ground, paligemma_hub, paligemma_models
from vqajax.nn.paligemma import PaliGemmaConfig

CONFIG = f"{os.path.dirname(row.__file__)}/paligemma_ground.py:runlocal"


@pytest.mark.parametrize("inputs, expected", [
    ("i+q", ["segment what is it?", "segment where?"]),
    ("i+q+a", ["segment what is it? a cat", "segment what is it? ", "segment where? left", "segment where? up"]),
    ("i+a", ["segment a cat", "segment ", "segment left", "segment up"]),
])
def test_the_prompts_per_input_variant(inputs, expected):
  config = ml_collections.ConfigDict({"model": {"inputs": inputs}, "data": {"max_answers": 2}})
  assert paligemma_ground.texts(["what is it?", "where?"], [("a cat",), ("left", "up")], config) == (expected, None)


def _spec(special_extras: bool = False) -> paligemma_models.Spec:
  """A word-level tokenizer holding Gemma's special tokens, "a", "cat" and the <loc> / <seg> tokens
  (added as HF's processor adds them, or marked special)."""
  words = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      {t: i for i, t in enumerate((*paligemma_models.SPECIAL, "a", "cat"))}, unk_token=paligemma_models.UNKNOWN))
  words.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  words.add_special_tokens(list(paligemma_models.SPECIAL))
  (words.add_special_tokens if special_extras else words.add_tokens)(list(paligemma_hub.EXTRA_TOKENS))
  return paligemma_models.Spec(PaliGemmaConfig(), words.to_str(), 8)


@pytest.mark.parametrize("special_extras", [False, True])
def test_replies_keep_their_location_and_mask_tokens(special_extras):
  spec = _spec(special_extras)
  ids = [spec.tokenizer.token_to_id(t) for t in ("<bos>", "<loc0007>", "<seg012>", "a", "cat", "<eos>", "<image>")]
  assert spec.decode(np.array([ids])) == ["<loc0007> <seg012> a cat"]  # a word-level decoder joins with spaces


class _Model:
  """Replies: a box over the top half ("<loc0000><loc0000><loc0511><loc1023> cat"), then free text ("a cat")."""

  def __init__(self, spec):
    ids = spec.tokenizer.token_to_id
    box = [ids(t) for t in ("<loc0000>", "<loc0000>", "<loc0511>", "<loc1023>", "cat", "<eos>")]
    self.tokens = np.array([[box, [ids("a"), ids("cat"), ids("<eos>")] + [ids("<pad>")] * 3]], np.int32)

  def apply(self, variables, batch, train):
    return {"tokens": self.tokens}


def test_crafted_replies_are_scored_as_hand_computed(tmp_path):
  """One 100 x 100 question, two answers grounded in the top-left quarter; on a 2 x 2 grid the truth is
  the top-left cell. Reply 1's box covers rows int(0.4995 * 16) = 7 of each top cell's 8 (grid raster):
  both top cells, IoU 1/2; at the pixel level rows 0..48, all columns. Reply 2 is malformed: empty, IoU 0."""
  square = np.array([[0, 0], [50, 0], [50, 50], [0, 50]], float)
  sample = Sample("f.json", 0, "VQAv2", 1, 1, "what?", ("cat", "dog"), (square, square), 100, 100, "other", "single")
  truth = np.zeros((1, 2, 2, 2), np.float32)
  truth[:, :, 0, 0] = 1.0
  val = {"grid_mask": truth, "answer_valid": np.ones((1, 2), bool), "label": np.zeros(1, np.int32),
         "source": np.zeros(1, np.int32)}
  config = ml_collections.ConfigDict({"name": "pg", "model": {"mask_grid": 2, "mask_decoder": ""},
                                      "data": {"max_answers": 2}})
  spec = _spec()
  data = types.SimpleNamespace(val=val, val_samples=[sample], encoders=types.SimpleNamespace(
      text=types.SimpleNamespace(encoder=spec)))
  step = jax.jit(grounding_mask.make_eval_step(_Model(spec), data, None))  # as runs call it
  predictions, sums = step(None, {**val, "mask": np.ones(1, bool)})
  metrics = grounding_mask.summarise(sums)
  assert "iou" not in metrics and metrics["whole_image/iou"] == pytest.approx(25.0)  # the model's: the host's
  host = grounding_mask.write_results(str(tmp_path), config, data, {"tokens": np.asarray(predictions["tokens"])},
                                      metrics)
  gt = coco_mask.decode(coco_mask.frPyObjects([square.ravel().tolist()], 100, 100))[..., 0] > 0  # independent truth
  box = np.zeros((100, 100), bool)
  box[:49] = True
  pixel = 100 * (gt & box).sum() / (gt | box).sum()
  assert host["malformed"] == 1 and host["iou"] == pytest.approx(25.0) and host["iou_pq"] == pytest.approx(25.0)
  assert host["pixel/iou"] == pytest.approx(pixel / 2) and host["from_masks/precision/multiple"] == 0.0  # masks unalike: multiple, wrongly
  written = json.loads((tmp_path / "metrics.json").read_text())
  assert written["malformed"] == 1 and written["whole_image/iou"] == pytest.approx(25.0)
  records = json.loads((tmp_path / "results.json").read_text())
  assert coco_mask.decode(records[0]["mask"]).astype(bool).tolist() == box.tolist()
  assert not coco_mask.decode(records[1]["mask"]).any()
  step = grounding_mask.make_predict_step(_Model(spec))
  test = types.SimpleNamespace(name="test", records=[sample])
  [path] = grounding_mask.write_submission(str(tmp_path), config, data.encoders, test, step(None, val))
  submitted = json.loads(open(path).read())[0]["grounding_masks"]
  assert [coco_mask.decode(m).astype(bool).tolist() for m in submitted] == [box.tolist(), [[False] * 100] * 100]



def test_a_bad_mask_decoder_is_refused_before_the_run(therapy_copy, tmp_path, capsys):
  bad, workdir = tmp_path / "vae-oid.npz", tmp_path / "run"
  bad.write_bytes(b"not a zip")
  argv = ["train", f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.dir={therapy_copy}",
          f"--config.model.mask_decoder={bad}"]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert err.splitlines()[-1].startswith(f"vqajax train: error: {bad}: not an .npz file") and "Traceback" not in err
  assert not workdir.exists()


@pytest.mark.slow
def test_runlocal_is_a_zero_shot_row_of_the_grounding_table(therapy_copy, tmp_path):
  """No step trains: step 0 is evaluated with its replies read on the host (random weights: malformed
  or empty), the row stands in `vqajax therapy grounding`, and `ask` draws a mask per answer's reply."""
  run = tmp_path / "run"
  assert cli.main(["train", f"--config={CONFIG}", f"--workdir={run}", f"--config.data.dir={therapy_copy}",
                   "--config.model.inputs=i+a"]) == 0
  assert os.listdir(run / "checkpoints") == ["0"]
  step = run / "results" / "step_0"
  metrics = json.loads((step / "metrics.json").read_text())
  answers = len(json.loads((step / "results.json").read_text()))
  assert 0 <= metrics["malformed"] <= answers and {"iou_pq", "pixel/iou_pq", "from_masks/precision/single"} <= set(metrics)
  assert cli.main(["therapy", "grounding", str(run), "--out", str(tmp_path / "g")]) == 0
  rows = json.loads((tmp_path / "g" / "grounding.json").read_text())
  assert [r["masks"] for r in rows if r["method"] == "PaliGemma zero-shot I+A"] == ["grid", "pixel"], rows
  picture = os.path.join(therapy_copy, "val2014", sorted(os.listdir(os.path.join(therapy_copy, "val2014")))[0])
  assert cli.main(["ask", f"--workdir={run}", "--image", picture, "--question", "what is it?",
                   "--answers", "cup", "plate", f"--out={tmp_path / 'masks'}", "--json"]) == 0
  records = json.loads((tmp_path / "masks" / "masks.json").read_text())  # one mask per answer, from its reply
  assert len(records) == 1 and [m["answer"] for m in records[0]["masks"]] == ["cup", "plate"]
  assert all(os.path.exists(tmp_path / "masks" / m["png"]) for m in records[0]["masks"])


def test_the_three_rows_are_in_the_grounding_sweep():
  rows = {name: (config, overrides) for name, config, overrides in therapy_grounding.ROWS}
  assert [rows[f"paligemma_zeroshot_{k}"] for k in ("iq", "iqa", "ia")] == [
      ("paligemma_ground", {"model.inputs": v}) for v in ("i+q", "i+q+a", "i+a")]
