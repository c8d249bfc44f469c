"""reward.type=majority_vote (TTRL): the group's majority answer is every rollout's label."""
from __future__ import annotations

from coop_jax.trainer.rewards.source import RewardInputs, register_reward
from coop_jax.trainer.rewards.voting import VOTE, pseudo_label_accuracy, vote


@register_reward("majority_vote", **VOTE)
def _majority_vote(x: RewardInputs):
    """TTRL: the majority answer of the group is every rollout's label."""
    rewards, pseudo = vote(x, x.extracted, x.extracted)
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}
