"""Answer voting, shared by the label-free reward types (TTRL's majority vote, Co-rewarding-I
and -II): how extracted answers are compared (`reward.vote_match`), each group's majority answer
and the rewards of matching it."""
from __future__ import annotations

import collections
from typing import Callable, Sequence

import numpy as np

from coop_jax.registry import Param, Registry
from coop_jax.trainer.rewards.source import VOTE_EXTRACTION, RewardInputs
from coop_jax.verify import answers_equivalent


def _exact(answer: str) -> str:
    return answer.strip()


def _no_whitespace(answer: str) -> str:
    return "".join(answer.split())


# `reward.vote_match`: how the voting rewards compare extracted answers. The references compare
# them as exact strings; "no_whitespace" also lets `\frac {1}{2}` and `\frac{1}{2}` vote together.
ANSWER_MATCHES: Registry[Callable[[str], str]] = Registry("reward.vote_match")
ANSWER_MATCHES.register("exact", _exact, doc="exact strings (the references), ends stripped")
ANSWER_MATCHES.register("no_whitespace", _no_whitespace, doc="exact strings after removing all "
                        "whitespace")

# the registration fields every voting reward type shares
VOTE = dict(extraction=VOTE_EXTRACTION, params={"match": Param("reward.vote_match")})


def normalize_answer(answer: str | None, match: str = "exact") -> str | None:
    """The answer as `match` compares it; None for no (or an empty) answer."""
    if answer is None:
        return None
    return ANSWER_MATCHES.lookup(match)(answer) or None


def majority_answer(answers: Sequence[str | None], match: str = "exact") -> str | None:
    """Most common non-empty answer (ties: the one seen first); None if all are empty."""
    keys = [normalize_answer(a, match) for a in answers]
    counts = collections.Counter(a for a in keys if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in keys if a is not None and counts[a] == best)


def match_rewards(answers: Sequence[str | None], labels: Sequence[str | None],
                  match: str = "exact") -> np.ndarray:
    """1.0 where the answer equals its label under `match` (no label -> 0)."""
    return np.array([float(lab is not None and normalize_answer(a, match) == lab)
                     for a, lab in zip(answers, labels)], np.float32)


def group_majority_labels(answers: Sequence[str | None], group_size: int,
                          match: str = "exact") -> list[str | None]:
    """The majority answer of each group of `group_size` consecutive rows."""
    if len(answers) % group_size:
        raise ValueError(f"{len(answers)} answers do not split into groups of {group_size}")
    return [majority_answer(answers[i:i + group_size], match)
            for i in range(0, len(answers), group_size)]


def pseudo_label_accuracy(records: Sequence[dict], pseudo: Sequence[str | None]) -> float:
    """Fraction of prompts whose majority-vote label is equivalent to the reference."""
    truth = [normalize_answer(r["reference"], "no_whitespace") for r in records]
    return float(np.mean([p is not None and answers_equivalent(t, p)
                          for p, t in zip(pseudo, truth)]))


def vote(x: RewardInputs, answers, labels_from) -> tuple[np.ndarray, list[str | None]]:
    """(rewards of `answers` for matching their group's majority of `labels_from`, the
    majority answer of each group)."""
    match = x.options["match"]
    pseudo = group_majority_labels(labels_from, x.group_size, match)
    return match_rewards(answers, np.repeat(pseudo, x.group_size).tolist(), match), pseudo
