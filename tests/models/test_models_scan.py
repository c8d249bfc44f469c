"""`ModelConfig.scan_layers`: the nn.scan decoder equals the unrolled one on converted params
(logits, gradients, RM scores, KV-cache sampling), and its stacked axis is never sharded."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_model_config
from coop_jax import models, parallel, sampling

CFG = tiny_model_config(vocab_size=64, intermediate_size=48, num_layers=3, num_heads=4,
                        num_kv_heads=2, qkv_bias=True, tie_embeddings=True)
SCAN = CFG.replace(scan_layers=True)


@pytest.fixture(scope="module")
def params():
    return models.init_params(CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(1, CFG.vocab_size, (3, 10)), jnp.int32)
    mask = jnp.asarray(np.arange(10)[None, :] >= np.array([[0], [3], [6]]))  # left padding
    return tokens, mask


def test_stacked_layout_matches_scan_init_and_roundtrips(params):
    stacked = models.stack_layers(params, CFG.num_layers)
    abstract = nn.meta.unbox(models.abstract_params(SCAN))
    assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(abstract)
    for got, want in zip(jax.tree_util.tree_leaves(stacked), jax.tree_util.tree_leaves(abstract)):
        assert got.shape == want.shape
    back = models.unstack_layers(stacked)
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, params)
    with pytest.raises(ValueError, match="already stacked"):
        models.stack_layers(stacked, CFG.num_layers)


@pytest.mark.parametrize("remat", [False, True])
def test_scan_logits_and_gradients_equal_unrolled(params, batch, remat):
    tokens, mask = batch
    stacked = models.stack_layers(params, CFG.num_layers)

    def loss(p, cfg):
        logits = models.lm_logits(p, cfg, tokens, mask)
        return jnp.sum(jnp.where(mask[..., None], jax.nn.log_softmax(logits), 0.0) ** 2) * 1e-4

    ref = models.lm_logits(params, CFG, tokens, mask)
    got = models.lm_logits(stacked, SCAN.replace(remat=remat), tokens, mask)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    g_ref = jax.grad(loss)(params, CFG)
    g_scan = models.unstack_layers(jax.grad(loss)(stacked, SCAN.replace(remat=remat)))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4),
                           g_scan, g_ref)


def test_scan_reward_scores_equal_unrolled(batch):
    tokens, mask = batch
    rm = CFG.replace(num_labels=1, tie_embeddings=False)
    p = models.init_params(rm, jax.random.key(1))
    np.testing.assert_allclose(
        models.reward_scores(models.stack_layers(p, rm.num_layers), rm.replace(scan_layers=True),
                             tokens, mask),
        models.reward_scores(p, rm, tokens, mask), atol=1e-5, rtol=1e-5)


def test_scan_kv_cache_sampling_equals_unrolled(params, batch):
    tokens, mask = batch
    scfg = sampling.SamplingConfig(max_new_tokens=6, eos_ids=(0,), pad_id=0, temperature=1.0,
                                   num_samples=2)
    key = jax.random.key(3)
    ref = sampling.make(CFG, scfg)(params, tokens, mask, key)
    got = sampling.make(SCAN, scfg)(models.stack_layers(params, CFG.num_layers), tokens, mask, key)
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=1e-5)


def test_stacked_layer_axis_is_replicated():
    mesh = parallel.make_mesh((1, 2, 1), jax.devices()[:2])
    q = parallel.param_shardings(SCAN, mesh)["layers"]["self_attn"]["q_proj"]["kernel"]
    assert tuple(q.spec) == (None, "fsdp", "tensor")
