"""Per-token log-probs and entropies of responses: the one call site for the fused kernels,
which run the implementation the model config chose (`ModelConfig.kernel_impl`)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from coop_jax import kernels
from coop_jax.models.config import ModelConfig
from coop_jax.models.forward import grouped_hidden_states, hidden_states, unembed_matrix


def response_logprobs(params: dict, cfg: ModelConfig, prompt_tokens: jax.Array,
                      prompt_mask: jax.Array, response_tokens: jax.Array,
                      response_mask: jax.Array, *, temperature: float = 1.0,
                      valid_vocab: int | None = None) -> tuple[jax.Array, jax.Array]:
    """log π(y_t | x, y_<t) / T-scaled and the entropy per response token: [B, N] each.

    Logits are divided by the sampling temperature so the learner's log-probs match the
    behaviour policy's. Masked (padding) positions get 0 for both.
    """
    p = prompt_tokens.shape[1]
    tokens = jnp.concatenate([prompt_tokens, response_tokens], axis=1)
    mask = jnp.concatenate([prompt_mask, response_mask], axis=1).astype(bool)
    hidden = hidden_states(params, cfg, tokens, mask)[:, p - 1:-1]  # predicts response tokens
    return _token_logprobs(params, cfg, hidden, response_tokens, response_mask, temperature,
                           valid_vocab)


def resolved_kernel(cfg: ModelConfig, hidden: jax.Array, unembed: jax.Array,
                    backend: str | None = None) -> str:
    """The concrete implementation (`kernels.resolve_impl`) the fused kernels run for `cfg` on
    these arrays; `backend`: the platform it is resolved for (default the default backend)."""
    return kernels.resolve_impl(cfg.kernel_impl, hidden, unembed, backend=backend)


def _token_logprobs(params, cfg, hidden, response_tokens, response_mask, temperature,
                    valid_vocab):
    """(log-probs, entropies) [B, N] of the response tokens from the hidden states [B, N, D]
    that predict them (the fused kernel; masked positions 0)."""
    b, n, d = hidden.shape
    unembed = unembed_matrix(params, cfg)
    targets = jnp.where(response_mask.astype(bool), response_tokens, -1).reshape(-1)
    logp, entropy = kernels.fused_logprobs(hidden.reshape(b * n, d), unembed, targets,
                                           temperature=temperature,
                                           impl=cfg.kernel_impl, valid_vocab=valid_vocab)
    return logp.reshape(b, n), entropy.reshape(b, n)


def grouped_response_logprobs(params: dict, cfg: ModelConfig, prompt_tokens: jax.Array,
                              prompt_mask: jax.Array, response_tokens: jax.Array,
                              response_mask: jax.Array, *, group_size: int,
                              temperature: float = 1.0, valid_vocab: int | None = None
                              ) -> tuple[jax.Array, jax.Array]:
    """`response_logprobs` of rows in groups of `group_size` consecutive rows that share one
    prompt (row r is response r % G to prompt r // G): each prompt runs once, its keys and values
    are repeated for the G responses, which attend to them, and their gradients sum into them.
    Positions, masks and causality are those of the unshared forward, so the values are its own
    to float32 rounding."""
    prompt_hidden, response_hidden = grouped_hidden_states(
        params, cfg, prompt_tokens, prompt_mask, response_tokens, response_mask, group_size)
    g = group_size
    # response token t is predicted by the prompt's last position (t = 0) or response token t - 1
    hidden = jnp.concatenate([jnp.repeat(prompt_hidden[:, -1:], g, axis=0),
                              response_hidden[:, :-1]], axis=1)
    return _token_logprobs(params, cfg, hidden, response_tokens, response_mask, temperature,
                           valid_vocab)
