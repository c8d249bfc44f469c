"""reward.type=corewarding_1 (Co-rewarding-I): two views of each prompt (the question and its
rephrasing), each labelled by the other view's majority answer."""
from __future__ import annotations

from coop_jax.trainer.rewards.source import RewardInputs, register_reward
from coop_jax.trainer.rewards.voting import VOTE, pseudo_label_accuracy, vote


@register_reward("corewarding_1", num_views=2, **VOTE)
def _corewarding_1(x: RewardInputs):
    """Co-rewarding-I: each view is labelled by the other view's majority answer."""
    extracted2 = x.verifier.extract_batch(x.views[1])
    rewards, pseudo = vote(x, x.extracted, extracted2)    # label for x from x'
    rewards2, _ = vote(x, extracted2, x.extracted)        # label for x' from x
    return [rewards, rewards2], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records,
                                                                                pseudo)}
