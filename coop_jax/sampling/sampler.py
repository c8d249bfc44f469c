"""Jit-compiled KV-cache sampler: prefill each prompt once, share its cache with its G rollouts,
then decode token by token in a `lax.while_loop` that stops when every row has finished."""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from coop_jax import kernels, models
from coop_jax.kernels import _common
from coop_jax.models.logprobs import resolved_kernel

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int
    eos_ids: tuple[int, ...]
    pad_id: int
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    num_samples: int = 1  # rollouts per prompt (G)
    valid_vocab: int | None = None  # ids >= this (embedding padding) are never sampled

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        object.__setattr__(self, "eos_ids", tuple(int(e) for e in self.eos_ids))


class Rollouts(NamedTuple):
    """Row r of the outputs is sample r % G of prompt r // G."""
    prompt_tokens: Array  # [B*G, P] left-padded
    prompt_mask: Array  # [B*G, P]
    tokens: Array  # [B*G, N] response tokens, pad after the stop token
    logprobs: Array  # [B*G, N] behaviour log-probs (at the sampling temperature)
    mask: Array  # [B*G, N] True on response tokens, the stop token included
    lengths: Array  # [B*G]
    truncated: Array  # [B*G] no stop token within max_new_tokens
    # [B*G, N] entropy of each token's (temperature-scaled, unfiltered) distribution, 0 after the
    # stop token; None only in pending rollouts saved before this field existed
    entropy: Array | None = None


def left_align(tokens: Array, mask: Array, pad_id: int) -> tuple[Array, Array]:
    """Move each row's real tokens to the right end (left padding), whatever the input padding."""
    order = jnp.argsort(mask.astype(jnp.int32), axis=-1, stable=True)
    mask = jnp.take_along_axis(mask, order, axis=-1)
    tokens = jnp.where(mask, jnp.take_along_axis(tokens, order, axis=-1), pad_id)
    return tokens, mask


# Decode samples a few rows at a time: a [rows, V] f32 logits block this size or smaller is cheap
# on the XLA path, where one vocabulary tile (one matmul) beats a scan of strided column slices
# of the unembedding (1.6x per sampling call on SmolLM2 shapes, same tokens).
_WHOLE_VOCAB_BYTES = 256 * 2 ** 20


def decode_vocab_tile(impl: str, rows: int, vocab: int) -> int | None:
    """Vocabulary tile of the decode-time sampler for a concrete `impl` (resolved by
    `kernels.resolve_impl`, as `generate` does): the whole vocabulary on the XLA path when the
    [rows, V] block is small, else None (the kernel's default; Pallas tiles are VMEM-bound)."""
    if impl not in _common.CONCRETE_IMPLS:
        raise ValueError(f"decode_vocab_tile needs a resolved impl, one of "
                         f"{_common.CONCRETE_IMPLS}, got {impl!r}")
    if impl == "xla" and rows * vocab * 4 <= _WHOLE_VOCAB_BYTES:
        return vocab
    return None


class DecodeHead(NamedTuple):
    """What a decode step's sampling head was resolved to, once per `generate` call."""
    impl: str  # the concrete kernel impl (`kernels.resolve_impl`)
    vocab_tile: int | None  # `decode_vocab_tile`
    prompt_len: int  # P: response token i sits in cache column P + i


class DecodeCarry(NamedTuple):
    """The decode loop's carry: token i is sampled next, token i-1 (`tok`) is fed first."""
    i: Array  # ()
    tok: Array  # [R] last sampled token
    cache: models.KVCache  # [R, ..., P + N]
    kv_mask: Array  # [R, P + N]
    positions: Array  # [R] rotary position of `tok`
    done: Array  # [R]
    tokens: Array  # [R, N]
    logps: Array  # [R, N]
    ents: Array  # [R, N]
    key: Array


def _emit(unembed, scfg: SamplingConfig, head: DecodeHead, i, hidden, done, tokens, logps, ents,
          key):
    """Sample token i of every row from its hidden state; rows already done get padding."""
    key, step_key = jax.random.split(key)
    temperature = jnp.full((hidden.shape[0],), scfg.temperature, jnp.float32)
    tok, logp, ent = kernels.fused_sample(step_key, hidden, unembed, temperature,
                                          scfg.top_k, scfg.top_p, impl=head.impl,
                                          valid_vocab=scfg.valid_vocab,
                                          vocab_tile=head.vocab_tile)
    tok = jnp.where(done, scfg.pad_id, tok.astype(jnp.int32))
    tokens = tokens.at[:, i].set(tok)
    logps = logps.at[:, i].set(jnp.where(done, 0.0, logp))
    ents = ents.at[:, i].set(jnp.where(done, 0.0, ent))
    eos = jnp.asarray(scfg.eos_ids, jnp.int32)
    return tok, done | jnp.isin(tok, eos), tokens, logps, ents, key


def decode_step(params: dict, unembed: Array, cfg: models.ModelConfig, scfg: SamplingConfig,
                head: DecodeHead, carry: DecodeCarry) -> DecodeCarry:
    """One iteration of `generate`'s decode loop: feed token i-1, then sample token i (no
    forward pass after the last token). `unembed` is `models.unembed_matrix(params, cfg)`,
    made once outside the loop (tied: a transpose of the embedding, which the loop must not
    repeat). benchmarks/decode_bytes.py compiles the step alone."""
    c, p = carry, head.prompt_len
    kv_mask = c.kv_mask.at[:, p + c.i - 1].set(True)
    hidden, cache = models.forward_with_cache(params, cfg, c.tok[:, None], c.positions[:, None],
                                              kv_mask, c.cache, p + c.i - 1)
    tok, done, tokens, logps, ents, key = _emit(unembed, scfg, head, c.i, hidden[:, 0], c.done,
                                                c.tokens, c.logps, c.ents, c.key)
    return DecodeCarry(c.i + 1, tok, cache, kv_mask, c.positions + 1, done, tokens, logps, ents,
                       key)


def generate(params: dict, cfg: models.ModelConfig, scfg: SamplingConfig, prompt_tokens: Array,
             prompt_mask: Array, key: Array, *, backend: str | None = None) -> Rollouts:
    """Sample `scfg.num_samples` responses for each prompt. Call under `jax.jit` (see `make`).

    `backend` is the platform the model config's kernel choice is resolved for (default
    `jax.default_backend()`; "tpu" to compile for TPU topologies from a CPU host).
    """
    g, n = scfg.num_samples, scfg.max_new_tokens
    prompt_tokens, prompt_mask = left_align(prompt_tokens, prompt_mask.astype(bool), scfg.pad_id)
    b, p = prompt_tokens.shape
    unembed = models.unembed_matrix(params, cfg)

    cache = models.init_cache(cfg, b, p + n)
    kv_mask = jnp.concatenate([prompt_mask, jnp.zeros((b, n), bool)], axis=1)
    hidden, cache = models.forward_with_cache(params, cfg, prompt_tokens,
                                              models.positions_from_mask(prompt_mask), kv_mask,
                                              cache, jnp.int32(0))
    repeat = lambda x: jnp.repeat(x, g, axis=0)
    # the cache's batch axis is -4 (leaves [B, KV, ., .], or [L, B, ...] with scan_layers)
    cache = jax.tree_util.tree_map(lambda x: jnp.repeat(x, g, axis=-4), cache)
    kv_mask, hidden = repeat(kv_mask), repeat(hidden[:, -1])
    positions = repeat(prompt_mask.sum(-1).astype(jnp.int32))
    rows = b * g
    eos = jnp.asarray(scfg.eos_ids, jnp.int32)
    # once, with the arrays' mesh: the tile and the kernel must agree on the path
    impl = resolved_kernel(cfg, hidden, unembed, backend=backend)
    head = DecodeHead(impl, decode_vocab_tile(impl, rows, unembed.shape[1]), p)

    zeros = jnp.zeros((rows, n), jnp.float32)
    tok, done, tokens, logps, ents, key = _emit(
        unembed, scfg, head, 0, hidden, jnp.zeros((rows,), bool),
        jnp.full((rows, n), scfg.pad_id, jnp.int32), zeros, zeros, key)
    init = DecodeCarry(jnp.int32(1), tok, cache, kv_mask, positions, done, tokens, logps, ents,
                       key)
    final = jax.lax.while_loop(lambda c: (c.i < n) & ~jnp.all(c.done),
                               functools.partial(decode_step, params, unembed, cfg, scfg, head), init)
    tokens, logps, ents = final.tokens, final.logps, final.ents
    is_stop = jnp.isin(tokens, eos)
    first_stop = jnp.where(jnp.any(is_stop, -1), jnp.argmax(is_stop, -1), n - 1)
    lengths = jnp.where(jnp.any(is_stop, -1), first_stop + 1, n)
    mask = jnp.arange(n)[None, :] < lengths[:, None]
    return Rollouts(repeat(prompt_tokens), repeat(prompt_mask), tokens, logps, mask,
                    lengths.astype(jnp.int32), ~jnp.any(is_stop, -1), ents)


@functools.lru_cache(maxsize=32)
def make(cfg: models.ModelConfig, scfg: SamplingConfig):
    """A jitted `(params, prompt_tokens, prompt_mask, key) -> Rollouts` for fixed configs."""
    return jax.jit(lambda params, tokens, mask, key: generate(params, cfg, scfg, tokens, mask, key))


def decode_texts(tokenizer, rollouts: Rollouts) -> list[str]:
    """Response texts without padding and stop tokens."""
    import numpy as np
    tokens, mask = np.asarray(rollouts.tokens), np.asarray(rollouts.mask)
    return [tokenizer.decode(row[m].tolist(), skip_special_tokens=True)
            for row, m in zip(tokens, mask)]
