import functools
import importlib
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments.therapy import grounding_class
from experiments.vqa import deeper_lstm_norm_i
from vqajax.answertherapy import configs as therapy_configs
from vqajax.core import config as config_lib
from vqajax.core.errors import InputError
from vqajax.nn import question
from vqajax.nn.lstm import IMPLS, masked_lstm, scan_lstm
from vqajax.nn.question import LSTMEncoder
from vqajax.vqa import configs as vqa_configs
from vqajax.vqa import models as vqa_models


def test_padding_never_changes_the_encoding():
  encoder = LSTMEncoder(vocab_size=20, embed_dim=6, hidden=5, layers=2)
  tokens = np.array([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0]])
  lengths = np.array([3, 1])
  params = jax.jit(encoder.init)(jax.random.key(0), tokens, lengths)
  apply = jax.jit(encoder.apply)  # jitted as in a run, and one compile a shape instead of one an op
  padded = apply(params, tokens, lengths)
  assert padded.shape == (2, 20)
  np.testing.assert_allclose(apply(params, tokens[:, :3], lengths), padded, atol=1e-6)
  np.testing.assert_allclose(apply(params, tokens[1:, :1], lengths[1:]), padded[1:], atol=1e-6)
  # garbage after the last word is ignored too
  noisy = tokens.copy()
  noisy[0, 3:] = 9
  np.testing.assert_allclose(apply(params, noisy, lengths), padded, atol=1e-6)


def test_empty_question_encodes_to_zeros():
  encoder = LSTMEncoder(vocab_size=20, embed_dim=4, hidden=3, layers=2)
  params = jax.jit(encoder.init)(jax.random.key(0), np.zeros((1, 4), np.int32), np.array([0]))
  np.testing.assert_array_equal(jax.jit(encoder.apply)(params, np.array([[5, 0, 0, 0]]), np.array([0])), 0.0)


def _plain_masked_lstm(x, lengths, w, b):
  """The recurrence written step by step, differentiated by JAX."""
  h = c = jnp.zeros((x.shape[1], w.shape[1] // 4))
  outputs = []
  for t in range(x.shape[0]):
    i, f, g, o = jnp.split(jnp.concatenate([x[t], h], axis=-1) @ w + b, 4, axis=-1)
    c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
    keep = (t < lengths)[:, None]
    c, h = jnp.where(keep, c_new, c), jnp.where(keep, h_new, h)
    outputs.append(jnp.where(keep, h_new, 0.0))
  return jnp.stack(outputs), c, h


@pytest.mark.slow
def test_lstm_backward_matches_autodiff_of_the_plain_recurrence():
  keys = jax.random.split(jax.random.key(0), 5)
  lengths = jnp.array([6, 5, 4, 2, 1, 0])  # sorted; chunks of 2 run 6, 4 and 1 steps; T = 7
  x = jax.random.normal(keys[0], (7, 6, 3))
  w, b = jax.random.normal(keys[1], (3 + 5, 20)) / 2, jax.random.normal(keys[2], (20,))
  weights = [jax.random.normal(k, s) for k, s in zip(keys[3:], [(7, 6, 5), (6, 5)])]
  ours = lambda x, lengths, w, b: masked_lstm(x, lengths, w, b, jnp.float32, 2)

  def loss(fn, x, w, b):
    out, c, h = fn(x, lengths, w, b)
    return jnp.sum(out * weights[0]) + jnp.sum((c + 2 * h) * weights[1])

  plain = jax.jit(jax.grad(lambda *a: loss(_plain_masked_lstm, *a), argnums=(0, 1, 2)))(x, w, b)
  for fn in (ours, scan_lstm):  # the CPU shape and the accelerator shape
    for a, b_ in zip(jax.jit(fn)(x, lengths, w, b), jax.jit(_plain_masked_lstm)(x, lengths, w, b)):
      np.testing.assert_allclose(a, b_, atol=1e-6)
    grads = jax.jit(jax.grad(lambda *a, fn=fn: loss(fn, *a), argnums=(0, 1, 2)))(x, w, b)
    for a, b_ in zip(grads, plain):
      np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_both_lstm_impls_encode_alike_with_the_same_gradients():
  tokens = np.array([[3, 4, 5, 0], [7, 0, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0]])
  lengths = np.array([3, 1, 4, 0])  # unsorted, one empty
  encoders = {impl: LSTMEncoder(vocab_size=8, embed_dim=3, hidden=2, layers=2, impl=impl) for impl in IMPLS}
  shapes = jax.eval_shape(encoders["chunked"].init, jax.random.key(0), tokens, lengths)  # no init to compile
  leaves, tree = jax.tree.flatten(shapes)
  params = tree.unflatten([jax.random.normal(jax.random.key(i), s.shape) for i, s in enumerate(leaves)])
  weights = jax.random.normal(jax.random.key(1), (4, 8))

  def loss(impl, p):
    encoding = encoders[impl].apply(p, tokens, lengths)
    return jnp.sum(encoding * weights), encoding

  grads, outputs = {}, {}
  for impl in IMPLS:  # one compile per impl: gradients and encodings together
    grads[impl], outputs[impl] = jax.jit(jax.grad(functools.partial(loss, impl), has_aux=True))(params)
  np.testing.assert_allclose(outputs["scan"], outputs["chunked"], atol=1e-6)
  assert all(jnp.abs(g).sum() > 0 for g in jax.tree.leaves(grads["scan"]))  # every weight gets a gradient
  jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6), grads["scan"], grads["chunked"])


@pytest.mark.parametrize("backend, expected", [("cpu", "chunked"), ("gpu", "scan"), ("tpu", "scan")])
def test_the_default_lstm_impl_is_the_backends(backend, expected, monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  for make in (deeper_lstm_norm_i.get_config, grounding_class.get_config):
    model = make("runlocal").model
    assert model.lstm_impl == "auto"
    assert question.build("lstm", model, 10).impl == expected
    assert question.build("lstm", config_lib.override(model, {"lstm_impl": "chunked"}), 10).impl == "chunked"


def test_unknown_encoders_and_models_are_clear_errors():
  for make, rules in ((deeper_lstm_norm_i.get_config, vqa_configs.rules),
                      (grounding_class.get_config, therapy_configs.rules)):
    for field, value in (("lstm_impl", "cudnn"), ("question", "gru"), ("name", "resnet")):
      changed = config_lib.override(make("runlocal"), {f"model.{field}": value})
      with pytest.raises(InputError, match=rf"config.model.{field}: expected one of .*, got '{value}'"):
        config_lib.check(changed, rules(changed))
  mask_model = config_lib.override(grounding_class.get_config("runlocal"), {"model.name": "mask_predictor"})
  with pytest.raises(InputError, match=r"^config.model.name: expected one of \('grounding_classifier', 'vilt', "
                                       r"'paligemma'\), got 'mask_predictor'$"):
    therapy_configs.rules(mask_model)  # a model of the other task


def _data(vocab=10, answers=7, question_bow=1030, caption_bow=1000):
  """The sizes `vqa_models.build` reads from a `VQAData`."""
  return types.SimpleNamespace(vocab=range(vocab), answers=range(answers), image_shape=(4096,),
                               bag_sizes={"question_bow": question_bow, "caption_bow": caption_bow})


def _param_shapes(model):
  batch = {"tokens": jnp.zeros((2, 26), jnp.int32), "length": jnp.array([3, 26]),
           "image": jnp.ones((2, 4096)), "question_bow": -jnp.ones((2, 29), jnp.int32),
           "caption_bow": -jnp.ones((2, 60), jnp.int32)}
  variables = jax.eval_shape(lambda: model.init(jax.random.key(0), batch, train=False))
  return jax.tree.map(jnp.shape, variables["params"])


def test_deeper_lstm_norm_i_has_the_papers_shapes():
  p = _param_shapes(vqa_models.build(deeper_lstm_norm_i.get_config().model, _data(vocab=50, answers=1000)))
  assert p["question"]["WordEmbedding_0"]["Embed_0"]["embedding"] == (50, 300)
  assert p["question_proj"]["kernel"] == (2048, 1024)  # [c1, h1, c2, h2] of 512 each
  assert p["image_proj"]["kernel"] == (4096, 1024)
  assert p["mlp_0"]["kernel"] == (1024, 1000) and p["mlp_1"]["kernel"] == (1000, 1000)
  assert p["classifier"]["kernel"] == (1000, 1000)


# row -> (width into the MLP, its projections): the paper's section 5 sizes.
ROWS = {
    "bow_q": (1030, set()),               # 1000 words + 3 x 10 leading words
    "i": (4096, set()),
    "bow_q_i": (1030 + 4096, set()),      # concatenation
    "lstm_q": (1024, set()),              # last cell + hidden of one 512 layer
    "lstm_q_i": (1024, {"image_proj"}),   # image -> 1024, element-wise with the question
    "deeper_lstm_q": (1024, {"question_proj"}),
    "caption": (1000, set()),
    "bow_q_c": (1030 + 1000, set()),
}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_every_table2_row_has_the_papers_shapes(row):
  config = importlib.import_module(f"experiments.vqa.{row}").get_config()
  p = _param_shapes(vqa_models.build(config.model, _data(vocab=50, answers=1000)))
  width, projections = ROWS[row]
  assert p["mlp_0"]["kernel"] == (width, 1000)
  assert {k for k in p if k.endswith("_proj")} == projections
  assert ("question" in p) == ("lstm" in row) and p["classifier"]["kernel"] == (1000, 1000)
  if row == "lstm_q":
    assert p["question"]["lstm_0"]["cell"]["ii"]["kernel"] == (300, 512) and "lstm_1" not in p["question"]


def _initial_params(model):
  batch = {"tokens": jnp.ones((2, 26), jnp.int32), "length": jnp.array([3, 26]), "image": jnp.ones((2, 4096))}
  return jax.jit(functools.partial(model.init, train=False))(jax.random.key(0), batch)["params"]


@pytest.mark.parametrize("row", ["lstm_q", "lstm_q_i", "deeper_lstm_q", "deeper_lstm_norm_i"])
def test_the_lstm_rows_start_as_the_papers_code_every_parameter_uniform_within_0_08(row):
  # VQA_LSTM_CNN's train.lua: each network's getParameters():uniform(-0.08, 0.08).
  config = importlib.import_module(f"experiments.vqa.{row}").get_config("runlocal")
  assert config.model.init == "paper"
  params = _initial_params(vqa_models.build(config.model, _data(vocab=50, answers=100)))
  leaves = {jax.tree_util.keystr(path): np.asarray(w) for path, w in jax.tree_util.tree_leaves_with_path(params)}
  assert any("embedding" in k for k in leaves) and any("bias" in k for k in leaves)
  for key, w in leaves.items():
    # >= 32 entries each: both signs unless a 2 * 0.5**32 chance
    assert w.size >= 32 and np.abs(w).max() <= 0.08 and (w < 0).any() and (w > 0).any(), key
  every = np.concatenate([w.ravel() for w in leaves.values()])
  # U(-a, a): mean 0, standard deviation a / sqrt(3) = 0.0462 (tens of thousands of draws: within 0.001)
  assert every.size > 20_000 and abs(every.mean()) < 0.001 and abs(every.std() - 0.08 / 3**0.5) < 0.001


def test_init_default_is_flaxs_own_rules():
  # e.g. zero biases and an embedding of N(0, 1 / 32) beyond 0.08 (one row: the rule is the model's, not the row's)
  config = config_lib.override(deeper_lstm_norm_i.get_config("runlocal"), {"model.init": "default"})
  default = _initial_params(vqa_models.build(config.model, _data(vocab=50, answers=100)))
  assert not default["classifier"]["bias"].any() and not default["question"]["WordEmbedding_0"]["bias"].any()
  assert np.abs(default["question"]["WordEmbedding_0"]["Embed_0"]["embedding"]).max() > 0.08


def test_the_rows_beyond_the_paper_start_by_flaxs_defaults_and_refuse_the_papers_rule():
  for row in ("attention", "transformer_q_norm_i"):
    config = importlib.import_module(f"experiments.vqa.{row}").get_config("runlocal")
    assert config.model.init == "default"
    data = types.SimpleNamespace(**{**vars(_data()), "image_shape": (7, 7, 64)}) if row == "attention" else _data()
    vqa_models.build(config.model, data)
    with pytest.raises(InputError, match=r"config.model.init 'paper' is for the late-fusion rows with an LSTM or "
                                         r"BoW question; the (attention model|transformer question encoder) takes"):
      vqa_models.build(config_lib.override(config, {"model.init": "paper"}).model, data)


def test_the_learning_rate_decay_is_the_papers_constant():
  # train.lua's `decay_factor = 0.99997592083 -- 50000`: 0.3x every 50,000 iterations.
  assert abs(vqa_configs.LR_DECAY_PER_STEP - 0.99997592083) < 1e-11
  assert deeper_lstm_norm_i.get_config().optimizer.lr_decay_per_step == vqa_configs.LR_DECAY_PER_STEP


def test_bag_of_words_counts_each_bin_and_ignores_padding():
  bags = vqa_models.bag_of_words(jnp.array([[2, 0, 2, -1], [-1, -1, -1, -1]]), 4)
  np.testing.assert_array_equal(bags, [[1, 0, 2, 0], [0, 0, 0, 0]])


def test_mul_fusion_of_unequal_widths_is_a_clear_error():
  cfg = ml_collections.ConfigDict(deeper_lstm_norm_i.get_config().model.to_dict())
  cfg.project = ("image",)  # 2048-d question vs 1024-d image
  with pytest.raises(InputError, match="equal widths"):
    _param_shapes(vqa_models.build(cfg, _data()))


@pytest.mark.slow
def test_image_norm_makes_the_model_invariant_to_image_scale():
  cfg = ml_collections.ConfigDict(deeper_lstm_norm_i.get_config("runlocal").model.to_dict())
  model = vqa_models.build(cfg, _data())
  batch = {"tokens": jnp.ones((2, 4), jnp.int32), "length": jnp.array([2, 4]),
           "image": jax.random.uniform(jax.random.key(1), (2, 4096))}
  params = jax.jit(functools.partial(model.init, train=False))(jax.random.key(0), batch)
  scaled = dict(batch, image=batch["image"] * 37.0)
  apply = jax.jit(functools.partial(model.apply, train=False))
  np.testing.assert_allclose(apply(params, batch), apply(params, scaled), rtol=1e-5, atol=1e-5)
  cfg.image_norm = False
  raw = jax.jit(functools.partial(vqa_models.build(cfg, _data()).apply, train=False))
  assert not np.allclose(raw(params, batch), raw(params, scaled), atol=1e-3)


def test_multiple_choice_picks_the_best_choice_in_the_table_else_the_first():
  from vqajax.vqa import task as vqa_task
  logits = jnp.array([[0.1, 0.9, 0.5, 0.2], [0.3, 0.2, 0.1, 0.0]])
  # question 0: choices are answers 2 and 0 and one outside the table (-1) -> answer 2 (0.5), choice 0;
  # question 1: no choice is in the table -> the first choice (file order)
  choice_index = jnp.array([[2, -1, 0], [-1, -1, -1]])
  assert vqa_task.multiple_choice(logits, choice_index).tolist() == [0, 0]
  choice_index = jnp.array([[0, 3, 1], [-1, 1, -1]])
  assert vqa_task.multiple_choice(logits, choice_index).tolist() == [2, 1]


def test_soft_target_losses_by_hand():
  from vqajax.vqa import task as vqa_task
  logits = jnp.array([[0.0, np.log(2.0)], [1.0, -1.0]])
  # question 0: three annotators said answer 0, 1, 1 (one slot padded); question 1: only an
  # answer outside the table (-2), so it has no soft target and no weight
  batch = {"answer_index": jnp.array([[0, 1, 1, -1], [-2, -1, -1, -1]]), "label": jnp.array([1, -1])}
  # softmax([0, ln 2]) = [1/3, 2/3], the target [1/3, 2/3]: the entropy of (1/3, 2/3)
  expected = -(np.log(1 / 3) / 3 + 2 * np.log(2 / 3) / 3)
  assert float(vqa_task.soft_loss(logits, batch)) == pytest.approx(expected, rel=1e-6)
  config = types.SimpleNamespace(model=types.SimpleNamespace(targets="soft"))
  assert vqa_task.make_loss(config) is vqa_task.soft_loss
  with pytest.raises(InputError, match="config.model.targets 'fuzzy' is not one of"):
    vqa_task.make_loss(types.SimpleNamespace(model=types.SimpleNamespace(targets="fuzzy")))


def _layer_norm(x, p, eps=1e-6):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _transformer_by_hand(p, tokens, lengths, layers, heads):
  """The pre-LN encoder in numpy: embeddings + positions; per block x += attention(LN(x)),
  x += MLP(LN(x)); LN; the mean over the valid words."""
  x = p["embed"]["embedding"][tokens] + p["positions"][:tokens.shape[1]]
  valid = np.arange(tokens.shape[1])[None] < lengths[:, None]
  for i in range(layers):
    a = p[f"block_{i}_attention"]
    h = _layer_norm(x, p[f"block_{i}_ln_attention"])
    q, k, v = (np.einsum("btw,whd->bthd", h, a[n]["kernel"]) + a[n]["bias"] for n in ("query", "key", "value"))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    logits = np.where((valid[:, None, :, None] & valid[:, None, None, :]), logits, np.finfo(np.float32).min)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    attended = np.einsum("bhqk,bkhd->bqhd", weights, v)
    x = x + np.einsum("bqhd,hdw->bqw", attended, a["out"]["kernel"]) + a["out"]["bias"]
    h = _layer_norm(x, p[f"block_{i}_ln_mlp"])
    h = h @ p[f"block_{i}_mlp_in"]["kernel"] + p[f"block_{i}_mlp_in"]["bias"]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu, tanh form
    x = x + h @ p[f"block_{i}_mlp_out"]["kernel"] + p[f"block_{i}_mlp_out"]["bias"]
  x = _layer_norm(x, p["ln_final"])
  return (x * valid[..., None]).sum(1) / np.maximum(valid.sum(1), 1)[:, None]


def test_the_transformer_encoder_is_the_pre_ln_formula_and_ignores_padding():
  encoder = question.TransformerEncoder(vocab_size=30, width=16, layers=2, heads=4, dropout=0.1, positions=9)
  tokens = np.array([[3, 7, 2, 9, 0, 0], [5, 5, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
  lengths = np.array([4, 3, 0], np.int32)
  params = jax.jit(encoder.init)(jax.random.key(0), tokens, lengths)["params"]
  params = jax.tree.map(lambda w: w + 0.1 * np.random.default_rng(1).normal(size=w.shape), params)  # no zero biases
  apply = jax.jit(encoder.apply)  # jitted as in a run, and one compile a shape instead of one an op
  got = np.asarray(apply({"params": params}, tokens, lengths))
  want = _transformer_by_hand(jax.tree.map(np.asarray, params), tokens, lengths, 2, 4)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  assert not got[2].any()  # an empty question encodes to zeros
  padded = np.where(tokens == 0, 11, tokens)  # other ids past each length change nothing
  np.testing.assert_allclose(apply({"params": params}, padded, lengths), got, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="9 positions"):
    apply({"params": params}, np.zeros((1, 10), np.int32), np.array([2]))
