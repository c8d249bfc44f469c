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
columns that are padding in every row of every host before that, to one of a few lengths;
`share_rm_prefix` first cuts the RM's inputs after the prefix that each group shares.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import flax.struct
import jax
import numpy as np

from coop_jax.parallel import host
from coop_jax.rm.input import shared_prefix_lengths, split_at, split_groups
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
    ("rm_prefix", ("rm_prefix_tokens", "rm_prefix_mask"), ("rm_prefix_mask",)),
    ("pair_prefix", ("pair_prefix_tokens", "pair_prefix_mask"), ("pair_prefix_mask",)),
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


# ---------------------------------------------------------------------- the RM's shared prefix
def _group_prefix_lengths(batch: TrainBatch, group_size: int) -> np.ndarray:
    """[groups] the prefix every RM input of a group shares: its rollouts' and, for pairs whose
    positive is the host's reference solution (pos_row -1), that positive's too."""
    rm, pairs = batch.rm, batch.pairs
    rows = [np.asarray(rm.tokens).reshape(-1, group_size, rm.tokens.shape[1])]
    masks = [np.asarray(rm.mask).reshape(rows[0].shape).astype(bool)]
    if pairs is not None and pairs.neg_choices is not None:
        per_group = len(pairs.valid) // rows[0].shape[0]
        reference = (np.asarray(pairs.pos_row) < 0)[:, None] & np.asarray(pairs.pos_mask, bool)
        rows.append(np.asarray(pairs.pos_tokens).reshape(-1, per_group, pairs.pos_tokens.shape[1]))
        masks.append(reference.reshape(rows[1].shape))
    width = max(r.shape[2] for r in rows)
    pad = lambda x: np.pad(x, ((0, 0), (0, 0), (0, width - x.shape[2])))
    tokens, mask = (np.concatenate([pad(x) for x in xs], axis=1) for xs in (rows, masks))
    return shared_prefix_lengths(tokens.reshape(-1, width), mask.reshape(-1, width),
                                 tokens.shape[1])


def share_rm_prefix(batch: TrainBatch, group_size: int) -> TrainBatch:
    """`batch` with its RM inputs cut after the prefix each group shares (the question and the
    reference, and whatever the completions share), so the step runs it once per group
    (`RMInputs.prefix_tokens`); Cooper's pairs likewise: pairs resolved on device from the
    rollouts take their group's prefix there, and their host positives are cut at it; pairs
    sent as texts share the prefix of their two inputs (`PairBatch.prefix_tokens`). Token
    values and order are unchanged: [prefix | suffix] is each whole input. Every axis is as wide
    as the whole input (`trim_padding` then cuts them to the batch)."""
    rm, pairs = batch.rm, batch.pairs
    lengths = _group_prefix_lengths(batch, group_size)
    prefix, prefix_mask, suffix, suffix_mask = split_groups(rm.tokens, rm.mask, group_size,
                                                            lengths)
    rm = RMInputs(suffix, suffix_mask, prefix, prefix_mask)
    if pairs is not None and pairs.neg_choices is not None:
        per_group = len(pairs.valid) // len(lengths)
        _, _, suffix, suffix_mask = split_at(pairs.pos_tokens, pairs.pos_mask,
                                             np.repeat(lengths, per_group))
        pairs = pairs.replace(pos_tokens=suffix, pos_mask=suffix_mask)
    elif pairs is not None:
        width = max(pairs.pos_tokens.shape[1], pairs.neg_tokens.shape[1])
        pad = lambda x: np.pad(np.asarray(x), ((0, 0), (0, width - np.shape(x)[1])))
        both = lambda a, b: np.stack([pad(a), pad(b)], axis=1).reshape(-1, width)
        prefix, prefix_mask, suffix, suffix_mask = split_groups(
            both(pairs.pos_tokens, pairs.neg_tokens), both(pairs.pos_mask, pairs.neg_mask), 2)
        pairs = pairs.replace(pos_tokens=suffix[::2], pos_mask=suffix_mask[::2],
                              neg_tokens=suffix[1::2], neg_mask=suffix_mask[1::2],
                              prefix_tokens=prefix[::2], prefix_mask=prefix_mask[::2])
    return batch.replace(rm=rm, pairs=pairs)
