"""DAPO dynamic sampling (host side, numpy): keep only groups whose rewards differ, refill.

A group whose G rewards are all equal has zero GRPO advantage and gives no policy gradient,
so it only dilutes the batch. ``fill_batch`` draws rollout batches until ``target_groups``
informative groups are collected.

Shortfall policy (``max_draws`` reached with fewer informative groups than ``target_groups``):
the batch is topped up with the most recent *uninformative* groups (latest draw first). They
have zero advantage, so they add no policy gradient and, unlike repeating kept groups, do not
over-weight any prompt; this is exactly what plain GRPO without dynamic sampling would train
on. If no informative group was found at all, the result is therefore the last draw
unfiltered (its first ``target_groups`` groups, topped up from earlier draws if it is short).
Only if all draws together held fewer than ``target_groups`` groups are the collected groups
repeated cyclically. The output always has exactly ``target_groups`` groups.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Batch = dict[str, np.ndarray]


def informative_groups(rewards: np.ndarray) -> np.ndarray:
    """Bool [n]: True where the rewards of the group (row) are not all equal. Exact equality,
    no tolerance: the rule under which the advantage estimators give a group exactly 0
    (`rl.advantages.constant_groups`), so a kept group always has a non-zero advantage and a
    dropped one never had any."""
    rewards = np.asarray(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [n, G], got shape {rewards.shape}")
    if rewards.shape[1] == 0:
        return np.zeros(rewards.shape[0], bool)
    return np.max(rewards, axis=1) > np.min(rewards, axis=1)  # NaN compares False: dropped


def _check_draw(batch: Batch, keys: frozenset | None, draw_idx: int) -> int:
    if not isinstance(batch, dict) or "rewards" not in batch:
        raise ValueError(f"draw {draw_idx}: draw() must return a dict with key 'rewards'")
    if keys is not None and frozenset(batch) != keys:
        raise ValueError(
            f"draw {draw_idx}: keys {sorted(batch)} differ from first draw's {sorted(keys)}"
        )
    n = np.asarray(batch["rewards"]).shape[0]
    for k, v in batch.items():
        if np.ndim(v) == 0 or np.shape(v)[0] != n:
            raise ValueError(
                f"draw {draw_idx}: {k!r} has leading dim {np.shape(v)[:1]}, expected {n} groups"
            )
    return n


def _take(batch: Batch, idx: np.ndarray) -> Batch:
    return {k: np.asarray(v)[idx] for k, v in batch.items()}


def _concat(parts: list[Batch], keys: frozenset) -> Batch:
    return {k: np.concatenate([p[k] for p in parts], axis=0) for k in keys}


def fill_batch(
    draw: Callable[[], Batch], target_groups: int, max_draws: int
) -> tuple[Batch, dict[str, int]]:
    """Collect ``target_groups`` informative groups from up to ``max_draws`` calls of ``draw``.

    Each draw returns arrays with a leading group dim, including ``rewards [n, G]``. Returns
    the batch (every array with leading dim ``target_groups``; kept groups first, in draw
    order) and stats: draws, groups_seen, groups_informative, groups_kept, groups_padded.
    See the module docstring for the shortfall policy.
    """
    if not isinstance(target_groups, int) or target_groups <= 0:
        raise ValueError(f"target_groups must be a positive int, got {target_groups!r}")
    if not isinstance(max_draws, int) or max_draws <= 0:
        raise ValueError(f"max_draws must be a positive int, got {max_draws!r}")

    keys: frozenset | None = None
    kept: list[Batch] = []
    discarded: list[Batch] = []
    n_kept = seen = informative = draws = 0
    while draws < max_draws and n_kept < target_groups:
        batch = draw()
        n = _check_draw(batch, keys, draws)
        keys = frozenset(batch)
        draws += 1
        seen += n
        mask = informative_groups(batch["rewards"])
        informative += int(mask.sum())
        kept.append(_take(batch, np.flatnonzero(mask)))
        discarded.append(_take(batch, np.flatnonzero(~mask)))
        n_kept += int(mask.sum())

    assert keys is not None
    if seen == 0:
        raise ValueError(f"fill_batch: {draws} draw(s) returned no groups at all")
    out = _concat(kept, keys)
    n_out = min(n_kept, target_groups)
    if n_kept < target_groups:
        pad = _concat(discarded[::-1], keys)  # latest draw's uninformative groups first
        out = _concat([out, pad], keys)
        if seen < target_groups:
            out = _take(out, np.arange(target_groups) % seen)
    out = _take(out, np.arange(target_groups))
    stats = {
        "draws": draws,
        "groups_seen": seen,
        "groups_informative": informative,
        "groups_kept": n_out,
        "groups_padded": target_groups - n_out,
    }
    return out, stats
