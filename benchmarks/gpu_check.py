"""The first-contact GPU check: kernels, sampler and the Cooper step on one GPU, one JSON out.

Prepared for one H200 lent for a few minutes (JAX with CUDA, flax, optax, orbax, transformers,
torch; no network). Every section is guarded (its failure is recorded in the JSON and the next
one runs) and time-budgeted (skipped when the remaining budget is below its estimate); the JSON
is rewritten after each section, so even a killed run leaves its results.

  kernels  fused_logprobs values + gradients and fused_sample: impl pallas_gpu vs xla vs
           reference at V=151,936, D=1536, bf16 and fp32; wall time and compiled memory.
  sampler  tokens/s of coop_jax vs transformers generate() (torch CUDA) on the same random
           Qwen2.5-1.5B-shaped weights, bf16, batch 64, 512 new tokens; ratio to the HBM bound
           (weights + KV bytes read per decode step / the chip's HBM bandwidth);
           --no-transformers: coop_jax alone.
  cooper   the Cooper train step (policy + reference + RM, 1.5B-shaped, random weights), 4 prompts
           x 16 rollouts, 512 + 512 tokens: compile time, step time, peak memory, MFU against
           the chip's bf16 peak; at reduced depth first (--cooper-layers, default 2, 4, 28: the
           Qwen2.5-1.5B width at 2 and 4 layers, then the full 28), so that even a lease too
           short for the full depth measures the step time per layer (the slope between depths)
           and extrapolates the full depth from it.

Sections run in the order given, cooper first by default. Compile time is bounded: XLA's GPU
autotuning runs at --xla-autotune-level (default 0: no autotuning, cuBLAS' and XLA's default
algorithms; set in XLA_FLAGS before JAX starts, recorded in the JSON's environment), and each
depth of the Cooper section is skipped when the budget left is below its estimate.

Run (from the repository root; the wheels are built here by benchmarks/gpu_wheels.sh into
build/gpu_wheels, which the device tool carries because `build/` is git-ignored):

    pip install --no-index --no-deps build/gpu_wheels/*.whl   # ml_collections etc., offline
    PYTHONPATH=. timeout 560 python benchmarks/gpu_check.py --budget-s 500 \
        --out $OUT/gpu_check.json 2>&1 | tee $OUT/gpu_check.log

`--smoke` runs the same code on CPU with tiny shapes (a test runs it: tests/benchmarks/test_gpu_check.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import threading
import time
import traceback
from typing import Callable

SMOKE = "--smoke" in sys.argv


def _argv_value(flag: str, default: str) -> str:
    """A flag's value read before argparse runs: XLA_FLAGS must be set before JAX starts."""
    for i, arg in enumerate(sys.argv):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


AUTOTUNE_LEVEL = _argv_value("--xla-autotune-level", "0")
if __name__ == "__main__":
    os.environ["JAX_PLATFORMS"] = "cpu" if SMOKE else os.environ.get("JAX_PLATFORMS", "cuda")
    if not SMOKE and "xla_gpu_autotune_level" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_gpu_autotune_level={AUTOTUNE_LEVEL}").strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # memory_plan's shared pieces

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

H200_HBM_BYTES_PER_S = 4.8e12
H200_BF16_FLOPS = 989e12
# device_kind substring -> (dense bf16 FLOP/s, HBM bytes/s) of the chip, the MFU and HBM bounds
CHIPS = {"H200": (989e12, 4.8e12), "H100": (989e12, 3.35e12)}

# Qwen2.5-1.5B shapes (full) and a tiny stand-in (smoke)
FULL = dict(vocab=151_936, hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2,
            kernel_rows=4096, batch=64, prompt=128, new_tokens=512, prompts=4, group=16,
            response=512, rm_len=1024, cooper_layers=(2, 4, 28))
TINY = dict(vocab=384, hidden=32, intermediate=64, layers=1, heads=4, kv_heads=2,
            kernel_rows=16, batch=4, prompt=8, new_tokens=8, prompts=2, group=4, response=8,
            rm_len=16, cooper_layers=(1, 2))


def model_config(s: dict, dtype: str, param_dtype: str, num_labels: int = 0, remat=False):
    from coop_jax import models
    return models.ModelConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
        num_layers=s["layers"], num_heads=s["heads"], num_kv_heads=s["kv_heads"],
        rope_theta=1_000_000.0, qkv_bias=True, tie_embeddings=num_labels == 0,
        max_position_embeddings=32_768, num_labels=num_labels, param_dtype=param_dtype,
        dtype=dtype, remat=remat)


_progress: dict = {}  # the running section and its phase, for a watchdog kill to record


def phase(label: str) -> None:
    """Marks where the running section is: the log, a watchdog kill and `phase_s` all show it."""
    now = time.perf_counter()
    if "phase" in _progress:
        _progress.setdefault("times", {})[_progress["phase"]] = now - _progress["since"]
    _progress.update(phase=label, since=now)
    print(f"[gpu_check]   {_progress.get('section')}: {label}", flush=True)


def timed(fn: Callable, repeats: int = 3) -> tuple[float, object]:
    """(median wall seconds of `repeats` calls after one warm-up call, the warm-up output)."""
    repeats = 1 if SMOKE else repeats
    out = jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def memory_of(compiled) -> dict:
    m = compiled.memory_analysis()
    if m is None:
        return {}
    return {"argument_bytes": int(m.argument_size_in_bytes),
            "temp_bytes": int(m.temp_size_in_bytes),
            "output_bytes": int(m.output_size_in_bytes)}


def device_peak() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# ----------------------------------------------------------------------------------- kernels
def section_kernels(s: dict, smoke: bool) -> dict:
    from coop_jax.kernels import fused_logprobs, fused_sample
    n, d, v = s["kernel_rows"], s["hidden"], s["vocab"]
    interpret = smoke  # CPU: the Triton kernel in Pallas interpret mode
    out = {"shape": {"N": n, "D": d, "V": v}}
    k = jax.random.split(jax.random.key(0), 5)
    for dtype in ("bfloat16",) if smoke else ("bfloat16", "float32"):  # smoke: same code once
        dt = jnp.dtype(dtype)
        h = jax.random.normal(k[0], (n, d), jnp.float32).astype(dt)
        w = (jax.random.normal(k[1], (d, v), jnp.float32) / math.sqrt(d) * 4).astype(dt)
        tgt = jax.random.randint(k[2], (n,), 0, v).at[: n // 8].set(-1)  # masked rows too
        g_lp, g_ent = jax.random.normal(k[3], (n,)), jax.random.normal(k[4], (n,))
        rows = {}
        for impl in ("reference", "xla", "pallas_gpu"):
            phase(f"{dtype} {impl}")
            row = {}
            try:
                kw = {"interpret": interpret} if impl == "pallas_gpu" else {}

                def loss(h, w, impl=impl, kw=kw):
                    lp, ent = fused_logprobs(h, w, tgt, temperature=0.9, impl=impl, **kw)
                    return jnp.sum(lp * g_lp + ent * g_ent), (lp, ent)
                t0 = time.perf_counter()
                fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
                compiled = fwd_bwd.lower(h, w).compile()
                row["compile_s"] = time.perf_counter() - t0
                row["fwd_bwd_s"], ((_, (lp, ent)), (dh, dw)) = timed(lambda: compiled(h, w))
                row.update(memory_of(compiled))
                fwd = jax.jit(lambda h, w, impl=impl, kw=kw: fused_logprobs(
                    h, w, tgt, temperature=0.9, impl=impl, **kw))
                row["fwd_s"], _ = timed(lambda: fwd(h, w))
                sample = jax.jit(lambda key, h, w, impl=impl, kw=kw: fused_sample(
                    key, h, w, 1.0, 0, 0.95, impl=impl, **kw))
                sc = sample.lower(k[0], h, w).compile()
                row["sample_s"], (tok, slp, _) = timed(lambda: sc(k[0], h, w))
                row["sample_memory"] = memory_of(sc)
                rows[impl] = row
                row["_values"] = (lp, ent, dh, dw, tok, slp)
            except Exception as e:  # recorded; the other impls still run
                row["error"] = f"{type(e).__name__}: {e}"[:800]
                rows[impl] = row
        ref = rows["reference"].get("_values")
        xla = rows["xla"].get("_values")
        pallas = rows["pallas_gpu"].get("_values")
        if xla is not None and pallas is not None:
            rows["pallas_gpu"]["rel_err_vs_xla"] = {
                nm: rel_err(a, b) for nm, a, b in zip(("logp", "entropy", "d_hidden", "d_unembed"),
                                                      pallas[:4], xla[:4])}
            rows["pallas_gpu"]["sample_token_match_vs_xla"] = float(np.mean(
                np.asarray(pallas[4]) == np.asarray(xla[4])))
        for impl, row in rows.items():
            vals = row.pop("_values", None)
            if vals is None or ref is None or impl == "reference":
                continue
            names = ("logp", "entropy", "d_hidden", "d_unembed")
            row["rel_err_vs_reference"] = {nm: rel_err(a, b) for nm, a, b in
                                           zip(names, vals[:4], ref[:4])}
            row["sample_token_match_vs_reference"] = float(np.mean(
                np.asarray(vals[4]) == np.asarray(ref[4])))
        out[dtype] = rows
    return out


# ----------------------------------------------------------------------------------- sampler
def hbm_bound_tokens_per_s(cfg, batch: int, prompt: int, new: int, weight_bytes: int) -> float:
    """Tokens/s if every decode step only streamed the weights and the live KV cache from HBM."""
    kv_per_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.dim_per_head * 2  # bf16 K and V
    bandwidth = chip_peaks()[1]
    seconds = sum((weight_bytes + batch * (prompt + t) * kv_per_token) / bandwidth
                  for t in range(new))
    return batch * new / seconds


def _transformers_model(cfg, params, device: str):
    """transformers' Qwen2ForCausalLM with coop_jax's `params` (bf16, tied embeddings)."""
    import torch
    import transformers
    from coop_jax.hf.convert import hf_config_from_model_config, params_to_hf
    hf_cfg = transformers.Qwen2Config.from_dict(hf_config_from_model_config(cfg))
    hf_cfg.eos_token_id, hf_cfg.pad_token_id = cfg.vocab_size - 1, 0
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(hf_cfg).to(torch.bfloat16).eval()
    state = {k: torch.from_numpy(np.asarray(v, np.float32)).to(torch.bfloat16)
             for k, v in params_to_hf(params).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"weight transfer: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


def _transformers_generate(model, prompts, n: int, device: str) -> dict:
    """transformers' generate() tokens/s on `prompts`, n new tokens, after one warm-up."""
    import torch
    ids = torch.from_numpy(prompts).long().to(device)

    def hf_run():
        with torch.inference_mode():
            res = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n,
                                 min_new_tokens=n, use_cache=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return res
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    hf_run()  # warm-up
    t0 = time.perf_counter()
    res = hf_run()
    out = {"transformers_tokens_per_s": prompts.size // prompts.shape[1] * n
           / (time.perf_counter() - t0), "transformers_new_tokens": int(res.shape[1]
                                                                        - prompts.shape[1])}
    if device == "cuda":
        out["transformers_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


def section_sampler(s: dict, smoke: bool) -> dict:
    """coop_jax's static sampler tokens/s and its share of the HBM bound; beside it (unless
    `s["transformers"]` is False) transformers' generate() on the same weights and the two
    sides' last-position logits."""
    from coop_jax import models, sampling
    cfg = model_config(s, "bfloat16", "bfloat16")
    device = "cpu" if smoke else "cuda"
    with_hf = s.get("transformers", True)
    phase("init params")
    params = jax.jit(lambda r: models.init_params(cfg, r))(jax.random.key(1))
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    b, p, n = s["batch"], s["prompt"], s["new_tokens"]
    prompts = np.random.default_rng(0).integers(1, cfg.vocab_size - 1, (b, p)).astype(np.int32)
    out = {"batch": b, "prompt": p, "new_tokens": n, "weight_bytes": weight_bytes}
    if with_hf:
        import torch
        phase("transformers model")
        model = _transformers_model(cfg, params, device)
        phase("logit parity")  # same weights: last-position logits agree (bf16)
        with torch.inference_mode():
            hf_logits = model(torch.from_numpy(prompts[:2]).long().to(device)).logits[:, -1]
        ours = models.lm_logits(params, cfg, jnp.asarray(prompts[:2]))[:, -1]
        out["logit_rel_err_vs_transformers"] = rel_err(np.asarray(ours),
                                                       hf_logits.float().cpu().numpy())

    scfg = sampling.SamplingConfig(max_new_tokens=n, eos_ids=(cfg.vocab_size - 1,), pad_id=0,
                                   valid_vocab=cfg.vocab_size - 1)
    sample = sampling.make(cfg, scfg)
    phase("coop_jax sampler")
    tokens, mask = jnp.asarray(prompts), jnp.ones(prompts.shape, bool)
    t0 = time.perf_counter()
    jax.block_until_ready(sample(params, tokens, mask, jax.random.key(0)))
    out["coop_jax_first_call_s"] = time.perf_counter() - t0
    seconds, res = timed(lambda: sample(params, tokens, mask, jax.random.key(2)), repeats=2)
    out["coop_jax_tokens_per_s"] = b * n / seconds
    out["coop_jax_all_rows_full_length"] = bool(np.asarray(res.truncated).all())
    bound = hbm_bound_tokens_per_s(cfg, b, p, n, weight_bytes)
    out["hbm_bound_tokens_per_s"] = bound
    out["coop_jax_fraction_of_hbm_bound"] = out["coop_jax_tokens_per_s"] / bound
    if with_hf:
        phase("transformers generate")
        out.update(_transformers_generate(model, prompts, n, device))
        out["ratio_coop_jax_over_transformers"] = (out["coop_jax_tokens_per_s"]
                                                   / out["transformers_tokens_per_s"])
        out["transformers_fraction_of_hbm_bound"] = out["transformers_tokens_per_s"] / bound
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------- cooper step
def model_flops_per_step(cfg, rows: int, p: int, r: int, rm_len: int, pairs: int) -> float:
    """Model FLOPs of one Cooper step (no remat recompute): policy fwd+bwd, old and reference
    forwards, RM scoring of the rollouts and RM fwd+bwd on the pairs; matmuls + attention."""
    d, layers = cfg.hidden_size, cfg.num_layers
    per_layer = 2 * (d * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.dim_per_head
                     + cfg.num_heads * cfg.dim_per_head * d + 3 * d * cfg.intermediate_size)

    def fwd(tokens_per_row, n_rows, unembed_tokens):
        t = tokens_per_row
        attn = 2 * 2 * layers * cfg.num_heads * cfg.dim_per_head * t * t / 2  # causal half
        return n_rows * (t * layers * per_layer + attn) + 2 * d * cfg.vocab_size * unembed_tokens

    policy = fwd(p + r, rows, rows * r)
    rm = fwd(rm_len, rows, 0)
    rm_pairs = fwd(rm_len, 2 * pairs, 0)
    return 3 * policy + 2 * policy + rm + 3 * rm_pairs  # train(3x) + old + ref, RM score, RM train


def chip_peaks() -> tuple[float, float]:
    """(bf16 FLOP/s, HBM bytes/s) of the device (the H200's when not in CHIPS)."""
    kind = jax.devices()[0].device_kind
    return next((v for k, v in CHIPS.items() if k in kind), (H200_BF16_FLOPS,
                                                              H200_HBM_BYTES_PER_S))


def cooper_setup(s: dict, layers: int):
    """(StepConfig, tx, rm_tx, config) of the Cooper step at shapes `s` and depth `layers`
    (policy and RM), as the trainer builds them from the Qwen2.5-1.5B GSM8K config, in
    `s["micro_batches"]` gradient-accumulation micro-batches (default 1)."""
    import memory_plan
    config = memory_plan.load_config(memory_plan.DEFAULT_CONFIG)
    arch = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                num_layers=layers, num_heads=s["heads"], num_kv_heads=s["kv_heads"])
    config.model.update(arch)
    config.reward_model.update(arch)
    config.rollout.update(prompts_per_step=s["prompts"], group_size=s["group"],
                          max_new_tokens=s["response"])
    config.data.max_prompt_len = s["response"]
    config.cooper.max_len = s["rm_len"]
    cfg, tx, rm_tx = memory_plan.step_setup(config, layers, True, "auto",
                                            valid_vocab=s["vocab"] - 271,
                                            micro_batches=s.get("micro_batches", 1))
    return cfg, tx, rm_tx, config


def cooper_depth(s: dict, layers: int, smoke: bool, steps: int | None = None) -> dict:
    """Compile and run the Cooper step at `layers` layers: compile time, memory, step times,
    FLOPs, MFU against the chip's peak. Phases are labelled with the depth."""
    import memory_plan
    from coop_jax import models
    from coop_jax.trainer.batch import TrainBatch
    from coop_jax.trainer.step import init_state, jit_step
    cfg, tx, rm_tx, config = cooper_setup(s, layers)
    key = jax.random.key(3)
    phase(f"{layers} layers: init params")
    policy = jax.jit(lambda r: models.init_params(cfg.policy, r))(key)
    ref = jax.tree_util.tree_map(jnp.copy, policy)
    rm = jax.jit(lambda r: models.init_params(cfg.rm, r))(jax.random.fold_in(key, 1))
    state = init_state(policy, tx, ref_params=ref, rm_params=rm, rm_tx=rm_tx)
    rng = np.random.default_rng(0)
    batch = {}
    for name, sds in memory_plan.abstract_batch(config, None).to_flat().items():
        if sds.dtype == np.int32 and "mask" not in name:
            batch[name] = rng.integers(1, cfg.valid_vocab, sds.shape).astype(np.int32)
        elif "mask" in name:
            batch[name] = np.ones(sds.shape, sds.dtype)
        elif name in ("rewards", "pair_valid"):
            batch[name] = (rng.random(sds.shape) > 0.5).astype(np.float32)
        elif name == "loss_weight":
            batch[name] = np.ones(sds.shape, np.float32)
        else:
            batch[name] = np.zeros(sds.shape, sds.dtype)
    batch = jax.device_put(TrainBatch.from_flat(batch))
    step = jit_step(cfg, tx, rm_tx)
    phase(f"{layers} layers: compile")
    t0 = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    out = {"layers": layers, "micro_batches": cfg.micro_batches,
           "compile_s": time.perf_counter() - t0, **memory_of(compiled)}
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    out["xla_flops"] = float(cost.get("flops", float("nan"))) if cost else float("nan")
    times, metrics = [], None
    for i in range(steps or (2 if smoke else 3)):
        phase(f"{layers} layers: step {i + 1}")
        t0 = time.perf_counter()
        state, outputs = compiled(state, batch)
        metrics = jax.block_until_ready(outputs.metrics)
        times.append(time.perf_counter() - t0)
    out["step_s_each"] = times
    out["step_s"] = float(np.median(times[1:]))  # the first call also pays for transfers
    out["metrics_finite"] = bool(all(np.isfinite(np.asarray(v)).all() for v in metrics.values()))
    rows = s["prompts"] * s["group"]
    flops = model_flops_per_step(cfg.policy, rows, s["response"], s["response"], s["rm_len"],
                                 s["prompts"])
    peak_flops = chip_peaks()[0]
    out["model_flops"] = flops
    out["mfu"] = flops / out["step_s"] / peak_flops
    out["hfu"] = out["xla_flops"] / out["step_s"] / peak_flops
    out["peak_flops"] = peak_flops
    out["device_peak_bytes"] = device_peak()
    del state, compiled
    return out


def per_layer_fit(depths: dict) -> dict:
    """Least-squares step_s = a + b * layers over the measured depths, and its value at the
    full depth: the per-layer time `b` even when the full depth was not run."""
    pts = [(d["layers"], d["step_s"]) for d in depths.values() if "step_s" in d]
    if len({x for x, _ in pts}) < 2:
        return {}
    xs, ys = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    slope, intercept = np.polyfit(xs, ys, 1)
    return {"per_layer_step_s": float(slope), "step_s_at_0_layers": float(intercept)}


# seconds one depth of the Cooper section may take on the H200 (compile + 3 steps), used to skip
# a depth the budget cannot hold; the full depth has never finished there (killed at 394 s)
COOPER_ESTIMATE_S = {2: 60, 4: 80, 28: 300}


def section_cooper(s: dict, smoke: bool, budget_left=None) -> dict:
    """The Cooper step at each depth of `s["cooper_layers"]`, smallest first, each guarded and
    time-budgeted; the deepest finished one is reported at the top level."""
    out = {"depths": {}}
    for layers in s["cooper_layers"]:
        left = budget_left() if budget_left else float("inf")
        estimate = COOPER_ESTIMATE_S.get(layers, 10 * layers)
        if not smoke and left < estimate:
            out["depths"][str(layers)] = {"skipped": f"budget: {left:.0f}s left < {estimate}s"}
            continue
        t0 = time.perf_counter()
        try:
            res = cooper_depth(s, layers, smoke)
        except Exception as e:  # recorded; a shallower depth's figures still stand
            res = {"layers": layers, "error": f"{type(e).__name__}: {e}"[:2000],
                   "traceback": traceback.format_exc()[-3000:]}
        res["depth_s"] = time.perf_counter() - t0
        out["depths"][str(layers)] = res
        # what a watchdog kill in a deeper depth keeps (main's watchdog writes it)
        _progress["partial"] = {"depths": dict(out["depths"]), **per_layer_fit(out["depths"])}
        print(f"[gpu_check]   cooper {layers} layers: "
              + (f"step {res['step_s']:.3f}s, MFU {res['mfu']:.3f}, compile "
                 f"{res['compile_s']:.1f}s" if "step_s" in res else res.get("error", "")),
              flush=True)
    fit = per_layer_fit(out["depths"])
    if fit:
        full = FULL["layers"]
        fit["extrapolated_step_s_at_full_depth"] = (fit["step_s_at_0_layers"]
                                                    + full * fit["per_layer_step_s"])
        out.update(fit)
    done = [d for d in out["depths"].values() if "step_s" in d]
    if not done:
        errors = [d["error"] for d in out["depths"].values() if "error" in d]
        if errors:
            raise RuntimeError(errors[-1])
        out["skipped"] = "budget: no depth fitted"
        return out
    out.update({k: v for k, v in done[-1].items() if k != "traceback"})
    return out


SECTIONS = {  # name -> (function, estimated seconds on the H200, incl. compiles), run order
    "cooper": (section_cooper, 60),  # its shallowest depth; deeper ones are budgeted inside
    "kernels": (section_kernels, 90),
    "sampler": (section_sampler, 280),  # 271 s on the first H200 run
}


def environment() -> dict:
    env = {"jax": jax.__version__, "backend": jax.default_backend(),
           "devices": [str(d) for d in jax.devices()],
           "device_kind": jax.devices()[0].device_kind,
           "xla_flags": os.environ.get("XLA_FLAGS", ""),
           "chip_peak_bf16_flops": chip_peaks()[0], "chip_hbm_bytes_per_s": chip_peaks()[1]}
    try:
        import torch
        env["torch"] = torch.__version__
        env["torch_cuda"] = bool(torch.cuda.is_available())
    except Exception as e:
        env["torch"] = f"unavailable: {e}"
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="gpu_check.json")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny shapes")
    p.add_argument("--budget-s", type=float, default=450.0, help="whole-run wall budget")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS),
                   help="sections in the order to run them (default: cooper kernels sampler)")
    p.add_argument("--cooper-layers", default=None,
                   help="comma-separated depths of the Cooper step, run in this order (default "
                        "2,4,28; smoke 1,2)")
    p.add_argument("--no-transformers", action="store_true",
                   help="sampler: coop_jax alone (its tokens/s and share of the HBM bound), "
                        "without transformers' generate() beside it (most of the section's time)")
    p.add_argument("--cooper-micro-batches", type=int, default=1,
                   help="gradient-accumulation micro-batches of the Cooper step (default 1; the "
                        "memory plan estimates the full depth at 151 GiB on one GPU unsplit)")
    p.add_argument("--xla-autotune-level", default=AUTOTUNE_LEVEL,
                   help="XLA_FLAGS --xla_gpu_autotune_level (default 0: no autotuning, a bounded "
                        "compile); read before JAX starts")
    a = p.parse_args(argv)
    start = time.perf_counter()
    shapes = dict(TINY if a.smoke else FULL)
    if a.cooper_layers:
        shapes["cooper_layers"] = tuple(int(x) for x in a.cooper_layers.split(",") if x)
    shapes["micro_batches"] = a.cooper_micro_batches
    shapes["transformers"] = not a.no_transformers
    results = {"smoke": a.smoke, "shapes": shapes, "environment": environment(), "sections": {}}
    out = pathlib.Path(a.out)

    def write():
        results["elapsed_s"] = time.perf_counter() - start
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1, default=str))
        tmp.replace(out)

    def watchdog():  # a hung compile must not eat the whole device lease
        time.sleep(a.budget_s + 30)
        results["killed_by_watchdog"] = True
        if _progress:
            results["sections"][_progress["section"]] = {
                **_progress.get("partial", {}),  # the Cooper depths that finished
                "status": "killed", "phase": _progress.get("phase"),
                "phase_s": time.perf_counter() - _progress.get("since", start)}
        write()
        os._exit(3)
    if not a.smoke:  # CPU smoke runs on shared machines: their wall time says nothing
        threading.Thread(target=watchdog, daemon=True).start()

    for name in a.sections:
        fn, estimate = SECTIONS[name]
        left = a.budget_s - (time.perf_counter() - start)
        if not a.smoke and left < estimate:
            results["sections"][name] = {"skipped": f"budget: {left:.0f}s left < {estimate}s"}
            write()
            continue
        t0 = time.perf_counter()
        _progress.clear()
        _progress["section"] = name
        try:
            if name == "cooper":
                res = fn(shapes, a.smoke, lambda: a.budget_s - (time.perf_counter() - start))
            else:
                res = fn(shapes, a.smoke)
            res["status"] = "ok"
        except Exception as e:  # recorded; the next section still runs
            res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000],
                   "traceback": traceback.format_exc()[-3000:]}
        res["section_s"] = time.perf_counter() - t0
        phase("done")
        res["phase_s"] = _progress.get("times", {})
        res["device_peak_bytes_so_far"] = device_peak()
        results["sections"][name] = res
        write()
        print(f"[gpu_check] {name}: {res['status']} in {res['section_s']:.1f}s", flush=True)
    write()
    failed = [n for n, r in results["sections"].items() if r.get("status") == "error"]
    print(f"[gpu_check] wrote {out}; failed sections: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
