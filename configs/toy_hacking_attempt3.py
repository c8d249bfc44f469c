"""Attempt 3 of the reward-hacking plan, draw 1 (docs/results/reward_hacking/attempt_3_plan.md):
attempt 2's committed start policy and static RM, with the new arms only. Every setting is
configs/toy_hacking.py's; the run selection is the one difference, so these runs sit beside
attempt 2's in docs/results/reward_hacking/runs/ and pair with them by seed.

    python -m coop_jax.projects.reward_hacking --config=configs/toy_hacking_attempt3.py \
        --workdir=runs/hacking --commit
"""
import os

from coop_jax.config import load_config_file

TOY_HACKING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toy_hacking.py")


def get_config():
    c = load_config_file(TOY_HACKING)
    # hard-negative Cooper with the reference positive; its sham control; the mechanism arm
    c.experiment.methods = "cooper_hardest_ref,sham_cooper,static_rm_drgrpo"
    return c
