from coop_jax.projects.reward_hacking.driver import run

run()
