"""Where coop_jax's decode loop spends its time, and its tokens/s next to transformers generate().

SmolLM2-135M shapes with random weights (30 layers, hidden 576, 9 heads / 3 KV heads, MLP 1536,
vocab 49,152, tied embeddings, float32), batch 16, prompt 64, 64 new tokens, CPU.

The profile is a `jax.profiler` trace of one whole `sampling.generate` call: every XLA thunk the
compiled program runs is an event, mapped back to its HLO instruction's `op_name` metadata and
grouped into the parts of a decode step (inside the token loop, `while/body`) and the prefill
(outside it). The sampler is one jitted call with the token loop on device (a `lax.while_loop`):
one host dispatch per `generate`, none per token. Traced thunk time is summed over the XLA
threads, so the shares are of compute time, not of wall time.

Then `sampling.generate` and transformers `generate()` run side by side on the same weights
(saved by `coop_jax.hf.save`, read by `from_pretrained`), alternating, best of --repeats each.

    python benchmarks/sampler_profile.py [--threads 2 --repeats 3]
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported: a CPU-vs-CPU comparison

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from coop_jax import hf, models, sampling  # noqa: E402

SMOLLM2_135M = models.ModelConfig(
    vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
    num_kv_heads=3, rope_theta=100_000.0, rms_norm_eps=1e-5, tie_embeddings=True,
    max_position_embeddings=8192, family="llama")

# (part, op_name pattern), first match wins; decode-loop ops carry "while/body" in their op_name
DECODE_PARTS = (
    ("KV cache writes (and re-layouts fused with them)", r"dynamic_update_slice"),
    ("weight matmuls (q, k, v, o, gate, up, down)", r"_proj/"),
    ("attention matmuls over the KV cache", r"->bkgts/|->btkgd/"),
    ("norms, RoPE, masking, softmax, residuals", r"Transformer/"),
    ("unembedding matmul (sampler)", r"dot_general"),
    ("sampling: Gumbel noise, argmax, bookkeeping", r""),
)
PREFILL = "prefill and setup (once per call)"
_SKIP = ("ThunkExecutor", "SlinkyThreadPool", "Await")


def _op_names(hlo: str) -> dict[str, list[str]]:
    """HLO instruction name -> the op_names of it and of the computation it calls."""
    comps = {}
    for block in re.split(r"\n(?=\S)", hlo):
        name = block.split(" ", 1)[0].lstrip("%")
        comps[name] = re.findall(r'op_name="([^"]+)"', block)
    out = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = ", line)
        if not m:
            continue
        names = re.findall(r'op_name="([^"]+)"', line)
        called = re.search(r"calls=%([^,\s]+)", line)
        if called:
            names += comps.get(called.group(1), [])
        out[m.group(1)] = names
    return out


def _part(op_names: list[str]) -> str:
    decode = [n for n in op_names if "while/body" in n]
    if not decode:
        return PREFILL
    for part, pattern in DECODE_PARTS:
        if any(re.search(pattern, n) for n in decode):
            return part
    return DECODE_PARTS[-1][0]


def profile(sample, params, tokens, mask, key) -> tuple[dict[str, float], int]:
    """Traced XLA thunk seconds of one generate call, by part; and the number of thunks run."""
    compiled = sample.lower(params, tokens, mask, key).compile()  # the program whose HLO is read
    ops = _op_names(compiled.as_text())
    jax.block_until_ready(compiled(params, tokens, mask, key))  # warm
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(compiled(params, tokens, mask, key))
        path = glob.glob(os.path.join(tmp, "**", "*.xplane.pb"), recursive=True)[0]
        data = jax.profiler.ProfileData.from_file(path)
    seconds, thunks = collections.Counter(), 0
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                if event.name in ops and not event.name.startswith(_SKIP):
                    seconds[_part(ops[event.name])] += event.duration_ns * 1e-9
                    thunks += 1
    return dict(seconds), thunks


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
    if not a.skip_profile:
        parts, thunks = profile(sample, params, tokens, mask, jax.random.key(2))
        total = sum(parts.values())
        decode = total - parts.get(PREFILL, 0.0)
        print(f"\none generate call, traced ({thunks} XLA thunks, 1 host dispatch): "
              f"{total:.2f} s of thunk time, {decode / n * 1e3:.1f} ms per decode step")
        print(f"  {'part':<48}{'ms/step':>9}{'share':>8}")
        for part in [PREFILL] + [name for name, _ in DECODE_PARTS]:
            sec = parts.get(part, 0.0)
            per = f"{sec / n * 1e3:9.2f}" if part != PREFILL else f"{'':>9}"
            print(f"  {part:<48}{per}{sec / total:8.1%}")

    hf_generate()
    best = {"coop_jax": float("inf"), "transformers": float("inf")}
    for _ in range(a.repeats):  # alternate so both see the same machine load
        for name, fn in (("coop_jax", coop), ("transformers", hf_generate)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"\ncoop_jax first call (compile + run): {compile_s:.1f}s")
    print(f"coop_jax: {best['coop_jax'] / n * 1e3:.2f} ms per new token (whole generate / {n}, "
          f"prefill included)")
    print(f"\n{'impl':<14}{'tokens/s':>10}{'ratio':>8}")
    for name, sec in best.items():
        print(f"{name:<14}{b * n / sec:>10.1f}{best['transformers'] / sec:>7.2f}x")


if __name__ == "__main__":
    main()
