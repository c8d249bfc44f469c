"""Wall time on the current backend: fused kernels vs the materialised reference, same run.

1. value-and-grad (w.r.t. hidden and unembed) of a GRPO loss through fused_logprobs;
2. one decode sampling step (fused_sample) at B rows.
Best of --repeats after one warm-up call. Usage: python benchmarks/kernel_speed.py [--help]
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from coop_jax.kernels import fused_logprobs, fused_sample

try:  # run as a script (benchmarks/ on sys.path) or as a module
    from kernel_memory import grpo_loss
except ImportError:  # pragma: no cover
    from benchmarks.kernel_memory import grpo_loss


def best_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def train_step(impl: str, **kw):
    def loss(hidden, unembed, targets, old_logp, adv, mask):
        logp, ent = fused_logprobs(hidden, unembed, targets, impl=impl, **kw)
        return grpo_loss(logp, ent, old_logp, adv, mask)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def decode_step(impl: str, top_k: int, top_p: float, **kw):
    return jax.jit(lambda key, h, w, t: fused_sample(key, h, w, t, top_k, top_p, impl=impl, **kw))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--v", type=int, default=32000)
    p.add_argument("--b", type=int, default=64, help="decode batch")
    p.add_argument("--vocab-tiles", default="auto,2048,8192",
                   help="comma list; 'auto' = the impl's default tile")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--impl", default="xla", help="fused impl to time against 'reference'")
    a = p.parse_args()
    ks = jax.random.split(jax.random.key(0), 8)
    hidden = jax.random.normal(ks[0], (a.n, a.d), jnp.float32)
    unembed = jax.random.normal(ks[1], (a.d, a.v), jnp.float32) * a.d ** -0.5
    targets = jax.random.randint(ks[2], (a.n,), 0, a.v)
    old = -jnp.abs(jax.random.normal(ks[3], (a.n,))) * 5
    adv = jax.random.normal(ks[4], (a.n,))
    mask = jnp.ones((a.n,))
    args = (hidden, unembed, targets, old, adv, mask)
    print(f"backend={jax.default_backend()} devices={jax.device_count()}  "
          f"train: N={a.n} D={a.d} V={a.v}  decode: B={a.b}")

    t_ref = best_time(train_step("reference"), *args, repeats=a.repeats)
    print(f"[train fwd+bwd] reference {t_ref * 1e3:8.1f} ms")
    tiles = [None if t == "auto" else int(t) for t in a.vocab_tiles.split(",")]
    for tile in tiles:
        t = best_time(train_step(a.impl, vocab_tile=tile), *args, repeats=a.repeats)
        print(f"[train fwd+bwd] {a.impl} tile={tile or 'auto':>5} {t * 1e3:8.1f} ms   "
              f"fused/reference = {t / t_ref:.2f}x")

    h_dec = hidden[:a.b]
    temp = jnp.full((a.b,), 1.0)
    for top_k, top_p in ((0, 1.0), (50, 1.0), (0, 0.95)):
        t_ref = best_time(decode_step("reference", top_k, top_p), ks[5], h_dec, unembed, temp,
                          repeats=a.repeats)
        line = f"[decode top_k={top_k:2d} top_p={top_p}] reference {t_ref * 1e3:7.2f} ms"
        for tile in tiles:
            t = best_time(decode_step(a.impl, top_k, top_p, vocab_tile=tile), ks[5], h_dec,
                          unembed, temp, repeats=a.repeats)
            line += f" | {a.impl} tile={tile or 'auto'} {t * 1e3:7.2f} ms ({t / t_ref:.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
