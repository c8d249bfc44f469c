"""reward.type=random: the calibration arm, a fair coin per rollout.

Bernoulli(0.5), not the rule labels shuffled within the batch: a shuffle keeps the batch's reward
rate equal to the policy's accuracy, so the signal's strength would still follow the task; a
coin's is the same at every step (the "random reward" calibration of Shao et al. 2025, "Spurious
Rewards"). Rule labels are still computed, in the background, for rule_accuracy.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from coop_jax.registry import Param
from coop_jax.trainer.rewards.source import RewardInputs, register_reward


def random_rewards(seed: int, step: int, records: Sequence[dict], rows: int) -> np.ndarray:
    """Bernoulli(0.5) per rollout from a host RNG seeded by (seed, step, the prompts' ids): the
    same on a resumed step, different for a refill's prompts, independent of the texts."""
    ids = zlib.crc32("\n".join(str(r.get("id", r["question"])) for r in records).encode())
    rng = np.random.default_rng([int(seed), int(step), ids])
    return (rng.random(rows) < 0.5).astype(np.float32)


@register_reward("random", uses_rule_labels=False, params={"seed": Param("seed")})
def _random(x: RewardInputs):
    """Calibration: a fair coin per rollout, unrelated to the completion."""
    return [random_rewards(x.options["seed"], x.step, x.records, len(x.views[0]))], {}
