"""Config validation: impossible combinations are rejected with a message naming the field."""
import pytest

from coop_jax import config as config_lib


def test_corewarding_1_with_dynamic_sampling_is_rejected():
    c = config_lib.base_config()
    c.reward.type = "corewarding_1"
    c.rl.dynamic_sampling = True
    with pytest.raises(ValueError, match=r"rl\.dynamic_sampling .*corewarding_1"):
        config_lib.validate(c)
    c.rl.dynamic_sampling = False
    config_lib.validate(c)
    c.reward.type = "corewarding_2"
    c.rl.dynamic_sampling = True
    config_lib.validate(c)
