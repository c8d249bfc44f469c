"""KV-cache sampler (`coop_jax.sampling`) against a cache-free greedy loop and the learner's
log-probs; EOS handling, G rollouts per prompt, vocabulary limit, filters, sharding.

Each `SamplingConfig` is compiled once (`sampling.make` is cached) by a module fixture.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import check_rollout_structure, left_padded_prompts, sharp_params, tiny_model_config
from coop_jax import models, parallel, sampling
from coop_jax.models.logprobs import response_logprobs

CFG = tiny_model_config(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
B, P, N, G = 4, 8, 8, 3
PAD = 0
PROMPT_LENGTHS = (8, 5, 3, 1)
NO_EOS = 1  # greedy never emits it with these weights (checked in test_greedy_matches_naive_loop)
VALID = 60  # vocabulary limit of the valid_vocab test
TEMPS = (1.0, 0.7)


def _scfg(**kw) -> sampling.SamplingConfig:
    base = dict(max_new_tokens=N, eos_ids=(NO_EOS,), pad_id=PAD, temperature=0.0)
    return sampling.SamplingConfig(**(base | kw))


def _run(scfg, params, tokens, mask, seed=0) -> sampling.Rollouts:
    out = sampling.make(CFG, scfg)(params, jnp.asarray(tokens), jnp.asarray(mask),
                                   jax.random.key(seed))
    return sampling.Rollouts(*(np.asarray(x) for x in out))


@pytest.fixture(scope="module")
def params():
    return sharp_params(CFG)


@pytest.fixture(scope="module")
def prompts() -> tuple[np.ndarray, np.ndarray]:
    """Left-padded prompts of lengths PROMPT_LENGTHS (tokens in [2, 64))."""
    tokens, mask = left_padded_prompts(PROMPT_LENGTHS, P, CFG.vocab_size, PAD)
    return tokens, mask


def _right_padded(tokens, mask):
    order = np.argsort(~mask, axis=1, kind="stable")
    mask_r = np.take_along_axis(mask, order, 1)
    return np.where(mask_r, np.take_along_axis(tokens, order, 1), PAD).astype(np.int32), mask_r


_last_logits = jax.jit(lambda p, t, m, i: models.lm_logits(p, CFG, t, m)[:, i])
_learner_logprobs = jax.jit(response_logprobs, static_argnums=1,
                            static_argnames=("temperature", "valid_vocab"))


def _extend(tokens, mask, n=N):
    """Append n masked pad slots (one compiled `_last_logits` shape for every call)."""
    b = tokens.shape[0]
    return (np.concatenate([tokens, np.full((b, n), PAD, np.int32)], 1),
            np.concatenate([mask, np.zeros((b, n), bool)], 1))


def _naive_greedy(params, tokens, mask, eos_ids, n=N):
    """Argmax of the full (cache-free) forward over the growing sequence; pad after a stop token.

    Returns (tokens [B, n], smallest top-1 / top-2 logit gap over the live steps)."""
    b, p = tokens.shape
    seq, seq_mask = _extend(tokens, mask, n)
    done = np.zeros(b, bool)
    gap = np.inf
    for t in range(n):
        logits = np.asarray(_last_logits(params, seq, seq_mask, p + t - 1))
        top2 = np.sort(logits, -1)[:, -2:]
        if (~done).any():
            gap = min(gap, float((top2[:, 1] - top2[:, 0])[~done].min()))
        tok = np.where(done, PAD, logits.argmax(-1))
        seq[:, p + t], seq_mask[:, p + t] = tok, True
        done |= np.isin(tok, eos_ids)
    return seq[:, p:], gap


@pytest.fixture(scope="module")
def greedy(params, prompts):
    return _run(_scfg(), params, *prompts)


EOS = (NO_EOS, 2, 3, 4)  # frequent enough at temperature >= 0.7 to end some rows, not all


def _sampled_cfg(temperature: float, num_samples: int = G) -> sampling.SamplingConfig:
    return _scfg(temperature=temperature, num_samples=num_samples, eos_ids=EOS, valid_vocab=VALID)


@pytest.fixture(scope="module")
def sampled(params, prompts):
    """{temperature: Rollouts} with G samples per prompt (ids >= VALID excluded)."""
    return {t: _run(_sampled_cfg(t), params, *prompts) for t in TEMPS}


def test_greedy_matches_naive_loop(greedy, params, prompts):
    expected, gap = _naive_greedy(params, *prompts, (NO_EOS,))
    assert gap > 1e-3, "weights give near-ties: the comparison would be fragile"
    np.testing.assert_array_equal(greedy.tokens, expected)
    assert not np.isin(expected, [NO_EOS]).any()
    assert greedy.truncated.all() and (greedy.lengths == N).all() and greedy.mask.all()
    np.testing.assert_array_equal(greedy.logprobs, 0.0)  # the T -> 0 limit
    np.testing.assert_array_equal(greedy.prompt_tokens, prompts[0])
    np.testing.assert_array_equal(greedy.prompt_mask, prompts[1])


def test_right_padding_equals_left_padding(greedy, params, prompts):
    tokens_r, mask_r = _right_padded(*prompts)
    assert not (mask_r == prompts[1]).all()
    out = _run(_scfg(), params, tokens_r, mask_r)
    for name in sampling.Rollouts._fields:
        np.testing.assert_array_equal(getattr(out, name), getattr(greedy, name), err_msg=name)


def test_left_align_moves_tokens_right():
    tokens = jnp.array([[5, 6, 0, 0], [0, 7, 0, 8], [1, 2, 3, 4]])
    mask = tokens > 0
    out, out_mask = sampling.left_align(tokens, mask, 9)
    np.testing.assert_array_equal(out, [[9, 9, 5, 6], [9, 9, 7, 8], [1, 2, 3, 4]])
    np.testing.assert_array_equal(out_mask, [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]])


@pytest.mark.parametrize("temperature", TEMPS)
def test_behaviour_logprobs_match_learner(sampled, params, temperature):
    r = sampled[temperature]
    check_rollout_structure(r, EOS, PAD)
    assert (~r.truncated).any() and r.truncated.any(), "want rows that stop and rows that run on"
    logp, ent = _learner_logprobs(params, CFG, r.prompt_tokens, r.prompt_mask, r.tokens, r.mask,
                                  temperature=temperature, valid_vocab=VALID)
    np.testing.assert_allclose(r.logprobs, np.asarray(logp), atol=1e-4)
    assert (r.logprobs[r.mask] < 0).all()
    np.testing.assert_allclose(r.entropy, np.asarray(ent) * r.mask, atol=1e-4)
    assert (r.entropy[r.mask] > 0).all() and (r.entropy[~r.mask] == 0).all()


@pytest.fixture(scope="module")
def eos_run(params, prompts, greedy):
    """Greedy with EOS = row 0's step-2 token and the step-1 tokens of the other rows."""
    eos = tuple(sorted({int(greedy.tokens[0, 2])} | {int(t) for t in greedy.tokens[1:, 1]}))
    return eos, _run(_scfg(eos_ids=eos), params, *prompts)


def test_eos_stops_rows_and_loop_exits_early(eos_run, greedy, params, prompts):
    eos, r = eos_run
    expected, _ = _naive_greedy(params, *prompts, eos)
    np.testing.assert_array_equal(r.tokens, expected)
    check_rollout_structure(r, eos, PAD)
    # rows stop at different steps; tokens before the stop are those of the EOS-free run
    assert r.lengths[0] <= 3 and (r.lengths[1:] <= 2).all() and not r.truncated.any()
    assert len(set(r.lengths.tolist())) > 1
    for row, length in enumerate(r.lengths):
        np.testing.assert_array_equal(r.tokens[row, :length], greedy.tokens[row, :length])
    # every row has stopped by step 2: the loop exits early yet the outputs keep full shapes
    assert r.tokens.shape == r.mask.shape == r.logprobs.shape == (B, N)
    assert (r.tokens[:, 3:] == PAD).all() and not r.mask[:, 3:].any()


def test_group_rows_are_prompt_major(sampled, prompts):
    r = sampled[1.0]
    rows = np.arange(B * G)
    np.testing.assert_array_equal(r.prompt_tokens, prompts[0][rows // G])
    np.testing.assert_array_equal(r.prompt_mask, prompts[1][rows // G])
    for prompt in range(B):
        group = {tuple(r.tokens[prompt * G + s]) for s in range(G)}
        assert len(group) == G, f"the {G} samples of prompt {prompt} are not all different"


def test_shared_prefill_equals_repeated_prompts(sampled, params, prompts):
    """G samples from one prefill == G=1 on each prompt repeated G times (same key, same rows)."""
    tokens, mask = (np.repeat(x, G, axis=0) for x in prompts)
    r = _run(_sampled_cfg(1.0, num_samples=1), params, tokens, mask)
    np.testing.assert_array_equal(r.tokens, sampled[1.0].tokens)
    np.testing.assert_allclose(r.logprobs, sampled[1.0].logprobs, atol=1e-5)


def test_same_key_same_samples_other_key_differs(sampled, params, prompts):
    scfg = _sampled_cfg(1.0)
    again = _run(scfg, params, *prompts, seed=0)
    other = _run(scfg, params, *prompts, seed=1)
    np.testing.assert_array_equal(again.tokens, sampled[1.0].tokens)
    np.testing.assert_array_equal(again.logprobs, sampled[1.0].logprobs)
    assert (other.tokens != sampled[1.0].tokens).any(axis=1).sum() >= B * G // 2


def test_vocab_tile_does_not_change_samples(sampled, params, prompts, monkeypatch):
    """Decode on the XLA path uses one whole-vocabulary tile; a scan over 16-column tiles
    draws the same tokens with the same log-probs (the noise is per (row, column))."""
    from coop_jax.sampling import sampler
    assert sampler.decode_vocab_tile("xla", B * G, CFG.vocab_size) == CFG.vocab_size
    assert sampler.decode_vocab_tile("pallas_tpu", B * G, CFG.vocab_size) is None
    assert sampler.decode_vocab_tile("xla", 4096, 151_936) is None  # too big a logits block
    monkeypatch.setattr(sampler, "decode_vocab_tile", lambda impl, rows, vocab: 16)
    tiled = jax.jit(lambda prm, t, m, k: sampler.generate(prm, CFG, _sampled_cfg(1.0), t, m, k))(
        params, *(jnp.asarray(x) for x in prompts), jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(tiled.tokens), sampled[1.0].tokens)
    np.testing.assert_allclose(np.asarray(tiled.logprobs), sampled[1.0].logprobs, atol=1e-5)


def _traced_decode_choices(monkeypatch, params, prompts, **generate_kw) -> set:
    """(impl, vocab_tile) of every fused_sample call `generate` traces, the kernel faked out."""
    from coop_jax.kernels import partition
    from coop_jax.sampling import sampler
    calls = set()

    def fake_sample(key, hidden, unembed, temperature, top_k, top_p, *, impl, vocab_tile,
                    valid_vocab):
        # the kernel re-resolves what it is given; a concrete impl must come back unchanged
        assert partition.resolve_impl(impl, hidden, unembed) == impl
        calls.add((impl, vocab_tile))
        zeros = jnp.zeros(hidden.shape[:1], jnp.float32)
        return zeros.astype(jnp.int32), zeros, zeros

    monkeypatch.setattr(sampler.kernels, "fused_sample", fake_sample)
    jax.eval_shape(lambda prm, t, m, k: sampler.generate(prm, CFG, _sampled_cfg(1.0), t, m, k,
                                                         **generate_kw),
                   params, *prompts, jax.random.key(0))
    return calls


def test_auto_impl_is_resolved_once_with_the_mesh(params, prompts, monkeypatch):
    """kernels.impl=auto on a multi-device TPU host: the decode tile and the kernel come from one
    resolution. Unplaced arrays take the xla path (XLA could partition a Mosaic call) with the
    whole-vocabulary tile; mesh-placed ones the Mosaic kernel with its own VMEM-bound tile, not
    the xla path's whole-vocabulary tile (which a resolution without the mesh would pick)."""
    mesh = parallel.make_mesh((2, 2, 2))
    data = parallel.batch_sharding(mesh)
    sds = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    placed = jax.tree_util.tree_map(sds, params, parallel.param_shardings(CFG, mesh))
    placed_prompts = tuple(sds(jnp.asarray(x), data) for x in prompts)
    host_prompts = tuple(jnp.asarray(x) for x in prompts)
    assert jax.device_count() > 1
    # an explicit backend resolves as that platform would, from any host (AOT compiles)
    assert _traced_decode_choices(monkeypatch, placed, placed_prompts, backend="tpu") == \
        {("pallas_tpu", None)}
    assert _traced_decode_choices(monkeypatch, placed, placed_prompts) == {("xla", CFG.vocab_size)}
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert _traced_decode_choices(monkeypatch, placed, placed_prompts) == {("pallas_tpu", None)}
    assert _traced_decode_choices(monkeypatch, params, host_prompts) == {("xla", CFG.vocab_size)}
    from coop_jax.sampling import sampler
    with pytest.raises(ValueError, match="resolved impl"):
        sampler.decode_vocab_tile("auto", B * G, CFG.vocab_size)


def test_valid_vocab_is_never_sampled(params, prompts):
    boosted = jax.tree_util.tree_map(lambda x: x, params)
    # a large constant residual component (embedding dim 0) read by the unembedding of the ids
    # >= VALID, with both signs so whichever sign dim 0 has after the layers, they win
    boosted["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[:, 0].set(5.0)
    boosted["lm_head"]["kernel"] = (params["lm_head"]["kernel"].at[0, VALID:VALID + 2].set(30.0)
                                    .at[0, VALID + 2:].set(-30.0))
    logits = np.asarray(_last_logits(boosted, *_extend(*prompts), P - 1), np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    share = probs[:, VALID:].sum(-1) / probs.sum(-1)
    assert (share > 0.99).all(), f"without the limit ids >= VALID would win: {share}"

    r = _run(_sampled_cfg(1.0), boosted, *prompts)
    assert (r.tokens < VALID).all()
    check_rollout_structure(r, EOS, PAD)
    logp, _ = _learner_logprobs(boosted, CFG, r.prompt_tokens, r.prompt_mask, r.tokens, r.mask,
                                temperature=1.0, valid_vocab=VALID)
    np.testing.assert_allclose(r.logprobs, np.asarray(logp), atol=1e-4)


@pytest.mark.parametrize("filters", [dict(top_k=1), dict(top_p=1e-6)], ids=["top_k=1", "top_p"])
def test_degenerate_filters_equal_greedy(filters, greedy, params, prompts):
    r = _run(_scfg(temperature=1.0, **filters), params, *prompts, seed=3)
    np.testing.assert_array_equal(r.tokens, greedy.tokens)
    np.testing.assert_array_equal(r.mask, greedy.mask)


def test_sharded_greedy_equals_unsharded(greedy, params, prompts):
    mesh = parallel.make_mesh((2, 2, 2))
    sharded = parallel.shard_params(params, CFG, mesh)
    data = parallel.batch_sharding(mesh)
    tokens, mask = (jax.device_put(jnp.asarray(x), data) for x in prompts)
    assert len(sharded["lm_head"]["kernel"].sharding.device_set) == 8
    out = sampling.make(CFG, _scfg())(sharded, tokens, mask, jax.random.key(0))
    for name in sampling.Rollouts._fields:
        np.testing.assert_array_equal(np.asarray(getattr(out, name)), getattr(greedy, name),
                                      err_msg=name)


def test_bad_config_names_field():
    for field, value in [("max_new_tokens", 0), ("num_samples", 0), ("temperature", -1.0),
                         ("top_p", 0.0), ("top_k", -1)]:
        with pytest.raises(ValueError, match=field):
            _scfg(**{field: value})


def test_decode_texts_drops_padding():
    class Tok:
        def decode(self, ids, skip_special_tokens):
            assert skip_special_tokens  # EOS / pad are special tokens in real tokenizers
            return ",".join(map(str, ids))

    r = sampling.Rollouts(*[None] * 2, np.array([[5, 1, 0], [7, 8, 9]]), None,
                          np.array([[1, 1, 0], [1, 1, 1]], bool), None, None)
    assert sampling.decode_texts(Tok(), r) == ["5,1", "7,8,9"]
