"""reward.type=corewarding_2 (Co-rewarding-II): labels are the majority answers of an EMA
teacher of the policy, which is also the KL reference; the teacher moves once per step."""
from __future__ import annotations

import math
from typing import Any

import jax

from coop_jax.registry import Options, Param
from coop_jax.trainer.rewards.source import VOTE_EXTRACTION, RewardInputs, register_reward
from coop_jax.trainer.rewards.voting import VOTE, pseudo_label_accuracy, vote

_ema = jax.jit(lambda teacher, policy, a: jax.tree_util.tree_map(
    lambda t, p: (a * p + (1 - a) * t).astype(t.dtype), teacher, policy))


def corewarding_decay(step: int, a_start: float, a_end: float, total: int) -> float:
    """a_k = a_end + 0.5 (a_start - a_end)(1 + cos(pi t / T)), t = clip(k - 1, 0, T), k = step+1."""
    total = max(int(total), 1)
    t = min(max(step, 0), total)
    return a_end + 0.5 * (a_start - a_end) * (1 + math.cos(math.pi * t / total))


def ema_teacher_update(state, step: int, options: Options) -> tuple[Any, dict]:
    """Co-rewarding-II: teacher <- a_k * policy + (1 - a_k) * teacher, once per step."""
    o = options
    a = corewarding_decay(step, o["a_start"], o["a_end"], o["decay_steps"] or o["steps"])
    teacher = _ema(state.ref_params, state.policy.params, a)
    return state.replace(ref_params=teacher), {"teacher_decay": a}


@register_reward("corewarding_2", needs_teacher=True, before_step=ema_teacher_update,
                 extraction=VOTE_EXTRACTION, params=VOTE["params"] | {
                     "a_start": Param("corewarding.a_start"), "a_end": Param("corewarding.a_end"),
                     "decay_steps": Param("corewarding.decay_steps"),
                     "steps": Param("train.steps")})
def _corewarding_2(x: RewardInputs):
    """Co-rewarding-II: labels are the majority answers of the EMA teacher's rollouts."""
    rewards, pseudo = vote(x, x.extracted, x.verifier.extract_batch(x.teacher))
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}
