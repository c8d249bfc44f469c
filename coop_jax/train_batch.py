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
(`coop_jax.parallel.host`): host i holds block i of every field.
"""
from __future__ import annotations

from typing import Any, Mapping

import flax.struct
import jax
import numpy as np

from coop_jax.parallel import host

Array = Any  # np.ndarray on the host, jax.Array after `to_global`


class Behaviour(flax.struct.PyTreeNode):
    logprobs: Array               # [R, T] the behaviour policy's log-probs of the rollouts
    entropy: Array | None = None  # [R, T] its entropies (None: the step recomputes them)


class RMInputs(flax.struct.PyTreeNode):
    tokens: Array  # [R, L] the RM's input of each rollout (coop_jax.rm_input)
    mask: Array    # [R, L]


class PairBatch(flax.struct.PyTreeNode):
    pos_tokens: Array  # [B, L] RM input of each prompt's positive
    pos_mask: Array
    neg_tokens: Array  # [B, L] ... and of its negative
    neg_mask: Array
    valid: Array       # [B] 1 where the prompt has a pair


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
