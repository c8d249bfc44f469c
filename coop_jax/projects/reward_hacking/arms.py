"""The reward-hacking experiment's arms and which runs it expects (shared by the driver and its
report, so neither imports the other for them)."""
from __future__ import annotations

import numpy as np

from coop_jax.trainer import rewards

# arm -> (reward.type, cooper.negative); everything else is shared by all arms.
ARMS = {
    "rule": ("rule", None),
    "static_rm": ("static_rm", None),
    "cooper_rollout": ("cooper", "rollout"),
    "cooper_consistent_wrong": ("cooper", "consistent_wrong"),
    "cooper_perturb": ("cooper", "perturb"),
    # Not in configs/toy_hacking.py's default methods: the real LLM rewrite path with
    # SmolLM2-135M-Instruct as the assistant (`cooper.assistant_hf_path`), run for its keep rate
    # and cost per step.
    "cooper_rewrite": ("cooper", "rewrite"),
    # Not in the default methods: the calibration arm, a fair coin per rollout (reward.type
    # "random"), for how much of an arm's gain has nothing to do with its reward.
    "random": ("random", None),
    # Why Cooper reduced the hack without preventing it (beyond the paper; not in the default
    # methods; attempt 3's plan, docs/results/reward_hacking/attempt_3_plan.md): Cooper with the
    # RM's own hardest wrong rollout as the negative, alone and with the reference solution as
    # the positive of groups without a correct rollout (attempt 3's new arm); the sham control
    # (the new arm's pairs with half their labels swapped); and the two mechanism arms for the
    # all-wrong-group route (advantages without the std division, and the RM's reward
    # thresholded at 0.5).
    "cooper_rollout_hardest": ("cooper", "rollout_hardest"),
    "cooper_hardest_ref": ("cooper", "rollout_hardest"),
    "sham_cooper": ("cooper", "rollout_hardest"),
    "static_rm_drgrpo": ("static_rm", None),
    "static_rm_threshold": ("static_rm", None),
}
# arm -> further config fields that set it apart (dotted field -> value)
ARM_OVERRIDES = {
    "cooper_hardest_ref": {"cooper.reference_positive": True},
    "sham_cooper": {"cooper.reference_positive": True, "cooper.pair_label_noise": 0.5},
    "static_rm_drgrpo": {"rl.advantage": "drgrpo"},
    "static_rm_threshold": {"reward.threshold": True},
}


def _seeds(value) -> list[int]:
    """`--config.experiment.seeds=0` arrives as an int, `=0,2` or `=(0, 2)` as a tuple or text."""
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    parts = value.replace("(", "").replace(")", "").split(",") if isinstance(value, str) else value
    try:
        seeds = [int(s) for s in parts if str(s).strip()]
    except (TypeError, ValueError):
        seeds = []
    if not seeds or min(seeds) < 0:
        raise ValueError(f"config.experiment.seeds must be non-negative integers, e.g. 0,1,2; "
                         f"got {value!r}")
    return seeds


def _methods(value) -> list[str]:
    names = [value] if isinstance(value, str) else list(value)
    names = [n.strip() for name in names for n in name.split(",") if n.strip()]
    for n in names:
        if n not in ARMS:
            raise ValueError(f"config.experiment.methods: unknown arm {n!r}; one of {list(ARMS)}")
    return names


def expected_runs(config) -> dict[str, list[int]]:
    """arm -> the seeds the experiment runs it on: `experiment.methods` x `experiment.seeds`,
    the `random` arm only on the first `experiment.random_seeds` of them (0 or unset: all)."""
    e = config.experiment
    seeds, n_random = _seeds(e.seeds), int(e.get("random_seeds", 0) or 0)
    return {arm: seeds[:n_random] if arm == "random" and n_random else seeds
            for arm in _methods(e.methods)}


def run_config(config, arm: str, seed: int, policy_dir: str, rm_dir: str, heldout: str,
               probes: str = ""):
    """One run's config: `config` with the arm's reward, negative and overrides, the seed, the
    start policy, and (RM arms) the static RM and its held-out triples."""
    if arm not in ARMS:
        raise ValueError(f"config.experiment.methods: unknown arm {arm!r}; one of {list(ARMS)}")
    reward_type, negative = ARMS[arm]
    c = config.copy_and_resolve_references()
    c.seed = seed
    c.reward.type = reward_type
    if negative:
        c.cooper.negative = negative
    for field, value in ARM_OVERRIDES.get(arm, {}).items():
        section, name = field.split(".")
        c[section][name] = value
    c.model.hf_path = policy_dir
    c.sft.steps = 0
    if probes:
        c.probes.triples = probes
    if reward_type in rewards.rm_reward_types():
        c.rm.checkpoint = rm_dir
        c.rm.heldout_triples = heldout
    return c
