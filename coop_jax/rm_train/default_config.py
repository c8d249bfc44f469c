"""`coop-train-rm`'s config when no --config is given: the schema defaults with the `rm_train`
section of `coop_jax.rm_train.options`, so `--config.rm_train.x=y` overrides work."""
from coop_jax.config import base_config
from coop_jax.rm_train.options import rm_train_section


def get_config():
    c = base_config()
    c.rm_train = rm_train_section()
    return c
