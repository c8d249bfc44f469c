"""Step options declared by their owners: a reward type whose device half reads a parameter,
registered here alone (no other file knows it), trains through coop-train; the StepConfig
carries its option."""
import json
import os

import numpy as np
import pytest

from conftest import repo_config
from coop_jax.trainer import loop, rewards, setup
from coop_jax.trainer.step import DeviceReward, StepConfig
from coop_jax import rl
from coop_jax.registry import Options, Param, Registry


@pytest.fixture
def scaled_rule_reward():
    """Reward type "toy_scaled": rule labels on the host, times `reward.toy_scale` on device
    (its device half "scaled_batch"); yields that device half."""
    def scaled(state, cfg, batch, options):
        return batch.rewards * options["scale"], {"toy_scale": options["scale"]}, None

    device = DeviceReward("scaled_batch", scaled,
                                     params=Options.of(scale=Param("reward.toy_scale")))

    @rewards.register_reward("toy_scaled", device=device)
    def toy(x):
        """Rule labels, scaled on device."""
        return [x.labels], {}

    yield device
    rewards.REWARD_SOURCES.unregister("toy_scaled")


def test_a_device_reward_with_a_parameter_is_one_registration(scaled_rule_reward, tmp_path):
    c = repo_config("tiny_test")
    c.reward.type = "toy_scaled"
    c.reward.toy_scale = 3.0
    c.train.steps = 1
    trainer = loop.Trainer(c, str(tmp_path))
    assert trainer.step.cfg.device_reward is scaled_rule_reward
    assert trainer.step.cfg.reward_options == Options.of(scale=3.0)
    summary = trainer.run()
    assert summary["steps"] == 1
    with open(os.path.join(tmp_path, "metrics.jsonl")) as f:
        row = [json.loads(line) for line in f][-1]
    assert row["toy_scale"] == 3.0
    # the step's reward is the rule accuracy times the scale (no overlong bonus, no KL reward)
    assert row["reward_mean"] == pytest.approx(3.0 * row["rule_accuracy"], abs=1e-6)


def test_a_missing_option_is_named(scaled_rule_reward):
    from conftest import tiny_model_config
    with pytest.raises(ValueError, match=r"device_reward='scaled_batch' needs the options "
                                         r"\['scale'\]"):
        StepConfig(policy=tiny_model_config(), loss=rl.LossConfig(), group_size=2,
                              device_reward=scaled_rule_reward)


def test_registry_errors_name_the_field_and_the_choices():
    reg = Registry("rl.thing", {"a": 1, "b": 2})
    assert reg.lookup("a") == 1 and tuple(reg) == ("a", "b") and "b" in reg
    with pytest.raises(ValueError, match=r"rl.thing='c' is not one of \['a', 'b'\]"):
        reg.lookup("c")
    with pytest.raises(ValueError, match=r"config.rl.thing must be one of \['a', 'b'\], got 'c'"):
        reg.check("c")
    with pytest.raises(ValueError, match="'a' is already registered"):
        reg.register("a", 3)
    reg.register("w", 4, params={"x": Param("p.q", lambda v: v * 2)}, doc="four")
    assert reg.describe()["w"] == "four"
    assert reg.options("w", {"p": {"q": 5}}) == Options.of(x=10)
    assert hash(Options.of(x=10)) == hash(Options.of(x=10))
    assert np.isclose(reg.options("w", {"p": {"q": 0.5}})["x"], 1.0)


def test_an_advantage_estimator_declares_its_parameter(tmp_path):
    """A scaled GRPO estimator registered here alone: its parameter reaches the step from the
    config through StepConfig.advantage_options."""
    def scaled_grpo(rewards, eps, present, tokens, scale):
        """GRPO advantages times a scale."""
        return rl.ADVANTAGES["grpo"](rewards, eps, present, tokens) * scale

    rl.ADVANTAGES.register("scaled_grpo", scaled_grpo, params={"scale": Param("rl.adv_scale")})
    try:
        c = repo_config("tiny_test")
        c.rl.advantage, c.rl.adv_scale = "scaled_grpo", 2.0
        from conftest import tiny_model_config
        cfg = setup.step_config(c, tiny_model_config(), None, 100)
        assert cfg.advantage_options == Options.of(scale=2.0)
        rewards = np.array([[1.0, 0.0, 0.0, 1.0]], np.float32)
        np.testing.assert_allclose(
            rl.compute_advantages("scaled_grpo", rewards, **cfg.advantage_options),
            2.0 * np.asarray(rl.compute_advantages("grpo", rewards)), rtol=1e-6)
    finally:
        rl.ADVANTAGES.unregister("scaled_grpo")
