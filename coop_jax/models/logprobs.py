"""Per-token log-probs and entropies of responses: the one call site for the fused kernels."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from coop_jax import kernels
from coop_jax.models.config import ModelConfig
from coop_jax.models.forward import hidden_states, unembed_matrix


def response_logprobs(params: dict, cfg: ModelConfig, prompt_tokens: jax.Array,
                      prompt_mask: jax.Array, response_tokens: jax.Array,
                      response_mask: jax.Array, *, temperature: float = 1.0,
                      impl: str = "auto", valid_vocab: int | None = None
                      ) -> tuple[jax.Array, jax.Array]:
    """log π(y_t | x, y_<t) / T-scaled and the entropy per response token: [B, N] each.

    Logits are divided by the sampling temperature so the learner's log-probs match the
    behaviour policy's. Masked (padding) positions get 0 for both.
    """
    p = prompt_tokens.shape[1]
    tokens = jnp.concatenate([prompt_tokens, response_tokens], axis=1)
    mask = jnp.concatenate([prompt_mask, response_mask], axis=1).astype(bool)
    hidden = hidden_states(params, cfg, tokens, mask)[:, p - 1:-1]  # predicts response tokens
    b, n, d = hidden.shape
    unembed = unembed_matrix(params, cfg)
    targets = jnp.where(response_mask.astype(bool), response_tokens, -1).reshape(-1)
    logp, entropy = kernels.fused_logprobs(hidden.reshape(b * n, d), unembed, targets,
                                           temperature=temperature, impl=impl,
                                           valid_vocab=valid_vocab)
    return logp.reshape(b, n), entropy.reshape(b, n)
