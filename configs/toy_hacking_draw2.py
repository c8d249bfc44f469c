"""Attempt 3 of the reward-hacking plan, draw 2 (docs/results/reward_hacking/attempt_3_plan.md):
an independent replication. Everything is configs/toy_hacking.py's recipe, the corpus's
agreement filter and competence gate included, with a new draw of the inputs: another SFT start
(seed 100), other character SFT generators for the offline corpus (seeds 101-103, same
corruption and steps), another static-RM training seed, and its own results folder. Setting A
was chosen by draw 1's headroom check, so draw 2 does not check again.

    python -m coop_jax.projects.reward_hacking --config=configs/toy_hacking_draw2.py \
        --workdir=runs/hacking_draw2 --commit
"""
import os

from coop_jax.config import load_config_file

TOY_HACKING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toy_hacking.py")


def get_config():
    c = load_config_file(TOY_HACKING)
    c.seed = 100  # the SFT start, the corpus's questions and splits (each run sets its own seed)
    c.rm_train.seed = 1
    c.experiment.update(
        methods="rule,static_rm,cooper_consistent_wrong,cooper_hardest_ref",
        corpus_sft_policies="seed=101; seed=102,corrupt=0.2; seed=103,corrupt=0.9,steps=150",
        headroom_max_accuracy=0.0,
        results_dir="docs/results/reward_hacking/draw_2")
    return c
