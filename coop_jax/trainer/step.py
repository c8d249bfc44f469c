"""The compiled update: one `jax.jit` that carries the policy and, for Cooper, the reward model.

    rewards     <- batch rewards (rule / majority vote / ...) or sigmoid(RM) with the PRE-update RM
    old, ref    <- log-probs of the rollouts under the policy before the update (or, when the batch
                   carries `behaviour` log-probs, the sampler's, with no forward pass when they
                   come with their entropies) and under the reference
    advantages  <- group-relative (GRPO / Dr.GRPO / RLOO) over the G rollouts of each prompt, or
                   REINFORCE++'s batch-whitened ones
    policy      <- PPO epochs x minibatches (lax.scan) of the clipped loss, AdamW
    RM (Cooper) <- Bradley-Terry on the valid (positive, negative) pairs, its own AdamW

The batch is a `train_batch.TrainBatch` (rows prompt-major: row r is rollout r % G of prompt
r // G); the step returns the new state and `train_batch.StepOutputs`. The device reward
(`DeviceReward`, declared by its reward type in `trainer.rewards`) and the advantage estimator
(`rl.ADVANTAGES`) declare the parameters they read; `StepConfig` carries their values
(`reward_options`, `advantage_options`), so a new one is one registration.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax

from coop_jax import models, parallel, rl
from coop_jax.models import lora
from coop_jax.models.logprobs import grouped_response_logprobs, response_logprobs
from coop_jax.optim import (ModelState, accumulate_gradients, apply_gradients, gradient_step,
                            split_micro_batches)
from coop_jax.registry import Options, read_options
from coop_jax.rm import step as rm_step
from coop_jax.rm.step import PairBatch, RMUpdate, resolve_pairs
from coop_jax.trainer.batch import StepOutputs, TrainBatch

Array = jax.Array


class TrainState(flax.struct.PyTreeNode):
    step: Array
    policy: ModelState
    ref_params: Any = None  # frozen KL reference (None when kl_coef == 0, and with LoRA)
    rm: ModelState | None = None  # the co-trained reward model (Cooper)
    # LoRA (`model.lora`, `reward_model.lora`): the frozen base parameters; `policy.params` /
    # `rm.params` (and their AdamW state) are then only the trainable part (`models.lora.split`)
    policy_base: Any = None
    rm_base: Any = None
    # the KL-in-reward coefficient when a controller moves it (`rl.kl_controller` adaptive);
    # None: the fixed `StepConfig.kl_coef_in_reward`
    kl_coef: Any = None

    def policy_weights(self):
        """The policy's full parameter tree (the base with its adapters under LoRA)."""
        return lora.combine(self.policy_base, self.policy.params)

    def rm_weights(self):
        """The RM's full parameter tree (None without an RM)."""
        return None if self.rm is None else lora.combine(self.rm_base, self.rm.params)


# ---------------------------------------------------------------------- device rewards
@dataclasses.dataclass(frozen=True)
class DeviceReward:
    """How the step turns a batch into sequence rewards: `fn(state, cfg, batch, options)` ->
    (rewards [R], metrics, the RM's raw scores [R] or None). Each reward type declares its own
    (`trainer.rewards`); `params`: the options `fn` reads (`StepConfig.reward_options`), each
    from its config field."""
    name: str
    fn: Callable[..., tuple[Array, dict, Array | None]]
    needs_rm: bool = False
    params: Options = Options()  # option -> registry.Param

    def options_from_config(self, config) -> Options:
        """The values of the declared options in `config` (read by the entry point)."""
        return read_options(self.params, config)


def _host_rewards(state: TrainState, cfg: StepConfig, batch: TrainBatch, options: Options):
    """The host's rewards (rule labels, majority-vote pseudo-labels, ...)."""
    return batch.rewards.astype(jnp.float32), {}, None


HOST_REWARDS = DeviceReward("batch", _host_rewards)


@dataclasses.dataclass(frozen=True)
class StepConfig:
    policy: models.ModelConfig
    loss: rl.LossConfig
    group_size: int
    advantage: str = "grpo"
    advantage_options: Options = Options()  # the estimator's declared parameters
    temperature: float = 1.0
    ppo_epochs: int = 1
    num_minibatches: int = 1
    # each mini-batch's gradient accumulated over this many micro-batches (lax.scan): the same
    # update, one micro-batch's activations live at a time
    micro_batches: int = 1
    kl_in_reward: bool = False
    # LoRA: the KL reference is the policy's frozen base (`TrainState.policy_base`), no copy
    kl_to_base: bool = False
    kl_coef_in_reward: float = 0.0  # with kl_in_reward: reward -= coef * sum_t KL_t
    # with a moving coefficient (`TrainState.kl_coef`): its rule (rl.KL_CONTROLLERS) and options
    kl_controller: str = "fixed"
    kl_target: float = 0.1
    kl_horizon: float = 10000.0
    log_kl_to_start: bool = False  # the reference is the start policy: log KL to it (`kl_to_start`)
    device_reward: DeviceReward = HOST_REWARDS  # how the step computes rewards
    reward_options: Options = Options()  # the values of its declared parameters
    rm: models.ModelConfig | None = None
    rm_update: RMUpdate | None = None  # None: the RM is not trained in the step
    valid_vocab: int | None = None
    num_views: int = 1  # Co-rewarding-I: rows split into views whose losses are summed
    # where the old policy IS the policy being differentiated (see `old_is_current`), its
    # log-probs are the loss forward's own, stop-gradient, instead of a second forward pass
    reuse_loss_forward: bool = True
    # rows come in groups of group_size that share one prompt: each forward over whole groups
    # runs the prompt once (`models.logprobs.grouped_response_logprobs`)
    share_prompt_prefix: bool = False

    def __post_init__(self):
        reward = self.device_reward
        if (reward.needs_rm or self.rm_update is not None) and self.rm is None:
            raise ValueError("an RM reward or RM training needs StepConfig.rm")
        for name, value, declared, options in (
                ("device_reward", reward.name, reward.params, self.reward_options),
                ("advantage", self.advantage, rl.ADVANTAGES.params(self.advantage),
                 self.advantage_options)):
            missing = set(declared) - set(options)
            if missing:
                raise ValueError(f"StepConfig.{name}={value!r} needs the options "
                                 f"{sorted(missing)}")


def shares_prompt_prefix(cfg: StepConfig, num_rows: int, grouped: bool = True) -> bool:
    """Whether a forward over `num_rows` rows runs each group's prompt once: with
    `share_prompt_prefix`, groups of more than one row, and rows that are whole groups in order
    (`grouped`: not the strided rows of a micro-batch, `optim.split_micro_batches`)."""
    return (cfg.share_prompt_prefix and grouped and cfg.group_size > 1
            and num_rows % cfg.group_size == 0)


def _logprobs(params, cfg: StepConfig, rows, model: models.ModelConfig | None = None,
              grouped: bool = True):
    """(log-probs, entropies) of the rollouts of `rows` (a TrainBatch or a mini-batch dict) under
    `params` of the policy (or of `model`, e.g. the LoRA policy's base); `grouped`: the rows are
    whole groups in order."""
    get = (lambda k: rows[k]) if isinstance(rows, dict) else (lambda k: getattr(rows, k))
    args = (params, model or cfg.policy, get("prompt_tokens"), get("prompt_mask"), get("tokens"),
            get("mask"))
    kwargs = dict(temperature=cfg.temperature, valid_vocab=cfg.valid_vocab)
    if shares_prompt_prefix(cfg, get("tokens").shape[0], grouped):
        return grouped_response_logprobs(*args, group_size=cfg.group_size, **kwargs)
    return response_logprobs(*args, **kwargs)


def compute_rewards(state: TrainState, cfg: StepConfig, batch: TrainBatch
                    ) -> tuple[Array, dict, Array | None]:
    """(sequence rewards [R], metrics, raw RM scores or None) of the batch; RM rewards use the
    RM parameters in `state`."""
    return cfg.device_reward.fn(state, cfg, batch, cfg.reward_options)


# ---------------------------------------------------------------------- the updates
def _token_mean(values: Array, mask: Array) -> Array:
    return (values * mask).sum() / jnp.maximum(mask.sum(), 1)


def _policy_update(state: TrainState, cfg: StepConfig, tx, batch: TrainBatch, advantages: Array,
                   old_logp: Array | None, ref_logp: Array | None,
                   is_weights: Array | None = None) -> tuple[ModelState, dict]:
    """`old_logp` None: the old policy is the one being differentiated (`old_is_current`); the
    loss forward's own log-probs, stop-gradient, are the old ones, and its entropies give the
    `rollout_entropy` metric. `is_weights`: TIS's per-token weights (`uses_tis`)."""
    rows = advantages.shape[0]
    m = cfg.num_minibatches
    if (rows // m) % (cfg.micro_batches * cfg.num_views):
        raise ValueError(f"rl.micro_batches ({cfg.micro_batches}) x views ({cfg.num_views}) must "
                         f"divide the {rows // m} rows of each PPO mini-batch ({rows} rows / "
                         f"rl.num_minibatches {m})")
    split = lambda x: x.reshape((m, rows // m) + x.shape[1:])
    mb = {k: split(getattr(batch, k)) for k in ("prompt_tokens", "prompt_mask", "tokens", "mask",
                                                 "loss_weight")}
    mb["adv"] = split(advantages)
    if old_logp is not None:
        mb["old"] = split(old_logp)
    if ref_logp is not None:
        mb["ref"] = split(ref_logp)
    if is_weights is not None:
        mb["is_w"] = split(is_weights)

    views = lambda x: None if x is None else x.reshape((cfg.num_views, -1) + x.shape[1:])
    view_weights = lambda rows: views(rows["mask"] * rows["loss_weight"][:, None])

    def view_losses(params, rows):
        """Per-view policy losses [V] and metrics of `rows` (a mini- or micro-batch)."""
        logp, entropy = _logprobs(lora.combine(state.policy_base, params), cfg, rows,
                                  grouped=cfg.micro_batches == 1)
        old = rows["old"] if "old" in rows else jax.lax.stop_gradient(logp)
        losses, metrics = jax.vmap(
            lambda lp, old, adv, w, ref, ent, isw: rl.policy_loss(
                lp, old, adv, w, cfg.loss, ref_logp=ref, entropy=ent, is_weights=isw))(
            views(logp), views(old), views(rows["adv"]), view_weights(rows),
            views(rows.get("ref")), views(entropy), views(rows.get("is_w")))
        if "old" not in rows:  # the step's one policy forward: the rollouts' entropy is its own
            metrics["rollout_entropy"] = jnp.broadcast_to(jax.lax.stop_gradient(
                _token_mean(entropy, rows["mask"])), losses.shape)
        return losses, metrics

    def loss_fn(params, minibatch):
        losses, metrics = view_losses(params, minibatch)
        return losses.sum(), jax.tree_util.tree_map(jnp.mean, metrics)

    def micro_loss_fn(params, micro, whole):
        """A micro-batch's share of the mini-batch's loss and metrics: its values re-weighted
        by normaliser(micro) / normaliser(mini-batch) (`whole`), so that they sum to the
        mini-batch's (the token-mean denominator stays the mini-batch's token count)."""
        losses, metrics = view_losses(params, micro)
        share = jax.vmap(lambda w, n: rl.part_weights(rl.loss_normalisers(cfg.loss, w), n))(
            view_weights(micro), whole)
        metrics = jax.vmap(rl.weigh_metrics)(metrics, share)
        return (losses * share["agg"]).sum(), jax.tree_util.tree_map(jnp.mean, metrics)

    def minibatch_step(model: ModelState, minibatch):
        if cfg.micro_batches == 1:
            model, metrics, grads = gradient_step(loss_fn, model, tx, minibatch)
        else:
            whole = jax.vmap(lambda w: rl.loss_normalisers(cfg.loss, w))(view_weights(minibatch))
            (_, metrics), grads = accumulate_gradients(
                lambda p, micro: micro_loss_fn(p, micro, whole), model.params,
                split_micro_batches(minibatch, cfg.micro_batches))
            model = apply_gradients(model, tx, grads)
        metrics["grad_norm"] = optax.global_norm(grads)
        return model, metrics

    def epoch(model, _):
        return jax.lax.scan(minibatch_step, model, mb)

    policy, metrics = jax.lax.scan(epoch, state.policy, None, length=cfg.ppo_epochs)
    return policy, jax.tree_util.tree_map(jnp.mean, metrics)


def _rm_update(state: TrainState, cfg: StepConfig, rm_tx, pairs: PairBatch
               ) -> tuple[ModelState, dict]:
    return rm_step.update(state.rm, state.rm_base, cfg.rm, cfg.rm_update, rm_tx, pairs)


def old_is_current(cfg: StepConfig, batch: TrainBatch) -> bool:
    """True where the importance ratio is exactly 1, so no separate old-log-prob pass is needed:
    one epoch of one mini-batch (the update sees the parameters that sampled), rollouts of the
    current policy (no behaviour log-probs: not rollout.overlap), and nothing that reads the old
    log-probs before the update (KL in the reward, KL to the start). One micro-batch and one view,
    so that the rollouts' entropy metric is the whole batch's."""
    return (cfg.reuse_loss_forward and cfg.ppo_epochs == 1 and cfg.num_minibatches == 1
            and cfg.micro_batches == 1 and cfg.num_views == 1 and batch.behaviour is None
            and not cfg.kl_in_reward and not cfg.log_kl_to_start)


def uses_tis(cfg: StepConfig, batch: TrainBatch) -> bool:
    """Truncated importance sampling applies: `rl.tis_cap` is set and the batch carries the
    sampler's log-probs."""
    return cfg.loss.tis_cap is not None and batch.behaviour is not None


def _tis_logprobs(state: TrainState, cfg: StepConfig, batch: TrainBatch, metrics: dict
                  ) -> tuple[Array, Array, Array]:
    """(old log-probs, entropies, TIS weights): the old policy is the learner's view of the
    parameters before the update (a forward pass), and each token's weight is
    min(pi_learner / pi_sampler, cap) against the sampler's log-probs, as verl's rollout
    correction. Adds the weights' metrics."""
    old_logp, entropy = _logprobs(state.policy_weights(), cfg, batch)
    old_logp = jax.lax.stop_gradient(old_logp)
    weights, tis_metrics = rl.truncated_is_weights(old_logp, batch.behaviour.logprobs,
                                                   batch.mask, cfg.loss.tis_cap)
    metrics.update(tis_metrics)
    return old_logp, entropy, weights


def _old_logprobs(state: TrainState, cfg: StepConfig, batch: TrainBatch) -> tuple[Array, Array]:
    """(behaviour log-probs, entropies) of the rollouts, without gradient."""
    behaviour = batch.behaviour
    if behaviour is not None and behaviour.entropy is not None:
        # rollout.overlap: sampled by the previous step's policy, whose log-probs and entropies
        # the sampler returned: no forward pass to recompute them
        old_logp, entropy = behaviour.logprobs.astype(jnp.float32), \
            behaviour.entropy.astype(jnp.float32)
    else:
        old_logp, entropy = _logprobs(state.policy_weights(), cfg, batch)
        if behaviour is not None:  # pending rollouts saved without their entropies
            old_logp = behaviour.logprobs.astype(jnp.float32)
    return jax.lax.stop_gradient(old_logp), entropy


def kl_to_start(old_logp: Array, ref_logp: Array, mask: Array) -> dict:
    """KL(pi || pi_start) estimated on the rollouts (sampled from pi): `kl_to_start`, the mean
    over response tokens of the clamped k3 (>= 0, low variance), and `kl_to_start_seq`, the mean
    over rollouts of the summed k1 (unbiased for the sequence-level KL, Gao et al. 2022's x-axis
    as its square root)."""
    m = mask.astype(jnp.float32)
    k3 = rl.kl_penalty("low_var_kl", old_logp, ref_logp)
    k1 = rl.kl_penalty("k1", old_logp, ref_logp)
    return {"kl_to_start": _token_mean(k3, m),
            "kl_to_start_seq": (k1 * m).sum(-1).mean()}


def _kl_in_reward(state: TrainState, cfg: StepConfig, batch: TrainBatch, rewards, old_logp,
                  ref_logp, metrics: dict) -> tuple[Array, Array | None]:
    """(rewards - coef * sum_t KL_t, the next step's coefficient): the coefficient is the
    state's when a controller moves it, which then reads this step's KL (verl's
    `apply_kl_penalty`: the pre-update coefficient, the rollouts' mean token KL)."""
    kl = rl.kl_penalty(cfg.loss.kl_estimator, old_logp, ref_logp)
    coef = cfg.kl_coef_in_reward if state.kl_coef is None else state.kl_coef
    current = rl.reward_kl(kl, batch.mask)
    metrics.update(kl_reward_penalty=current, kl_reward_coef=jnp.asarray(coef, jnp.float32))
    new_coef = state.kl_coef
    if state.kl_coef is not None:
        new_coef = rl.KL_CONTROLLERS[cfg.kl_controller](
            state.kl_coef, current, batch.mask.shape[0], cfg.kl_target, cfg.kl_horizon)
    return rl.fold_kl_into_rewards(rewards, kl, batch.mask, coef), new_coef


def train_step(state: TrainState, batch: TrainBatch, *, cfg: StepConfig, tx, rm_tx=None
               ) -> tuple[TrainState, StepOutputs]:
    """One RL update. Bind `cfg`, `tx`, `rm_tx` with functools.partial, then jit (see
    `jit_step`)."""
    rewards, metrics, rm_scores = compute_rewards(state, cfg, batch)
    old_logp = entropy = is_weights = None  # None: the loss forward's own (`old_is_current`)
    if uses_tis(cfg, batch):
        old_logp, entropy, is_weights = _tis_logprobs(state, cfg, batch, metrics)
    elif not old_is_current(cfg, batch):
        old_logp, entropy = _old_logprobs(state, cfg, batch)
    kl_coef = state.kl_coef
    ref_logp = None
    ref, ref_model = state.ref_params, None
    if cfg.kl_to_base:
        ref, ref_model = state.policy_base, lora.without(cfg.policy)
    if ref is not None:
        ref_logp = jax.lax.stop_gradient(_logprobs(ref, cfg, batch, ref_model)[0])
        if cfg.kl_in_reward:
            rewards, kl_coef = _kl_in_reward(state, cfg, batch, rewards, old_logp, ref_logp,
                                             metrics)
        if cfg.log_kl_to_start:
            metrics.update(kl_to_start(old_logp, ref_logp, batch.mask))
    # a reference kept only for logging stays out of the loss (no "kl" term or metric)
    loss_ref = None if cfg.kl_in_reward or (cfg.log_kl_to_start and cfg.loss.kl_coef == 0) \
        else ref_logp
    rewards = rewards + batch.reward_bonus  # e.g. overlong shaping, computed on host
    groups = rewards.reshape(-1, cfg.group_size)
    tokens = jnp.sum(batch.mask > 0, axis=-1).reshape(groups.shape)  # REINFORCE++'s weights
    advantages = rl.compute_advantages(cfg.advantage, groups, tokens=tokens,
                                       **cfg.advantage_options).reshape(-1)

    policy, policy_metrics = _policy_update(state, cfg, tx, batch, advantages, old_logp, loss_ref,
                                            is_weights)
    metrics.update(policy_metrics)
    metrics.update(reward_mean=rewards.mean(), advantage_abs_mean=jnp.abs(advantages).mean())
    if entropy is not None:
        metrics["rollout_entropy"] = _token_mean(entropy, batch.mask)
    rm, rm_scores_after = state.rm, None
    if cfg.rm_update is not None:
        pairs = resolve_pairs(batch.pairs, batch.rm, rm_scores, cfg.group_size)
        rm, rm_metrics = _rm_update(state, cfg, rm_tx, pairs)
        metrics.update(rm_metrics)
        # the updated RM on the same rollouts: does the co-trained RM follow the policy?
        rm_scores_after = rm_step.rollout_scores(lora.combine(state.rm_base, rm.params), cfg.rm,
                                                 batch.rm, cfg.group_size)
    return (state.replace(step=state.step + 1, policy=policy, rm=rm, kl_coef=kl_coef),
            StepOutputs(metrics, rm_scores, rm_scores_after, advantages))


def init_state(policy_params, tx, *, ref_params=None, rm_params=None, rm_tx=None,
               policy_base=None, rm_base=None, kl_coef: float | None = None) -> TrainState:
    """`policy_params` / `rm_params`: what trains (the adapters under LoRA, with the frozen
    `policy_base` / `rm_base`); the optimizers' state covers only them. `kl_coef`: the
    KL-in-reward coefficient's start when a controller moves it (else None)."""
    rm = None
    if rm_params is not None:
        rm = ModelState(rm_params, rm_tx.init(rm_params) if rm_tx is not None else None)
    return TrainState(jnp.zeros((), jnp.int32), ModelState(policy_params, tx.init(policy_params)),
                      ref_params, rm, policy_base, rm_base,
                      None if kl_coef is None else jnp.asarray(kl_coef, jnp.float32))


place_state = parallel.place_on_mesh  # a TrainState on the mesh


def state_shardings(state: TrainState):
    return jax.tree_util.tree_map(lambda x: x.sharding, state)


def jit_step(cfg: StepConfig, tx, rm_tx=None, *, state_shardings=None, batch_sharding=None,
             replicated=None, donate: bool = True):
    """`train_step` under jit with explicit shardings (when given: the state's, the batch's as
    a TrainBatch of shardings, and a replicated one for the outputs) and the state donated."""
    fn = lambda state, batch: train_step(state, batch, cfg=cfg, tx=tx, rm_tx=rm_tx)
    donate_argnums = (0,) if donate else ()
    if state_shardings is None:
        return jax.jit(fn, donate_argnums=donate_argnums)
    return jax.jit(fn, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, replicated), donate_argnums=donate_argnums)
