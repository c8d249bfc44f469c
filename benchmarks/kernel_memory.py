"""Compiled temp memory of value-and-grad of a GRPO loss: materialised logits vs fused kernels.

Nothing is allocated: inputs are ShapeDtypeStructs and only ``lower().compile()`` runs.
Usage: python benchmarks/kernel_memory.py [--n 4096 --d 1536 --v 151936 --dtype float32]
       python benchmarks/kernel_memory.py --smollm2   # SmolLM2-135M's shapes: D=576, V=49,152
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from coop_jax.kernels import fused_logprobs

MIB = 2 ** 20
SMOLLM2_D, SMOLLM2_V = 576, 49_152  # hidden size and vocabulary of SmolLM2-135M(-Instruct)


def grpo_loss(logp, entropy, old_logp, adv, mask, clip_eps=0.2, ent_coef=0.01):
    ratio = jnp.exp(logp - old_logp)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    per_token = -surrogate - ent_coef * entropy
    return jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def make_step(impl: str, **kw):
    def loss(hidden, unembed, targets, old_logp, adv, mask):
        logp, ent = fused_logprobs(hidden, unembed, targets, temperature=1.0, impl=impl, **kw)
        return grpo_loss(logp, ent, old_logp, adv, mask)
    return jax.value_and_grad(loss, argnums=(0, 1))


def temp_bytes(impl: str, args, **kw) -> tuple[int, float]:
    t0 = time.perf_counter()
    compiled = jax.jit(make_step(impl, **kw)).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=1536)
    p.add_argument("--v", type=int, default=151_936)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--vocab-tile", type=int, default=None)
    p.add_argument("--skip-pallas", action="store_true")
    p.add_argument("--smollm2", action="store_true",
                   help="SmolLM2-135M-Instruct's hidden size and vocabulary (576, 49,152)")
    a = p.parse_args()
    if a.smollm2:
        a.d, a.v = SMOLLM2_D, SMOLLM2_V
    dt = jnp.dtype(a.dtype)
    f32 = jnp.float32
    args = (jax.ShapeDtypeStruct((a.n, a.d), dt), jax.ShapeDtypeStruct((a.d, a.v), dt),
            jax.ShapeDtypeStruct((a.n,), jnp.int32), jax.ShapeDtypeStruct((a.n,), f32),
            jax.ShapeDtypeStruct((a.n,), f32), jax.ShapeDtypeStruct((a.n,), f32))
    print(f"backend={jax.default_backend()} N={a.n} D={a.d} V={a.v} dtype={a.dtype}")
    ref, t_ref = temp_bytes("reference", args)
    print(f"reference (materialised)  temp = {ref / MIB:10.1f} MiB  (compile {t_ref:.1f}s)")
    xla, t_xla = temp_bytes("xla", args, vocab_tile=a.vocab_tile)
    print(f"xla (fused scan)          temp = {xla / MIB:10.1f} MiB  (compile {t_xla:.1f}s)"
          f"  ratio fused/materialised = 1/{ref / xla:.0f}")
    if not a.skip_pallas:
        for impl in ("pallas_tpu", "pallas_gpu"):
            try:
                pal, t_pal = temp_bytes(impl, args, interpret=True)
                print(f"{impl} (interpret)  temp = {pal / MIB:10.1f} MiB  (compile {t_pal:.1f}s)"
                      f"  ratio = 1/{ref / pal:.0f}  [interpret-mode HLO, not the real kernel]")
            except Exception as e:  # report, don't hide: interpret lowering may not scale
                print(f"{impl} (interpret): could not lower/compile on CPU: "
                      f"{type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
