"""Where coop_jax's decode loop spends its time, and its tokens/s next to transformers generate().

SmolLM2-135M shapes with random weights (30 layers, hidden 576, 9 heads / 3 KV heads, MLP 1536,
vocab 49,152, tied embeddings, float32), batch 16, prompt 64, 64 new tokens, CPU. The parts of
one decode step are timed as separate jitted functions on the same shapes: the decoder forward
of one token with attention over the whole cache and over the average live length, the KV cache
writes alone, the fused sampler alone and its unembedding matmul alone, and an empty dispatch
(the host round trip). Then `sampling.generate` and transformers `generate()` run side by side on
the same weights (saved by `coop_jax.hf.save`, read by `from_pretrained`), alternating, best of
--repeats each.

    python benchmarks/sampler_profile.py [--threads 2 --repeats 3]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported: a CPU-vs-CPU comparison

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from coop_jax import hf, kernels, models, sampling  # noqa: E402

SMOLLM2_135M = models.ModelConfig(
    vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
    num_kv_heads=3, rope_theta=100_000.0, rms_norm_eps=1e-5, tie_embeddings=True,
    max_position_embeddings=8192, family="llama")


def per_call(fn, *args, calls: int = 10) -> float:
    """Median seconds of one call (after a warm-up/compile call)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def profile(cfg, params, b: int, p: int, n: int) -> dict[str, float]:
    """Seconds per decode step of each part, on the shapes of step ~n/2."""
    unembed = models.unembed_matrix(params, cfg)
    tok = jnp.ones((b, 1), jnp.int32)
    pos = jnp.full((b, 1), p + n // 2, jnp.int32)
    hidden = jax.random.normal(jax.random.key(0), (b, cfg.hidden_size), jnp.float32)

    def forward(cache_len):
        cache = models.init_cache(cfg, b, cache_len)
        mask = jnp.arange(cache_len)[None, :].repeat(b, 0) <= p + n // 2
        step = jax.jit(lambda prm, c: models.forward_with_cache(prm, cfg, tok, pos, mask, c,
                                                                jnp.int32(p + n // 2))[0])
        return per_call(step, params, cache)

    kv = jnp.ones((b, 1, cfg.num_kv_heads, cfg.dim_per_head), jnp.float32)

    @jax.jit
    def writes(cache):  # n steps of K/V writes carried through a loop, as in the decode loop
        def one(i, c):
            return tuple((jax.lax.dynamic_update_slice(k, kv, (0, p + i, 0, 0)),
                          jax.lax.dynamic_update_slice(v, kv, (0, p + i, 0, 0))) for k, v in c)
        return jax.lax.fori_loop(0, n, one, cache)

    out = {
        "forward, attention over the full cache (p+n)": forward(p + n),
        "forward, attention over the live length (p+n/2)": forward(p + n // 2),
        "KV cache writes alone (all layers, K and V)": per_call(
            writes, models.init_cache(cfg, b, p + n)) / n,
        "fused sampler (xla impl, T=1)": per_call(jax.jit(
            lambda k, h: kernels.fused_sample(k, h, unembed, 1.0, impl="xla")),
            jax.random.key(1), hidden),
        "sampler, impl=reference (materialised [B, V] logits)": per_call(jax.jit(
            lambda k, h: kernels.fused_sample(k, h, unembed, 1.0, impl="reference")),
            jax.random.key(1), hidden),
        "unembedding matmul alone": per_call(jax.jit(lambda h: h @ unembed), hidden),
        "empty jitted dispatch (host round trip)": per_call(jax.jit(lambda x: x + 1),
                                                            jnp.int32(0)),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-profile", action="store_true")
    a = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    cfg, b, p, n = SMOLLM2_135M, a.batch, a.prompt_len, a.new_tokens
    params = jax.jit(lambda r: models.init_params(cfg, r))(jax.random.key(0))
    print(f"SmolLM2-135M shapes, random weights, float32; batch {b}, prompt {p}, {n} new tokens; "
          f"jax {jax.__version__} ({os.cpu_count()} cpus), torch {torch.__version__} "
          f"({a.threads} threads), transformers {transformers.__version__}")

    if not a.skip_profile:
        parts = profile(cfg, params, b, p, n)
        print(f"\none decode step, by part (median ms per call):")
        for name, sec in parts.items():
            print(f"  {name:<52}{sec * 1e3:9.2f}")

    eos = cfg.vocab_size - 1
    prompts = np.random.default_rng(0).integers(1, eos, (b, p)).astype(np.int32)
    scfg = sampling.SamplingConfig(max_new_tokens=n, eos_ids=(eos,), pad_id=0, valid_vocab=eos)
    sample = sampling.make(cfg, scfg)
    tokens, mask = jnp.asarray(prompts), jnp.ones(prompts.shape, bool)
    keys = iter(jax.random.split(jax.random.key(1), 100))
    with tempfile.TemporaryDirectory() as tmp:
        hf.save(hf.from_params(cfg, params), tmp)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp).eval()
    ids = torch.from_numpy(prompts).long()

    def coop():
        out = jax.block_until_ready(sample(params, tokens, mask, next(keys)))
        assert bool(out.truncated.all())

    def hf_generate():
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n,
                                 min_new_tokens=n, eos_token_id=eos, pad_token_id=0)
        assert out.shape[1] == p + n

    t0 = time.perf_counter()
    coop()
    compile_s = time.perf_counter() - t0
    hf_generate()
    best = {"coop_jax": float("inf"), "transformers": float("inf")}
    for _ in range(a.repeats):  # alternate so both see the same machine load
        for name, fn in (("coop_jax", coop), ("transformers", hf_generate)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"\ncoop_jax first call (compile + run): {compile_s:.1f}s")
    if not a.skip_profile:
        step = best["coop_jax"] / n
        print(f"coop_jax per generated token step: {step * 1e3:.2f} ms (whole generate / {n})")
    print(f"\n{'impl':<14}{'tokens/s':>10}{'ratio':>8}")
    for name, sec in best.items():
        print(f"{name:<14}{b * n / sec:>10.1f}{best['transformers'] / sec:>7.2f}x")


if __name__ == "__main__":
    main()
