"""One decoder (its HF families: `models.families`), as a config plus pure functions of a
parameter pytree."""
from coop_jax.models.config import ModelConfig
from coop_jax.models.families import MODEL_FAMILIES, ModelFamily
from coop_jax.models.forward import (
    abstract_params,
    forward_with_cache,
    grouped_hidden_states,
    grouped_reward_scores,
    hidden_states,
    init_boxed,
    init_cache,
    init_params,
    last_token_index,
    lm_logits,
    param_count,
    positions_from_mask,
    reward_scores,
    stack_layers,
    unembed_matrix,
    unstack_layers,
)
from coop_jax.models.transformer import KVCache, Transformer

__all__ = [
    "KVCache", "MODEL_FAMILIES", "ModelConfig", "ModelFamily", "Transformer", "abstract_params",
    "forward_with_cache", "grouped_hidden_states",
    "grouped_reward_scores", "hidden_states", "init_boxed", "init_cache", "init_params",
    "last_token_index", "lm_logits", "param_count", "positions_from_mask", "reward_scores",
    "stack_layers", "unembed_matrix", "unstack_layers",
]
