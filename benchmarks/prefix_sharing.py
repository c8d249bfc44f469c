"""What running each prompt once per group saves (`rl.share_prompt_prefix`), by prompt length,
response length and group size.

Times the gradient of the response log-probs (the learner's forward and backward pass, fused
log-prob kernel included) with and without the shared prompt, on a decoder of SmolLM2-135M's
widths (hidden 576, 9/3 heads, MLP 1536, vocabulary 49152) with `--layers` layers and random
weights, for every (prompt length P, response length T, group size G) of the grid, `--prompts`
prompts per batch. Every token is valid. Reports the median of `--repeats` timed calls after
one compiling call, the ratio shared / unshared, and the ratio of token positions the forward
runs, (P / G + T) / (P + T), which the ratio approaches where the body's matmuls dominate.

With `--rm`, the same grid for the reward model's half (a one-label head on the same decoder):
P is the (question, reference) prefix a group's RM inputs share and T each input's own tokens;
it times the scoring forward of the G rows of each prompt (what the step runs before and after
Cooper's RM update) and the Bradley-Terry gradient of one (positive, negative) pair per prompt,
whose two inputs share their prefix (group size 2).

    python benchmarks/prefix_sharing.py --out docs/results/prefix_sharing/sweep.json
    python benchmarks/prefix_sharing.py --rm --group-sizes 8 --out docs/results/prefix_sharing/rm.json

Wall times: run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.models.logprobs import grouped_response_logprobs, response_logprobs
from coop_jax.rm.step import PairBatch, bradley_terry_loss, pair_scores

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import run_facts, write_result  # noqa: E402


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"values must be >= 1, got {text!r}")
    return values


def time_gradient(fn, params, repeats: int) -> float:
    fn(params)[0].block_until_ready()  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(cfg, params, prompts: int, p: int, t: int, g: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    rows = prompts * g
    prompt_tokens = np.repeat(rng.integers(0, cfg.vocab_size, (prompts, p)), g, 0).astype(np.int32)
    response = rng.integers(0, cfg.vocab_size, (rows, t)).astype(np.int32)
    prompt_mask, response_mask = np.ones((rows, p), bool), np.ones((rows, t), bool)

    def gradient(logprobs, **kwargs):
        def total(params):
            logp, _ = logprobs(params, cfg.with_kernels("xla"), prompt_tokens, prompt_mask,
                               response, response_mask, **kwargs)
            return jnp.sum(logp)
        return jax.jit(jax.value_and_grad(total))

    unshared = time_gradient(gradient(response_logprobs), params, repeats)
    shared = time_gradient(gradient(grouped_response_logprobs, group_size=g), params, repeats)
    return {"prompt_len": p, "response_len": t, "group_size": g, "rows": rows,
            "unshared_s": unshared, "shared_s": shared, "ratio": shared / unshared,
            "position_ratio": (p / g + t) / (p + t)}


def measure_rm(cfg, params, prompts: int, p: int, t: int, g: int, repeats: int) -> dict:
    """The RM half at one grid point: shared / unshared time of the rollouts' scoring forward
    (prompts x g rows) and of the pairs' Bradley-Terry gradient (one pair per prompt)."""
    rng = np.random.default_rng(0)
    tok = lambda rows, n: rng.integers(0, cfg.vocab_size, (rows, n)).astype(np.int32)
    prefix = lambda rows, k: np.repeat(tok(prompts, p), k, 0)[:rows]
    rows = prompts * g
    suffix, ones = tok(rows, t), lambda rows, n: np.ones((rows, n), bool)
    whole = lambda pre, suf: (np.concatenate([pre, suf], 1), ones(len(suf), p + t))
    scoring = {
        "unshared": jax.jit(lambda w: models.reward_scores(w, cfg, *whole(prefix(rows, g),
                                                                         suffix))),
        "shared": jax.jit(lambda w: models.grouped_reward_scores(
            w, cfg, prefix(rows, g), ones(rows, p), suffix, ones(rows, t), g))}
    pos, neg = tok(prompts, t), tok(prompts, t)
    pre = prefix(prompts, 1)
    pairs = {"unshared": PairBatch(*whole(pre, pos), *whole(pre, neg), np.ones(prompts)),
             "shared": PairBatch(pos, ones(prompts, t), neg, ones(prompts, t), np.ones(prompts),
                                 prefix_tokens=pre, prefix_mask=ones(prompts, p))}
    gradient = {k: jax.jit(jax.grad(lambda w, b=b: bradley_terry_loss(w, cfg, b)[0]))
                for k, b in pairs.items()}
    times = {}
    for k in ("unshared", "shared"):
        times[f"scoring_{k}_s"] = time_gradient(lambda w: (scoring[k](w),), params, repeats)
        # one jitted program: its head's gradient is ready when the whole gradient is
        times[f"pairs_{k}_s"] = time_gradient(lambda w: (gradient[k](w)["score"]["kernel"],),
                                              params, repeats)
    shared_pairs = pair_scores(params, cfg, pairs["shared"])
    np.testing.assert_allclose(shared_pairs, pair_scores(params, cfg, pairs["unshared"]),
                               rtol=1e-4, atol=1e-4)
    return {"prefix_len": p, "suffix_len": t, "group_size": g, "rows": rows, **times,
            "scoring_ratio": times["scoring_shared_s"] / times["scoring_unshared_s"],
            "pairs_ratio": times["pairs_shared_s"] / times["pairs_unshared_s"],
            "position_ratio": (p / g + t) / (p + t), "pair_position_ratio": (p / 2 + t) / (p + t)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="decoder layers")
    p.add_argument("--prompts", type=int, default=2, help="prompts per batch")
    p.add_argument("--prompt-lens", type=_ints, default=[32, 128, 256])
    p.add_argument("--response-lens", type=_ints, default=[32, 128])
    p.add_argument("--group-sizes", type=_ints, default=[4, 8, 16])
    p.add_argument("--repeats", type=int, default=3, help="timed calls per measurement")
    p.add_argument("--rm", action="store_true",
                   help="the reward model's half: scoring and pair gradient (P: the prefix "
                        "its inputs share, T: each input's own tokens)")
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    if a.layers < 1 or a.prompts < 1 or a.repeats < 1:
        p.error("--layers, --prompts and --repeats must be >= 1")
    cfg = models.ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                             num_layers=a.layers, num_heads=9, num_kv_heads=3,
                             tie_embeddings=True, max_position_embeddings=8192)
    if a.rm:
        cfg = cfg.replace(num_labels=1, tie_embeddings=False)
    params = models.init_params(cfg, jax.random.key(0))
    rows = []
    for pl, tl, g in itertools.product(a.prompt_lens, a.response_lens, a.group_sizes):
        rows.append((measure_rm if a.rm else measure)(cfg, params, a.prompts, pl, tl, g,
                                                      a.repeats))
        r = rows[-1]
        if a.rm:
            print(f"P={pl:4d} T={tl:4d} G={g:3d}: scoring {r['scoring_unshared_s']:.3f} -> "
                  f"{r['scoring_shared_s']:.3f} s ({r['scoring_ratio']:.2f}), pair gradient "
                  f"{r['pairs_unshared_s']:.3f} -> {r['pairs_shared_s']:.3f} s "
                  f"({r['pairs_ratio']:.2f})", flush=True)
        else:
            print(f"P={pl:4d} T={tl:4d} G={g:3d}: unshared {r['unshared_s']:.3f} s, shared "
                  f"{r['shared_s']:.3f} s, ratio {r['ratio']:.2f} (positions "
                  f"{r['position_ratio']:.2f})", flush=True)
    write_result(a.out, {"layers": a.layers, "prompts": a.prompts, "repeats": a.repeats,
                         "half": "rm" if a.rm else "policy", **run_facts(), "rows": rows})


if __name__ == "__main__":
    main()
