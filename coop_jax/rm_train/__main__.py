"""`python -m coop_jax.rm_train ...` is `coop-train-rm ...`."""
from coop_jax.rm_train.cli import run

run()
