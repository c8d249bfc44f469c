"""KV-cache sampling for rollouts and evaluation."""
from coop_jax.sampling.sampler import Rollouts, SamplingConfig, decode_texts, generate, left_align, make

__all__ = ["Rollouts", "SamplingConfig", "decode_texts", "generate", "left_align", "make"]
