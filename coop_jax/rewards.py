"""Host-side reward sources: rule labels, majority-vote (TTRL / Co-rewarding) pseudo-labels.

Rows are prompt-major (row r = rollout r % G of prompt r // G). The device-side RM rewards
(static_rm / cooper / hybrid) live in `coop_jax.train_step`; the pairs for Cooper in
`coop_jax.cooper`.
"""
from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

# reward.type -> where the per-rollout reward of the update comes from
REWARD_SOURCE = {
    "rule": "batch", "majority_vote": "batch", "corewarding_1": "batch",
    "corewarding_2": "batch", "static_rm": "rm", "cooper": "rm", "hybrid": "hybrid",
}


def normalize_answer(answer: str | None) -> str | None:
    """Exact-string comparison as in Co-rewarding, after removing all whitespace."""
    if answer is None:
        return None
    answer = "".join(answer.split())
    return answer or None


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """Most common non-empty answer (ties: the one seen first); None if all are empty."""
    counts = collections.Counter(a for a in map(normalize_answer, answers) if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in map(normalize_answer, answers) if a is not None and counts[a] == best)


def match_rewards(answers: Sequence[str | None], labels: Sequence[str | None]) -> np.ndarray:
    """1.0 where the answer equals its label as an exact string (no label -> 0)."""
    return np.array([float(lab is not None and normalize_answer(a) == lab)
                     for a, lab in zip(answers, labels)], np.float32)


def group_majority_labels(answers: Sequence[str | None], group_size: int) -> list[str | None]:
    """The majority answer of each group of `group_size` consecutive rows."""
    if len(answers) % group_size:
        raise ValueError(f"{len(answers)} answers do not split into groups of {group_size}")
    return [majority_answer(answers[i:i + group_size]) for i in range(0, len(answers), group_size)]


def rule_labels(verifier, references: Sequence[str], texts: Sequence[str]
                ) -> tuple[np.ndarray, list[str | None], int]:
    """(0/1 labels, extracted answers, timeouts) from the process-pool rule verifier."""
    results = verifier.verify_batch_detailed(list(references), list(texts))
    labels = np.array([float(r.correct) for r in results], np.float32)
    return labels, [r.extracted for r in results], sum(bool(r.timed_out) for r in results)
