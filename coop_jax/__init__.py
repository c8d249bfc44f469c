"""coop_jax: RL of LLM reasoning with a co-optimised reference-based reward model (Cooper),
label-free Co-rewarding and the GRPO family, in JAX. The package map is docs/ARCHITECTURE.md."""
