"""Config validation (the schema's and the training registries', `train.validate_config`):
impossible combinations are rejected with a message naming the field."""
import pytest

from coop_jax import config as config_lib
from coop_jax.trainer.setup import validate_config


def test_corewarding_1_with_dynamic_sampling_is_rejected():
    c = config_lib.base_config()
    c.reward.type = "corewarding_1"
    c.rl.dynamic_sampling = True
    with pytest.raises(ValueError, match=r"rl\.dynamic_sampling .*corewarding_1"):
        validate_config(c)
    c.rl.dynamic_sampling = False
    validate_config(c)
    c.reward.type = "corewarding_2"
    c.rl.dynamic_sampling = True
    validate_config(c)


def test_micro_batches_must_divide_each_mini_batch_and_the_pairs():
    c = config_lib.base_config()  # 16 prompts x 8 rollouts = 128 rows
    assert c.rl.micro_batches == 1
    c.rl.update(num_minibatches=4, micro_batches=8)
    validate_config(c)
    c.rl.micro_batches = 3
    with pytest.raises(ValueError, match=r"rl\.micro_batches \(3\)"):
        validate_config(c)
    c.rl.micro_batches = 0
    with pytest.raises(ValueError, match=r"rl\.micro_batches must be > 0"):
        validate_config(c)
    c.rl.micro_batches = 1
    c.cooper.micro_batches = 3  # one pair per prompt: must divide prompts_per_step (16)
    with pytest.raises(ValueError, match=r"cooper\.micro_batches \(3\)"):
        validate_config(c)


def test_eval_headline_defaults_to_the_papers_avg_at_8_and_is_validated():
    c = config_lib.base_config()
    assert (c.eval.headline, c.eval.k, c.eval.temperature, c.eval.top_p) == (
        "avg_at_k", 8, 0.7, 0.95)
    c.eval.headline = "greedy"
    validate_config(c)
    c.eval.headline = "pass_at_k"
    with pytest.raises(ValueError, match="eval.headline must be one of"):
        validate_config(c)
    c.eval.headline, c.eval.k = "avg_at_k", 0
    with pytest.raises(ValueError, match="eval.k must be > 0"):
        validate_config(c)


def test_cooper_rm_optimiser_defaults_follow_the_reference():
    c = config_lib.base_config()
    assert c.cooper.warmup_ratio == 0.0 and c.cooper.no_pair_step == "zero_grad"
    c.cooper.no_pair_step = "never"
    with pytest.raises(ValueError, match="cooper.no_pair_step must be one of"):
        validate_config(c)


def test_rollout_overlap_is_off_by_default_and_rejects_what_it_cannot_sample_ahead():
    c = config_lib.base_config()
    assert c.rollout.overlap is False
    c.rollout.overlap = True
    validate_config(c)
    c.rl.dynamic_sampling = True
    with pytest.raises(ValueError, match=r"rollout\.overlap .*rl\.dynamic_sampling"):
        validate_config(c)
    c.rl.dynamic_sampling = False
    c.reward.type = "cooper"
    c.cooper.negative = "perturb"
    validate_config(c)  # Cooper's pairs are built in the overlapped host half
    c.reward.type = "corewarding_2"
    with pytest.raises(ValueError, match=r"rollout\.overlap .*corewarding_2"):
        validate_config(c)


def test_reference_defaults_dual_clip_exact_votes_and_the_reference_keep_rule():
    from coop_jax import rl
    c = config_lib.base_config()
    # dual-clip PPO at 3.0 as the references always apply it; 0 turns it off
    assert c.rl.clip_ratio_c is None and rl.LossConfig.from_config(c.rl).clip_ratio_c == 3.0
    c.rl.clip_ratio_c = 0.0
    assert rl.LossConfig.from_config(c.rl).clip_ratio_c is None
    c.rl.clip_ratio_c = None
    # GSPO and CISPO have no dual clip unless one is asked for
    c.rl.ratio_level = "sequence"
    assert rl.LossConfig.from_config(c.rl).clip_ratio_c is None
    c.rl.clip_ratio_c = 2.5
    assert rl.LossConfig.from_config(c.rl).clip_ratio_c == 2.5
    c.rl.update(clip_ratio_c=None, ratio_level="token", policy_loss="cispo")
    assert rl.LossConfig.from_config(c.rl).clip_ratio_c is None
    c.rl.policy_loss = "ppo"
    assert c.reward.vote_match == "exact" and c.cooper.negative_check == "reference"
    c.reward.vote_match = "fuzzy"
    c.reward.type = "majority_vote"
    with pytest.raises(ValueError, match="config.reward.vote_match must be one of"):
        validate_config(c)
    c.reward.vote_match = "exact"
    c.cooper.negative_check = "strict"
    with pytest.raises(ValueError, match="config.cooper.negative_check must be one of"):
        validate_config(c)


@pytest.mark.parametrize("overrides,message", [
    (dict(policy_loss="a2c"), r"config\.rl\.policy_loss must be one of \['ppo', 'cispo'\]"),
    (dict(policy_loss="cispo", ratio_level="sequence"), r"rl\.policy_loss='cispo'.*ratio_level"),
    (dict(clip_ratio_c=0.5), r"config\.rl\.clip_ratio_c must be 0 \(off\) or > 1, got 0\.5"),
    (dict(kl_controller="pid"), r"config\.rl\.kl_controller must be one of"),
    (dict(kl_controller="adaptive"), r"rl\.kl_controller='adaptive'.*rl\.kl_in_reward=True"),
    (dict(kl_controller="adaptive", kl_in_reward=True, kl_target=0.0),
     r"config\.rl\.kl_target must be > 0"),
    (dict(kl_controller="adaptive", kl_in_reward=True, kl_horizon=-5),
     r"config\.rl\.kl_horizon must be > 0"),
    (dict(advantage="ppo"), r"config\.rl\.advantage must be one of .*reinforce_plus_plus"),
])
def test_rl_options_are_checked_with_the_field_named(overrides, message):
    c = config_lib.base_config()
    c.rl.update(**overrides)
    with pytest.raises(ValueError, match=message):
        validate_config(c)


def test_the_new_rl_options_validate():
    c = config_lib.base_config()
    c.rl.update(policy_loss="cispo", advantage="reinforce_plus_plus_baseline",
                kl_estimator="k3+", kl_in_reward=True, kl_controller="adaptive")
    validate_config(c)
