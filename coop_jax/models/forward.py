"""Pure functions of a parameter pytree: init, training forward, logits, RM scores, KV cache."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from coop_jax.models.config import ModelConfig
from coop_jax.models.transformer import KVCache, Transformer

Array = jax.Array
Params = dict


def positions_from_mask(mask: Array) -> Array:
    """Rotary positions of a (left- or right-) padded batch: 0 at each row's first real token."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def _dummy_inputs(batch: int = 1, length: int = 2):
    tokens = jnp.zeros((batch, length), jnp.int32)
    return tokens, jnp.zeros_like(tokens), jnp.ones((batch, length), bool)


def init_boxed(cfg: ModelConfig, rng: Array) -> Params:
    """Parameters still wrapped in `nn.Partitioned` boxes (carry their logical axis names)."""
    return Transformer(cfg).init(rng, *_dummy_inputs())["params"]


def init_params(cfg: ModelConfig, rng: Array) -> Params:
    return nn.meta.unbox(init_boxed(cfg, rng))


def abstract_params(cfg: ModelConfig) -> Params:
    """Boxed `ShapeDtypeStruct`s: shapes and logical axes without allocating anything."""
    return jax.eval_shape(lambda: init_boxed(cfg, jax.random.key(0)))


def hidden_states(params: Params, cfg: ModelConfig, tokens: Array, attention_mask: Array | None = None,
                  positions: Array | None = None) -> Array:
    """Training-time forward: tokens [B, T] -> final-norm hidden states [B, T, D]."""
    if attention_mask is None:
        attention_mask = jnp.ones(tokens.shape, bool)
    attention_mask = attention_mask.astype(bool)
    if positions is None:
        positions = positions_from_mask(attention_mask)
    hidden, _ = Transformer(cfg).apply({"params": params}, tokens, positions, attention_mask)
    return hidden


def unembed_matrix(params: Params, cfg: ModelConfig) -> Array:
    """[D, V] unembedding (the transposed input embedding when tied)."""
    if cfg.is_reward_model:
        raise ValueError("a reward model (num_labels > 0) has no unembedding matrix")
    if cfg.tie_embeddings:
        return params["embed_tokens"]["embedding"].T
    return params["lm_head"]["kernel"]


def lm_logits(params: Params, cfg: ModelConfig, tokens: Array,
              attention_mask: Array | None = None) -> Array:
    """Materialised [B, T, V] float32 logits (inference, tests; training uses the fused kernels)."""
    hidden = hidden_states(params, cfg, tokens, attention_mask)
    unembed = unembed_matrix(params, cfg).astype(cfg.jnp_dtype)
    return jnp.einsum("btd,dv->btv", hidden, unembed, preferred_element_type=jnp.float32)


def last_token_index(attention_mask: Array) -> Array:
    """Index of the last real token of each row (right or left padding)."""
    t = jnp.arange(attention_mask.shape[-1])
    return jnp.max(jnp.where(attention_mask.astype(bool), t, 0), axis=-1)


def grouped_hidden_states(params: Params, cfg: ModelConfig, prefix_tokens: Array,
                          prefix_mask: Array, suffix_tokens: Array, suffix_mask: Array,
                          group_size: int) -> tuple[Array, Array]:
    """`hidden_states` of rows [prefix | suffix] in groups of `group_size` consecutive rows that
    share one prefix (row r's prefix is its group's; only rows 0, G, 2G, ... of `prefix_*` are
    read): each prefix runs once, its keys and values are repeated for the G suffixes, which
    attend to them, and their gradients sum into them. Positions, masks and causality are those
    of the unshared forward over the concatenated rows, so the values are its own to float32
    rounding. Returns (prefix hidden [R / G, P, D], suffix hidden [R, S, D])."""
    rows, p = prefix_tokens.shape
    g = group_size
    mask = jnp.concatenate([prefix_mask, suffix_mask], axis=1).astype(bool)
    positions = positions_from_mask(mask)
    prefix_kv = jnp.where(jnp.arange(mask.shape[1]) < p, mask[::g], False)
    model = Transformer(cfg)
    # the prefix pass writes its keys/values into slots [0, P) of a cache as long as the rows
    prefix_hidden, cache = model.apply({"params": params}, prefix_tokens[::g], positions[::g, :p],
                                       prefix_kv, init_cache(cfg, rows // g, mask.shape[1]), 0)
    cache = jax.tree_util.tree_map(lambda c: jnp.repeat(c, g, axis=-4), cache)  # batch axis
    suffix_hidden, _ = model.apply({"params": params}, suffix_tokens, positions[:, p:], mask,
                                   cache, p)
    return prefix_hidden, suffix_hidden


def _score_head(params: Params, cfg: ModelConfig, hidden: Array, attention_mask: Array) -> Array:
    """The sequence-classification head of `hidden` [B, T, D] read at each row's last valid
    token of `attention_mask`: [B] float32 (num_labels=1) or [B, num_labels]."""
    if not cfg.is_reward_model:
        raise ValueError("reward_scores needs a reward model config (num_labels > 0)")
    last = jnp.take_along_axis(hidden, last_token_index(attention_mask)[:, None, None], axis=1)[:, 0]
    head = params["score"]["kernel"].astype(cfg.jnp_dtype)
    scores = jnp.einsum("bd,dl->bl", last, head, preferred_element_type=jnp.float32)
    return scores[:, 0] if cfg.num_labels == 1 else scores


def reward_scores(params: Params, cfg: ModelConfig, tokens: Array, attention_mask: Array) -> Array:
    """Sequence-classification head read at the last non-pad token: [B] float32 (num_labels=1)."""
    return _score_head(params, cfg, hidden_states(params, cfg, tokens, attention_mask),
                       attention_mask)


def grouped_reward_scores(params: Params, cfg: ModelConfig, prefix_tokens: Array,
                          prefix_mask: Array, suffix_tokens: Array, suffix_mask: Array,
                          group_size: int) -> Array:
    """`reward_scores` of rows [prefix | suffix] whose groups of `group_size` rows share one
    prefix (`grouped_hidden_states`), read at each row's last valid suffix token (every row's
    suffix holds one; a row without any gets its suffix's first position)."""
    _, hidden = grouped_hidden_states(params, cfg, prefix_tokens, prefix_mask, suffix_tokens,
                                      suffix_mask, group_size)
    return _score_head(params, cfg, hidden, suffix_mask)


def init_cache(cfg: ModelConfig, batch: int, length: int, dtype=None) -> KVCache:
    """Zero KV cache: one (k [B, KV, S, head_dim], v [B, KV, head_dim, S]) pair per layer, or
    with `cfg.scan_layers` one pair stacked on a leading layer axis. Either way the batch axis is
    axis -4 of every leaf."""
    kv, hd = cfg.num_kv_heads, cfg.dim_per_head
    shapes = (batch, kv, length, hd), (batch, kv, hd, length)
    dtype = dtype or cfg.jnp_dtype
    if cfg.scan_layers:
        return tuple(jnp.zeros((cfg.num_layers,) + s, dtype) for s in shapes)
    return tuple(tuple(jnp.zeros(s, dtype) for s in shapes) for _ in range(cfg.num_layers))


def stack_layers(params: Params, num_layers: int) -> Params:
    """Unrolled parameters (`layers_0` ... `layers_{L-1}`) -> the `scan_layers` layout (one
    `layers` subtree, every leaf stacked on a new leading axis). numpy leaves stay numpy."""
    missing = [i for i in range(num_layers) if f"layers_{i}" not in params]
    if missing or "layers" in params:
        raise ValueError(f"stack_layers needs unrolled params layers_0..layers_{num_layers - 1}; "
                         f"missing {missing}" + (" (already stacked)" if "layers" in params else ""))
    out = {k: v for k, v in params.items() if not k.startswith("layers_")}
    layers = [params[f"layers_{i}"] for i in range(num_layers)]
    stack = lambda *xs: (np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs)
                         else jnp.stack(xs))
    out["layers"] = jax.tree_util.tree_map(stack, *layers)
    return out


def unstack_layers(params: Params) -> Params:
    """The `scan_layers` layout -> unrolled `layers_{i}` subtrees (inverse of `stack_layers`)."""
    if "layers" not in params:
        raise ValueError("unstack_layers needs stacked params (a 'layers' subtree)")
    out = {k: v for k, v in params.items() if k != "layers"}
    num_layers = jax.tree_util.tree_leaves(params["layers"])[0].shape[0]
    for i in range(num_layers):
        out[f"layers_{i}"] = jax.tree_util.tree_map(lambda x: x[i], params["layers"])
    return out


def forward_with_cache(params: Params, cfg: ModelConfig, tokens: Array, positions: Array,
                       kv_mask: Array, cache: KVCache, cache_index: Array) -> tuple[Array, KVCache]:
    """Prefill (T > 1) or decode (T == 1) writing keys/values at slots [cache_index, +T)."""
    return Transformer(cfg).apply({"params": params}, tokens, positions, kv_mask.astype(bool),
                                  cache, cache_index)


def param_count(params: Params) -> int:
    return sum(x.size for x in jax.tree_util.tree_leaves(params))
