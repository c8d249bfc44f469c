"""reward.type=rule: the rule verifier's 0/1 label of each rollout."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from coop_jax.trainer.rewards.source import RewardInputs, register_reward


def rule_labels(verifier, references: Sequence[str], texts: Sequence[str]
                ) -> tuple[np.ndarray, list[str | None], int]:
    """(0/1 labels, extracted answers, timeouts) from the process-pool rule verifier."""
    results = verifier.verify_batch_detailed(list(references), list(texts))
    labels = np.array([float(r.correct) for r in results], np.float32)
    return labels, [r.extracted for r in results], sum(bool(r.timed_out) for r in results)


@register_reward("rule")
def _rule(x: RewardInputs):
    return [x.labels], {}
