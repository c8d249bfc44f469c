"""reward.type=static_rm: sigmoid of a frozen reward model's score, computed in the step. Its
device half (`RM_SCORES`) is also Cooper's, whose RM the step trains."""
from __future__ import annotations

import numpy as np

from coop_jax.registry import Options, Param
from coop_jax.rm.step import rm_rewards
from coop_jax.trainer.rewards.source import RewardInputs, register_reward
from coop_jax.trainer.step import DeviceReward


def rm_scores(state, cfg, batch, threshold: bool = False):
    """(sigmoid(score) or its 0/1 threshold, raw scores, metrics) of the batch's RM inputs under
    the PRE-update RM in `state`."""
    proxy, scores = rm_rewards(state.rm_weights(), cfg.rm, batch.rm, cfg.group_size, threshold)
    return proxy, scores, {"proxy_reward_mean": proxy.mean(), "rm_score_mean": scores.mean()}


def _rm_reward(state, cfg, batch, options: Options):
    """sigmoid(score) (or its 0/1 threshold) under the PRE-update reward model."""
    proxy, scores, metrics = rm_scores(state, cfg, batch, options["threshold"])
    # the host compares the raw scores with the rollouts' rule labels (`rollouts.rm_label_metrics`)
    return proxy, metrics, scores


RM_SCORES = DeviceReward("rm", _rm_reward, needs_rm=True,
                         params=Options.of(threshold=Param("reward.threshold")))


@register_reward("static_rm", device=RM_SCORES, uses_rule_labels=False)
def _static_rm(x: RewardInputs):
    # the frozen RM scores on device; the batch's reward column is unused
    return [np.zeros(len(x.views[0]), np.float32)], {}
