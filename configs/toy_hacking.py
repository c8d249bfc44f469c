"""Reward-hacking experiment on the synthetic task (CPU, 2 cores): rule vs static RM vs Cooper
with rollout / consistent_wrong / perturb negatives, one SFT start, one static RM, 3 seeds.
See coop_jax/experiments/reward_hacking.py.

    python -m coop_jax.experiments.reward_hacking --config=configs/toy_hacking.py --workdir=DIR \
        [--config.experiment.methods=rule,cooper_consistent_wrong --config.experiment.seeds=0]
"""
import importlib.util
import os

import ml_collections


def default_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default.py")
    spec = importlib.util.spec_from_file_location("coop_jax_default_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def get_config():
    c = default_config()
    c.reward_model.update(c.model.to_dict())  # same tiny architecture, its own weights
    c.cooper.update(negative="rollout", learning_rate=1e-4, warmup_ratio=0.0,
                    max_len=128, heldout_every=10)
    c.train.update(steps=60, eval_every=10, checkpoint_every=30)
    c.experiment = ml_collections.ConfigDict(dict(
        # comma-separated, so one arm / one seed can be rerun alone from the command line
        methods="rule,static_rm,cooper_rollout,cooper_consistent_wrong,cooper_perturb",
        seeds="0,1,2",
        rm_questions=1600, samples_per_question=4, heldout_fraction=0.15,
        rm_epochs=4, rm_learning_rate=1e-3, rm_batch_size=32, rm_warmup_ratio=0.0))
    return c
