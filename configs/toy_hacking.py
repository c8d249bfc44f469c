"""Reward-hacking experiment on the synthetic task (CPU, <= 45 min on 2 cores):
rule vs static RM vs Cooper, same SFT start, 3 seeds. See coop_jax/experiments/reward_hacking.py.
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
    c.cooper.update(negative="perturb", learning_rate=1e-4, warmup_ratio=0.0, max_len=128,
                    heldout_every=10)
    c.train.update(steps=60, eval_every=10, checkpoint_every=30)
    c.experiment = ml_collections.ConfigDict(dict(
        methods=("rule", "static_rm", "cooper"), seeds=(0, 1, 2), triple_questions=384,
        samples_per_question=4, heldout_fraction=0.25, rm_epochs=4, rm_learning_rate=1e-3,
        rm_batch_size=32))
    return c
