"""Policy-gradient losses (PPO / GRPO / DAPO / Dr.GRPO / GSPO clipped surrogate, CISPO) and loss
aggregations.

Everything here is jit-traceable with static shapes. Masks may be bool or float weights
(e.g. the token mask times an overlong loss weight); masked positions never contribute,
even if the arrays hold NaN or inf there, and an all-masked batch gives loss 0.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from coop_jax.registry import Registry
from coop_jax.rl.kl import KL_ESTIMATORS, kl_penalty

AggFn = Callable[[jax.Array, jax.Array, int], jax.Array]

# Bound on |log ratio| before exp (as verl): keeps exp finite and its gradient NaN-free.
_MAX_LOG_RATIO = 20.0
# verl's GSPO bound on the whole token log ratio sg(log s) + logp - sg(logp), from above only
_GSPO_MAX_LOG_RATIO = 10.0


def _safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    return num / jnp.where(den > 0, den, 1.0)


def _masked(values: jax.Array, weights: jax.Array) -> jax.Array:
    # where, not a bare product: 0 * NaN would leak NaN from padding.
    return jnp.where(weights > 0, values * weights, 0.0)


def token_mean(values: jax.Array, weights: jax.Array, max_len: int) -> jax.Array:
    """Sum over valid tokens / number of valid tokens in the batch (DAPO)."""
    del max_len
    return _safe_div(jnp.sum(_masked(values, weights)), jnp.sum(weights))


def seq_mean_token_mean(values: jax.Array, weights: jax.Array, max_len: int) -> jax.Array:
    """Token mean per sequence, then mean over all B sequences (GRPO). A sequence with no valid
    token (e.g. masked as overlong) adds 0 and still counts in B, as verl's trainer divides by
    the mini-batch's rows (`global_batch_size`) and as seq_mean_token_sum does."""
    del max_len
    per_seq = _safe_div(jnp.sum(_masked(values, weights), axis=-1), jnp.sum(weights, axis=-1))
    return jnp.sum(per_seq) / values.shape[0]


def seq_mean_token_sum_norm(values: jax.Array, weights: jax.Array, max_len: int) -> jax.Array:
    """Sum over valid tokens / (B * max_len), a constant normaliser (Dr.GRPO; verl 0.9.1's
    seq-mean-token-sum-norm)."""
    return jnp.sum(_masked(values, weights)) / (values.shape[0] * max_len)


def seq_mean_token_sum(values: jax.Array, weights: jax.Array, max_len: int) -> jax.Array:
    """Token sum per sequence, mean over all B sequences (verl's seq-mean-token-sum)."""
    del max_len
    return jnp.sum(_masked(values, weights)) / values.shape[0]


def token_sum_norm(values: jax.Array, weights: jax.Array, max_len: int) -> jax.Array:
    """Sum over valid tokens / max_len, per micro-batch: verl's seq-mean-token-sum-norm before
    0.5 (Dr.GRPO as the Cooper and Co-rewarding references run it; verl 0.9.1's form is
    seq_mean_token_sum_norm). Not divided by B: see NORMALISERS."""
    return jnp.sum(_masked(values, weights)) / max_len


_rows = lambda weights, max_len: jnp.float32(weights.shape[0])  # noqa: E731
# aggregations whose loss depends on the micro-batch split (see NORMALISERS)
PER_MICRO_BATCH = ("micro_token_mean", "token_sum_norm")

AGGREGATIONS: Registry[AggFn] = Registry("rl.aggregation", {
    "token_mean": token_mean,
    "seq_mean_token_mean": seq_mean_token_mean,
    "seq_mean_token_sum_norm": seq_mean_token_sum_norm,
    "seq_mean_token_sum": seq_mean_token_sum,
    "token_sum_norm": token_sum_norm,
})
AGGREGATIONS.register("micro_token_mean", token_mean,
                      doc="token mean of each micro-batch, averaged over the micro-batches")

# The denominator of each aggregation (it depends on the weights only). For any split of a
# batch's rows into parts, agg(batch) = sum_k agg(part_k) * norm(part_k) / norm(batch): what
# gradient accumulation over micro-batches needs to reproduce the whole batch's loss.
# The two per-micro-batch forms of the references (micro_token_mean, token_sum_norm) weigh every
# micro-batch by its rows instead, 1 / rl.micro_batches each, as verl's gradient accumulation
# does: their loss depends on how the mini-batch is split (with token_sum_norm the mini-batch's
# loss is sum / (max_len * micro_batches), i.e. the learning rate of seq_mean_token_sum_norm
# times the micro-batch size B / micro_batches).
NORMALISERS: dict[str, Callable[[jax.Array, int], jax.Array]] = {
    "token_mean": lambda weights, max_len: jnp.sum(weights),
    "seq_mean_token_mean": _rows,
    "seq_mean_token_sum_norm": lambda weights, max_len: jnp.float32(weights.shape[0] * max_len),
    "seq_mean_token_sum": _rows,
    "token_sum_norm": _rows,
    "micro_token_mean": _rows,
}
# policy_loss metrics reduced with the loss's aggregation; its other metrics are token means
AGGREGATED_METRICS = ("loss", "pg_loss", "kl", "entropy")


def loss_normalisers(cfg: "LossConfig", mask: jax.Array) -> dict[str, jax.Array]:
    """The denominators `policy_loss(..., mask, cfg)` divides by for rows `mask [B, T]`:
    "agg" (its aggregation's, for AGGREGATED_METRICS) and "token" (the valid-token weight, for
    the token-mean metrics)."""
    w = jnp.asarray(mask).astype(jnp.float32)
    max_len = w.shape[1] if cfg.agg_max_len is None else cfg.agg_max_len
    return {"agg": NORMALISERS[cfg.aggregation](w, max_len), "token": jnp.sum(w)}


def part_weights(part: dict[str, jax.Array], whole: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Weights of a row subset's `policy_loss` values in the whole batch's (see NORMALISERS), from
    the `loss_normalisers` of both."""
    return {k: _safe_div(part[k], whole[k]) for k in part}


def weigh_metrics(metrics: dict[str, jax.Array], weights: dict[str, jax.Array]) -> dict:
    """`policy_loss` metrics of a row subset times its `part_weights`: summed over a split of
    the rows, they equal the whole batch's metrics."""
    return {k: v * weights["agg" if k in AGGREGATED_METRICS else "token"]
            for k, v in metrics.items()}


def _check_max_len(max_len: Optional[int], field: str = "max_len") -> None:
    if max_len is not None and (
        isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral) or max_len <= 0
    ):
        raise ValueError(f"{field} must be a positive int or None, got {max_len!r}")


def aggregate(
    name: str, values: jax.Array, mask: jax.Array, *, max_len: Optional[int] = None
) -> jax.Array:
    """Reduce ``values [B, T]`` under ``mask [B, T]`` to a scalar with aggregation ``name``.

    ``max_len`` is the constant of ``seq_mean_token_sum_norm`` (default T).
    """
    fn = AGGREGATIONS.lookup(name, "aggregation")
    values, mask = jnp.asarray(values), jnp.asarray(mask)
    if values.ndim != 2 or mask.shape != values.shape:
        raise ValueError(
            f"values and mask must both be [B, T], got {values.shape} and {mask.shape}"
        )
    _check_max_len(max_len)
    weights = mask.astype(jnp.float32)
    return fn(values.astype(jnp.float32), weights, values.shape[1] if max_len is None else max_len)


# --- per-token log importance ratio, by ratio level -------------------------------------------

def _token_log_ratio(logp: jax.Array, old_logp: jax.Array, weights: jax.Array) -> jax.Array:
    delta = jnp.where(weights > 0, logp - old_logp, 0.0)
    return jnp.clip(delta, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _sequence_log_ratio(logp: jax.Array, old_logp: jax.Array, weights: jax.Array) -> jax.Array:
    """GSPO log ratio: min(sg(log s_i) + logp - sg(logp), 10), log s_i = masked mean of
    (logp - old).

    The value equals log s_i at every token, and d/d logp_t = 1, so with seq_mean_token_mean
    the gradient of sequence i is s_i / |y_i| * sum_t grad logp_t, as in the GSPO paper. The cap
    applies to the whole expression, as verl's: past it the gradient is 0 (capping only sg(log s)
    would leave a gradient of s = e^10 times the advantage). No bound from below, as verl: there
    exp(.) underflows to 0 with a zero gradient.
    """
    delta = jnp.where(weights > 0, logp - old_logp, 0.0)
    log_s = _safe_div(jnp.sum(delta * weights, axis=-1), jnp.sum(weights, axis=-1))
    lp = jnp.where(weights > 0, logp, 0.0)
    log_ratio = jax.lax.stop_gradient(log_s)[:, None] + lp - jax.lax.stop_gradient(lp)
    return jnp.minimum(log_ratio, _GSPO_MAX_LOG_RATIO)


RATIO_LEVELS: Registry[Callable[[jax.Array, jax.Array, jax.Array], jax.Array]] = Registry(
    "rl.ratio_level", {"token": _token_log_ratio, "sequence": _sequence_log_ratio})


# --- the per-token surrogate, by policy loss --------------------------------------------------
# fn(ratio, logp, adv, lo, hi) -> (per-token loss, bool: the clip decided the token's loss)

def ppo_surrogate(ratio, logp, adv, lo, hi):
    """PPO's clipped surrogate -min(rho A, clip(rho, lo, hi) A) (GRPO, DAPO, GSPO)."""
    del logp
    unclipped, clipped = -adv * ratio, -adv * jnp.clip(ratio, lo, hi)
    return jnp.maximum(unclipped, clipped), clipped > unclipped


def cispo_surrogate(ratio, logp, adv, lo, hi):
    """CISPO (MiniMax-M1): -sg(clip(rho, lo, hi)) A log pi; every token keeps a gradient."""
    clipped = jnp.clip(ratio, lo, hi)
    return -jax.lax.stop_gradient(clipped) * adv * logp, ratio != clipped


POLICY_LOSSES: Registry[Callable] = Registry(
    "rl.policy_loss", {"ppo": ppo_surrogate, "cispo": cispo_surrogate})
# where PPO's dual clip applies by default: the token-level clipped surrogate (verl's vanilla
# loss); neither GSPO nor CISPO has one (`LossConfig.from_config`)
DUAL_CLIP_DEFAULT = 3.0


def check_policy_loss(policy_loss: str, ratio_level: str, where: str) -> None:
    """Raise unless the pair can be computed (`where`: the fields' prefix in the message)."""
    if policy_loss == "cispo" and ratio_level != "token":
        raise ValueError(f"{where}policy_loss='cispo' weighs tokens: it needs "
                         f"{where}ratio_level='token', got {ratio_level!r}")


def default_clip_ratio_c(policy_loss: str, ratio_level: str) -> Optional[float]:
    """The dual-clip bound a config gets when it does not set `rl.clip_ratio_c`."""
    return DUAL_CLIP_DEFAULT if (policy_loss, ratio_level) == ("ppo", "token") else None


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Policy-loss options. Frozen and hashable, so it can be a static jit argument.

    clip_eps_low/high: ratio clipped to [1 - low, 1 + high] (DAPO clip-higher: high ~ 0.28).
    clip_ratio_c: dual-clip bound (> 1) on the loss of negative-advantage tokens; None = off.
    policy_loss: a key of POLICY_LOSSES ("ppo": the clipped surrogate; "cispo": token level).
    ratio_level: "token" (PPO/GRPO) or "sequence" (GSPO; pair with seq_mean_token_mean).
    aggregation: a key of AGGREGATIONS; agg_max_len: its Dr.GRPO constant (None = T).
    kl_coef / kl_estimator: KL-to-reference term in the loss (a key of KL_ESTIMATORS).
    entropy_coef: weight of the entropy bonus (subtracted from the loss).
    tis_cap: truncated importance sampling (TIS) of off-policy rollouts: each token's loss is
      weighted by min(pi_learner / pi_sampler, tis_cap) (`truncated_is_weights`); None = off.
    """

    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    clip_ratio_c: Optional[float] = None
    policy_loss: str = "ppo"
    ratio_level: str = "token"
    aggregation: str = "token_mean"
    kl_coef: float = 0.001
    kl_estimator: str = "low_var_kl"
    entropy_coef: float = 0.0
    agg_max_len: Optional[int] = None
    tis_cap: Optional[float] = None

    def __post_init__(self) -> None:
        def number(field: str) -> float:
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"LossConfig.{field} must be a finite number, got {v!r}")
            return float(v)

        if not 0.0 <= number("clip_eps_low") < 1.0:
            raise ValueError(f"LossConfig.clip_eps_low must be in [0, 1), got {self.clip_eps_low}")
        if number("clip_eps_high") < 0.0:
            raise ValueError(f"LossConfig.clip_eps_high must be >= 0, got {self.clip_eps_high!r}")
        if self.clip_ratio_c is not None and number("clip_ratio_c") <= 1.0:
            raise ValueError(
                f"LossConfig.clip_ratio_c must be None or > 1, got {self.clip_ratio_c}"
            )
        if number("kl_coef") < 0.0:
            raise ValueError(f"LossConfig.kl_coef must be >= 0, got {self.kl_coef!r}")
        number("entropy_coef")
        if self.tis_cap is not None and number("tis_cap") <= 0.0:
            raise ValueError(f"LossConfig.tis_cap must be None or > 0, got {self.tis_cap!r}")
        RATIO_LEVELS.lookup(self.ratio_level, "LossConfig.ratio_level")
        POLICY_LOSSES.lookup(self.policy_loss, "LossConfig.policy_loss")
        check_policy_loss(self.policy_loss, self.ratio_level, "LossConfig.")
        AGGREGATIONS.lookup(self.aggregation, "LossConfig.aggregation")
        KL_ESTIMATORS.lookup(self.kl_estimator, "LossConfig.kl_estimator")
        _check_max_len(self.agg_max_len, "LossConfig.agg_max_len")

    @classmethod
    def from_config(cls, rl_section) -> "LossConfig":
        """The loss options of a config's `rl` section (`clip_ratio_c` 0 = off, unset = the
        dual clip of token-level PPO only; with `kl_in_reward` the KL leaves the loss for the
        reward; `tis_cap` 0 = off)."""
        r = rl_section
        clip_c = r.clip_ratio_c
        if clip_c is None:
            clip_c = default_clip_ratio_c(r.policy_loss, r.ratio_level)
        return cls(clip_eps_low=r.clip_eps_low, clip_eps_high=r.clip_eps_high,
                   clip_ratio_c=clip_c or None, policy_loss=r.policy_loss,
                   ratio_level=r.ratio_level,
                   aggregation=r.aggregation, kl_coef=0.0 if r.kl_in_reward else r.kl_coef,
                   kl_estimator=r.kl_estimator, entropy_coef=r.entropy_coef,
                   tis_cap=r.tis_cap or None)


def _check_inputs(logp, old_logp, advantages, mask, ref_logp, entropy, is_weights=None) -> None:
    if logp.ndim != 2:
        raise ValueError(f"logp must be [B, T], got shape {logp.shape}")
    named = {"old_logp": old_logp, "mask": mask, "ref_logp": ref_logp, "entropy": entropy,
             "is_weights": is_weights}
    for field, arr in named.items():
        if arr is not None and arr.shape != logp.shape:
            raise ValueError(f"{field} must have shape {logp.shape} like logp, got {arr.shape}")
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be [B]={logp.shape[:1]}, got shape {advantages.shape}")


def policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    mask: jax.Array,
    cfg: LossConfig,
    *,
    ref_logp: Optional[jax.Array] = None,
    entropy: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Policy surrogate + optional KL penalty and entropy bonus; returns (loss, metrics).

    Per token, ``policy_loss="ppo"``: -min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A);
    ``"cispo"``: -sg(clip(rho, 1 - eps_low, 1 + eps_high)) * A * logp. Dual clip min(., -A * c)
    on A < 0 tokens when ``cfg.clip_ratio_c`` is set; rho is the token ratio exp(logp - old_logp)
    or, for ``ratio_level="sequence"``, GSPO's sg(s_i) exp(logp - sg(logp)).
    loss = agg(pg) + kl_coef * agg(KL(logp || ref_logp)) - entropy_coef * agg(entropy).

    ``logp`` (and ``old_logp``/``ref_logp``) must be log-probs of the sampled tokens computed from
    logits divided by the SAMPLING temperature, so they match the behaviour policy's.

    ``is_weights`` (TIS, `truncated_is_weights`) multiply each token's surrogate after the clips,
    as verl's ``rollout_is_weights``.

    Args: logp, old_logp, mask, ref_logp, entropy, is_weights [B, T]; advantages [B] (one per
    sequence).
    Metrics (scalars, stop-gradient): loss, pg_loss, kl, entropy (0 when not given, aggregated like
    the loss), and token means over valid tokens of clip_frac (clipped branch active),
    clip_frac_high / clip_frac_low (ratio above / below the range), dual_clip_frac, ratio_mean,
    approx_kl_old (1/2 (logp - old_logp)^2).
    """
    if not isinstance(cfg, LossConfig):
        raise ValueError(f"cfg must be a LossConfig, got {type(cfg).__name__}")
    logp, old_logp, advantages, mask = map(jnp.asarray, (logp, old_logp, advantages, mask))
    ref_logp = None if ref_logp is None else jnp.asarray(ref_logp)
    entropy = None if entropy is None else jnp.asarray(entropy)
    is_weights = None if is_weights is None else jnp.asarray(is_weights)
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, entropy, is_weights)

    f32 = jnp.float32
    logp, old_logp, adv = logp.astype(f32), old_logp.astype(f32), advantages.astype(f32)[:, None]
    w = mask.astype(f32)
    valid = w > 0
    max_len = logp.shape[1] if cfg.agg_max_len is None else cfg.agg_max_len
    agg = AGGREGATIONS[cfg.aggregation]

    ratio = jnp.exp(RATIO_LEVELS[cfg.ratio_level](logp, old_logp, w))
    lo, hi = 1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high
    pg, clip_active = POLICY_LOSSES[cfg.policy_loss](ratio, jnp.where(valid, logp, 0.0), adv,
                                                     lo, hi)
    if cfg.clip_ratio_c is not None:
        pg_dual = -adv * cfg.clip_ratio_c
        dual_active = (adv < 0) & (pg > pg_dual)
        pg = jnp.where(adv < 0, jnp.minimum(pg, pg_dual), pg)
    else:
        dual_active = jnp.zeros(pg.shape, bool)
    if is_weights is not None:
        pg = pg * jax.lax.stop_gradient(is_weights.astype(f32))
    pg_loss = agg(pg, w, max_len)
    loss = pg_loss

    # "kl" and "entropy" are reported only where they were computed, so curves never show a
    # flat zero for a term the run does not have.
    optional = {}
    if ref_logp is not None:
        ref = jnp.where(valid, ref_logp.astype(f32), 0.0)
        kl_tok = kl_penalty(cfg.kl_estimator, jnp.where(valid, logp, 0.0), ref)
        optional["kl"] = kl = agg(kl_tok, w, max_len)
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    if entropy is not None:
        optional["entropy"] = ent = agg(entropy.astype(f32), w, max_len)
        if cfg.entropy_coef != 0:
            loss = loss - cfg.entropy_coef * ent

    frac = lambda x: token_mean(x.astype(f32), w, max_len)  # noqa: E731
    delta = jnp.where(valid, logp - old_logp, 0.0)
    metrics = {
        "loss": loss,
        "pg_loss": pg_loss,
        **optional,
        "clip_frac": frac(clip_active),
        "clip_frac_high": frac(clip_active & (ratio > hi)),
        "clip_frac_low": frac(clip_active & (ratio < lo)),
        "dual_clip_frac": frac(dual_active),
        "ratio_mean": frac(ratio),
        "approx_kl_old": frac(0.5 * jnp.square(delta)),
    }
    return loss, jax.lax.stop_gradient(metrics)


# verl's bound on the log ratio before exp (rollout_corr_helper.SAFETY_BOUND)
_TIS_MAX_LOG_RATIO = 20.0


def truncated_is_weights(learner_logp: jax.Array, sampler_logp: jax.Array, mask: jax.Array,
                         cap: float) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Truncated importance sampling (TIS; Yao et al. 2025, verl's token-level rollout
    correction): per token min(pi_learner / pi_sampler, cap), 0 off the mask, where the learner's
    log-probs are those of the policy before the update and the sampler's those it sampled with
    (a stale policy under `rollout.overlap`, or another implementation). Returns (weights [B, T],
    metrics: tis_weight_mean, tis_truncated_frac and tis_log_ratio_abs_mean over valid tokens)."""
    w = jnp.asarray(mask).astype(jnp.float32)
    log_ratio = jnp.where(w > 0, jnp.asarray(learner_logp, jnp.float32)
                          - jnp.asarray(sampler_logp, jnp.float32), 0.0)
    raw = jnp.exp(jnp.clip(log_ratio, -_TIS_MAX_LOG_RATIO, _TIS_MAX_LOG_RATIO)) * w
    weights = jax.lax.stop_gradient(jnp.minimum(raw, cap))
    mean = lambda x: _safe_div((x * w).sum(), w.sum())  # noqa: E731
    return weights, {"tis_weight_mean": mean(weights),
                     "tis_truncated_frac": mean((raw > cap).astype(jnp.float32)),
                     "tis_log_ratio_abs_mean": mean(jnp.abs(log_ratio))}
