"""fused_sample: token-for-token equality with jax.random.categorical and a sort-based oracle.

V=300 with 128-wide vocab tiles (ragged last tile); Pallas kernels run in interpret mode.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from coop_jax.kernels import fused_sample
from coop_jax.kernels import rng

B, D, V = 24, 32, 300
GREEDY_ROWS = (2, 9)

TPU_PARAMS = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan",
                                   num_cores_or_threads=2)
IMPLS = {
    "xla": ("xla", dict(vocab_tile=128)),
    "pallas_tpu-interpret": ("pallas_tpu", dict(interpret=True, vocab_tile=128, row_tile=16)),
    "pallas_tpu-interpret-params": ("pallas_tpu", dict(interpret=TPU_PARAMS, vocab_tile=128,
                                                       row_tile=16)),
    "pallas_gpu-interpret": ("pallas_gpu", dict(interpret=True, vocab_tile=128, row_tile=16)),
}
FILTERS = [(0, 1.0), (5, 1.0), (0, 0.9), (20, 0.7), (0, 0.01)]
# interpret mode is slow: the Pallas kernels get the settings that exercise distinct code paths
CASE_FILTERS = {"xla": FILTERS, "pallas_tpu-interpret": [(0, 1.0), (0, 0.9), (20, 0.7)],
                "pallas_gpu-interpret": [(0, 1.0), (0, 0.9), (20, 0.7)],
                "pallas_tpu-interpret-params": [(20, 0.7)]}


def _sample(p, top_k=0, top_p=1.0, impl="xla", temp=None, **kw):
    fn = jax.jit(lambda key, h, w, t: fused_sample(key, h, w, t, top_k, top_p, impl=impl, **kw))
    return fn(p["key"], p["hidden"], p["unembed"], p["temp"] if temp is None else temp)


@pytest.fixture(scope="module")
def problem():
    ks = jax.random.split(jax.random.key(1), 3)
    hidden = jax.random.normal(ks[0], (B, D), jnp.float32)
    unembed = jax.random.normal(ks[1], (D, V), jnp.float32) * 0.5
    temp = jnp.linspace(0.4, 1.6, B).at[GREEDY_ROWS[0]].set(0.0).at[GREEDY_ROWS[1]].set(1e-7)
    key = jax.random.key(7)
    logits = jnp.dot(hidden, unembed, preferred_element_type=jnp.float32)
    noise = jax.random.gumbel(key, (B, V))  # what jax.random.categorical adds
    return dict(hidden=hidden, unembed=unembed, temp=temp, key=key, logits=np.asarray(logits),
                noise=np.asarray(noise))


def oracle(p, top_k, top_p, max_candidates=128):
    """Sort-based top-k/top-p + Gumbel-max in numpy with the categorical noise."""
    logits, noise, temp = p["logits"], p["noise"], np.asarray(p["temp"])
    greedy = temp <= 1e-6
    z = logits / np.where(greedy, np.float32(1), temp)[:, None]
    tokens = []
    for b in range(z.shape[0]):
        if greedy[b]:
            tokens.append(int(np.argmax(logits[b])))
            continue
        order = np.argsort(-z[b], kind="stable")
        cand = order[:top_k if top_k else min(max_candidates, V)]
        zc = z[b, cand].astype(np.float64)
        keep = np.ones(len(cand), bool)
        if top_p < 1.0:
            full = z[b].astype(np.float64)
            norm = np.log(np.sum(np.exp(zc - zc.max()))) + zc.max() if top_k else \
                np.log(np.sum(np.exp(full - full.max()))) + full.max()
            probs = np.exp(zc - norm)
            keep = (np.cumsum(probs) - probs) < top_p
        kept = cand[keep]
        tokens.append(int(kept[np.argmax(z[b, kept] + noise[b, kept])]))
    return np.array(tokens)


def _log_softmax(p):
    temp = np.asarray(p["temp"])
    z = p["logits"] / np.where(temp <= 1e-6, np.float32(1), temp)[:, None]
    return np.asarray(jax.nn.log_softmax(jnp.asarray(z), axis=-1))


def test_noise_is_bitwise_jax_random_gumbel():
    for key in (jax.random.key(3), jax.random.PRNGKey(11)):
        rows, cols = jnp.arange(7)[:, None], jnp.arange(301)[None, :]
        words = rng.key_words(key)
        mine = jax.jit(lambda w: rng.gumbel_at(w[0], w[1], rows, cols, 301))(words)
        want = jax.random.gumbel(key, (7, 301))
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(want))


def test_unfiltered_equals_jax_random_categorical(problem):
    p = problem
    temp = np.asarray(p["temp"])
    expect = np.asarray(jax.random.categorical(
        p["key"], jnp.asarray(p["logits"]) / jnp.where(p["temp"] <= 1e-6, 1.0, p["temp"])[:, None]))
    expect = np.where(temp <= 1e-6, p["logits"].argmax(-1), expect)
    np.testing.assert_array_equal(oracle(p, 0, 1.0), expect)
    for impl in ("reference", "xla"):
        tokens, _, _ = _sample(p, impl=impl)
        np.testing.assert_array_equal(np.asarray(tokens), expect)
    raw_key = dict(p, key=jax.random.key_data(p["key"]))  # legacy uint32[2] keys work too
    np.testing.assert_array_equal(np.asarray(_sample(raw_key, impl="xla")[0]), expect)


@pytest.mark.parametrize("case, top_k, top_p",
                         [(c, k, q) for c, fs in CASE_FILTERS.items() for k, q in fs])
def test_tokens_match_oracle(problem, case, top_k, top_p):
    impl, kw = IMPLS[case]
    p = problem
    tokens, logp, ent = _sample(p, top_k, top_p, impl, **kw)
    tokens = np.asarray(tokens)
    np.testing.assert_array_equal(tokens, oracle(p, top_k, top_p))
    # logp / entropy are those of the unfiltered temperature-scaled distribution; 0 if greedy
    logp_all = _log_softmax(p)
    want_logp = np.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
    want_ent = -np.sum(np.exp(logp_all) * logp_all, axis=-1)
    greedy = np.array(GREEDY_ROWS)
    want_logp[greedy] = 0.0
    want_ent[greedy] = 0.0
    np.testing.assert_allclose(logp, want_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, want_ent, rtol=1e-5, atol=1e-5)
    if isinstance(kw.get("interpret"), pltpu.InterpretParams):
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
        assert ipc.races is None or not ipc.races.races_found


def test_reference_matches_oracle(problem):
    for top_k, top_p in ((0, 0.9), (20, 0.7)):
        tokens, _, _ = _sample(problem, top_k, top_p, impl="reference")
        np.testing.assert_array_equal(np.asarray(tokens), oracle(problem, top_k, top_p))


def test_nucleus_truncated_to_max_candidates(problem):
    p = dict(problem, temp=jnp.full((B,), 3.0))  # flat distributions: nucleus >> 8 tokens
    z = p["logits"] / 3.0
    probs = np.exp(z - z.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert np.all(np.sort(probs, -1)[:, ::-1][:, :8].sum(-1) < 0.999)
    want = oracle(p, 0, 0.999, max_candidates=8)
    top8 = np.argsort(-z, axis=-1, kind="stable")[:, :8]
    assert all(t in row for t, row in zip(want, top8))
    for impl, kw in (("reference", {}), ("xla", dict(vocab_tile=128))):
        tokens, _, _ = _sample(p, 0, 0.999, impl, max_candidates=8, **kw)
        np.testing.assert_array_equal(np.asarray(tokens), want)


def _chi2_critical(dof: int, z: float = 3.0902) -> float:
    """Upper 0.1% point of chi-square (Wilson-Hilferty; z = standard normal 99.9% quantile)."""
    return dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3


def _chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson statistic with categories of expected count < 5 pooled together."""
    expected = probs * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(np.sum((obs - exp) ** 2 / exp)), len(exp) - 1


@pytest.mark.parametrize("case, top_k", [("xla", 0), ("xla", 10), ("pallas_tpu-interpret", 10),
                                         ("pallas_gpu-interpret", 0)])
def test_chi_square_frequencies(problem, case, top_k):
    """4096 draws of one row: empirical frequencies match softmax (renormalised over top-k)."""
    impl, kw = IMPLS[case]
    kw = dict(kw, row_tile=64) if "row_tile" in kw else kw
    n = 4096
    row = problem["hidden"][:1] * 0.35  # a moderately peaked distribution over 300 tokens
    hidden = jnp.broadcast_to(row, (n, D))
    tokens, _, _ = jax.jit(lambda key: fused_sample(key, hidden, problem["unembed"], 1.0, top_k,
                                                    impl=impl, **kw))(jax.random.key(123))
    tokens = np.asarray(tokens)
    assert tokens.min() >= 0 and tokens.max() < V
    logits = np.asarray(row @ problem["unembed"], np.float64)[0]
    probs = np.exp(logits - logits.max())
    if top_k:
        allowed = np.argsort(-logits, kind="stable")[:top_k]
        assert set(tokens.tolist()) <= set(allowed.tolist()), "sampled outside the top-k"
        probs = np.where(np.isin(np.arange(V), allowed), probs, 0.0)
    probs /= probs.sum()
    stat, dof = _chi2(np.bincount(tokens, minlength=V).astype(np.float64), probs)
    assert dof >= 5
    assert stat < _chi2_critical(dof), f"chi2={stat:.1f} dof={dof}"


@pytest.mark.parametrize("case", ["xla", "pallas_tpu-interpret", "pallas_gpu-interpret"])
def test_padded_columns_never_sampled(problem, case):
    """All-equal logits: padded/overlapping tile columns would win ties or add mass if unmasked."""
    impl, kw = IMPLS[case]
    n = 1024
    hidden = jnp.zeros((n, D))
    kw = dict(kw, row_tile=64) if "row_tile" in kw else kw
    tokens, logp, _ = jax.jit(lambda key: fused_sample(key, hidden, problem["unembed"], 1.0,
                                                       impl=impl, **kw))(jax.random.key(5))
    tokens = np.asarray(tokens)
    assert tokens.min() >= 0 and tokens.max() < V
    np.testing.assert_allclose(logp, -np.log(V), rtol=1e-5)
    stat, dof = _chi2(np.bincount(tokens // 30, minlength=10).astype(np.float64),
                      np.full(10, 0.1))
    assert stat < _chi2_critical(dof)


def test_greedy_rows_ignore_filters(problem):
    p = problem
    temp = jnp.zeros((B,))
    for top_k, top_p in ((0, 1.0), (3, 0.5)):
        tokens, logp, ent = _sample(p, top_k, top_p, "xla", temp=temp, vocab_tile=128)
        np.testing.assert_array_equal(np.asarray(tokens), p["logits"].argmax(-1))
        assert np.all(np.asarray(logp) == 0) and np.all(np.asarray(ent) == 0)


@pytest.mark.parametrize("impl", ["xla", "reference"])
@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (20, 0.7)])
def test_per_row_keys_equal_one_row_draws(problem, impl, top_k, top_p):
    """Keys of shape [B] (or raw uint32[B, 2]): row b is the one-row call under keys[b] (the
    same token; its log-prob and entropy to float32 rounding)."""
    p = problem
    keys = jax.random.split(jax.random.key(5), B)
    call = jax.jit(lambda k, h, t: fused_sample(k, h, p["unembed"], t, top_k, top_p, impl=impl,
                                                vocab_tile=128))
    batched = [np.asarray(x) for x in call(keys, p["hidden"], p["temp"])]
    raw = [np.asarray(x) for x in call(jax.random.key_data(keys), p["hidden"], p["temp"])]
    for b in range(B):
        one = call(keys[b], p["hidden"][b:b + 1], p["temp"][b:b + 1])
        np.testing.assert_array_equal(batched[0][b], np.asarray(one[0])[0], err_msg=f"row {b}")
        # a one-row matmul may round unlike the [B, D] one
        for got, want in zip(batched[1:], one[1:]):
            np.testing.assert_allclose(got[b], np.asarray(want)[0], rtol=1e-5, atol=1e-6)
    for got, want in zip(raw, batched):
        np.testing.assert_array_equal(got, want)
    sampled = np.asarray(p["temp"]) > 1e-6
    one_key = np.asarray(call(jax.random.key(5), p["hidden"], p["temp"])[0])
    assert (batched[0] != one_key)[sampled].any()  # the rows' own keys, not one shared key


def test_per_row_keys_refuse_the_pallas_kernels_and_a_wrong_count(problem):
    p = problem
    keys = jax.random.split(jax.random.key(5), B)
    with pytest.raises(ValueError, match="per-row keys run on impl 'xla' or 'reference'"):
        fused_sample(keys, p["hidden"], p["unembed"], 1.0, impl="pallas_tpu", interpret=True)
    with pytest.raises(ValueError, match=f"key: {B - 1} per-row keys for {B} rows"):
        fused_sample(keys[1:], p["hidden"], p["unembed"], 1.0, impl="xla")


@pytest.mark.parametrize("kwargs, match", [
    (dict(top_k=-1), "top_k"),
    (dict(top_k=V + 1), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_p=0.9, max_candidates=0), "max_candidates"),
    (dict(impl="pallas"), "interpret"),
    (dict(key=jnp.zeros((2,), jnp.float32)), "key"),
    (dict(hidden=jnp.zeros((B, D + 1))), "hidden"),
])
def test_bad_input_names_the_field(problem, kwargs, match):
    args = dict(key=problem["key"], hidden=problem["hidden"], unembed=problem["unembed"],
                temperature=problem["temp"])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fused_sample(args.pop("key"), args.pop("hidden"), args.pop("unembed"),
                     args.pop("temperature"), **args)
