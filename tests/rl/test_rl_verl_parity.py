"""coop_jax.rl against verl's own code (`verl/trainer/ppo/core_algos.py` and the DAPO reward
manager of the pinned verl, installed without its dependencies by `make install-test`), on
identical random inputs: advantages, every policy loss with every aggregation both sides have
(values and gradients), KL estimators in the loss and in the reward, the adaptive KL controller
and DAPO's overlong shaping. The test fails, never skips, when verl is missing.

Where coop_jax differs on purpose (docs/ALGORITHMS.md §5), the inputs avoid the case and a hand
test elsewhere holds coop_jax's choice: a group of one rollout (verl: its raw reward under GRPO,
coop_jax: 0), and all-equal groups whose float mean is off by an ulp in torch.
"""
from __future__ import annotations

import importlib.util
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

VERL_VERSION = "0.9.1"  # the pin of setup.py's test extra and the Makefile; ALGORITHMS.md §3


def _ray_stand_in() -> types.ModuleType:
    """`verl/__init__` imports ray (for DataProto futures); nothing under test calls it."""
    module = types.ModuleType("ray")

    class Absent:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("ray is not installed: the parity test's stand-in was called")

    def attribute(name: str):
        if name.startswith("__"):  # __file__, __path__, ...: a plain module's answers
            raise AttributeError(name)
        return Absent  # ray.ObjectRef, ray.remote, ...

    module.__getattr__ = attribute
    return module


if importlib.util.find_spec("ray") is None:
    sys.modules["ray"] = _ray_stand_in()

import torch  # noqa: E402
import verl  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.reward_manager.dapo import DAPORewardManager  # noqa: E402

from coop_jax import rl  # noqa: E402

# our aggregation name -> verl's loss_agg_mode (the four both sides have)
AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean",
             "seq_mean_token_sum": "seq-mean-token-sum",
             "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
# our policy loss (policy_loss, ratio_level) -> verl's registered policy loss
POLICY_LOSSES = {("ppo", "token"): "vanilla", ("ppo", "sequence"): "gspo",
                 ("cispo", "token"): "cispo"}
# our KL estimator -> verl's kl_penalty name
KL_NAMES = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "low_var_kl", "abs": "abs",
            "k1+": "k1+", "k3+": "k3+"}
TOL = dict(rtol=2e-5, atol=2e-6)


def test_the_pinned_verl_is_the_one_compared():
    assert verl.__version__ == VERL_VERSION


# --- inputs ------------------------------------------------------------------------------------

def _groups(seed: int, sizes=(4, 3, 2, 5), binary: bool = False):
    """Flat rewards, group ids (verl's `index`) and response lengths of groups of `sizes`."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([[f"prompt{g}"] * n for g, n in enumerate(sizes)]).astype(object)
    order = rng.permutation(len(ids))  # rows of a group need not be adjacent
    ids = ids[order]
    rewards = (rng.integers(0, 2, len(ids)) if binary else rng.normal(0.3, 1.0, len(ids)))
    lengths = rng.integers(1, 9, len(ids))
    return rewards.astype(np.float32), ids, lengths


def _token_level(rewards: np.ndarray, lengths: np.ndarray, width: int = 8):
    """verl's layout: the reward at each response's last token, and the response mask."""
    mask = np.arange(width)[None, :] < lengths[:, None]
    scores = np.zeros((len(rewards), width), np.float32)
    scores[np.arange(len(rewards)), lengths - 1] = rewards
    return torch.tensor(scores), torch.tensor(mask.astype(np.float32))


def _loss_inputs(seed: int, rows: int = 6, width: int = 7):
    """Log-probs whose ratios fall inside and outside the clip range on both sides (and past
    the dual clip), a row with no valid token, and advantages of both signs."""
    rng = np.random.default_rng(seed)
    old = rng.normal(-2.0, 0.5, (rows, width)).astype(np.float32)
    shift = rng.normal(0.0, 0.3, (rows, width))
    shift[0, :3] = [1.5, -0.9, 2.0]   # ratios 4.5, 0.4, 7.4
    shift[1] = 0.4                     # a sequence ratio of e^0.4 (GSPO clips it)
    shift[2] = 12.0                    # past GSPO's cap of 10
    shift[3] = np.log(4.5)             # GSPO's s = 4.5: PPO's dual clip would act at A < 0
    logp = (old + shift).astype(np.float32)
    mask = np.ones((rows, width), np.float32)
    mask[1, 5:] = 0
    mask[4, 2:] = 0
    mask[5] = 0                        # e.g. an overlong response masked out
    adv = np.array([-1.0, 2.0, -1.0, -0.5, 0.7, 1.3], np.float32)[:rows]
    return logp, old, adv, mask


# --- advantages --------------------------------------------------------------------------------

def _verl_advantage(name: str, rewards, ids, lengths) -> np.ndarray:
    scores, mask = _token_level(rewards, lengths)
    if name == "grpo":
        adv, _ = core_algos.compute_grpo_outcome_advantage(scores, mask, ids)
    elif name == "drgrpo":
        adv, _ = core_algos.compute_grpo_outcome_advantage(scores, mask, ids,
                                                           norm_adv_by_std_in_grpo=False)
    elif name == "rloo":
        adv, _ = core_algos.compute_rloo_outcome_advantage(scores, mask, ids)
    elif name == "reinforce_plus_plus":
        adv, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            scores, mask, config=types.SimpleNamespace(gamma=1.0))
    else:
        adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
            scores, mask, ids)
    adv, mask = adv.numpy(), mask.numpy()
    # an outcome advantage: one value over each response's tokens
    first = adv[:, :1]
    np.testing.assert_allclose(adv * mask, first * mask, rtol=1e-6, atol=1e-7)
    return first[:, 0]


@pytest.mark.parametrize("name", sorted(rl.ADVANTAGES))
@pytest.mark.parametrize("seed,binary", [(0, False), (1, False), (2, True), (3, True)])
def test_advantages_match_verl_on_groups_of_different_sizes(name, seed, binary):
    rewards, ids, lengths = _groups(seed, binary=binary)
    ours = rl.ragged_advantages(name, rewards, ids, tokens=lengths)
    np.testing.assert_allclose(ours, _verl_advantage(name, rewards, ids, lengths), **TOL)


@pytest.mark.parametrize("name", sorted(rl.ADVANTAGES))
def test_advantages_match_verl_on_full_groups(name):
    rewards, ids, lengths = _groups(4, sizes=(4, 4, 4))
    rows, cols, n = rl.group_layout(ids)
    grid, tokens = np.zeros((n, 4), np.float32), np.zeros((n, 4), np.int64)
    grid[rows, cols], tokens[rows, cols] = rewards, lengths
    ours = np.asarray(rl.compute_advantages(name, jnp.asarray(grid), tokens=tokens))[rows, cols]
    np.testing.assert_allclose(ours, _verl_advantage(name, rewards, ids, lengths), **TOL)


# --- policy losses -----------------------------------------------------------------------------

def _actor_config(clip_low: float, clip_high: float, clip_c: float, rows: int) -> ActorConfig:
    # global_batch_size: verl's trainer divides the seq-mean modes by the mini-batch's rows
    return ActorConfig(strategy="fsdp", rollout_n=1, clip_ratio=clip_low, clip_ratio_low=clip_low,
                       clip_ratio_high=clip_high, clip_ratio_c=clip_c,
                       ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=rows,
                       global_batch_info={"global_batch_size": rows})


def _verl_policy_loss(verl_name, agg, logp, old, adv, mask, cfg):
    lp = torch.tensor(logp, requires_grad=True)
    adv_tok = torch.tensor(adv)[:, None].expand(mask.shape)
    loss, metrics = core_algos.get_policy_loss_fn(verl_name)(
        torch.tensor(old), lp, adv_tok, torch.tensor(mask), loss_agg_mode=agg, config=cfg)
    loss.backward()
    return loss.item(), lp.grad.numpy(), metrics


@pytest.mark.parametrize("kind", sorted(POLICY_LOSSES), ids="-".join)
@pytest.mark.parametrize("aggregation", sorted(AGG_MODES))
@pytest.mark.parametrize("seed", [0, 1])
def test_policy_losses_match_verl_value_and_gradient(kind, aggregation, seed):
    policy_loss_name, ratio_level = kind
    logp, old, adv, mask = _loss_inputs(seed)
    clip_c = rl.default_clip_ratio_c(policy_loss_name, ratio_level)  # 3.0 for vanilla PPO only
    cfg = rl.LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, clip_ratio_c=clip_c,
                        policy_loss=policy_loss_name, ratio_level=ratio_level,
                        aggregation=aggregation, kl_coef=0.0)

    def ours(lp):
        return rl.policy_loss(lp, jnp.asarray(old), jnp.asarray(adv), jnp.asarray(mask), cfg)

    (loss, metrics), grad = jax.value_and_grad(ours, has_aux=True)(jnp.asarray(logp))
    verl_cfg = _actor_config(0.2, 0.28, clip_c or 3.0, len(adv))
    v_loss, v_grad, v_metrics = _verl_policy_loss(POLICY_LOSSES[kind], AGG_MODES[aggregation],
                                                  logp, old, adv, mask, verl_cfg)
    np.testing.assert_allclose(float(loss), v_loss, **TOL)
    np.testing.assert_allclose(np.asarray(grad), v_grad, **TOL)
    np.testing.assert_allclose(float(metrics["clip_frac"]), v_metrics["actor/pg_clipfrac"],
                               **TOL)
    if kind == ("ppo", "token"):
        np.testing.assert_allclose(float(metrics["dual_clip_frac"]),
                                   v_metrics["actor/pg_clipfrac_lower"], **TOL)


def test_the_inputs_reach_the_cases_that_differed():
    # GSPO's row past the cap has a zero gradient on both sides, and the s = 4.5 row is where a
    # dual clip would have acted: the comparison above covers the two former differences
    logp, old, adv, mask = _loss_inputs(0)
    cfg = _actor_config(0.2, 0.28, 3.0, len(adv))
    _, v_grad, _ = _verl_policy_loss("gspo", "seq-mean-token-mean", logp, old, adv, mask, cfg)
    assert np.all(v_grad[2] == 0) and np.all(v_grad[3] != 0)
    _, vanilla_grad, metrics = _verl_policy_loss("vanilla", "token-mean", logp, old, adv, mask,
                                                 cfg)
    assert metrics["actor/pg_clipfrac_lower"] > 0 and np.all(vanilla_grad[5] == 0)


@pytest.mark.parametrize("aggregation", sorted(AGG_MODES))
def test_aggregations_match_verl_agg_loss(aggregation):
    rng = np.random.default_rng(5)
    values = rng.normal(size=(5, 6)).astype(np.float32)
    mask = (rng.random((5, 6)) > 0.3).astype(np.float32)
    mask[2] = 0
    theirs = core_algos.agg_loss(torch.tensor(values), torch.tensor(mask), AGG_MODES[aggregation],
                                 global_batch_size=5)
    np.testing.assert_allclose(float(rl.aggregate(aggregation, values, mask)), theirs.item(),
                               **TOL)


# --- KL ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KL_NAMES))
def test_kl_estimators_match_verl_value_and_gradient(name):
    rng = np.random.default_rng(6)
    logp = rng.normal(-2.0, 1.0, (4, 5)).astype(np.float32)
    ref = (logp + rng.normal(0.0, 0.8, (4, 5))).astype(np.float32)
    ref[0, 0] = logp[0, 0] + 30.0  # past low_var_kl's clamps
    lp = torch.tensor(logp, requires_grad=True)
    theirs = core_algos.kl_penalty(lp, torch.tensor(ref), KL_NAMES[name])
    theirs.sum().backward()
    ours, grad = jax.value_and_grad(lambda x: rl.kl_penalty(name, x, jnp.asarray(ref)).sum())(
        jnp.asarray(logp))
    np.testing.assert_allclose(np.asarray(rl.kl_penalty(name, logp, ref)), theirs.detach().numpy(),
                               **TOL)
    np.testing.assert_allclose(float(ours), theirs.sum().item(), rtol=2e-5)
    np.testing.assert_allclose(np.asarray(grad), lp.grad.numpy(), **TOL)


@pytest.mark.parametrize("aggregation", sorted(AGG_MODES))
def test_kl_in_the_loss_matches_verl(aggregation):
    # verl's actor: kl_loss = agg_loss(kl_penalty(logp, ref, kl_loss_type), mask, agg mode)
    logp, old, adv, mask = _loss_inputs(2)
    ref = old - 0.2
    cfg = rl.LossConfig(aggregation=aggregation, kl_coef=0.001, kl_estimator="low_var_kl")
    _, metrics = rl.policy_loss(logp, old, adv, mask, cfg, ref_logp=ref)
    kld = core_algos.kl_penalty(torch.tensor(logp), torch.tensor(ref), "low_var_kl")
    theirs = core_algos.agg_loss(kld, torch.tensor(mask), AGG_MODES[aggregation],
                                 global_batch_size=len(adv))
    np.testing.assert_allclose(float(metrics["kl"]), theirs.item(), **TOL)


def test_kl_in_the_reward_and_the_adaptive_controller_match_verl():
    logp, old, _, mask = _loss_inputs(3)
    ref = old + 0.1
    scores = np.linspace(0.0, 1.0, len(mask), dtype=np.float32)
    token_scores = torch.zeros(mask.shape)
    token_scores[:, -1] = torch.tensor(scores)
    # verl's compute_rewards: token_level_scores - coef * (old_log_prob - ref_log_prob)
    theirs = core_algos.compute_rewards(token_scores, torch.tensor(logp), torch.tensor(ref), 0.05)
    theirs = (theirs * torch.tensor(mask)).sum(-1) + token_scores[:, -1] * (1 - mask[:, -1])
    kl = rl.kl_penalty("k1", logp, ref)
    np.testing.assert_allclose(rl.fold_kl_into_rewards(scores, kl, mask, 0.05), theirs.numpy(),
                               **TOL)
    controller = core_algos.AdaptiveKLController(init_kl_coef=0.05, target_kl=0.1, horizon=500)
    coef = 0.05
    for current in (0.3, 0.05, 0.11, 0.0, 0.09):
        controller.update(current_kl=current, n_steps=48)
        coef = rl.KL_CONTROLLERS["adaptive"](coef, current, 48, 0.1, 500)
        np.testing.assert_allclose(float(coef), controller.value, rtol=1e-6)


# --- DAPO overlong shaping ---------------------------------------------------------------------

class _Tokenizer:
    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True):
        return ""


def test_overlong_penalty_matches_verl_dapo_reward_manager():
    max_len, cache_len, factor = 10, 4, 0.7
    lengths = np.arange(1, max_len + 1)
    rewards = np.linspace(-0.5, 1.0, len(lengths)).astype(np.float32)
    rows, prompt = len(lengths), 2
    attention = torch.zeros(rows, prompt + max_len, dtype=torch.long)
    attention[:, :prompt] = 1
    for i, n in enumerate(lengths):
        attention[i, prompt:prompt + n] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(rows, prompt, dtype=torch.long),
                 "responses": torch.ones(rows, max_len, dtype=torch.long),
                 "attention_mask": attention},
        non_tensors={"reward_model": np.array([{"ground_truth": str(r)} for r in rewards]),
                     "data_source": np.array(["parity"] * rows, dtype=object)})
    buffer = OmegaConf.create({"enable": True, "len": cache_len, "penalty_factor": factor,
                               "log": False})
    manager = DAPORewardManager(
        _Tokenizer(), 0, compute_score=lambda data_source, solution_str, ground_truth,
        extra_info: float(ground_truth), max_resp_len=max_len, overlong_buffer_cfg=buffer)
    theirs = manager(data).sum(-1).numpy()
    ours, weight = rl.apply_overlong("penalty", rewards, lengths, lengths == max_len,
                                     max_len=max_len, cache_len=cache_len, factor=factor)
    np.testing.assert_allclose(np.asarray(ours), theirs, **TOL)
    assert np.all(np.asarray(weight) == 1.0)


# --- truncated importance sampling (rl.tis_cap) ------------------------------------------------

@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_truncated_is_weights_and_weighted_loss_match_verl(aggregation):
    """verl's token-level rollout correction (TIS: min(exp(old - rollout), threshold), 0 off the
    mask) and the vanilla loss weighted by it, value and gradient."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
    logp, old, adv, mask = _loss_inputs(3)
    rng = np.random.default_rng(7)
    sampler = (old + rng.normal(scale=0.8, size=old.shape)).astype(np.float32)
    cap = 2.0
    weights, metrics = rl.truncated_is_weights(jnp.asarray(old), jnp.asarray(sampler),
                                               jnp.asarray(mask), cap)
    v_weights, _ = compute_rollout_correction_weights(
        torch.tensor(old - sampler), torch.tensor(mask), rollout_is="token",
        rollout_is_threshold=cap)
    np.testing.assert_allclose(np.asarray(weights), v_weights.numpy(), **TOL)
    assert 0 < float(metrics["tis_truncated_frac"]) < 1  # some weights were truncated, not all

    cfg = rl.LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, clip_ratio_c=3.0,
                        aggregation=aggregation, kl_coef=0.0, tis_cap=cap)

    def ours(lp):
        return rl.policy_loss(lp, jnp.asarray(old), jnp.asarray(adv), jnp.asarray(mask), cfg,
                              is_weights=weights)

    (loss, _), grad = jax.value_and_grad(ours, has_aux=True)(jnp.asarray(logp))
    lp = torch.tensor(logp, requires_grad=True)
    v_loss, _ = core_algos.get_policy_loss_fn("vanilla")(
        torch.tensor(old), lp, torch.tensor(adv)[:, None].expand(mask.shape), torch.tensor(mask),
        loss_agg_mode=AGG_MODES[aggregation], config=_actor_config(0.2, 0.28, 3.0, len(adv)),
        rollout_is_weights=v_weights)
    v_loss.backward()
    np.testing.assert_allclose(float(loss), v_loss.item(), **TOL)
    np.testing.assert_allclose(np.asarray(grad), lp.grad.numpy(), **TOL)
