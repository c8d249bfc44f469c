"""reward.type=hybrid: the rule decides the stratum, the RM orders rollouts inside it."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from coop_jax.registry import Options, Param
from coop_jax.trainer.rewards.source import RewardInputs, register_reward
from coop_jax.trainer.rewards.static_rm import rm_scores
from coop_jax.trainer.step import DeviceReward


def _hybrid_reward(state, cfg, batch, options: Options):
    """correct -> [1 - w, 1], incorrect -> [0, w], ordered by sigmoid(RM score)."""
    _, scores, metrics = rm_scores(state, cfg, batch)
    w = options["weight"]
    rule = batch.rewards.astype(jnp.float32)
    return rule * (1.0 - w) + w * jax.nn.sigmoid(scores), metrics, scores


RULE_THEN_RM = DeviceReward("hybrid", _hybrid_reward, needs_rm=True,
                            params=Options.of(weight=Param("reward.hybrid_rm_weight")))


@register_reward("hybrid", device=RULE_THEN_RM)
def _hybrid(x: RewardInputs):
    """Rule labels on the host; the device ranks rollouts inside each rule stratum by the RM."""
    return [x.labels], {}
