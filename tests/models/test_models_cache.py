"""`forward_with_cache` with one write column per row (the continuous-batching engine's decode):
each row's keys/values land in its own column and its hidden state equals a decode of that row
alone at that column, unrolled and scanned; a per-row index takes one token per row."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_model_config
from coop_jax import models

CFG = tiny_model_config(vocab_size=64, intermediate_size=48, num_layers=2, num_heads=4,
                        num_kv_heads=2)
B, P, WIDTH = 3, 5, 12


def _prefilled(cfg, params):
    """Three prompts of length P prefilled into a [B, ..., WIDTH] cache, and the key mask."""
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 64, (B, P)), jnp.int32)
    mask = jnp.ones((B, P), bool)
    kv_mask = jnp.concatenate([mask, jnp.zeros((B, WIDTH - P), bool)], axis=1)
    _, cache = models.forward_with_cache(params, cfg, tokens, models.positions_from_mask(mask),
                                         kv_mask, models.init_cache(cfg, B, WIDTH), jnp.int32(0))
    return cache, kv_mask


def _layer_pairs(cfg, cache):
    return [cache] if cfg.scan_layers else list(cache)


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_per_row_columns_equal_one_row_decodes(scan):
    cfg = CFG.replace(scan_layers=scan)
    params = models.init_params(cfg, jax.random.key(1))
    cache, kv_mask = _prefilled(cfg, params)
    cols = jnp.asarray([P, P + 3, WIDTH - 1], jnp.int32)  # three rows, three decode steps
    tok = jnp.asarray([[7], [8], [9]], jnp.int32)
    kv_mask = kv_mask.at[jnp.arange(B), cols].set(True)
    positions = jnp.full((B, 1), P, jnp.int32)
    hidden, new = models.forward_with_cache(params, cfg, tok, positions, kv_mask, cache, cols)

    for row in range(B):
        one = jax.tree_util.tree_map(lambda x: x[..., row:row + 1, :, :, :], cache)
        want, want_cache = models.forward_with_cache(
            params, cfg, tok[row:row + 1], positions[row:row + 1], kv_mask[row:row + 1], one,
            cols[row])
        np.testing.assert_allclose(hidden[row], want[0], rtol=1e-5, atol=1e-5)
        for (k, v), (wk, wv), (k0, v0) in zip(_layer_pairs(cfg, new),
                                              _layer_pairs(cfg, want_cache),
                                              _layer_pairs(cfg, cache)):
            # a batch of one rounds its matmuls differently: equal to float32 rounding
            np.testing.assert_allclose(k[..., row, :, :, :], wk[..., 0, :, :, :], atol=1e-6)
            np.testing.assert_allclose(v[..., row, :, :, :], wv[..., 0, :, :, :], atol=1e-6)
            # every other column of the row is untouched
            others = np.arange(WIDTH) != int(cols[row])
            np.testing.assert_array_equal(np.asarray(k)[..., row, :, others, :],
                                          np.asarray(k0)[..., row, :, others, :])


def test_a_per_row_index_takes_one_token_per_row():
    params = models.init_params(CFG, jax.random.key(1))
    cache, kv_mask = _prefilled(CFG, params)
    with pytest.raises(ValueError, match="one new token per row"):
        models.forward_with_cache(params, CFG, jnp.ones((B, 2), jnp.int32),
                                  jnp.zeros((B, 2), jnp.int32), kv_mask, cache,
                                  jnp.asarray([P, P, P], jnp.int32))
