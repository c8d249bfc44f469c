from coop_jax.monitor.cli import run

run()
