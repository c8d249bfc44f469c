"""reward.type=cooper: the RM's reward, with the RM co-trained in the same step on the
(positive, negative) pairs that `rm.cooper` builds from the rule labels."""
from __future__ import annotations

from coop_jax.registry import Param
from coop_jax.trainer.rewards.source import RewardInputs, register_reward
from coop_jax.trainer.rewards.static_rm import RM_SCORES

# the step's RM update (`rm.step.RMUpdate`); cooper.no_pair_step="skip" leaves the RM unchanged
# on a step without a pair
COOPER_RM_UPDATE = {"skip_no_pair": Param("cooper.no_pair_step", lambda v: v == "skip"),
                    "micro_batches": Param("cooper.micro_batches")}


@register_reward("cooper", device=RM_SCORES, rm_update=COOPER_RM_UPDATE)
def _cooper(x: RewardInputs):
    # the rule labels go with the batch to build the RM's pairs; the policy's reward is the RM's
    return [x.labels], {}
