"""The typed contract between the host half of a step and the compiled update.

`TrainBatch` is what `train_step.train_step` consumes; `StepOutputs` is what it gives back beside
the new state. Rows are prompt-major (row r = rollout r % G of prompt r // G); with several trained
views (Co-rewarding-I) the view fields hold every view's rows, view-major. The optional groups are
`None` when a run does not use them, and their presence is part of the compiled program's
structure (a pytree), not a runtime switch:

  behaviour  the sampler's log-probs (and entropies) of the rollouts: rollout.overlap, whose
             rollouts come from the previous step's policy
  rm         the reward model's inputs of view 0's rollouts (RM rewards, Cooper)
  pairs      Cooper's (positive, negative) pair per prompt for the RM update

`TrainBatch.to_global` is the one place where host-local rows become global arrays
(`coop_jax.parallel.host`): host i holds block i of every field. `trim_padding` cuts the
columns that are padding in every row of every host before that, to one of a few lengths.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import flax.struct
import jax
import numpy as np

from coop_jax.parallel import host
from coop_jax.rm.step import PairBatch, RMInputs

Array = Any  # np.ndarray on the host, jax.Array after `to_global`


class Behaviour(flax.struct.PyTreeNode):
    logprobs: Array               # [R, T] the behaviour policy's log-probs of the rollouts
    entropy: Array | None = None  # [R, T] its entropies (None: the step recomputes them)


class TrainBatch(flax.struct.PyTreeNode):
    prompt_tokens: Array  # [R, P] left-padded prompts
    prompt_mask: Array    # [R, P]
    tokens: Array         # [R, T] the rollouts
    mask: Array           # [R, T] their valid tokens
    rewards: Array        # [R] host rewards (rule labels, pseudo-labels, ...)
    reward_bonus: Array   # [R] added to the rewards on device (overlong shaping)
    loss_weight: Array    # [R] per-row loss weight (overlong masking)
    behaviour: Behaviour | None = None
    rm: RMInputs | None = None
    pairs: PairBatch | None = None

    @property
    def num_rows(self) -> int:
        return self.tokens.shape[0]

    def groups_share_prompts(self, group_size: int) -> bool:
        """Whether every `group_size` consecutive rows hold one prompt (what a prefix-shared
        forward assumes)."""
        for field in (self.prompt_tokens, self.prompt_mask):
            groups = np.asarray(field).reshape((-1, group_size) + field.shape[1:])
            if not (groups == groups[:, :1]).all():
                return False
        return True

    def to_global(self, mesh, num_views: int = 1) -> "TrainBatch":
        """Every host's rows as one global batch on `mesh`: each field sharded by its rows
        (`host.row_sharding`); the view fields keep every host's view 0 before its view 1."""
        views = host.global_batch(self.replace(rm=None, pairs=None), mesh, parts=num_views)
        return views.replace(rm=host.global_batch(self.rm, mesh),
                             pairs=host.global_batch(self.pairs, mesh))

    @classmethod
    def concat_views(cls, views: list["TrainBatch"]) -> "TrainBatch":
        """One batch of several views' rows (view-major); the views carry no RM inputs or pairs."""
        return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *views)

    def to_flat(self) -> dict[str, Any]:
        """Every array under a flat name (`rm_tokens`, `pair_valid`, `behaviour_logprobs`, ...):
        the inverse of `from_flat`, for row-wise host code (dynamic sampling's group
        selection)."""
        flat = {k: v for k, v in vars(self).items() if k not in ("behaviour", "rm", "pairs")}
        for prefix, group in (("behaviour_", self.behaviour), ("rm_", self.rm),
                              ("pair_", self.pairs)):
            for k, v in vars(group).items() if group is not None else ():
                if v is not None:
                    flat[prefix + k] = v
        return flat

    @classmethod
    def from_flat(cls, arrays: Mapping[str, Any]) -> "TrainBatch":
        """A batch from flat names (`to_flat`), for arrays made elsewhere: shape structs of
        ahead-of-time compiles, test fixtures, rows selected on the host."""
        arrays = dict(arrays)
        group = lambda prefix: {k[len(prefix):]: arrays.pop(k) for k in list(arrays)
                                if k.startswith(prefix)}
        behaviour, rm, pairs = group("behaviour_"), group("rm_"), group("pair_")
        arrays.setdefault("reward_bonus", np.zeros(arrays["rewards"].shape, np.float32))
        arrays.setdefault("loss_weight", np.ones(arrays["rewards"].shape, np.float32))
        return cls(**arrays, behaviour=Behaviour(**behaviour) if behaviour else None,
                   rm=RMInputs(**rm) if rm else None, pairs=PairBatch(**pairs) if pairs else None)


class StepOutputs(flax.struct.PyTreeNode):
    """What the compiled step returns beside the new state."""
    metrics: dict                         # scalars of the step
    rm_scores: Array | None = None        # [R] the reward RM's raw scores of the rollouts
    rm_scores_after: Array | None = None  # [R] ... under the RM after this step's update
    advantages: Array | None = None       # [R] each rollout's advantage in this step's loss


# ---------------------------------------------------------------------- padding trimmed to the batch
# Each padded axis of a TrainBatch: the flat fields (`TrainBatch.to_flat`) cut along axis 1 and the
# masks whose valid columns must stay. Prompts are left-padded and the rest right-padded; the cut
# keeps a window of columns, so positions (from the masks) and every valid token are unchanged.
PADDED_AXES = (
    ("prompt", ("prompt_tokens", "prompt_mask"), ("prompt_mask",)),
    ("response", ("tokens", "mask", "behaviour_logprobs", "behaviour_entropy"), ("mask",)),
    ("rm", ("rm_tokens", "rm_mask"), ("rm_mask",)),
    ("pair", ("pair_pos_tokens", "pair_pos_mask", "pair_neg_tokens", "pair_neg_mask"),
     ("pair_pos_mask", "pair_neg_mask")),
)
ALIGN = 8  # bucket lengths are multiples of this (or the full length)


def bucket_lengths(full: int, buckets: int, align: int = ALIGN) -> tuple[int, ...]:
    """The lengths an axis of `full` columns may be cut to: `buckets` even steps up to `full`,
    each rounded up to a multiple of `align` (never past `full`)."""
    steps = (math.ceil(full * i / buckets) for i in range(1, buckets + 1))
    return tuple(sorted({min(full, align * math.ceil(n / align)) for n in steps}))


def valid_span(masks: Sequence[np.ndarray]) -> tuple[int, int]:
    """[first, last + 1) of the columns valid in some row of some mask; (full, 0) when none is."""
    cols = np.flatnonzero(np.any([np.asarray(m).astype(bool).any(axis=0) for m in masks], axis=0))
    return (int(cols[0]), int(cols[-1]) + 1) if cols.size else (masks[0].shape[1], 0)


def padding_window(span: tuple[int, int], full: int, buckets: int) -> tuple[int, int]:
    """(start, length) of the shortest bucket-length window of columns that holds `span`."""
    lo, hi = span
    length = next(n for n in bucket_lengths(full, buckets) if n >= hi - lo)
    return max(0, min(lo, full - length)), length


def trim_padding(batch: TrainBatch, buckets: int) -> tuple[TrainBatch, dict[str, int]]:
    """`batch` with each padded axis cut to a window of a bucket length that holds the valid
    columns of every row of every host (one small all-gather: every host cuts the same window,
    so the global arrays have one shape). Also returns each present axis's length."""
    flat = batch.to_flat()
    axes = [(name, fields, masks) for name, fields, masks in PADDED_AXES if masks[0] in flat]
    spans = np.asarray([valid_span([flat[m] for m in masks]) for _, _, masks in axes], np.int64)
    every = host.gather_rows(spans.reshape(1, -1)).reshape(-1, len(axes), 2)
    lengths = {}
    for (name, fields, masks), lo, hi in zip(axes, every[:, :, 0].min(0), every[:, :, 1].max(0)):
        full = flat[masks[0]].shape[1]
        start, lengths[name] = padding_window((int(lo), int(hi)), full, buckets)
        for f in fields:
            if f in flat:
                flat[f] = flat[f][:, start:start + lengths[name]]
    return TrainBatch.from_flat(flat), lengths
