"""One decoder-only transformer (Qwen2 / Qwen2.5 / Llama 3.x) in Flax linen.

The same graph serves training (full sequence, no cache) and decoding (prefill and single-token
steps writing into an explicit KV cache). Parameter names mirror the Hugging Face checkpoints so
conversion is a rename plus transposes. Every parameter carries logical axis names; see
`coop_jax.parallel` for the mapping onto mesh axes.
"""
from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from coop_jax.models import lora as lora_lib
from coop_jax.models.config import ModelConfig
from coop_jax.models.lora import LoraConfig

Array = jax.Array
LayerCache = tuple[Array, Array]  # k [B, KV, S, head_dim], v [B, KV, head_dim, S]
# one LayerCache per layer; with `scan_layers`, one pair stacked over a leading layer axis
KVCache = tuple[LayerCache, ...] | LayerCache

_init = nn.initializers.normal(stddev=0.02)


def _logical(init, names):
    return nn.with_logical_partitioning(init, names)


def rope_inv_freq(cfg: ModelConfig) -> Array:
    """Inverse rotary frequencies, with Llama-3 frequency-dependent scaling when configured."""
    dim = cfg.dim_per_head
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    scaling = cfg.rope_scaling_dict
    if not scaling or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not supported (default, linear, llama3)")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return jnp.where(is_medium, smoothed, scaled)


def apply_rope(x: Array, positions: Array, inv_freq: Array) -> Array:
    """x [B, T, H, d], positions [B, T] -> rotated x (HF's rotate_half convention)."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, d/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb).astype(x.dtype), jnp.sin(emb).astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    eps: float
    dtype: Any
    param_dtype: Any

    @nn.compact
    def __call__(self, x: Array) -> Array:
        weight = self.param("weight", _logical(nn.initializers.ones, ("norm",)), (x.shape[-1],),
                            self.param_dtype)
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return weight.astype(self.dtype) * x32.astype(self.dtype)


class LoraDense(nn.Dense):
    """nn.Dense plus a low-rank update (`models.lora`): y = x W + b + (alpha / r) (x A) B, with
    float32 A [in, r] and B [r, out] = 0 at init, their logical axes those of W's in and out."""
    lora: LoraConfig | None = None
    names: tuple[str, str] = ("embed", "mlp")

    @nn.compact
    def __call__(self, inputs):
        y = super().__call__(inputs)
        r = self.lora.rank
        a = self.param("lora_a", _logical(lora_lib.A_INIT, (self.names[0], "lora_rank")),
                       (inputs.shape[-1], r), jnp.float32)
        b = self.param("lora_b", _logical(nn.initializers.zeros, ("lora_rank", self.names[1])),
                       (r, self.features), jnp.float32)
        return y + lora_lib.delta(inputs, a, b, self.lora.scale, y.dtype)


def _dense(cfg: ModelConfig, features: int, names: tuple[str, str], bias: bool, name: str):
    kw = dict(use_bias=bias, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
              kernel_init=_logical(_init, names),
              bias_init=_logical(nn.initializers.zeros, names[1:]), name=name)
    if cfg.lora is not None and name in cfg.lora.targets:
        return LoraDense(features, lora=cfg.lora, names=names, **kw)
    return nn.Dense(features, **kw)


def _write_cache(cache: LayerCache, k: Array, v: Array, cache_index: Array) -> LayerCache:
    """Keys [B, KV, T, hd] / values [B, KV, hd, T] written into the cache from column
    `cache_index`: one column shared by every row (a scalar), or each row's own (a [B] vector,
    decode only: the continuous-batching engine's slots sit at different steps; an index past
    the cache is clamped to its last column, as `dynamic_update_slice` does)."""
    k_cache, v_cache = cache
    k, v = k.astype(k_cache.dtype), v.astype(v_cache.dtype)
    if jnp.ndim(cache_index) == 0:
        return (jax.lax.dynamic_update_slice(k_cache, k, (0, 0, cache_index, 0)),
                jax.lax.dynamic_update_slice(v_cache, v, (0, 0, 0, cache_index)))
    if k.shape[2] != 1:
        raise ValueError(f"a per-row cache_index needs one new token per row, got {k.shape[2]}")
    # vmapped, the update is a scatter with the batch as its batching axis: sharded rows stay put
    def put(axis):
        return jax.vmap(lambda c, x, i: jax.lax.dynamic_update_slice_in_dim(c, x, i, axis))
    return put(1)(k_cache, k, cache_index), put(2)(v_cache, v, cache_index)


class Attention(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, positions, kv_mask, cache: LayerCache | None, cache_index):
        cfg = self.cfg
        heads, kv_heads, hd = cfg.num_heads, cfg.num_kv_heads, cfg.dim_per_head
        batch, length, _ = x.shape
        q = _dense(cfg, heads * hd, ("embed", "heads"), cfg.qkv_bias, "q_proj")(x)
        k = _dense(cfg, kv_heads * hd, ("embed", "kv_heads"), cfg.qkv_bias, "k_proj")(x)
        v = _dense(cfg, kv_heads * hd, ("embed", "kv_heads"), cfg.qkv_bias, "v_proj")(x)
        q = q.reshape(batch, length, heads, hd)
        k = k.reshape(batch, length, kv_heads, hd)
        v = v.reshape(batch, length, kv_heads, hd)
        inv_freq = rope_inv_freq(cfg)
        q, k = apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq)

        # keys [B, KV, S, hd] and values [B, KV, hd, S]: the operand layouts of the two matmuls
        # below, and the KV cache's, so a decode step reads the cache without transposing it
        # (on XLA:CPU those per-step transposes of the whole cache were a sixth of a decode step)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 3, 1)
        if cache is None:
            q_slots = jnp.arange(length)[None]
            new_cache = None
        else:
            k, v = _write_cache(cache, k, v, cache_index)
            new_cache = (k, v)
            q_slots = jnp.reshape(cache_index, (-1, 1)) + jnp.arange(length)  # [1 or B, T]
        k_slots = jnp.arange(k.shape[2])
        mask = (k_slots <= q_slots[..., None]) & kv_mask[:, None, :]  # [B, T, S]

        groups = heads // kv_heads
        q = q.reshape(batch, length, kv_heads, groups, hd)
        scores = jnp.einsum("btkgd,bksd->bkgts", q, k.astype(q.dtype),
                            preferred_element_type=jnp.float32) / math.sqrt(hd)
        scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(cfg.jnp_dtype)
        out = jnp.einsum("bkgts,bkds->btkgd", probs, v.astype(cfg.jnp_dtype))
        out = out.reshape(batch, length, heads * hd)
        out = _dense(cfg, cfg.hidden_size, ("heads", "embed"), cfg.o_bias, "o_proj")(out)
        return out, new_cache


class MLP(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        gate = _dense(cfg, cfg.intermediate_size, ("embed", "mlp"), cfg.mlp_bias, "gate_proj")(x)
        up = _dense(cfg, cfg.intermediate_size, ("embed", "mlp"), cfg.mlp_bias, "up_proj")(x)
        return _dense(cfg, cfg.hidden_size, ("mlp", "embed"), cfg.mlp_bias, "down_proj")(
            nn.silu(gate) * up)


class Block(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, positions, kv_mask, cache, cache_index):
        cfg = self.cfg
        norm = lambda name: RMSNorm(cfg.rms_norm_eps, cfg.jnp_dtype, cfg.jnp_param_dtype,
                                    name=name)
        attn_out, new_cache = Attention(cfg, name="self_attn")(
            norm("input_layernorm")(x), positions, kv_mask, cache, cache_index)
        x = x + attn_out
        x = x + MLP(cfg, name="mlp")(norm("post_attention_layernorm")(x))
        x = nn.with_logical_constraint(x, ("batch", "seq", "act_embed"))
        return x, new_cache


def _scanned_layers(cfg: ModelConfig, block, with_cache: bool):
    """`cfg.num_layers` blocks as one `nn.scan` over stacked parameters (params["layers"][...],
    leading logical axis "layers"): XLA compiles the block once instead of once per layer. The
    KV cache, when given, is one stacked (k, v) pair ([L, B, KV, S, hd], [L, B, KV, hd, S])
    scanned alongside."""
    return nn.scan(block, variable_axes={"params": 0}, split_rngs={"params": True},
                   length=cfg.num_layers,
                   in_axes=(nn.broadcast, nn.broadcast, 0 if with_cache else nn.broadcast,
                            nn.broadcast),
                   metadata_params={nn.PARTITION_NAME: "layers"})(cfg, name="layers")


class _Matrix(nn.Module):
    """A bare weight matrix, returned rather than applied (the unembedding and the RM head)."""
    shape: tuple[int, int]
    names: tuple[str, str]
    dtype: Any

    @nn.compact
    def __call__(self):
        return self.param("kernel", _logical(_init, self.names), self.shape, self.dtype)


class Transformer(nn.Module):
    """tokens [B, T] -> final-norm hidden states [B, T, D] (and the updated cache).

    `kv_mask` [B, S] marks the valid key slots (S = T without a cache, the cache length with one);
    causality is by slot index, so left-padded prompts work with any `positions`.
    """
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens, positions, kv_mask, cache: KVCache | None = None,
                 cache_index=None):
        cfg = self.cfg
        embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.jnp_dtype,
                         param_dtype=cfg.jnp_param_dtype,
                         embedding_init=_logical(_init, ("vocab", "embed")), name="embed_tokens")
        x = embed(tokens)
        # inside a scan, CSE cannot merge the recomputation across iterations (flax's advice)
        block = nn.remat(Block, prevent_cse=not cfg.scan_layers) if cfg.remat else Block
        if cfg.scan_layers:
            x, new_cache = _scanned_layers(cfg, block, cache is not None)(
                x, positions, kv_mask, cache, cache_index)
        else:
            new_cache = []
            for i in range(cfg.num_layers):
                x, layer_cache = block(cfg, name=f"layers_{i}")(
                    x, positions, kv_mask, None if cache is None else cache[i], cache_index)
                new_cache.append(layer_cache)
            new_cache = None if cache is None else tuple(new_cache)
        x = RMSNorm(cfg.rms_norm_eps, cfg.jnp_dtype, cfg.jnp_param_dtype, name="norm")(x)
        if cfg.is_reward_model:
            _Matrix((cfg.hidden_size, cfg.num_labels), ("embed", "labels"),
                    cfg.jnp_param_dtype, name="score")()
        elif not cfg.tie_embeddings:
            _Matrix((cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"),
                    cfg.jnp_param_dtype, name="lm_head")()
        return x, new_cache
