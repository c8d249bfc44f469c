"""`coop-eval`'s config when no --config is given: the schema defaults, so `--config.x=y`
overrides still work."""
from coop_jax.config import base_config


def get_config():
    return base_config()
