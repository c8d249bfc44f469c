"""Continuous-batching sampler (`sampling.engine`) against the static-batch `sampler.generate`:
greedy rollouts token for token at every slot count, sampled rollouts independent of the slot
count and drawn from per-request keys, stop / truncation semantics, slot validation.

Each (config, slot count) is compiled once (`make_continuous` is cached) by module fixtures.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import check_rollout_structure, left_padded_prompts, sharp_params, tiny_model_config
from coop_jax import models, parallel
from coop_jax.sampling import engine, sampler

CFG = tiny_model_config(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
B, P, N, G = 3, 7, 12, 2
R = B * G
PAD = 0
PROMPT_LENGTHS = (7, 4, 2)
GREEDY_SLOTS = (1, 2, 4, 6)
SAMPLED_SLOTS = (1, 3, 6)
SAMPLED_EOS = (1, 2, 3, 4)  # at temperature 1 these end some rows early, not all


def _scfg(**kw) -> sampler.SamplingConfig:
    base = dict(max_new_tokens=N, eos_ids=(1,), pad_id=PAD, temperature=0.0, num_samples=G)
    return sampler.SamplingConfig(**(base | kw))


def _numpy(r: sampler.Rollouts) -> sampler.Rollouts:
    return sampler.Rollouts(*(np.asarray(x) for x in r))


def _static(scfg, params, prompts, seed=0) -> sampler.Rollouts:
    return _numpy(sampler.make(CFG, scfg)(params, *prompts, jax.random.key(seed)))


def _engine(scfg, params, prompts, slots, seed=0, cfg=CFG, halvings=0) -> sampler.Rollouts:
    return _numpy(engine.make_continuous(cfg, scfg, slots, halvings)(params, *prompts,
                                                                     jax.random.key(seed)))


@pytest.fixture(scope="module")
def params():
    return sharp_params(CFG)


@pytest.fixture(scope="module")
def prompts():
    """Left-padded prompts of lengths PROMPT_LENGTHS (tokens in [2, 64))."""
    tokens, mask = left_padded_prompts(PROMPT_LENGTHS, P, CFG.vocab_size, PAD)
    return jnp.asarray(tokens), jnp.asarray(mask)


@pytest.fixture(scope="module")
def greedy_eos(params, prompts):
    """EOS ids that stop the static greedy rows at different steps, one row never: id 1 (the
    last prompt's second token) and prompt 1's sixth token. Returns (eos_ids, the static
    rollouts with them)."""
    base = _static(_scfg(), params, prompts)
    eos = tuple(sorted({1, int(base.tokens[G, 5])}))
    assert PAD not in eos
    ref = _static(_scfg(eos_ids=eos), params, prompts)
    assert ref.truncated.any() and not ref.truncated.all()
    assert len(set(ref.lengths.tolist())) >= 3, ref.lengths  # refills happen at varied steps
    return eos, ref


@pytest.mark.parametrize("slots", GREEDY_SLOTS)
def test_greedy_equals_static_batch(greedy_eos, params, prompts, slots):
    eos, ref = greedy_eos
    out = _engine(_scfg(eos_ids=eos), params, prompts, slots)
    for name in ("prompt_tokens", "prompt_mask", "tokens", "mask", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(out, name), getattr(ref, name), err_msg=name)
    np.testing.assert_allclose(out.logprobs, ref.logprobs, atol=1e-5)
    np.testing.assert_allclose(out.entropy, ref.entropy, atol=1e-5)
    check_rollout_structure(out, eos, PAD)


@pytest.mark.parametrize("slots, halvings", [(6, 2), (4, 3), (2, 1)])
def test_greedy_equals_static_batch_as_the_slots_halve(greedy_eos, params, prompts, slots,
                                                        halvings):
    """The static rows stop at three lengths, so the slots halve while rows are still busy
    (6 slots: 6 -> 3 -> 2 once 4 rows have stopped)."""
    eos, ref = greedy_eos
    out = _engine(_scfg(eos_ids=eos), params, prompts, slots, halvings=halvings)
    for name in ("tokens", "mask", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(out, name), getattr(ref, name), err_msg=name)
    np.testing.assert_allclose(out.logprobs, ref.logprobs, atol=1e-5)
    np.testing.assert_allclose(out.entropy, ref.entropy, atol=1e-5)


def test_stage_sizes_halve_rounding_up_down_to_one_slot(params, prompts):
    assert engine.stage_sizes(64, 3) == (64, 32, 16, 8)
    assert engine.stage_sizes(6, 2) == (6, 3, 2)
    assert engine.stage_sizes(3, 5) == (3, 2, 1)
    assert engine.stage_sizes(5, 0) == (5,)
    # one decode loop per stage
    jaxpr = jax.make_jaxpr(lambda p, t, m: engine.generate_continuous(
        p, CFG, _scfg(), t, m, jax.random.key(0), slots=6, halvings=2))(params, *prompts)
    assert sum(e.primitive.name == "while" for e in jaxpr.jaxpr.eqns) == 3


def test_the_config_default_is_the_engines():
    from coop_jax.config import base_config
    assert base_config().rollout.slot_halvings == engine.DEFAULT_SLOT_HALVINGS


def test_greedy_with_scanned_layers(greedy_eos, params, prompts):
    """scan_layers stacks the KV cache on a leading layer axis: the per-slot copies follow."""
    eos, ref = greedy_eos
    cfg = tiny_model_config(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                            scan_layers=True)
    out = _engine(_scfg(eos_ids=eos), models.stack_layers(params, CFG.num_layers), prompts, 2,
                  cfg=cfg)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_array_equal(out.lengths, ref.lengths)


@pytest.fixture(scope="module")
def sampled(params, prompts):
    """{slots: rollouts at temperature 1}, one key."""
    scfg = _scfg(temperature=1.0, eos_ids=SAMPLED_EOS)
    return {s: _engine(scfg, params, prompts, s) for s in SAMPLED_SLOTS}


def test_samples_do_not_depend_on_the_slot_count(sampled):
    first = sampled[SAMPLED_SLOTS[0]]
    check_rollout_structure(first, SAMPLED_EOS, PAD)
    assert first.truncated.any() and not first.truncated.all()
    assert len(set(first.lengths.tolist())) > 2
    for slots in SAMPLED_SLOTS[1:]:
        out = sampled[slots]
        for name in ("tokens", "mask", "lengths", "truncated"):
            np.testing.assert_array_equal(getattr(out, name), getattr(first, name),
                                          err_msg=f"{name}, slots={slots}")
        np.testing.assert_allclose(out.logprobs, first.logprobs, atol=1e-5)
        np.testing.assert_allclose(out.entropy, first.entropy, atol=1e-5)


@pytest.mark.parametrize("slots, halvings", [(6, 2), (3, 1)])
def test_samples_do_not_depend_on_the_slots_halving(sampled, params, prompts, slots, halvings):
    out = _engine(_scfg(temperature=1.0, eos_ids=SAMPLED_EOS), params, prompts, slots,
                  halvings=halvings)
    first = sampled[SAMPLED_SLOTS[0]]
    for name in ("tokens", "mask", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(out, name), getattr(first, name), err_msg=name)
    np.testing.assert_allclose(out.logprobs, first.logprobs, atol=1e-5)


def test_same_key_same_samples_other_key_differs(sampled, params, prompts):
    scfg = _scfg(temperature=1.0, eos_ids=SAMPLED_EOS)
    again = _engine(scfg, params, prompts, 3, seed=0)
    other = _engine(scfg, params, prompts, 3, seed=1)
    for name in sampler.Rollouts._fields:
        np.testing.assert_array_equal(getattr(again, name), getattr(sampled[3], name),
                                      err_msg=name)
    assert (other.tokens != sampled[3].tokens).any(axis=1).sum() >= R // 2
    # the G samples of a prompt come from different keys
    for prompt in range(B):
        rows = sampled[3].tokens[prompt * G:(prompt + 1) * G]
        assert len({tuple(row) for row in rows}) == G


def test_each_request_draws_from_its_own_key(sampled, params, prompts):
    """Token t of request (b, g) is jax.random.categorical(fold_in(fold_in(fold_in(key, b), g),
    t), logits / T) on the cache-free forward of its prefix; the log-probs and entropies are
    those of the same logits."""
    r = sampled[1]
    seq = np.concatenate([r.prompt_tokens, r.tokens], 1)
    seq_mask = np.concatenate([r.prompt_mask, r.mask], 1)
    logits = jax.jit(models.lm_logits, static_argnums=1)(params, CFG, seq, seq_mask)
    z = np.asarray(logits)[:, P - 1:P + N - 1]  # [R, N, V] the logits of each response token
    fold = jax.random.fold_in
    key = jax.random.key(0)
    keys = jnp.stack([jnp.stack([fold(fold(fold(key, row // G), row % G), t) for t in range(N)])
                      for row in range(R)])
    draw = jax.vmap(jax.vmap(lambda k, x: jax.random.categorical(k, x[None])[0]))
    expected = np.asarray(draw(keys, jnp.asarray(z)))
    np.testing.assert_array_equal(r.tokens[r.mask], expected[r.mask])
    logp_all = np.asarray(jax.nn.log_softmax(z, axis=-1))
    logp = np.take_along_axis(logp_all, r.tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(r.logprobs[r.mask], logp[r.mask], atol=1e-4)
    entropy = -(np.exp(logp_all) * logp_all).sum(-1)
    np.testing.assert_allclose(r.entropy[r.mask], entropy[r.mask], atol=1e-4)


def test_truncated_rows_fill_max_new_tokens(greedy_eos, sampled):
    """A row without a stop token is truncated with a full mask; a stopped row's mask ends on
    its stop token and padding follows."""
    eos, ref = greedy_eos
    for r, stops in ((ref, eos), (sampled[3], SAMPLED_EOS)):
        cut = r.truncated
        assert cut.any() and (~cut).any()
        assert (r.lengths[cut] == N).all() and r.mask[cut].all()
        assert not np.isin(r.tokens[cut], stops).any()
        for row in np.flatnonzero(~cut):
            length = r.lengths[row]
            assert np.isin(r.tokens[row, length - 1], stops)
            assert not np.isin(r.tokens[row, :length - 1], stops).any()
            assert r.mask[row, :length].all() and not r.mask[row, length:].any()
            assert (r.tokens[row, length:] == PAD).all()


def test_sharded_equals_unsharded(sampled, params, prompts):
    """Parameters sharded over 8 devices (B = 3 prompts do not split over the data axes)."""
    sharded = parallel.shard_params(params, CFG, parallel.make_mesh((2, 2, 2)))
    assert len(sharded["lm_head"]["kernel"].sharding.device_set) == 8
    out = _engine(_scfg(temperature=1.0, eos_ids=SAMPLED_EOS), sharded, prompts, 3)
    np.testing.assert_array_equal(out.tokens, sampled[3].tokens)
    np.testing.assert_allclose(out.logprobs, sampled[3].logprobs, atol=1e-5)


def test_slots_must_be_positive(params, prompts):
    with pytest.raises(ValueError, match="rollout.slots"):
        engine.make_continuous(CFG, _scfg(), 0)
    with pytest.raises(ValueError, match="rollout.slots"):
        engine.generate_continuous(params, CFG, _scfg(), *prompts, jax.random.key(0), slots=0)
    with pytest.raises(ValueError, match="rollout.slot_halvings"):
        engine.make_continuous(CFG, _scfg(), 2, -1)
    assert engine.make_continuous(CFG, _scfg(), 2) is engine.make_continuous(CFG, _scfg(), 2)


def test_the_trainer_samples_with_the_continuous_engine(tmp_path, monkeypatch):
    """rollout.engine=continuous: coop-train's rollouts come from `rollout.slots` decode slots;
    the step's rows are those of the static layout (G per prompt, prompt-major) and train."""
    import json

    from conftest import repo_config
    from coop_jax.trainer import loop
    c = repo_config("tiny_test")
    c.rollout.update(engine="continuous", slots=3)
    c.train.steps = 2
    c.evals = type(c.evals)()  # no evaluators
    made = []
    real = engine.make_continuous
    monkeypatch.setattr(engine, "make_continuous", lambda cfg, scfg, slots, halvings:
                        made.append((scfg.num_samples, slots, halvings))
                        or real(cfg, scfg, slots, halvings))
    loop.train(c, str(tmp_path))
    assert made == [(c.rollout.group_size, 3, c.rollout.slot_halvings)]
    rows = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["loss"]) and r["generated_tokens"] > 0 for r in rows)
