"""KV-cache sampling for rollouts and evaluation."""
from coop_jax.sampling.batching import fixed_batches, tokenize_prompts
from coop_jax.sampling.completions import generate_completions, generate_texts
from coop_jax.sampling.engine import generate_continuous, make_continuous, make_sampler
from coop_jax.sampling.sampler import Rollouts, SamplingConfig, decode_texts, generate, left_align, make

__all__ = ["Rollouts", "SamplingConfig", "decode_texts", "fixed_batches", "generate",
           "generate_completions", "generate_continuous", "generate_texts", "left_align", "make",
           "make_continuous", "make_sampler", "tokenize_prompts"]
