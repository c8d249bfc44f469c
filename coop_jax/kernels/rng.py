"""Counter-based Gumbel noise that matches ``jax.random.gumbel(key, (B, V))`` element by element.

With ``jax_threefry_partitionable`` (the default), the random bits of element ``(b, j)`` of a
``(B, V)`` draw are ``threefry2x32(key, (hi, lo))`` xor-folded, where ``(hi, lo)`` is the 64-bit
flat index ``b * V + j``. Recomputing that hash for any tile of columns therefore reproduces the
exact noise ``jax.random.categorical`` adds to the full logits, without materialising it. The
functions here use only uint32 add/xor/shift ops so they also run inside Pallas kernels.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = np.uint32(0x1BD11BDA)
_F32_ONE_BITS = np.uint32(0x3F800000)
_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def check_rng_config() -> None:
    """Raise if the global jax config makes the counter-based noise differ from jax.random."""
    if jax.config.jax_default_prng_impl != "threefry2x32":
        raise ValueError(
            "fused sampling reproduces threefry2x32 bits; jax_default_prng_impl is "
            f"{jax.config.jax_default_prng_impl!r}. Use impl='reference' instead.")
    if not jax.config.jax_threefry_partitionable:
        raise ValueError("fused sampling needs jax_threefry_partitionable=True (the default); "
                         "use impl='reference' with the legacy bit layout.")
    if jax.config.jax_high_dynamic_range_gumbel:
        raise ValueError("fused sampling implements the default 'low' Gumbel mode; "
                         "jax_high_dynamic_range_gumbel is on. Use impl='reference'.")


def per_row_keys(key: jax.Array) -> bool:
    """Whether `key` is one key per row: typed keys of shape [B], or raw uint32[B, 2]."""
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    return key.ndim == (1 if typed else 2)


def key_words(key: jax.Array) -> jax.Array:
    """The uint32 words of a threefry key: [2] for one key (typed ``jax.random.key`` or raw
    uint32[2]), [B, 2] for one key per row (typed keys of shape [B], or raw uint32[B, 2])."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        if impl != "threefry2x32":
            raise ValueError(f"key: fused sampling needs a threefry2x32 key, got {impl!r}")
        data = jax.random.key_data(key)
    else:
        data = jnp.asarray(key)
        if data.dtype != jnp.uint32:
            raise ValueError(f"key: expected a PRNG key or uint32[2], got dtype {data.dtype}")
    if data.ndim not in (1, 2) or data.shape[-1] != 2:
        raise ValueError(f"key: expected one key (data shape (2,)) or one per row ((B, 2)), "
                         f"got {data.shape}")
    return data


def draw_coords(words: jax.Array, num_rows: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(k0, k1, rows), each broadcastable to [num_rows, 1], for `gumbel_at`: one key's
    (num_rows, V) draw (row b at row b), or per-row keys' one-row draws (every row at row 0,
    under its own key), so row b's noise is that of ``jax.random.gumbel(keys[b], (1, V))``."""
    if words.ndim == 1:
        return words[0], words[1], jnp.arange(num_rows, dtype=jnp.int32)[:, None]
    return words[:, 0:1], words[:, 1:2], jnp.zeros((num_rows, 1), jnp.int32)


def _rotl(x: jax.Array, d: int) -> jax.Array:
    return lax.shift_left(x, np.uint32(d)) | lax.shift_right_logical(x, np.uint32(32 - d))


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 (20 rounds), the same schedule as jax's reference lowering."""
    ks = (k0, k1, k0 ^ k1 ^ _KS_PARITY)
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r)
            x1 = x0 ^ x1
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def gumbel_from_bits(bits: jax.Array) -> jax.Array:
    """float32 Gumbel(0, 1) from uint32 bits, op for op as ``jax.random.gumbel`` (mode 'low')."""
    float_bits = lax.shift_right_logical(bits, np.uint32(32 - 23)) | _F32_ONE_BITS
    floats = lax.bitcast_convert_type(float_bits, jnp.float32) - np.float32(1.0)
    u = jnp.maximum(_F32_TINY, floats * (np.float32(1.0) - _F32_TINY) + _F32_TINY)
    return -jnp.log(-jnp.log(u))


def gumbel_at(k0: jax.Array, k1: jax.Array, rows: jax.Array, cols: jax.Array,
              num_cols: int) -> jax.Array:
    """Gumbel noise of element ``(rows, cols)`` of a ``(B, num_cols)`` draw; broadcasts rows/cols.

    Requires ``B * num_cols < 2**32`` (checked by callers), so the high counter word is 0.
    """
    flat = rows.astype(jnp.uint32) * np.uint32(num_cols) + cols.astype(jnp.uint32)
    b0, b1 = threefry2x32(k0, k1, jnp.zeros_like(flat), flat)
    return gumbel_from_bits(b0 ^ b1)


def check_counter_range(num_rows: int, num_cols: int) -> None:
    if num_rows * num_cols >= 2 ** 32:
        raise ValueError(f"hidden/unembed: batch*vocab = {num_rows}*{num_cols} must be < 2**32 "
                         "for the fused sampler; use impl='reference'")
