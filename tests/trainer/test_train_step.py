"""The compiled update: sharded == unsharded, Cooper's joint step == the two updates separately."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import tiny_model_config
from coop_jax import models, parallel, rl
from coop_jax.trainer import step
from coop_jax.optim import make_optimizer
from coop_jax.registry import Options
from coop_jax.trainer.batch import Behaviour, TrainBatch
from coop_jax.rm.step import RMUpdate, bradley_terry_loss, rm_rewards
from coop_jax.trainer.step import StepConfig, init_state, place_state, state_shardings
from coop_jax.trainer.rewards.hybrid import RULE_THEN_RM
from coop_jax.trainer.rewards.static_rm import RM_SCORES

POLICY = tiny_model_config(vocab_size=64, num_heads=4, num_kv_heads=2, tie_embeddings=True,
                           qkv_bias=True)
RM = POLICY.replace(num_labels=1, tie_embeddings=False)
XLA_POLICY = POLICY.with_kernels("xla")  # the steps' log-probs on the xla scan
G, PROMPTS, P, N, L = 4, 4, 6, 5, 12
LOSS = rl.LossConfig(kl_coef=0.01, clip_eps_high=0.28)


def _batch(seed=0, valid_pairs=(1, 0, 1, 1)):
    rng = np.random.default_rng(seed)
    rows = G * PROMPTS
    prompt_mask = np.ones((rows, P), bool)
    prompt_mask[:, :2] = rng.random((rows, 2)) > 0.5  # some left padding
    mask = np.ones((rows, N), bool)
    mask[::3, 3:] = False
    tok = lambda shape: rng.integers(1, 60, size=shape).astype(np.int32)
    rm_mask = np.ones((rows, L), bool)
    rm_mask[1::2, 8:] = False
    pm = np.ones((PROMPTS, L), bool)
    pm[::2, 9:] = False
    return TrainBatch.from_flat({
        "prompt_tokens": tok((rows, P)), "prompt_mask": prompt_mask, "tokens": tok((rows, N)),
        "mask": mask, "rewards": rng.integers(0, 2, rows).astype(np.float32),
        "loss_weight": np.ones(rows, np.float32), "rm_tokens": tok((rows, L)), "rm_mask": rm_mask,
        "pair_pos_tokens": tok((PROMPTS, L)), "pair_pos_mask": pm,
        "pair_neg_tokens": tok((PROMPTS, L)), "pair_neg_mask": pm[::-1].copy(),
        "pair_valid": np.asarray(valid_pairs, np.float32),
    })


def jit_step(*args, **kwargs):
    """`step.jit_step` whose second output is the step's metrics (`StepOutputs.metrics`)."""
    compiled = step.jit_step(*args, **kwargs)

    def run(state, batch):
        new_state, outputs = compiled(state, batch)
        return new_state, outputs.metrics
    return run


RM_REWARD = dict(device_reward=RM_SCORES, reward_options=Options.of(threshold=False), rm=RM)


# Adam divides by sqrt(v): on entries whose gradient is ~0 it amplifies float reassociation noise
# (sharded vs unsharded reductions) to ~lr; eps=1e-4 keeps those entries well conditioned so the
# comparisons below can hold at 1e-5.
TX = make_optimizer(1e-2, warmup_steps=0, grad_clip=1.0, eps=1e-4)
RM_TX = make_optimizer(1e-2, warmup_steps=0, grad_clip=1.0, weight_decay=0.01, eps=1e-4)


def _state(with_rm):
    policy = models.init_params(POLICY, jax.random.key(0))
    rm = models.init_params(RM, jax.random.key(1)) if with_rm else None
    ref = jax.tree_util.tree_map(lambda x: x + 0.01, policy)
    return init_state(policy, TX, ref_params=ref, rm_params=rm, rm_tx=RM_TX if with_rm else None)


def _close(a, b, atol=1e-5):
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, atol=atol, rtol=1e-5),
                           a, b)


def test_sharded_step_equals_unsharded():
    tx = TX
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G, num_minibatches=2, ppo_epochs=2)
    batch = _batch()
    policy = models.init_params(POLICY, jax.random.key(0))
    ref = jax.tree_util.tree_map(lambda x: x + 0.01, policy)
    fresh = lambda: init_state(policy, tx, ref_params=ref)
    ref_state, ref_metrics = jit_step(cfg, tx, donate=False)(fresh(), batch)
    mesh = parallel.make_mesh((2, 2, 2))
    state = fresh()
    shardings = parallel.param_shardings(POLICY, mesh)
    state = state.replace(policy=state.policy.replace(
        params=jax.device_put(state.policy.params, shardings)),
        ref_params=jax.device_put(state.ref_params, shardings))
    state = place_state(state, mesh)
    step = jit_step(cfg, tx, state_shardings=state_shardings(state),
                    batch_sharding=parallel.batch_sharding(mesh, 1),
                    replicated=parallel.replicated(mesh))
    new_state, metrics = step(state, batch)
    assert new_state.policy.params["embed_tokens"]["embedding"].sharding.spec == \
        jax.sharding.PartitionSpec("tensor", "fsdp")
    _close(new_state.policy.params, ref_state.policy.params)
    _close(metrics, ref_metrics, atol=1e-5)
    assert int(new_state.step) == 1
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0


def test_cooper_joint_step_equals_separate_updates():
    batch = _batch(1)
    mesh = parallel.make_mesh((2, 2, 2))
    joint_cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G, **RM_REWARD,
                           rm_update=RMUpdate())
    state = _state(True)
    shard = lambda tree, cfg: jax.device_put(tree, parallel.param_shardings(cfg, mesh))
    state = state.replace(policy=state.policy.replace(params=shard(state.policy.params, POLICY)),
                          ref_params=shard(state.ref_params, POLICY),
                          rm=state.rm.replace(params=shard(state.rm.params, RM)))
    before_rm = jax.device_get(state.rm.params)
    joint, metrics = jit_step(joint_cfg, TX, RM_TX, donate=False)(state, batch)

    # 1) the policy update alone, with rewards from the PRE-update RM passed as batch rewards
    rm_inputs = jax.tree_util.tree_map(jnp.asarray, batch.rm)
    proxy, _ = rm_rewards(before_rm, RM, rm_inputs)
    policy_only = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G)
    alone, alone_metrics = jit_step(policy_only, TX, donate=False)(
        _state(False), batch.replace(rewards=np.asarray(proxy)))
    _close(joint.policy.params, alone.policy.params)
    np.testing.assert_allclose(metrics["reward_mean"], np.mean(np.asarray(proxy)), atol=1e-6)

    # 2) the RM update alone: Bradley-Terry on the valid pairs with its own optimizer
    grads = jax.grad(lambda p: bradley_terry_loss(p, RM, batch.pairs)[0])(before_rm)
    updates, _ = RM_TX.update(grads, RM_TX.init(before_rm), before_rm)
    import optax
    _close(joint.rm.params, optax.apply_updates(before_rm, updates))
    assert metrics["rm_valid_pairs"] == 3
    # the RM really moved, and the policy's rewards did not see the move
    moved = jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(a - b))), joint.rm.params,
                                   before_rm)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-4
    proxy_after, _ = rm_rewards(joint.rm.params, RM, rm_inputs)
    assert not np.allclose(proxy_after, proxy)


def test_no_valid_pair_rm_step_zero_gradient_by_default_or_skipped():
    import dataclasses
    import optax
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G, **RM_REWARD,
                     rm_update=RMUpdate())
    state = _state(True)
    before = jax.device_get(state.rm)
    # default (the reference): AdamW on zero gradients, so weight decay shrinks the weights
    new, metrics = jit_step(cfg, TX, RM_TX, donate=False)(state, _batch(2, (0, 0, 0, 0)))
    assert metrics["rm_valid_pairs"] == 0 and np.isfinite(metrics["rm_loss"])
    expected, _ = RM_TX.update(jax.tree_util.tree_map(np.zeros_like, before.params),
                               before.opt_state, before.params)
    _close(new.rm.params, optax.apply_updates(before.params, expected), atol=1e-7)
    assert max(np.abs(a - b).max() for a, b in zip(jax.tree_util.tree_leaves(new.rm.params),
                                                    jax.tree_util.tree_leaves(before.params))) > 0
    # rm_skip_no_pair: no RM step at all
    skip = dataclasses.replace(cfg, rm_update=RMUpdate(skip_no_pair=True))
    new, _ = jit_step(skip, TX, RM_TX, donate=False)(state, _batch(2, (0, 0, 0, 0)))
    _close(new.rm.params, before.params, atol=0)
    _close(new.rm.opt_state, before.opt_state, atol=0)


def test_equal_rewards_give_zero_advantage_and_no_nan():
    cfg = StepConfig(policy=XLA_POLICY, loss=rl.LossConfig(kl_coef=0.0), group_size=G)
    tx = make_optimizer(1e-2, weight_decay=0.0)
    policy = models.init_params(POLICY, jax.random.key(0))
    state = init_state(policy, tx)
    batch = _batch(3).replace(rewards=np.ones(G * PROMPTS, np.float32))
    new, metrics = jit_step(cfg, tx, donate=False)(state, batch)
    assert float(metrics["advantage_abs_mean"]) == 0.0
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) == 0.0
    _close(new.policy.params, policy, atol=0)


@pytest.mark.parametrize("controller", ["fixed", "adaptive"])
def test_kl_in_reward_and_its_controller(controller):
    # the reward loses coef * sum_t KL_t under the PRE-update coefficient; the adaptive
    # controller then moves the state's coefficient by the step's KL (verl's apply_kl_penalty)
    loss = rl.LossConfig(kl_coef=0.0, kl_estimator="k1")
    cfg = StepConfig(policy=XLA_POLICY, loss=loss, group_size=G,
                     kl_in_reward=True, kl_coef_in_reward=0.05, kl_controller=controller,
                     kl_target=1e-4, kl_horizon=200.0)
    state = _state(False)
    if controller == "adaptive":
        state = state.replace(kl_coef=jnp.float32(0.05))
    batch = _batch(2)
    new, metrics = jit_step(cfg, TX, donate=False)(state, batch)
    logp = step._logprobs(state.policy_weights(), cfg, batch)[0]
    ref = step._logprobs(state.ref_params, cfg, batch)[0]
    m = np.asarray(batch.mask, np.float32)
    kl = np.asarray(logp - ref) * m
    current = np.mean(kl.sum(-1) / m.sum(-1))
    np.testing.assert_allclose(metrics["kl_reward_penalty"], current, rtol=1e-4)
    np.testing.assert_allclose(metrics["kl_reward_coef"], 0.05, rtol=1e-6)
    expected_reward = np.mean(np.asarray(batch.rewards) - 0.05 * kl.sum(-1))
    np.testing.assert_allclose(metrics["reward_mean"], expected_reward, rtol=1e-4, atol=1e-7)
    if controller == "fixed":
        assert new.kl_coef is None
    else:
        error = np.clip(current / 1e-4 - 1, -0.2, 0.2)
        np.testing.assert_allclose(new.kl_coef, 0.05 * (1 + error * G * PROMPTS / 200.0),
                                   rtol=1e-5)
        assert float(new.kl_coef) != 0.05


def test_hybrid_reward_keeps_rule_strata():
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G, device_reward=RULE_THEN_RM, rm=RM,
                     reward_options=Options.of(weight=0.4))
    state = _state(True)
    batch = _batch(4)
    from coop_jax.trainer.step import compute_rewards
    rewards, _, _ = compute_rewards(state, cfg, jax.tree_util.tree_map(jnp.asarray, batch))
    rewards = np.asarray(rewards)
    rule = batch.rewards > 0.5
    assert np.all(rewards[rule] >= 0.6) and np.all(rewards[~rule] <= 0.4)


def test_behaviour_logprobs_replace_the_recomputed_old_logprobs():
    """rollout.overlap: the PPO ratio is taken against the sampler's log-probs when the batch
    carries them; equal ones give the on-policy step."""
    from coop_jax.trainer.step import _logprobs
    cfg = StepConfig(policy=XLA_POLICY, loss=rl.LossConfig(kl_coef=0.0), group_size=G)
    # plain SGD, so equal gradients give equal parameters within rounding: Adam's first step is
    # about lr * sign(g), which turns the last-bit noise of a near-zero gradient into a full step
    tx = optax.sgd(1e-2)
    state = init_state(models.init_params(POLICY, jax.random.key(0)), tx)
    batch = _batch(5)
    step = jit_step(cfg, tx, donate=False)
    on_policy, metrics = step(state, batch)
    assert float(metrics["ratio_mean"]) == pytest.approx(1.0, abs=1e-6)
    own = np.asarray(_logprobs(state.policy.params, cfg, batch)[0])
    same, same_metrics = step(state, batch.replace(behaviour=Behaviour(own)))
    _close(same.policy.params, on_policy.policy.params, atol=1e-6)
    assert float(same_metrics["loss"]) == pytest.approx(float(metrics["loss"]), abs=1e-6)
    # a behaviour policy 0.5 nats less likely on every token: ratio e^0.5, KL(old) 0.5^2 / 2
    _, stale = step(state, batch.replace(behaviour=Behaviour(own - 0.5)))
    assert float(stale["ratio_mean"]) == pytest.approx(np.exp(0.5), rel=1e-4)
    assert float(stale["approx_kl_old"]) == pytest.approx(0.125, rel=1e-4)


@pytest.mark.parametrize("shift, weight", [(np.log(3.0), 2.0), (-np.log(2.0), 0.5)])
def test_truncated_importance_sampling_weighs_the_loss_by_the_capped_ratio(shift, weight):
    """rl.tis_cap = 2: the old log-probs are the learner's (ratio 1 at the start, not the
    sampler's), and each token's loss is weighted by min(pi_learner / pi_sampler, 2); a sampler
    that found every token 3x less likely gives weight 2 (truncated), 2x more likely 0.5."""
    from coop_jax.trainer.step import _logprobs
    tx = make_optimizer(1e-2, weight_decay=0.0)
    state = init_state(models.init_params(POLICY, jax.random.key(0)), tx)
    batch = _batch(5)
    plain = StepConfig(policy=XLA_POLICY, loss=rl.LossConfig(kl_coef=0.0), group_size=G)
    tis = dataclasses.replace(plain, loss=rl.LossConfig(kl_coef=0.0, tis_cap=2.0))
    _, on_policy = jit_step(plain, tx, donate=False)(state, batch)
    own = np.asarray(_logprobs(state.policy.params, plain, batch)[0])
    sampled = batch.replace(behaviour=Behaviour(own - shift))
    assert step.uses_tis(tis, sampled) and not step.uses_tis(plain, sampled)
    assert not step.uses_tis(tis, batch)  # no sampler log-probs: nothing to weigh
    _, m = jit_step(tis, tx, donate=False)(state, sampled)
    assert float(m["ratio_mean"]) == pytest.approx(1.0, abs=1e-6)
    assert float(m["tis_weight_mean"]) == pytest.approx(weight, rel=1e-4)
    assert float(m["tis_truncated_frac"]) == (1.0 if weight == 2.0 else 0.0)
    assert float(m["tis_log_ratio_abs_mean"]) == pytest.approx(abs(shift), rel=1e-4)
    assert float(m["pg_loss"]) == pytest.approx(weight * float(on_policy["pg_loss"]), rel=1e-4)


@pytest.mark.parametrize("loss", [rl.LossConfig(kl_coef=0.0), LOSS,
                                  rl.LossConfig(kl_coef=0.0, ratio_level="sequence")])
def test_an_on_policy_step_reuses_the_loss_forward_for_the_old_logprobs(monkeypatch, loss):
    """One epoch, one mini-batch, no behaviour log-probs: the ratio is exactly 1, so the old
    log-probs are the loss forward's own (one policy forward pass fewer) and the update, the
    loss and every metric equal the step that recomputes them."""
    cfg = StepConfig(policy=XLA_POLICY, loss=loss, group_size=G)
    state, batch = _state(False), _batch(6)
    calls, real = [], step._logprobs
    monkeypatch.setattr(step, "_logprobs",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    reused, metrics = jit_step(cfg, TX, donate=False)(state, batch)
    reused_calls, calls[:] = len(calls), []
    two_pass = dataclasses.replace(cfg, reuse_loss_forward=False)
    recomputed, recomputed_metrics = jit_step(two_pass, TX, donate=False)(state, batch)
    assert step.old_is_current(cfg, batch) and not step.old_is_current(two_pass,
                                                                                   batch)
    assert reused_calls == len(calls) - 1
    _close(reused.policy.params, recomputed.policy.params, atol=1e-6)
    assert set(metrics) == set(recomputed_metrics)
    for key in metrics:
        np.testing.assert_allclose(metrics[key], recomputed_metrics[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)
    assert float(metrics["ratio_mean"]) == 1.0 and float(metrics["approx_kl_old"]) == 0.0


def test_the_old_logprob_pass_stays_where_the_ratio_can_differ():
    cfg = StepConfig(policy=POLICY, loss=LOSS, group_size=G)
    batch = _batch(0)
    assert step.old_is_current(cfg, batch)
    for changed in (dict(ppo_epochs=2), dict(num_minibatches=2), dict(micro_batches=2),
                    dict(num_views=2), dict(kl_in_reward=True), dict(log_kl_to_start=True),
                    dict(reuse_loss_forward=False)):
        assert not step.old_is_current(dataclasses.replace(cfg, **changed), batch), changed
    own = np.zeros(np.shape(batch.mask), np.float32)
    assert not step.old_is_current(cfg, batch.replace(behaviour=Behaviour(own)))


def test_behaviour_entropy_skips_the_old_logprob_forward(monkeypatch):
    """With the sampler's log-probs and entropies in the batch the step runs no forward pass for
    them: `rollout_entropy` is the behaviour policy's, and the update is the same."""
    cfg = StepConfig(policy=XLA_POLICY, loss=rl.LossConfig(kl_coef=0.0), group_size=G)
    tx = make_optimizer(1e-2, weight_decay=0.0)
    state = init_state(models.init_params(POLICY, jax.random.key(0)), tx)
    batch = _batch(5)
    own, entropy = (np.asarray(x) for x in step._logprobs(state.policy.params, cfg, batch))
    calls, real = [], step._logprobs
    monkeypatch.setattr(step, "_logprobs",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    recomputed, recomputed_metrics = jit_step(cfg, tx, donate=False)(
        state, batch.replace(behaviour=Behaviour(own)))
    traced_with_forward, calls[:] = len(calls), []
    given, metrics = jit_step(cfg, tx, donate=False)(
        state, batch.replace(behaviour=Behaviour(own, entropy + 1.0)))
    assert len(calls) == traced_with_forward - 1  # the update's own forward passes remain
    _close(given.policy.params, recomputed.policy.params, atol=1e-6)
    assert float(metrics["loss"]) == pytest.approx(float(recomputed_metrics["loss"]), abs=1e-6)
    assert float(metrics["rollout_entropy"]) == pytest.approx(
        float(recomputed_metrics["rollout_entropy"]) + 1.0, rel=1e-5)


@pytest.mark.parametrize("aggregation,ratio_level,views", [
    ("token_mean", "token", 1), ("seq_mean_token_mean", "sequence", 2),
    ("seq_mean_token_sum_norm", "token", 1)])
def test_micro_batches_give_the_same_update(aggregation, ratio_level, views):
    """rl.micro_batches=2 accumulates the mini-batch's gradient in halves with the mini-batch's
    own normalisers (global token count, sequence count or B * max_len): same update, metrics."""
    loss = rl.LossConfig(kl_coef=0.05, entropy_coef=0.01, clip_eps_high=0.28,
                         aggregation=aggregation, ratio_level=ratio_level)
    cfg = StepConfig(policy=XLA_POLICY, loss=loss, group_size=G, ppo_epochs=2,
                     num_minibatches=2 if views == 1 else 1, num_views=views)
    batch = _batch(7)
    batch = batch.replace(loss_weight=np.tile(np.float32([1.0, 0.5, 0.0, 1.0]), G))  # uneven
    batch.mask[4:8, 1:] = False  # micro-batches with very different token counts
    ref, ref_metrics = jit_step(cfg, TX, donate=False)(_state(False), batch)
    micro = dataclasses.replace(cfg, micro_batches=2)
    got, metrics = jit_step(micro, TX, donate=False)(_state(False), batch)
    _close(got.policy.params, ref.policy.params)
    for name in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio_mean", "grad_norm"):
        assert float(metrics[name]) == pytest.approx(float(ref_metrics[name]), rel=1e-4,
                                                     abs=1e-6), name
    with pytest.raises(ValueError, match="rl.micro_batches"):
        jit_step(dataclasses.replace(cfg, micro_batches=3), TX, donate=False)(_state(False),
                                                                               batch)


def test_cooper_rm_micro_batches_give_the_same_update():
    """cooper.micro_batches=2 (with rl.micro_batches=2): the RM's pair gradient accumulated in
    halves over the step's valid-pair count equals one pass; metrics too."""
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G, **RM_REWARD,
                     rm_update=RMUpdate())
    batch = _batch(2, valid_pairs=(1, 1, 0, 1))  # 2 valid pairs in one half, 1 in the other
    ref, ref_metrics = jit_step(cfg, TX, RM_TX, donate=False)(_state(True), batch)
    micro = dataclasses.replace(cfg, micro_batches=2, rm_update=RMUpdate(micro_batches=2))
    got, metrics = jit_step(micro, TX, RM_TX, donate=False)(_state(True), batch)
    _close(got.rm.params, ref.rm.params)
    _close(got.policy.params, ref.policy.params)
    for name in ("rm_loss", "rm_pair_acc_before", "rm_valid_pairs", "rm_grad_norm"):
        assert float(metrics[name]) == pytest.approx(float(ref_metrics[name]), rel=1e-5), name


def test_bradley_terry_loss_and_gradient_by_hand(monkeypatch):
    """A linear scorer, score = sum_t w[token_t] over the mask, on 2 valid pairs and 1 masked:
        pair 1: r+ = w1 + w3 = 3.0, r- = 2 w2 = -1.0, margin 4
        pair 2: r+ = w1 = 1.0, r- = w3 = 2.0, margin -1
    loss = (-log s(4) - log s(-1)) / 2 = (0.0181499 + 1.3132617) / 2 = 0.6657058, and
    dL/dw = -1/2 [(1 - s(4)) (e1 + e3 - 2 e2) + (1 - s(-1)) (e1 - e3)]
          = [0, -0.3745224, 0.0179862, 0.3565362]  (1 - s(4) = 0.0179862, 1 - s(-1) = 0.7310586).
    The masked third pair (margin -10) counts neither in the loss nor in the mean."""
    from coop_jax.rm.step import PairBatch
    monkeypatch.setattr(step.models, "reward_scores",
                        lambda params, cfg, tokens, mask: (params["w"][tokens] * mask).sum(-1))
    pairs = PairBatch(pos_tokens=jnp.array([[1, 3], [1, 0], [0, 0]]),
                      pos_mask=jnp.array([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]]),
                      neg_tokens=jnp.array([[2, 2], [3, 0], [3, 3]]),
                      neg_mask=jnp.array([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]),
                      valid=jnp.array([1.0, 1.0, 0.0]))
    params = {"w": jnp.array([0.0, 1.0, -0.5, 2.0])}
    (loss, metrics), grads = jax.value_and_grad(bradley_terry_loss, has_aux=True)(
        params, None, pairs)
    assert float(loss) == pytest.approx(0.6657058, abs=1e-6)
    np.testing.assert_allclose(grads["w"], [0.0, -0.3745224, 0.0179862, 0.3565362], atol=1e-6)
    assert float(metrics["rm_pair_acc"]) == 0.5 and float(metrics["rm_valid_pairs"]) == 2.0
    # as a micro-batch of a step with 4 valid pairs: the same sums over twice the count
    half, _ = bradley_terry_loss(params, None, pairs, num_valid=jnp.float32(4.0))
    assert float(half) == pytest.approx(0.6657058 / 2, abs=1e-6)


def _grouped(batch: TrainBatch) -> TrainBatch:
    """`batch` with every group's rows holding its first row's prompt (as rollouts do)."""
    same = lambda x: np.repeat(np.asarray(x)[::G], G, axis=0)
    return batch.replace(prompt_tokens=same(batch.prompt_tokens),
                         prompt_mask=same(batch.prompt_mask))


def _lora_state(cfg: StepConfig):
    from coop_jax.hf.build import add_adapters
    from coop_jax.models import lora
    base = models.init_params(POLICY, jax.random.key(0))
    policy, params = add_adapters(POLICY, base, lora.LoraConfig(rank=4, alpha=8.0),
                                  parallel.make_mesh((8, 1, 1)), jax.random.key(3))
    # B = 0 at the start would hide the adapters' gradient through the shared prompt
    params = jax.tree_util.tree_map_with_path(
        lambda p, x: x + 0.05 if p[-1].key == "lora_b" else x, params)
    frozen, trainable = lora.split(params, policy)
    return (dataclasses.replace(cfg, policy=policy, kl_to_base=True),
            init_state(trainable, TX, policy_base=frozen))


@pytest.mark.parametrize("case", ["cooper", "lora_minibatches", "micro_batches", "mesh"])
def test_a_prefix_shared_step_equals_the_unshared_step(monkeypatch, case):
    """rl.share_prompt_prefix: each prompt runs once for its G rollouts. The update (policy, RM)
    and every metric are the unshared step's to float32 rounding: with Cooper's RM, with LoRA
    (the KL reference is the frozen base) over 2 epochs x 2 mini-batches, with micro-batches
    (strided rows: only the whole-batch old/ref passes share) and on a (2, 2, 2) mesh."""
    calls = []
    grouped = step.grouped_response_logprobs
    monkeypatch.setattr(step, "grouped_response_logprobs",
                        lambda *a, **k: calls.append(a[2].shape[0]) or grouped(*a, **k))
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G,
                     reuse_loss_forward=False)
    batch, tx_args, state = _grouped(_batch(3)), (TX,), lambda: _state(False)
    kwargs = dict(donate=False)
    if case == "cooper":
        cfg = dataclasses.replace(cfg, **RM_REWARD, rm_update=RMUpdate())
        tx_args, state = (TX, RM_TX), lambda: _state(True)
    elif case == "lora_minibatches":
        cfg, lora_state = _lora_state(dataclasses.replace(cfg, ppo_epochs=2, num_minibatches=2))
        state = lambda: lora_state
    elif case == "micro_batches":
        cfg = dataclasses.replace(cfg, micro_batches=2)
    else:
        mesh = parallel.make_mesh((2, 2, 2))
        state = lambda: place_state(_state(False), mesh)
        kwargs.update(state_shardings=state_shardings(state()),
                      batch_sharding=parallel.batch_sharding(mesh, 1),
                      replicated=parallel.replicated(mesh))
    shared_cfg = dataclasses.replace(cfg, share_prompt_prefix=True)
    ref, ref_metrics = jit_step(cfg, *tx_args, **kwargs)(state(), batch)
    assert calls == []
    got, metrics = jit_step(shared_cfg, *tx_args, **kwargs)(state(), batch)
    rows = G * PROMPTS
    assert calls == {"cooper": [rows, rows, rows], "lora_minibatches": [rows, rows, rows // 2],
                     "micro_batches": [rows, rows], "mesh": [rows, rows, rows]}[case]
    _close(got.policy.params, ref.policy.params, atol=1e-6)
    if case == "cooper":
        _close(got.rm.params, ref.rm.params, atol=1e-6)
    for name in ref_metrics:
        assert float(metrics[name]) == pytest.approx(float(ref_metrics[name]), rel=2e-5,
                                                     abs=1e-7), name


def _rm_batch_with_shared_prefixes(seed: int, pairs_on_device: bool) -> TrainBatch:
    """`_grouped(_batch(seed))` whose RM inputs are real-looking: each group's rows start with
    the group's (question, reference) tokens (of 0-7 tokens), then their own completion (1-4
    tokens), right-padded to 16. Pairs are texts of the group's prefix plus a completion, or
    (`pairs_on_device`) rollout_hardest rows with a reference positive for groups 1 and 3."""
    from coop_jax.rm import cooper
    rng = np.random.default_rng(seed)
    batch, width = _grouped(_batch(seed)), 16
    heads = [rng.integers(1, 60, n).tolist() for n in (5, 0, 7, 3)]
    whole = lambda head: head + rng.integers(1, 60, rng.integers(1, 5)).tolist()
    pad = lambda rows: np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    rm_rows = [whole(heads[r // G]) for r in range(G * PROMPTS)]
    flat = batch.to_flat() | {"rm_tokens": pad(rm_rows), "rm_mask": pad(rm_rows) > 0}
    if pairs_on_device:
        labels = np.asarray(batch.rewards)
        labels[4:8] = 0  # group 1: no right rollout, so its positive is the reference
        pairs, _ = cooper.ranked_rollout_pairs(labels, G, 2, [False, True, False, True])
        refs = [whole(heads[i // 2]) if row < 0 else [] for i, row in enumerate(pairs.pos_row)]
        pairs = pairs.replace(pos_tokens=pad(refs), pos_mask=pad(refs) > 0,
                              neg_tokens=np.zeros((len(refs), width), np.int32),
                              neg_mask=np.zeros((len(refs), width), bool))
        flat = {k: v for k, v in flat.items() if not k.startswith("pair_")} | {
            "pair_" + k: v for k, v in vars(pairs).items() if v is not None}
        flat["rewards"] = labels
    else:
        pos, neg = ([whole(h) for h in heads] for _ in range(2))
        flat |= {"pair_pos_tokens": pad(pos), "pair_pos_mask": pad(pos) > 0,
                 "pair_neg_tokens": pad(neg), "pair_neg_mask": pad(neg) > 0}
    return TrainBatch.from_flat(flat)


@pytest.mark.parametrize("pairs_on_device", [False, True])
@pytest.mark.parametrize("mesh_shape", [None, (2, 2, 2)])
def test_the_rms_shared_prefix_gives_the_unshared_step(pairs_on_device, mesh_shape):
    """rl.share_prompt_prefix in the RM's half: each group's RM inputs cut after their shared
    prefix (`share_rm_prefix`) and trimmed to the batch give the whole inputs' step to float32
    rounding: the policy and RM updates, the pre- and post-update RM scores of the rollouts, and
    every metric; for pairs sent as texts and for pairs the step resolves from the rollouts
    (with reference positives), on one device and on a (data, fsdp, tensor) mesh."""
    from coop_jax.trainer.batch import share_rm_prefix, trim_padding
    batch = _rm_batch_with_shared_prefixes(5, pairs_on_device)
    cfg = StepConfig(policy=XLA_POLICY, loss=LOSS, group_size=G,
                     share_prompt_prefix=True, **RM_REWARD, rm_update=RMUpdate())
    shared, lengths = trim_padding(share_rm_prefix(batch, G), buckets=8)
    assert shared.rm.prefix_tokens is not None and lengths["rm"] < 16 and lengths["rm_prefix"] <= 8
    assert (shared.pairs.prefix_tokens is None) == pairs_on_device
    kwargs, state = dict(donate=False), lambda: _state(True)
    if mesh_shape:
        mesh = parallel.make_mesh(mesh_shape)
        state = lambda: place_state(_state(True), mesh)
        kwargs.update(state_shardings=state_shardings(state()),
                      batch_sharding=parallel.batch_sharding(mesh, 1),
                      replicated=parallel.replicated(mesh))
    ref, ref_out = step.jit_step(cfg, TX, RM_TX, **kwargs)(state(), batch)
    got, out = step.jit_step(cfg, TX, RM_TX, **kwargs)(state(), shared)
    _close(got.policy.params, ref.policy.params, atol=1e-6)
    _close(got.rm.params, ref.rm.params, atol=1e-6)
    _close(out.rm_scores, ref_out.rm_scores)
    _close(out.rm_scores_after, ref_out.rm_scores_after)
    assert float(ref_out.metrics["rm_valid_pairs"]) == np.sum(batch.pairs.valid) >= 3
    if pairs_on_device:  # a reference positive (pos_row -1) is among the trained pairs
        assert np.any((np.asarray(batch.pairs.pos_row) < 0) & (batch.pairs.valid > 0))
    for name in ref_out.metrics:
        assert float(out.metrics[name]) == pytest.approx(float(ref_out.metrics[name]), rel=2e-5,
                                                         abs=1e-7), name
