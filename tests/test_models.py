import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.vqa import deeper_lstm_norm_i
from vqajax.models import vqa as vqa_models
from vqajax.models.question import LSTMEncoder


def test_padding_never_changes_the_encoding():
  encoder = LSTMEncoder(vocab_size=20, embed_dim=6, hidden=5, layers=2)
  tokens = np.array([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0]])
  lengths = np.array([3, 1])
  params = encoder.init(jax.random.key(0), tokens, lengths)
  padded = encoder.apply(params, tokens, lengths)
  assert padded.shape == (2, 20)
  np.testing.assert_allclose(encoder.apply(params, tokens[:, :3], lengths), padded, atol=1e-6)
  np.testing.assert_allclose(encoder.apply(params, tokens[1:, :1], lengths[1:]), padded[1:], atol=1e-6)
  # garbage after the last word is ignored too
  noisy = tokens.copy()
  noisy[0, 3:] = 9
  np.testing.assert_allclose(encoder.apply(params, noisy, lengths), padded, atol=1e-6)


def test_empty_question_encodes_to_zeros():
  encoder = LSTMEncoder(vocab_size=20, embed_dim=4, hidden=3, layers=2)
  params = encoder.init(jax.random.key(0), np.zeros((1, 4), np.int32), np.array([0]))
  np.testing.assert_array_equal(encoder.apply(params, np.array([[5, 0, 0, 0]]), np.array([0])), 0.0)


def test_deeper_lstm_norm_i_has_the_papers_shapes():
  cfg = deeper_lstm_norm_i.get_config()
  model = vqa_models.build(cfg.model, vocab_size=50, num_answers=1000)
  batch = {"tokens": jnp.zeros((2, 26), jnp.int32), "length": jnp.array([3, 26]),
           "image": jnp.ones((2, 4096))}
  shapes = jax.tree.map(jnp.shape, jax.eval_shape(lambda: model.init(jax.random.key(0), batch, train=False)))
  p = shapes["params"]
  assert p["question"]["WordEmbedding_0"]["Embed_0"]["embedding"] == (50, 300)
  assert p["question_proj"]["kernel"] == (2048, 1024)  # [c1, h1, c2, h2] of 512 each
  assert p["image_proj"]["kernel"] == (4096, 1024)
  assert p["mlp_0"]["kernel"] == (1024, 1000) and p["mlp_1"]["kernel"] == (1000, 1000)
  assert p["classifier"]["kernel"] == (1000, 1000)


def test_image_norm_makes_the_model_invariant_to_image_scale():
  cfg = ml_collections.ConfigDict(deeper_lstm_norm_i.get_config("runlocal").model.to_dict())
  model = vqa_models.build(cfg, vocab_size=10, num_answers=7)
  batch = {"tokens": jnp.ones((2, 4), jnp.int32), "length": jnp.array([2, 4]),
           "image": jax.random.uniform(jax.random.key(1), (2, 4096))}
  params = model.init(jax.random.key(0), batch, train=False)
  scaled = dict(batch, image=batch["image"] * 37.0)
  np.testing.assert_allclose(model.apply(params, batch, train=False), model.apply(params, scaled, train=False),
                             rtol=1e-5, atol=1e-5)
  cfg.image_norm = False
  raw = vqa_models.build(cfg, vocab_size=10, num_answers=7)
  assert not np.allclose(raw.apply(params, batch, train=False), raw.apply(params, scaled, train=False), atol=1e-3)
