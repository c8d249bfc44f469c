"""`coop-train-rm`'s config when no --config is given: the schema defaults (with its `rm_train`
section, `coop_jax.config.rm_train_section`), so `--config.rm_train.x=y` overrides work."""
from coop_jax.config import base_config


def get_config():
    return base_config()
