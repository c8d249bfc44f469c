"""The reward model's optimiser, one builder for both trainers of the RM: Cooper's co-training
(the `cooper` section) and coop-train-rm (the `rm_train` section). Each reads its section into
`RMOptimizerSettings` with its own warm-up rounding; `rm_optimizer` builds the optax transform
(`coop_jax.optim.make_optimizer`)."""
from __future__ import annotations

import dataclasses
import math

import optax

from coop_jax.optim import make_optimizer


@dataclasses.dataclass(frozen=True)
class RMOptimizerSettings:
    """AdamW for the RM: a linear warm-up of `warmup_steps` to `learning_rate`, then `schedule`
    (an `optim.SCHEDULES` name) until `total_steps`; weight decay on the parameters
    `weight_decay_mask` (an `optim.WEIGHT_DECAY_MASKS` name) selects; global-norm clip
    `grad_clip` (0: off)."""
    learning_rate: float
    warmup_steps: int
    total_steps: int
    schedule: str = "constant"
    weight_decay: float = 0.0
    weight_decay_mask: str = "all"
    grad_clip: float = 0.0

    @classmethod
    def for_cooper(cls, cooper, steps: int) -> "RMOptimizerSettings":
        """Cooper's (`config.cooper`, a run of `steps` steps): warm-up over `warmup_ratio` of the
        run rounded up, then constant; every parameter decayed."""
        return cls(cooper.learning_rate, math.ceil(cooper.warmup_ratio * steps), steps,
                   weight_decay=cooper.weight_decay, grad_clip=cooper.grad_clip)

    @classmethod
    def for_rm_training(cls, rm_train, total_steps: int) -> "RMOptimizerSettings":
        """coop-train-rm's (`config.rm_train`, `total_steps` steps): warm-up over `warmup_ratio`
        of the steps rounded down, then `rm_train.schedule`, with its weight-decay mask."""
        r = rm_train
        return cls(r.learning_rate, int(r.warmup_ratio * total_steps), total_steps, r.schedule,
                   r.weight_decay, r.weight_decay_mask, r.grad_clip)


def rm_optimizer(settings: RMOptimizerSettings) -> optax.GradientTransformation:
    s = settings
    return make_optimizer(s.learning_rate, warmup_steps=s.warmup_steps,
                          total_steps=s.total_steps, schedule=s.schedule,
                          weight_decay=s.weight_decay, weight_decay_mask=s.weight_decay_mask,
                          grad_clip=s.grad_clip)
