"""The compiled update: one `jax.jit` that carries the policy and, for Cooper, the reward model.

    rewards     <- batch rewards (rule / majority vote / ...) or sigmoid(RM) with the PRE-update RM
    old, ref    <- log-probs of the rollouts under the policy before the update (or, when the batch
                   carries `behaviour_logprobs`, the sampler's, with no forward pass when it
                   also carries `behaviour_entropy`) and under the reference
    advantages  <- group-relative (GRPO / Dr.GRPO / RLOO) over the G rollouts of each prompt
    policy      <- PPO epochs x minibatches (lax.scan) of the clipped loss, AdamW
    RM (Cooper) <- Bradley-Terry on the valid (positive, negative) pairs, its own AdamW

A batch is a dict of arrays whose rows are prompt-major: row r is rollout r % G of prompt r // G.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from coop_jax import models, rl
from coop_jax.registry import Registry
from coop_jax.models.logprobs import response_logprobs

Array = jax.Array


class ModelState(flax.struct.PyTreeNode):
    params: Any
    opt_state: Any


class TrainState(flax.struct.PyTreeNode):
    step: Array
    policy: ModelState
    ref_params: Any = None  # frozen KL reference (None when kl_coef == 0)
    rm: ModelState | None = None  # the co-trained reward model (Cooper)


@dataclasses.dataclass(frozen=True)
class StepConfig:
    policy: models.ModelConfig
    loss: rl.LossConfig
    group_size: int
    advantage: str = "grpo"
    temperature: float = 1.0
    ppo_epochs: int = 1
    num_minibatches: int = 1
    kl_in_reward: bool = False
    reward_source: str = "batch"  # "batch" | "rm" | "hybrid"
    rm: models.ModelConfig | None = None
    rm_threshold: bool = False  # reward = 1[sigmoid(score) > 0.5] instead of sigmoid(score)
    hybrid_rm_weight: float = 0.5
    train_rm: bool = False
    # a step without a valid pair: False = AdamW on zero gradients (the reference: moments decay,
    # weight decay applies), True = no RM step at all
    rm_skip_no_pair: bool = False
    kernel_impl: str = "auto"
    valid_vocab: int | None = None
    num_views: int = 1  # Co-rewarding-I: rows split into views whose losses are summed
    kl_coef_in_reward: float = 0.0  # with kl_in_reward: reward -= coef * sum_t KL_t
    # each mini-batch's gradient accumulated over this many micro-batches (lax.scan): the same
    # update, one micro-batch's activations live at a time
    micro_batches: int = 1
    rm_micro_batches: int = 1  # the same for the Cooper RM's Bradley-Terry pairs

    def __post_init__(self):
        if self.reward_source not in DEVICE_REWARDS:
            raise ValueError(f"StepConfig.reward_source must be one of {sorted(DEVICE_REWARDS)}, "
                             f"got {self.reward_source!r}")
        if (self.reward_source != "batch" or self.train_rm) and self.rm is None:
            raise ValueError("an RM reward or RM training needs StepConfig.rm")


def _constant_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    del total_steps
    return optax.join_schedules([optax.linear_schedule(0.0, learning_rate, warmup_steps),
                                 optax.constant_schedule(learning_rate)], [warmup_steps])


def _cosine_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    return optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(warmup_steps, 0),
                                              max(total_steps, warmup_steps + 1))


def _linear_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    """Linear decay from the peak to 0 at `total_steps` (the VerifyRM reference's schedule)."""
    decay = max(total_steps - warmup_steps, 1)
    return optax.join_schedules([optax.linear_schedule(0.0, learning_rate, warmup_steps),
                                 optax.linear_schedule(learning_rate, 0.0, decay)],
                                [warmup_steps])


# learning-rate schedules after a linear warm-up: (peak, warmup_steps, total_steps) -> schedule
SCHEDULES = Registry("optim.schedule", {"constant": _constant_schedule,
                                        "cosine": _cosine_schedule, "linear": _linear_schedule})


def make_optimizer(learning_rate: float, *, warmup_steps: int = 0, total_steps: int = 0,
                   schedule: str = "constant", weight_decay: float = 0.0, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-8,
                   grad_clip: float = 0.0) -> optax.GradientTransformation:
    """AdamW with linear warm-up then constant or cosine decay, after global-norm clipping."""
    lr = SCHEDULES.lookup(schedule, "schedule")(learning_rate, warmup_steps, total_steps)
    parts = [optax.clip_by_global_norm(grad_clip)] if grad_clip > 0 else []
    return optax.chain(*parts, optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


def apply_gradients(model: ModelState, tx, grads) -> ModelState:
    updates, opt_state = tx.update(grads, model.opt_state, model.params)
    return ModelState(optax.apply_updates(model.params, updates), opt_state)


def gradient_step(loss_fn, model: ModelState, tx, *args) -> tuple[ModelState, Any, Any]:
    """One optimizer step on `loss_fn(params, *args) -> (loss, aux)`: (new state, aux, grads)."""
    (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(model.params, *args)
    return apply_gradients(model, tx, grads), aux, grads


def split_micro_batches(tree, micro_batches: int):
    """Rows [R, ...] -> [micro_batches, R / micro_batches, ...]; micro-batch k takes rows k,
    k + M, k + 2M, ...: each stays spread over the shards of a row-sharded batch."""
    return jax.tree_util.tree_map(
        lambda x: jnp.swapaxes(x.reshape((-1, micro_batches) + x.shape[1:]), 0, 1), tree)


def accumulate_gradients(loss_fn, params, micro) -> tuple[tuple[Any, Any], Any]:
    """((loss, aux), grads) of `loss_fn(params, micro_batch) -> (loss, aux)`, each summed over
    the leading axis of `micro` by `lax.scan`: one micro-batch's activations live at a time."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                   jax.eval_shape(grad_fn, params, first))

    def body(total, micro_batch):
        return jax.tree_util.tree_map(jnp.add, total, grad_fn(params, micro_batch)), None

    return jax.lax.scan(body, zeros, micro)[0]


def rm_rewards(rm_params, cfg: StepConfig, tokens: Array, mask: Array) -> tuple[Array, Array]:
    """(reward in [0, 1], raw score) of each rollout under the given RM parameters."""
    scores = models.reward_scores(rm_params, cfg.rm, tokens, mask)
    prob = jax.nn.sigmoid(scores)
    return (prob > 0.5).astype(jnp.float32) if cfg.rm_threshold else prob, scores


PAIR_KEYS = ("pair_pos_tokens", "pair_pos_mask", "pair_neg_tokens", "pair_neg_mask", "pair_valid")


def bradley_terry_loss(rm_params, rm_cfg: models.ModelConfig, batch: dict,
                       num_valid: Array | None = None) -> tuple[Array, dict]:
    """mean over valid pairs of -log sigmoid(r_pos - r_neg); 0 (and no gradient) without pairs.
    `num_valid`: the mean's denominator when `batch` is a micro-batch of the step's pairs (the
    step's valid-pair count); the losses of its micro-batches then add up to the step's."""
    pos = models.reward_scores(rm_params, rm_cfg, batch["pair_pos_tokens"], batch["pair_pos_mask"])
    neg = models.reward_scores(rm_params, rm_cfg, batch["pair_neg_tokens"], batch["pair_neg_mask"])
    valid = batch["pair_valid"].astype(jnp.float32)
    count = valid.sum()
    n = jnp.maximum(count if num_valid is None else num_valid, 1.0)
    loss = -(jax.nn.log_sigmoid(pos - neg) * valid).sum() / n
    acc = ((pos > neg) * valid).sum() / n
    return loss, {"rm_loss": loss, "rm_pair_acc": acc, "rm_valid_pairs": count}


def _logprobs(params, cfg: StepConfig, batch: dict):
    return response_logprobs(params, cfg.policy, batch["prompt_tokens"], batch["prompt_mask"],
                             batch["tokens"], batch["mask"], temperature=cfg.temperature,
                             impl=cfg.kernel_impl, valid_vocab=cfg.valid_vocab)


def _batch_rewards(state: TrainState, cfg: StepConfig, batch: dict) -> tuple[Array, dict]:
    """The host's rewards (rule labels, majority-vote pseudo-labels, ...)."""
    return batch["rewards"].astype(jnp.float32), {}


def _rm_scores(state: TrainState, cfg: StepConfig, batch: dict) -> tuple[Array, Array, dict]:
    proxy, scores = rm_rewards(state.rm.params, cfg, batch["rm_tokens"], batch["rm_mask"])
    metrics = {"proxy_reward_mean": proxy.mean(), "rm_score_mean": scores.mean()}
    if "rule_labels" in batch:
        rule = batch["rule_labels"].astype(jnp.float32)
        metrics["rm_rule_agreement"] = jnp.mean((scores > 0) == (rule > 0.5))
    else:  # rule labels still being computed on the host: it compares them with these
        metrics["rm_scores"] = scores
    return proxy, scores, metrics


def _rm_reward(state: TrainState, cfg: StepConfig, batch: dict) -> tuple[Array, dict]:
    """sigmoid(score) (or its 0/1 threshold) under the PRE-update reward model."""
    proxy, _, metrics = _rm_scores(state, cfg, batch)
    return proxy, metrics


def _hybrid_reward(state: TrainState, cfg: StepConfig, batch: dict) -> tuple[Array, dict]:
    """The rule decides the stratum, the RM orders rollouts inside it:
    correct -> [1 - w, 1], incorrect -> [0, w]."""
    _, scores, metrics = _rm_scores(state, cfg, batch)
    rule = batch["rewards"].astype(jnp.float32)
    w = cfg.hybrid_rm_weight
    return rule * (1.0 - w) + w * jax.nn.sigmoid(scores), metrics


# StepConfig.reward_source -> (state, cfg, batch) -> (sequence rewards [R], metrics)
DEVICE_REWARDS = {"batch": _batch_rewards, "rm": _rm_reward, "hybrid": _hybrid_reward}


def compute_rewards(state: TrainState, cfg: StepConfig, batch: dict) -> tuple[Array, dict]:
    """Sequence rewards [R] of the batch; RM rewards use the RM parameters in `state`."""
    return DEVICE_REWARDS[cfg.reward_source](state, cfg, batch)


def _policy_update(state: TrainState, cfg: StepConfig, tx, batch: dict, advantages: Array,
                   old_logp: Array, ref_logp: Array | None) -> tuple[ModelState, dict]:
    rows = advantages.shape[0]
    m = cfg.num_minibatches
    if (rows // m) % (cfg.micro_batches * cfg.num_views):
        raise ValueError(f"rl.micro_batches ({cfg.micro_batches}) x views ({cfg.num_views}) must "
                         f"divide the {rows // m} rows of each PPO mini-batch ({rows} rows / "
                         f"rl.num_minibatches {m})")
    split = lambda x: x.reshape((m, rows // m) + x.shape[1:])
    mb = {k: split(batch[k]) for k in ("prompt_tokens", "prompt_mask", "tokens", "mask")}
    mb["loss_weight"] = split(batch["loss_weight"])
    mb["adv"], mb["old"] = split(advantages), split(old_logp)
    if ref_logp is not None:
        mb["ref"] = split(ref_logp)

    views = lambda x: None if x is None else x.reshape((cfg.num_views, -1) + x.shape[1:])
    view_weights = lambda rows: views(rows["mask"] * rows["loss_weight"][:, None])

    def view_losses(params, rows):
        """Per-view policy losses [V] and metrics of `rows` (a mini- or micro-batch)."""
        logp, entropy = _logprobs(params, cfg, rows)
        return jax.vmap(
            lambda lp, old, adv, w, ref, ent: rl.policy_loss(lp, old, adv, w, cfg.loss,
                                                             ref_logp=ref, entropy=ent))(
            views(logp), views(rows["old"]), views(rows["adv"]), view_weights(rows),
            views(rows.get("ref")), views(entropy))

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


def _rm_update(state: TrainState, cfg: StepConfig, rm_tx, batch: dict) -> tuple[ModelState, dict]:
    if cfg.rm_micro_batches == 1:
        updated, metrics, grads = gradient_step(bradley_terry_loss, state.rm, rm_tx, cfg.rm,
                                                batch)
    else:  # the pairs' gradient accumulated over micro-batches, divided by the step's count
        pairs = {k: batch[k] for k in PAIR_KEYS}
        if pairs["pair_valid"].shape[0] % cfg.rm_micro_batches:
            raise ValueError(f"cooper.micro_batches ({cfg.rm_micro_batches}) must divide the "
                             f"{pairs['pair_valid'].shape[0]} pairs of a step (prompts_per_step)")
        count = batch["pair_valid"].astype(jnp.float32).sum()
        (_, metrics), grads = accumulate_gradients(
            lambda p, micro: bradley_terry_loss(p, cfg.rm, micro, count), state.rm.params,
            split_micro_batches(pairs, cfg.rm_micro_batches))
        updated = apply_gradients(state.rm, rm_tx, grads)
    new = updated  # no pair: the loss has zero gradient, AdamW still steps
    if cfg.rm_skip_no_pair:
        has_pairs = metrics["rm_valid_pairs"] > 0
        new = jax.tree_util.tree_map(lambda n, o: jnp.where(has_pairs, n, o), updated, state.rm)
    metrics["rm_grad_norm"] = optax.global_norm(grads)
    metrics["rm_pair_acc_before"] = metrics.pop("rm_pair_acc")
    return new, metrics


def train_step(state: TrainState, batch: dict, *, cfg: StepConfig, tx, rm_tx=None
               ) -> tuple[TrainState, dict]:
    """One RL update. Bind `cfg`, `tx`, `rm_tx` with functools.partial, then jit (see
    `jit_step`)."""
    rewards, metrics = compute_rewards(state, cfg, batch)
    if "behaviour_entropy" in batch:  # rollout.overlap: sampled by the previous step's policy,
        # whose log-probs and entropies the sampler returned: no forward pass to recompute them
        old_logp = batch["behaviour_logprobs"].astype(jnp.float32)
        entropy = batch["behaviour_entropy"].astype(jnp.float32)
    else:
        old_logp, entropy = _logprobs(state.policy.params, cfg, batch)
        if "behaviour_logprobs" in batch:  # pending rollouts saved without their entropies
            old_logp = batch["behaviour_logprobs"].astype(jnp.float32)
    old_logp = jax.lax.stop_gradient(old_logp)
    ref_logp = None
    if state.ref_params is not None:
        ref_logp = jax.lax.stop_gradient(_logprobs(state.ref_params, cfg, batch)[0])
        if cfg.kl_in_reward:
            kl = rl.kl_penalty(cfg.loss.kl_estimator, old_logp, ref_logp)
            rewards = rl.fold_kl_into_rewards(rewards, kl, batch["mask"], cfg.kl_coef_in_reward)
    if "reward_bonus" in batch:  # e.g. overlong shaping, computed on host from lengths
        rewards = rewards + batch["reward_bonus"]
    groups = rewards.reshape(-1, cfg.group_size)
    advantages = rl.compute_advantages(cfg.advantage, groups).reshape(-1)

    policy, policy_metrics = _policy_update(state, cfg, tx, batch, advantages, old_logp,
                                            None if cfg.kl_in_reward else ref_logp)
    metrics.update(policy_metrics)
    metrics.update(reward_mean=rewards.mean(), advantage_abs_mean=jnp.abs(advantages).mean(),
                   rollout_entropy=(entropy * batch["mask"]).sum() / jnp.maximum(
                       batch["mask"].sum(), 1))
    rm = state.rm
    if cfg.train_rm:
        rm, rm_metrics = _rm_update(state, cfg, rm_tx, batch)
        metrics.update(rm_metrics)
    return state.replace(step=state.step + 1, policy=policy, rm=rm), metrics


def init_state(policy_params, tx, *, ref_params=None, rm_params=None, rm_tx=None) -> TrainState:
    rm = None
    if rm_params is not None:
        rm = ModelState(rm_params, rm_tx.init(rm_params) if rm_tx is not None else None)
    return TrainState(jnp.zeros((), jnp.int32), ModelState(policy_params, tx.init(policy_params)),
                      ref_params, rm)


def place_state(state: TrainState, mesh) -> TrainState:
    """Every leaf on `mesh`: parameters keep their named shardings, the rest (step counters,
    optimizer counts) is replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    def place(x):
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
            return x
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))

    return jax.tree_util.tree_map(place, state)


def state_shardings(state: TrainState):
    return jax.tree_util.tree_map(lambda x: x.sharding, state)


def jit_step(cfg: StepConfig, tx, rm_tx=None, *, state_shardings=None, batch_sharding=None,
             replicated=None, donate: bool = True):
    """`train_step` under jit with explicit shardings (when given) and the state donated."""
    fn = lambda state, batch: train_step(state, batch, cfg=cfg, tx=tx, rm_tx=rm_tx)
    donate_argnums = (0,) if donate else ()
    if state_shardings is None:
        return jax.jit(fn, donate_argnums=donate_argnums)
    return jax.jit(fn, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, replicated), donate_argnums=donate_argnums)
