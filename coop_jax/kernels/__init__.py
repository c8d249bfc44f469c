"""Fused unembedding kernels: log-prob + entropy with a streaming VJP, and a fused sampler.

Both avoid the [tokens, vocab] logits (151,936 columns for Qwen) by walking the vocabulary in
tiles: ``impl="xla"`` is a ``lax.scan`` (CPU default), ``impl="pallas"`` a Mosaic-TPU or Triton
kernel chosen by ``jax.default_backend()`` (``"auto"`` picks it on TPU only:
the Triton kernels lost to the XLA scan on an H200, docs/results/gpu).
"""
from coop_jax.kernels._common import IMPLS
from coop_jax.kernels.logprobs import fused_logprobs
from coop_jax.kernels.partition import resolve_impl
from coop_jax.kernels.sampler import DEFAULT_MAX_CANDIDATES, fused_sample

__all__ = ["IMPLS", "DEFAULT_MAX_CANDIDATES", "fused_logprobs", "fused_sample", "resolve_impl"]
