"""Does co-optimising the RM reduce reward hacking? The pre-registered toy experiment
(`python -m coop_jax.projects.reward_hacking`, docs/results/reward_hacking)."""
