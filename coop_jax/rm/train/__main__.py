"""`python -m coop_jax.rm.train ...` is `coop-train-rm ...`."""
from coop_jax.rm.train.cli import run

run()
