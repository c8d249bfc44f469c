"""The reward model's half of the compiled step (Cooper and the RM rewards): the RM's inputs of
the rollouts and its (positive, negative) pairs, the reward it gives, the pairs a strategy that
ranks by the pre-update RM resolves on device, and its Bradley-Terry update. `trainer.step` calls
these inside the one jitted step; nothing here knows the policy.
"""
from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import optax

from coop_jax import models
from coop_jax.models import lora
from coop_jax.optim import (ModelState, accumulate_gradients, apply_gradients, gradient_step,
                            split_micro_batches)

Array = jax.Array


class RMInputs(flax.struct.PyTreeNode):
    """The RM's input of each rollout (coop_jax.rm.input), whole, or with `prefix_tokens` cut
    after the prefix its group of G rows shares (`rm.input.split_groups`, rl.share_prompt_prefix):
    then `tokens` holds each row's own suffix, and the prefix runs once per group."""
    tokens: Array  # [R, L] right-padded
    mask: Array    # [R, L]
    prefix_tokens: Array | None = None  # [R, P] left-padded: the row's group's prefix
    prefix_mask: Array | None = None


class PairBatch(flax.struct.PyTreeNode):
    """Cooper's (positive, negative) RM inputs, one row per pair (k per prompt with
    `cooper.pairs_per_group`). A strategy that picks its negative on device by the pre-update
    RM's scores (`rollout_hardest`) sends rollout indices instead of texts: `pos_row` (the
    positive's row in its group), `neg_choices` (its group's candidate rows) and `neg_rank`
    (which of them, by score); the step fills the tokens from the rollouts' RM inputs
    (`resolve_pairs`). `swap`: 1 where the pair's labels are swapped (sham Cooper). With
    `prefix_tokens`, the pair's two inputs share that prefix and the token fields hold their
    suffixes (rl.share_prompt_prefix)."""
    pos_tokens: Array  # [N, L] RM input of each pair's positive
    pos_mask: Array
    neg_tokens: Array  # [N, L] ... and of its negative
    neg_mask: Array
    valid: Array       # [N] 1 where the pair is formed
    pos_row: Array | None = None      # [N] int32, in the pair's group
    neg_choices: Array | None = None  # [N, G] 1 for each candidate negative of the group
    neg_rank: Array | None = None     # [N] int32: 0 = the highest-scored candidate
    swap: Array | None = None         # [N] 1 = labels swapped
    prefix_tokens: Array | None = None  # [N, P] left-padded prefix of both inputs
    prefix_mask: Array | None = None


@dataclasses.dataclass(frozen=True)
class RMUpdate:
    """Cooper's RM update inside the step."""
    # a step without a valid pair: False = AdamW on zero gradients (the reference: moments decay,
    # weight decay applies), True = no RM step at all
    skip_no_pair: bool = False
    micro_batches: int = 1  # the pairs' gradient accumulated over this many micro-batches


def rollout_scores(rm_params, rm_cfg: models.ModelConfig, rm: RMInputs, group_size: int
                   ) -> Array:
    """[R] raw RM scores of the rollouts' RM inputs, each group's shared prefix run once where
    the inputs come split (`RMInputs.prefix_tokens`)."""
    if rm.prefix_tokens is None:
        return models.reward_scores(rm_params, rm_cfg, rm.tokens, rm.mask)
    return models.grouped_reward_scores(rm_params, rm_cfg, rm.prefix_tokens, rm.prefix_mask,
                                        rm.tokens, rm.mask, group_size)


def rm_rewards(rm_params, rm_cfg: models.ModelConfig, rm: RMInputs, group_size: int = 1,
               threshold: bool = False) -> tuple[Array, Array]:
    """(reward in [0, 1], raw score) of each rollout under the given RM parameters; `threshold`:
    the reward is 1[sigmoid(score) > 0.5] instead of sigmoid(score)."""
    scores = rollout_scores(rm_params, rm_cfg, rm, group_size)
    prob = jax.nn.sigmoid(scores)
    return (prob > 0.5).astype(jnp.float32) if threshold else prob, scores


def pair_scores(rm_params, rm_cfg: models.ModelConfig, pairs: PairBatch) -> tuple[Array, Array]:
    """([N], [N]) raw RM scores of each pair's positive and negative; with a shared prefix, the
    two suffixes of a pair (rows 2i and 2i + 1) attend to one run of it."""
    if pairs.prefix_tokens is None:
        return (models.reward_scores(rm_params, rm_cfg, pairs.pos_tokens, pairs.pos_mask),
                models.reward_scores(rm_params, rm_cfg, pairs.neg_tokens, pairs.neg_mask))
    width = max(pairs.pos_tokens.shape[1], pairs.neg_tokens.shape[1])
    pad = lambda x: jnp.pad(x, ((0, 0), (0, width - x.shape[1])))
    both = lambda a, b: jnp.stack([pad(a), pad(b)], axis=1).reshape(-1, width)
    scores = models.grouped_reward_scores(
        rm_params, rm_cfg, jnp.repeat(pairs.prefix_tokens, 2, axis=0),
        jnp.repeat(pairs.prefix_mask, 2, axis=0), both(pairs.pos_tokens, pairs.neg_tokens),
        both(pairs.pos_mask, pairs.neg_mask), 2).reshape(-1, 2)
    return scores[:, 0], scores[:, 1]


def bradley_terry_loss(rm_params, rm_cfg: models.ModelConfig, pairs: PairBatch,
                       num_valid: Array | None = None) -> tuple[Array, dict]:
    """mean over valid pairs of -log sigmoid(r_pos - r_neg); 0 (and no gradient) without pairs.
    `num_valid`: the mean's denominator when `pairs` is a micro-batch of the step's pairs (the
    step's valid-pair count); the losses of its micro-batches then add up to the step's."""
    pos, neg = pair_scores(rm_params, rm_cfg, pairs)
    valid = pairs.valid.astype(jnp.float32)
    count = valid.sum()
    n = jnp.maximum(count if num_valid is None else num_valid, 1.0)
    loss = -(jax.nn.log_sigmoid(pos - neg) * valid).sum() / n
    acc = ((pos > neg) * valid).sum() / n
    return loss, {"rm_loss": loss, "rm_pair_acc": acc, "rm_valid_pairs": count}


def resolve_pairs(pairs: PairBatch, rm: RMInputs, scores: Array, group_size: int) -> PairBatch:
    """The pairs the RM trains on. A pair sent as rollout indices (`PairBatch.neg_choices`) gets
    its negative's RM input from the rollouts: the candidate of rank `neg_rank` by the
    pre-update RM `scores` [R] (0: the highest; ties go to the first row); its positive is the
    rollout `pos_row`, or the host's `pos_tokens` where `pos_row` is -1. Then pairs marked
    `swap` exchange positive and negative."""
    if pairs.neg_choices is not None:
        per_group = pairs.valid.shape[0] * group_size // scores.shape[0]
        group = jnp.repeat(jnp.arange(scores.shape[0] // group_size), per_group)
        ranked = jnp.where(pairs.neg_choices > 0, scores.reshape(-1, group_size)[group], -jnp.inf)
        order = jnp.argsort(-ranked, axis=-1, stable=True)
        neg = jnp.take_along_axis(order, pairs.neg_rank[:, None], axis=-1)[:, 0]
        pos_rows = group * group_size + jnp.maximum(pairs.pos_row, 0)
        neg_rows = group * group_size + neg
        # pos_row -1: the host's positive (the reference solution) in pos_tokens; RM inputs are
        # right-padded, so the rollouts' and the host's are padded on the right to one length
        width = max(rm.tokens.shape[1], pairs.pos_tokens.shape[1])
        pad = lambda x: jnp.pad(x, ((0, 0), (0, width - x.shape[1])))
        own = pairs.pos_row[:, None] >= 0
        if rm.prefix_tokens is not None:  # the pair's prefix is its group's
            pairs = pairs.replace(prefix_tokens=rm.prefix_tokens[group * group_size],
                                  prefix_mask=rm.prefix_mask[group * group_size])
        pairs = pairs.replace(
            pos_tokens=jnp.where(own, pad(rm.tokens[pos_rows]), pad(pairs.pos_tokens)),
            pos_mask=jnp.where(own, pad(rm.mask[pos_rows]), pad(pairs.pos_mask)),
            neg_tokens=pad(rm.tokens[neg_rows]), neg_mask=pad(rm.mask[neg_rows]),
            pos_row=None, neg_choices=None, neg_rank=None)
    if pairs.swap is not None:
        swap = pairs.swap[:, None] > 0
        pairs = pairs.replace(
            pos_tokens=jnp.where(swap, pairs.neg_tokens, pairs.pos_tokens),
            pos_mask=jnp.where(swap, pairs.neg_mask, pairs.pos_mask),
            neg_tokens=jnp.where(swap, pairs.pos_tokens, pairs.neg_tokens),
            neg_mask=jnp.where(swap, pairs.pos_mask, pairs.neg_mask), swap=None)
    return pairs


def update(rm: ModelState, rm_base, rm_cfg: models.ModelConfig, opts: RMUpdate, rm_tx,
           pairs: PairBatch) -> tuple[ModelState, dict]:
    """One AdamW step of the RM (`rm`: its trainable part and optimiser state; `rm_base`: the
    frozen LoRA base or None) on the Bradley-Terry loss of `pairs`."""
    loss = lambda p, *args: bradley_terry_loss(lora.combine(rm_base, p), rm_cfg, *args)
    if opts.micro_batches == 1:
        updated, metrics, grads = gradient_step(loss, rm, rm_tx, pairs)
    else:  # the pairs' gradient accumulated over micro-batches, divided by the step's count
        if pairs.valid.shape[0] % opts.micro_batches:
            raise ValueError(f"cooper.micro_batches ({opts.micro_batches}) must divide the "
                             f"{pairs.valid.shape[0]} pairs of a step (prompts_per_step)")
        count = pairs.valid.astype(jnp.float32).sum()
        (_, metrics), grads = accumulate_gradients(
            lambda p, micro: loss(p, micro, count), rm.params,
            split_micro_batches(pairs, opts.micro_batches))
        updated = apply_gradients(rm, rm_tx, grads)
    new = updated  # no pair: the loss has zero gradient, AdamW still steps
    if opts.skip_no_pair:
        has_pairs = metrics["rm_valid_pairs"] > 0
        new = jax.tree_util.tree_map(lambda n, o: jnp.where(has_pairs, n, o), updated, rm)
    metrics["rm_grad_norm"] = optax.global_norm(grads)
    metrics["rm_pair_acc_before"] = metrics.pop("rm_pair_acc")
    return new, metrics
