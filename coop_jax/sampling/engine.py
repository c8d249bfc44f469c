"""Continuous-batching sampler: a fixed pool of decode slots that take the next queued request as
soon as their row finishes.

Why: response lengths are long-tailed. `sampler.generate` decodes all B*G rows in lock step until
the longest one stops, so every step pays for rows that finished long ago. Here a decode step
costs `slots` rows however many requests there are, and a finished row is replaced at once.

Design (everything static-shaped, one `lax.while_loop`):
  * a request is one (prompt, sample) pair; the R = B*G requests are queued prompt-major (request
    r is sample r % G of prompt r // G), the row order of `Rollouts`, and written into [R, N]
    output buffers at [request, step];
  * every prompt is prefilled once, up front, into a [B, ..., P] cache; its last hidden state,
    key mask and length are kept with it, and its G samples all copy from there;
  * a slot is one row of a [S, ..., P + N] KV cache plus its request id, its step within that
    request, its next-token hidden state, its key mask and rotary position. A request keeps the
    static sampler's layout whatever slot it lands in: its prompt in columns [0, P), response
    token k in column P + k (`forward_with_cache` takes one write column per row). Refilling a
    slot copies its new prompt's cache into columns [0, P) and resets its key mask; the columns
    an earlier request left beyond P stay masked until overwritten;
  * a step first refills the slots whose rows finished at the step before, then samples and
    feeds back every slot's token, so each step's cache writes (refill, then the new column)
    come before its attention reads, and XLA updates the cache in place (writes after the read,
    as a per-row copy of a scratch column or a refill at the end of the step, made it copy the
    whole cache every step);
  * randomness is per request: token t of request (b, g) is drawn with
    fold_in(fold_in(fold_in(key, b), g), t) as a one-row draw, so the samples depend on neither
    the slot a request lands in nor the slot count. `kernels.fused_sample` takes the slots'
    keys, one per row, in one batched pass (the xla path; see `_row_sampler`). Greedy decoding
    (temperature 0) needs no keys and samples every slot in one call of the configured kernel.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from coop_jax import kernels, models
from coop_jax.kernels import _common
from coop_jax.models.logprobs import resolved_kernel
from coop_jax.sampling import sampler
from coop_jax.sampling.sampler import Rollouts, SamplingConfig

Array = jax.Array
DEFAULT_SLOT_HALVINGS = 3  # rollout.slot_halvings' default: stages of S, S/2, S/4 and S/8 slots
ENGINES = ("static", "continuous")  # rollout.engine: the static batch (sampler) or this engine


class _Prompts(NamedTuple):
    """Every prompt prefilled once: what a slot copies when it takes one of its requests."""
    cache: models.KVCache  # [B, KV, P, hd] / [B, KV, hd, P] leaves (leading [L] when scanned)
    hidden: Array  # [B, D] last prompt token's hidden state
    kv_mask: Array  # [B, P + N] the prompt's key mask in a slot's cache
    lengths: Array  # [B] rotary position of the first response token


class _Slots(NamedTuple):
    req: Array  # [S] request id; R = idle (the queue is empty)
    step: Array  # [S] index of the token the slot samples next
    hidden: Array  # [S, D]
    cache: models.KVCache  # [S, ..., P + N]
    kv_mask: Array  # [S, P + N]
    positions: Array  # [S]
    queue: Array  # () next request to hand out
    tokens: Array  # [R, N]
    logps: Array  # [R, N]
    ents: Array  # [R, N]


def _pairs(cfg: models.ModelConfig, cache: models.KVCache) -> tuple:
    """The cache as (k, v) pairs: one per layer, or the one stacked pair with scan_layers."""
    return (cache,) if cfg.scan_layers else tuple(cache)


def _unpairs(cfg: models.ModelConfig, pairs) -> models.KVCache:
    return tuple(pairs[0]) if cfg.scan_layers else tuple(tuple(kv) for kv in pairs)


def _copy_prompts(cache: models.KVCache, prompt_cache: models.KVCache, take: Array,
                  prompts: Array) -> models.KVCache:
    """Slot cache with columns [0, P) of the `take` rows set to their `prompts`' caches: one
    in-place row copy per refilled slot, in a loop as long as their count (a refill of one slot
    moves one prompt's cache, not the [S, ..., P] block of every slot)."""
    order = jnp.argsort(~take, stable=True)  # refilled slots first

    def put(x, src, row, prompt):
        axis = x.ndim - 4  # the slot / prompt axis
        piece = jax.lax.dynamic_index_in_dim(src, prompt, axis, keepdims=True)
        start = [jnp.int32(0)] * x.ndim
        start[axis] = row
        return jax.lax.dynamic_update_slice(x, piece.astype(x.dtype), start)

    def body(j, cache):
        row = order[j]
        return jax.tree_util.tree_map(lambda x, src: put(x, src, row, prompts[row]), cache,
                                      prompt_cache)
    return jax.lax.fori_loop(0, take.sum(dtype=jnp.int32), body, cache)


def _refill(state: _Slots, free: Array, prompts: _Prompts, g: int) -> _Slots:
    """Hand the next queued requests, in slot order, to the `free` slots; slots left without
    one go idle."""
    s, r = free.shape[0], state.tokens.shape[0]
    new_req = state.queue + jnp.cumsum(free.astype(jnp.int32)) - 1
    take = free & (new_req < r)
    prompt = jnp.where(take, new_req // g, 0)
    keep = lambda new, old: jnp.where(take.reshape((s,) + (1,) * (old.ndim - 1)), new, old)
    return state._replace(
        req=jnp.where(free, jnp.where(take, new_req, r), state.req),
        step=keep(0, state.step),
        hidden=keep(prompts.hidden[prompt], state.hidden),
        cache=_copy_prompts(state.cache, prompts.cache, take, prompt),
        kv_mask=keep(prompts.kv_mask[prompt], state.kv_mask),
        positions=keep(prompts.lengths[prompt], state.positions),
        queue=jnp.minimum(state.queue + free.sum(dtype=jnp.int32), r))


def _prefill(params: dict, cfg: models.ModelConfig, tokens: Array, mask: Array,
             n: int) -> _Prompts:
    """Left-aligned prompts [B, P] -> their caches, last hidden states, slot key masks, lengths."""
    b, p = tokens.shape
    hidden, cache = models.forward_with_cache(params, cfg, tokens, models.positions_from_mask(mask),
                                              mask, models.init_cache(cfg, b, p), jnp.int32(0))
    return _Prompts(cache, hidden[:, -1], jnp.concatenate([mask, jnp.zeros((b, n), bool)], axis=1),
                    mask.sum(-1).astype(jnp.int32))


def _row_sampler(scfg: SamplingConfig, unembed: Array, impl: str, rows: int, key: Array):
    """`(hidden [S, D], prompt [S], sample [S], step [S]) -> (tokens, logps, entropies)`.

    Sampled rows draw from one key per row, in one batched pass of `fused_sample`. The Pallas
    kernels take a single key, so those rows take the xla path (the same tokens: every impl
    reproduces jax.random.categorical for the key). Greedy rows never read a key and keep the
    configured kernel."""
    greedy = scfg.temperature <= _common.GREEDY_TEMPERATURE
    impl = "xla" if not greedy and impl.startswith("pallas") else impl
    kw = dict(impl=impl, valid_vocab=scfg.valid_vocab,
              vocab_tile=sampler.decode_vocab_tile(impl, rows, unembed.shape[1]))

    def sample_rows(hidden, prompt, sample, step):
        fold = jax.random.fold_in
        keys = key if greedy else jax.vmap(lambda b, g, t: fold(fold(fold(key, b), g), t))(
            prompt, sample, step)
        return kernels.fused_sample(keys, hidden, unembed, scfg.temperature, scfg.top_k,
                                    scfg.top_p, **kw)
    return sample_rows


def _decode_step(params: dict, cfg: models.ModelConfig, scfg: SamplingConfig, sample_rows,
                 prompts: _Prompts, state: _Slots) -> _Slots:
    """Refill the idle slots from the queue, sample every busy slot's next token and feed it
    back; a row that finishes leaves its slot idle for the next step's refill."""
    g, n = scfg.num_samples, scfg.max_new_tokens
    r, (s, width) = state.tokens.shape[0], state.kv_mask.shape
    # no `cond` around it: the refill's row loop runs once per refilled slot, none when no slot
    # refills (a branch that refilled wrote the prompt columns of every slot: 2.15 GB a step at
    # Qwen2.5-1.5B shapes, 64 slots; docs/results/decode_bytes)
    state = _refill(state, state.req >= r, prompts, g)
    busy = state.req < r
    tok, logp, ent = sample_rows(state.hidden, state.req // g, state.req % g, state.step)
    out = (jnp.where(busy, state.req, r), state.step)  # idle slots write out of range: dropped
    finished = busy & (jnp.isin(tok, jnp.asarray(scfg.eos_ids, jnp.int32)) | (state.step == n - 1))
    cols = jnp.minimum(width - n + state.step, width - 1)  # idle rows' steps run past N
    kv_mask = state.kv_mask.at[jnp.arange(s), cols].set(True)
    hidden, cache = models.forward_with_cache(params, cfg, tok[:, None], state.positions[:, None],
                                              kv_mask, state.cache, cols)
    return state._replace(
        req=jnp.where(finished, r, state.req), step=state.step + 1, hidden=hidden[:, 0],
        cache=cache, kv_mask=kv_mask, positions=state.positions + 1,
        tokens=state.tokens.at[out].set(tok.astype(jnp.int32), mode="drop"),
        logps=state.logps.at[out].set(logp, mode="drop"),
        ents=state.ents.at[out].set(ent, mode="drop"))


def _rollouts(scfg: SamplingConfig, prompt_tokens: Array, prompt_mask: Array, tokens: Array,
              logps: Array, ents: Array) -> Rollouts:
    """Lengths, masks and the truncation flag from the response tokens, as `generate` does."""
    g, n = scfg.num_samples, scfg.max_new_tokens
    is_stop = jnp.isin(tokens, jnp.asarray(scfg.eos_ids, jnp.int32))
    stopped = jnp.any(is_stop, -1)
    lengths = jnp.where(stopped, jnp.argmax(is_stop, -1) + 1, n)
    mask = jnp.arange(n)[None, :] < lengths[:, None]
    repeat = lambda x: jnp.repeat(x, g, axis=0)
    return Rollouts(repeat(prompt_tokens), repeat(prompt_mask), tokens, logps, mask,
                    lengths.astype(jnp.int32), ~stopped, ents)


def _check_slots(slots: int, halvings: int = DEFAULT_SLOT_HALVINGS) -> None:
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        raise ValueError(f"rollout.slots must be an int >= 1, got {slots!r}")
    if not isinstance(halvings, int) or isinstance(halvings, bool) or halvings < 0:
        raise ValueError(f"rollout.slot_halvings must be an int >= 0, got {halvings!r}")


def stage_sizes(slots: int, halvings: int) -> tuple[int, ...]:
    """Slot counts of the decode stages: `slots`, then halved (rounding up) at most `halvings`
    times, down to one slot."""
    sizes = [slots]
    while len(sizes) <= halvings and sizes[-1] > 1:
        sizes.append((sizes[-1] + 1) // 2)
    return tuple(sizes)


def _decoding(r: int, next_size: int, state: _Slots) -> Array:
    """Whether a stage goes on: work is left and, unless it is the last stage, the queue still
    holds requests or more than `next_size` slots are busy."""
    busy, queued = state.req < r, state.queue < r
    left = jnp.any(busy) | queued
    return left & (queued | (busy.sum() > next_size)) if next_size else left


def _compact(cfg: models.ModelConfig, state: _Slots, size: int) -> _Slots:
    """The first `size` slots in slot order, busy ones first: the next, smaller stage's slots.
    Called once the queue is empty and at most `size` slots are busy, so no row is dropped."""
    busy = state.req < state.tokens.shape[0]
    keep = jnp.argsort(jnp.where(busy, 0, 1), stable=True)[:size]
    rows = lambda x: jnp.take(x, keep, axis=-4)  # a cache leaf's slot axis
    return state._replace(
        req=state.req[keep], step=state.step[keep], hidden=state.hidden[keep],
        cache=_unpairs(cfg, [(rows(k), rows(v)) for k, v in _pairs(cfg, state.cache)]),
        kv_mask=state.kv_mask[keep], positions=state.positions[keep])


def generate_continuous(params: dict, cfg: models.ModelConfig, scfg: SamplingConfig,
                        prompt_tokens: Array, prompt_mask: Array, key: Array, *, slots: int,
                        halvings: int = DEFAULT_SLOT_HALVINGS, backend: str | None = None
                        ) -> Rollouts:
    """`sampler.generate`'s rollouts (same layout and semantics) decoded `slots` rows at a time,
    each slot taking the next queued request when its row finishes. Once the queue is empty
    and at most half the slots are busy, the busy rows move to a stage with half the slots (at
    most `halvings` times; each stage is its own compiled loop body). Call under `jax.jit`
    (see `make_continuous`); `backend` as in `generate`."""
    _check_slots(slots, halvings)
    g, n = scfg.num_samples, scfg.max_new_tokens
    prompt_tokens, prompt_mask = sampler.left_align(prompt_tokens, prompt_mask.astype(bool),
                                                    scfg.pad_id)
    b, p = prompt_tokens.shape
    r = b * g
    sizes = stage_sizes(min(slots, r), halvings)  # more slots than requests: idle rows only
    unembed = models.unembed_matrix(params, cfg)
    prompts = _prefill(params, cfg, prompt_tokens, prompt_mask, n)

    s = sizes[0]
    hidden = jnp.zeros((s,) + prompts.hidden.shape[1:], prompts.hidden.dtype)
    zeros = jnp.zeros((r, n), jnp.float32)
    state = _Slots(jnp.full((s,), r, jnp.int32), jnp.zeros((s,), jnp.int32), hidden,
                   models.init_cache(cfg, s, p + n), jnp.zeros((s, p + n), bool),
                   jnp.zeros((s,), jnp.int32), jnp.int32(0),
                   jnp.full((r, n), scfg.pad_id, jnp.int32), zeros, zeros)
    for i, size in enumerate(sizes):
        if i:
            state = _compact(cfg, state, size)
        impl = resolved_kernel(cfg, state.hidden, unembed, backend=backend)
        step = functools.partial(_decode_step, params, cfg, scfg,
                                 _row_sampler(scfg, unembed, impl, size, key), prompts)
        next_size = sizes[i + 1] if i + 1 < len(sizes) else 0
        state = jax.lax.while_loop(functools.partial(_decoding, r, next_size), step, state)
    return _rollouts(scfg, prompt_tokens, prompt_mask, state.tokens, state.logps, state.ents)


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")


def make_sampler(cfg: models.ModelConfig, scfg: SamplingConfig, engine: str, rows: int,
                 slots: int = 0, halvings: int = DEFAULT_SLOT_HALVINGS):
    """The compiled sampler of `rollout.engine` for calls of `rows` prompts x samples: the
    static batch (`sampler.make`), or the continuous engine with `slots` slots (0: one per row)."""
    check_engine(engine)
    if engine == "continuous":
        return make_continuous(cfg, scfg, slots or rows, halvings)
    return sampler.make(cfg, scfg)


@functools.lru_cache(maxsize=32)
def make_continuous(cfg: models.ModelConfig, scfg: SamplingConfig, slots: int,
                    halvings: int = DEFAULT_SLOT_HALVINGS):
    """A jitted `(params, prompt_tokens, prompt_mask, key) -> Rollouts` for fixed configs."""
    _check_slots(slots, halvings)
    return jax.jit(lambda params, tokens, mask, key: generate_continuous(
        params, cfg, scfg, tokens, mask, key, slots=slots, halvings=halvings))
