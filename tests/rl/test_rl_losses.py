"""Aggregations, LossConfig and policy_loss against hand computations."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl.losses import PER_MICRO_BATCH
from coop_jax.rl import (AGGREGATIONS, LossConfig, aggregate, loss_normalisers, part_weights,
                         policy_loss, weigh_metrics)

NO_KL = dict(kl_coef=0.0)

# --- aggregations -----------------------------------------------------------------------------

VALUES = jnp.array([[1.0, 2.0, jnp.nan], [4.0, 5.0, 6.0], [jnp.nan, jnp.inf, 9.0]])
MASK = jnp.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)  # ragged; last row empty


@pytest.mark.parametrize(
    "name,max_len,expected",
    [
        ("token_mean", None, (1 + 2 + 4) / 3),
        # the empty row adds 0 and counts among the B = 3 rows (verl's trainer: / the
        # mini-batch's rows, its global_batch_size), as seq_mean_token_sum
        ("seq_mean_token_mean", None, (1.5 + 4.0 + 0.0) / 3),
        ("seq_mean_token_sum_norm", None, 7 / (3 * 3)),
        ("seq_mean_token_sum_norm", 4, 7 / (3 * 4)),
    ],
)
def test_aggregation_hand_example(name, max_len, expected):
    np.testing.assert_allclose(aggregate(name, VALUES, MASK, max_len=max_len), expected, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_aggregation_all_masked_is_zero(name):
    assert float(aggregate(name, VALUES, jnp.zeros((3, 3)))) == 0.0


@pytest.mark.parametrize("name", sorted(set(AGGREGATIONS) - set(PER_MICRO_BATCH)))
def test_row_parts_reweighted_by_normalisers_sum_to_the_whole(name):
    """What gradient accumulation relies on: policy_loss over a split of the rows, each part
    times normaliser(part) / normaliser(whole), adds up to the whole batch's loss and metrics."""
    rng = np.random.default_rng(0)
    logp = jnp.asarray(rng.normal(-1.0, 0.5, (6, 5)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0.0, 0.3, (6, 5)), jnp.float32)
    adv = jnp.asarray(rng.normal(size=6), jnp.float32)
    weights = jnp.asarray(rng.random((6, 5)) * (rng.random((6, 5)) > 0.3), jnp.float32)
    weights = weights.at[1].set(0.0)  # a row without tokens
    cfg = LossConfig(aggregation=name, kl_coef=0.1, entropy_coef=0.01, agg_max_len=7)
    ent = jnp.abs(logp)
    run = lambda rows: policy_loss(logp[rows], old[rows], adv[rows], weights[rows], cfg,
                                   ref_logp=old[rows], entropy=ent[rows])
    loss, metrics = run(np.arange(6))
    whole = loss_normalisers(cfg, weights)
    total_loss, total = 0.0, {k: 0.0 for k in metrics}
    for rows in (np.array([0, 2, 4]), np.array([1, 3]), np.array([5])):
        share = part_weights(loss_normalisers(cfg, weights[rows]), whole)
        part_loss, part = run(rows)
        total_loss += part_loss * share["agg"]
        total = {k: total[k] + v for k, v in weigh_metrics(part, share).items()}
    np.testing.assert_allclose(total_loss, loss, rtol=1e-5)
    for k in metrics:
        np.testing.assert_allclose(total[k], metrics[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_aggregation_errors():
    with pytest.raises(ValueError, match="aggregation='mean'"):
        aggregate("mean", VALUES, MASK)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate("token_mean", VALUES, MASK[:2])
    with pytest.raises(ValueError, match="max_len"):
        aggregate("seq_mean_token_sum_norm", VALUES, MASK, max_len=0)


# --- LossConfig -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "field,value,match",
    [
        ("clip_eps_low", 1.0, "clip_eps_low"),
        ("clip_eps_high", -0.1, "clip_eps_high"),
        ("clip_ratio_c", 1.0, "clip_ratio_c"),
        ("ratio_level", "seq", "ratio_level='seq'.*sequence.*token"),
        ("aggregation", "token-mean", "aggregation='token-mean'.*seq_mean_token_mean"),
        ("kl_coef", -1.0, "kl_coef"),
        ("kl_estimator", "k4", "kl_estimator='k4'.*low_var_kl"),
        ("entropy_coef", math.nan, "entropy_coef"),
        ("agg_max_len", 0, "agg_max_len"),
    ],
)
def test_loss_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        LossConfig(**{field: value})


def test_loss_config_is_frozen_and_hashable():
    cfg = LossConfig()
    assert hash(cfg) == hash(LossConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.kl_coef = 0.1


# --- PPO clipped surrogate --------------------------------------------------------------------

# ratios chosen by hand, eps_low 0.2, eps_high 0.28 -> range [0.8, 1.28]
RATIOS = np.array([[1.5, 1.1, 0.5, 2.0], [0.5, 1.5, 0.9, 0.1]])
ADV = jnp.array([1.0, -1.0])
PPO_MASK = jnp.array([[1, 1, 1, 0], [1, 1, 1, 0]], jnp.float32)  # 6 valid tokens
OLD = jnp.full((2, 4), -1.0)
LOGP = OLD + jnp.log(jnp.asarray(RATIOS, jnp.float32))


def _loss_fn(cfg, mask=PPO_MASK, adv=ADV, old=OLD, **kw):
    return lambda lp: policy_loss(lp, old, adv, mask, cfg, **kw)


def test_ppo_clip_hand_example():
    cfg = LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, **NO_KL)
    (loss, m), grad = jax.value_and_grad(_loss_fn(cfg), has_aux=True)(LOGP)
    # A=+1: 1.5 clips high -> -1.28 ; 1.1 -> -1.1 ; 0.5 stays unclipped (min picks it) -> -0.5
    # A=-1: 0.5 clips low -> 0.8 ; 1.5 unclipped (max picks it) -> 1.5 ; 0.9 -> 0.9
    per_token = [-1.28, -1.1, -0.5, 0.8, 1.5, 0.9]
    np.testing.assert_allclose(loss, sum(per_token) / 6, rtol=1e-5)
    np.testing.assert_allclose(m["pg_loss"], sum(per_token) / 6, rtol=1e-5)
    np.testing.assert_allclose(m["clip_frac"], 2 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac_high"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac_low"], 1 / 6, rtol=1e-6)
    np.testing.assert_allclose(m["ratio_mean"], (1.5 + 1.1 + 0.5 + 0.5 + 1.5 + 0.9) / 6, rtol=1e-5)
    logs = np.log([1.5, 1.1, 0.5, 0.5, 1.5, 0.9])
    np.testing.assert_allclose(m["approx_kl_old"], np.mean(0.5 * logs**2), rtol=1e-5)
    assert float(m["dual_clip_frac"]) == 0.0
    assert "kl" not in m  # no reference model: no KL metric (and no flat-zero curve)
    # d/dlogp of -A*rho/6 is -A*rho/6 on unclipped tokens, 0 on clipped and masked ones
    expected_grad = np.array([[0, -1.1, -0.5, 0], [0, 1.5, 0.9, 0]]) / 6
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)


def test_dual_clip_hand_example():
    adv = jnp.array([-1.0, -1.0, 1.0])
    old = jnp.zeros((3, 1))
    logp = jnp.log(jnp.array([[5.0], [2.0], [5.0]]))
    mask = jnp.ones((3, 1))
    plain = LossConfig(**NO_KL)
    dual = LossConfig(clip_ratio_c=3.0, **NO_KL)
    (l_plain, _), g_plain = jax.value_and_grad(_loss_fn(plain, mask, adv, old), has_aux=True)(logp)
    (l_dual, m), g_dual = jax.value_and_grad(_loss_fn(dual, mask, adv, old), has_aux=True)(logp)
    # A=-1, rho=5: max(5, 1.2)=5, capped at -A*c = 3 ; A=-1, rho=2: 2 < 3 ; A=+1, rho=5: -1.2
    np.testing.assert_allclose(l_plain, (5 + 2 - 1.2) / 3, rtol=1e-5)
    np.testing.assert_allclose(l_dual, (3 + 2 - 1.2) / 3, rtol=1e-5)
    np.testing.assert_allclose(m["dual_clip_frac"], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(g_plain[:, 0], [5 / 3, 2 / 3, 0.0], rtol=1e-5)
    np.testing.assert_allclose(g_dual[:, 0], [0.0, 2 / 3, 0.0], atol=1e-7, rtol=1e-5)


def test_kl_and_entropy_terms_hand_example():
    logp = jnp.array([[-1.0, -2.0]])
    ref = jnp.array([[-2.0, -2.0]])  # k1 = (1, 0)
    ent = jnp.array([[2.0, 4.0]])
    cfg = LossConfig(kl_coef=0.5, kl_estimator="k1", entropy_coef=0.1)
    zero_adv, mask = jnp.zeros(1), jnp.ones((1, 2))
    loss, m = policy_loss(logp, logp, zero_adv, mask, cfg, ref_logp=ref, entropy=ent)
    # pg 0 (A=0) + 0.5 * mean(1, 0) - 0.1 * mean(2, 4)
    np.testing.assert_allclose(loss, 0.25 - 0.3, rtol=1e-5)
    np.testing.assert_allclose(m["kl"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(m["entropy"], 3.0, rtol=1e-6)
    # default estimator low_var_kl: k3 of log r = 1 is exp(-1)
    loss, m = policy_loss(logp, logp, zero_adv, mask, LossConfig(), ref_logp=ref)
    np.testing.assert_allclose(m["kl"], math.exp(-1.0) / 2, rtol=1e-5)
    np.testing.assert_allclose(loss, 0.001 * math.exp(-1.0) / 2, rtol=1e-5)


# --- GSPO -------------------------------------------------------------------------------------

def _gspo_inputs():
    mask = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], jnp.float32)
    old = jnp.asarray(np.random.default_rng(0).normal(-2.0, 0.5, (4, 4)), jnp.float32)
    # per-sequence mean log-ratio: 0.05 (inside), 0.5 (s=1.65, clips for A>0), -0.1 (inside)
    shift = jnp.array(
        [[0.1, 0.0, 0.05, 9.0], [0.4, 0.6, 9.0, 9.0], [-0.2, 0.0, -0.1, -0.1], [9.0] * 4]
    )
    adv = jnp.array([1.0, 2.0, -1.5, 3.0])
    return old + shift, old, adv, mask


def _gspo_reference(logp, old, adv, mask, lo, hi):
    """The GSPO paper objective written out per sequence, differentiated by autodiff."""
    lens = mask.sum(-1)
    s = jnp.exp(jnp.sum(mask * (logp - old), -1) / jnp.maximum(lens, 1))
    per_seq = -jnp.minimum(s * adv, jnp.clip(s, lo, hi) * adv)
    return jnp.sum(jnp.where(lens > 0, per_seq, 0.0)) / logp.shape[0]  # / B, empty rows too


def test_gspo_matches_sequence_objective():
    logp, old, adv, mask = _gspo_inputs()
    cfg = LossConfig(ratio_level="sequence", aggregation="seq_mean_token_mean", **NO_KL)
    (loss, m), grad = jax.value_and_grad(_loss_fn(cfg, mask, adv, old), has_aux=True)(logp)
    ref_loss, ref_grad = jax.value_and_grad(_gspo_reference)(logp, old, adv, mask, 0.8, 1.2)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-7)
    # hand: sequence 0 unclipped, grad per valid token = -A s / |y| / (B = 4 sequences)
    s0 = math.exp(0.05)
    np.testing.assert_allclose(grad[0], [-s0 / 12] * 3 + [0.0], rtol=1e-5)
    assert np.all(np.asarray(grad[1]) == 0) and np.all(np.asarray(grad[3]) == 0)  # clipped / empty
    np.testing.assert_allclose(m["clip_frac"], 2 / 9, rtol=1e-6)  # both tokens of sequence 1
    tok = LossConfig(aggregation="seq_mean_token_mean", **NO_KL)
    tok_grad = jax.grad(lambda lp: policy_loss(lp, old, adv, mask, tok)[0])(logp)
    assert not np.allclose(tok_grad, grad)


def _one_sequence(log_s: float, tokens: int = 2):
    old = jnp.full((1, tokens), -1.0)
    return old + log_s, old, jnp.ones((1, tokens))


def test_gspo_has_no_dual_clip_unless_asked_for():
    # s = 4.5, A = -1, eps 0.2: the clipped surrogate max(4.5, 1.2) = 4.5 at every token; PPO's
    # dual clip at c = 3 would bound it to 3 (verl's compute_policy_loss_gspo has none)
    import ml_collections
    section = ml_collections.ConfigDict(dict(
        clip_eps_low=0.2, clip_eps_high=0.2, clip_ratio_c=None, policy_loss="ppo",
        ratio_level="sequence", aggregation="seq_mean_token_mean", kl_in_reward=False,
        kl_coef=0.0, kl_estimator="k1", entropy_coef=0.0, tis_cap=0.0))
    cfg = LossConfig.from_config(section)
    assert cfg.clip_ratio_c is None
    logp, old, mask = _one_sequence(math.log(4.5))
    loss, m = policy_loss(logp, old, jnp.array([-1.0]), mask, cfg)
    np.testing.assert_allclose(loss, 4.5, rtol=1e-6)
    assert float(m["dual_clip_frac"]) == 0.0
    asked = dataclasses.replace(cfg, clip_ratio_c=3.0)
    np.testing.assert_allclose(policy_loss(logp, old, jnp.array([-1.0]), mask, asked)[0], 3.0,
                               rtol=1e-6)
    # the token-level PPO loss keeps the references' dual clip by default
    section.ratio_level = "token"
    assert LossConfig.from_config(section).clip_ratio_c == 3.0
    section.clip_ratio_c = 0.0
    assert LossConfig.from_config(section).clip_ratio_c is None


def test_gspo_gradient_is_zero_past_the_cap():
    cfg = LossConfig(ratio_level="sequence", aggregation="seq_mean_token_mean", **NO_KL)
    # log s = 12 > 10: the whole log ratio is capped, value A-weighted e^10, gradient 0
    logp, old, mask = _one_sequence(12.0)
    fn = _loss_fn(cfg, mask, jnp.array([-1.0]), old)
    (loss, _), grad = jax.value_and_grad(fn, has_aux=True)(logp)
    np.testing.assert_allclose(loss, math.exp(10.0), rtol=1e-5)
    assert np.array_equal(np.asarray(grad), np.zeros((1, 2)))
    # log s = 9 < 10: d loss / d logp_t = -A s / |y| = e^9 / 2 at each of the 2 tokens
    logp, old, mask = _one_sequence(9.0)
    grad = jax.grad(lambda lp: _loss_fn(cfg, mask, jnp.array([-1.0]), old)(lp)[0])(logp)
    np.testing.assert_allclose(grad, [[math.exp(9.0) / 2] * 2], rtol=1e-5)


def test_cispo_hand_example():
    # log ratios (0.5, 0, -0.5) with eps 0.2: weights clip(rho) = (1.2, 1, 0.8), A = 2,
    # token_mean over 3 tokens: loss = -(2/3) sum_t w_t logp_t, d/dlogp_t = -2 w_t / 3
    old = jnp.full((1, 3), -1.0)
    logp = old + jnp.array([[0.5, 0.0, -0.5]])
    cfg = LossConfig(policy_loss="cispo", **NO_KL)
    w = np.array([1.2, 1.0, 0.8])
    (loss, m), grad = jax.value_and_grad(_loss_fn(cfg, jnp.ones((1, 3)), jnp.array([2.0]), old),
                                         has_aux=True)(logp)
    np.testing.assert_allclose(loss, -(2 / 3) * float(np.sum(w * np.asarray(logp[0]))),
                               rtol=1e-6)
    np.testing.assert_allclose(grad, [-2 * w / 3], rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac_high"], 1 / 3, rtol=1e-6)
    with pytest.raises(ValueError, match="cispo.*ratio_level='token'"):
        LossConfig(policy_loss="cispo", ratio_level="sequence")
    with pytest.raises(ValueError, match="policy_loss='a2c'"):
        LossConfig(policy_loss="a2c")


# --- edge cases and jit -----------------------------------------------------------------------

LOSS_KINDS = [("ppo", "token"), ("ppo", "sequence"), ("cispo", "token")]


@pytest.mark.parametrize("policy_loss_name,ratio_level", LOSS_KINDS)
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_fully_masked_batch_is_zero_and_finite(policy_loss_name, ratio_level, aggregation):
    logp = jnp.array([[jnp.nan, -jnp.inf], [50.0, 0.0]])
    cfg = LossConfig(ratio_level=ratio_level, aggregation=aggregation, entropy_coef=0.01,
                     kl_estimator="k3_unclamped", policy_loss=policy_loss_name)
    adv, mask = jnp.array([1.0, jnp.nan]), jnp.zeros((2, 2))
    ref, ent = jnp.full((2, 2), -jnp.inf), jnp.full((2, 2), jnp.nan)
    fn = lambda lp: policy_loss(  # noqa: E731
        lp, jnp.zeros((2, 2)), adv, mask, cfg, ref_logp=ref, entropy=ent
    )
    (loss, m), grad = jax.value_and_grad(fn, has_aux=True)(logp)
    assert float(loss) == 0.0
    assert all(np.isfinite(float(v)) for v in m.values())
    assert np.array_equal(np.asarray(grad), np.zeros((2, 2)))


@pytest.mark.parametrize("policy_loss_name,ratio_level", LOSS_KINDS)
def test_extreme_log_ratio_stays_finite(policy_loss_name, ratio_level):
    logp = jnp.array([[100.0, -1.0], [-100.0, -1.0]])
    cfg = LossConfig(ratio_level=ratio_level, clip_ratio_c=3.0, policy_loss=policy_loss_name,
                     **NO_KL)
    for adv in ([0.0, 0.0], [-1.0, 1.0], [1.0, -1.0]):
        (loss, m), grad = jax.value_and_grad(
            _loss_fn(cfg, jnp.ones((2, 2)), jnp.array(adv), jnp.full((2, 2), -1.0)), has_aux=True
        )(logp)
        assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(grad)))
        assert all(np.isfinite(float(v)) for v in m.values())


def test_policy_loss_jits():
    logp, old, adv, mask = _gspo_inputs()
    ref, ent = old - 0.1, jnp.ones_like(old)
    for cfg in (LossConfig(clip_ratio_c=3.0), LossConfig(ratio_level="sequence"),
                LossConfig(policy_loss="cispo")):
        jitted = jax.jit(policy_loss, static_argnames=("cfg",))
        loss_j, m_j = jitted(logp, old, adv, mask, cfg=cfg, ref_logp=ref, entropy=ent)
        loss_e, m_e = policy_loss(logp, old, adv, mask, cfg, ref_logp=ref, entropy=ent)
        np.testing.assert_allclose(loss_j, loss_e, rtol=1e-5)
        for k in m_e:
            np.testing.assert_allclose(m_j[k], m_e[k], rtol=1e-5, atol=1e-7, err_msg=k)
        loss_fn = lambda lp: policy_loss(lp, old, adv, mask, cfg, ref_logp=ref)[0]  # noqa: E731
        g = jax.jit(jax.grad(loss_fn))(logp)
        assert g.shape == logp.shape and np.all(np.isfinite(np.asarray(g)))


def test_policy_loss_input_errors():
    cfg = LossConfig()
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(LOGP, OLD, jnp.zeros((2, 4)), PPO_MASK, cfg)
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss(LOGP, OLD[:, :3], ADV, PPO_MASK, cfg)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(LOGP, OLD, ADV, PPO_MASK, cfg, ref_logp=OLD[:1])
    with pytest.raises(ValueError, match="cfg"):
        policy_loss(LOGP, OLD, ADV, PPO_MASK, {"kl_coef": 0.0})


# --- the references' aggregations (verl's agg_loss names), numbers by hand ---------------------

def test_reference_aggregations_hand_numbers():
    # valid tokens 1, 2 (row 0) and 4 (row 1): token sum 7, 3 valid tokens, B = 2, T = 3
    values = jnp.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = jnp.array([[1, 1, 0], [1, 0, 0]], bool)
    expected = {"token_mean": 7 / 3, "micro_token_mean": 7 / 3,
                "seq_mean_token_mean": (1.5 + 4.0) / 2,
                "seq_mean_token_sum": 7 / 2,          # verl seq-mean-token-sum: mean of row sums
                "seq_mean_token_sum_norm": 7 / (2 * 3),  # Dr.GRPO with coop_jax's B * T
                "token_sum_norm": 7 / 3}              # verl seq-mean-token-sum-norm: sum / T
    for name, value in expected.items():
        assert float(aggregate(name, values, mask)) == pytest.approx(value, rel=1e-6), name


def test_per_micro_batch_aggregations_weigh_each_micro_batch_equally():
    """Two micro-batches of 2 rows with 3 and 1 valid tokens: the exact token mean weighs them
    3/4 and 1/4; the references' per-micro-batch forms 1/2 each, whatever their token counts."""
    from coop_jax.rl import loss_normalisers, part_weights
    whole = jnp.array([[1, 1, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]], jnp.float32)
    first, second = whole[:2], whole[2:]
    for name, shares in {"token_mean": (0.75, 0.25), "micro_token_mean": (0.5, 0.5),
                         "token_sum_norm": (0.5, 0.5), "seq_mean_token_sum": (0.5, 0.5)}.items():
        cfg = LossConfig(aggregation=name)
        total = loss_normalisers(cfg, whole)
        got = [float(part_weights(loss_normalisers(cfg, part), total)["agg"])
               for part in (first, second)]
        assert got == pytest.approx(list(shares)), name


def test_gspo_sequence_log_ratio_is_capped_at_verls_10():
    """verl's GSPO clamps the sequence log ratio at 10 from above; below, the +-20 bound of every
    ratio stays."""
    cfg = LossConfig(ratio_level="sequence", aggregation="seq_mean_token_mean", kl_coef=0.0)
    mask = jnp.ones((2, 3))
    logp = jnp.array([[15.0] * 3, [-25.0] * 3])  # log s = 15 and -25 against old log-probs of 0
    _, m = policy_loss(logp, jnp.zeros((2, 3)), jnp.array([1.0, 1.0]), mask, cfg)
    assert float(m["ratio_mean"]) == pytest.approx((math.exp(10.0) + math.exp(-20.0)) / 2,
                                                   rel=1e-5)
