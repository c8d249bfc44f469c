"""Where the learner's gradient pass spends its time: the decoder body against the log-prob
kernel, per log-prob implementation, with and without the shared prompt.

On a decoder of SmolLM2-135M's shape (30 layers, hidden 576, 9/3 heads, MLP 1536, vocabulary
49152, tied embeddings) with random weights and the real-model lane's LoRA (r16, alpha 32, every
projection; the gradient is the adapters'), at the lane's batch (4 prompts x 8 rollouts, 80
prompt + 64 response tokens, every token valid), it times after one compiling call (median of
`--repeats`):

    pass/<impl>          the gradient of the response log-probs (`models.logprobs`), unshared
    pass_shared/<impl>   the same with each prompt run once per group
    body                 the decoder alone: the gradient through the hidden states that predict
                         the responses, with no unembedding
    kernel/<impl>        the log-prob kernel alone: the gradient of its [2048, 576] hidden states

for the log-prob implementations `xla` (the streaming scan over vocabulary tiles, coop_jax's CPU
default) and `reference` (the materialised [N, V] logits).

    python benchmarks/learner_breakdown.py --out docs/results/learner_step/breakdown.json

Wall times: run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import kernels, models
from coop_jax.models import lora
from coop_jax.models.logprobs import grouped_response_logprobs, response_logprobs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import run_facts, write_result  # noqa: E402

IMPLS = ("xla", "reference")
PROMPTS, GROUP, PROMPT_LEN, RESPONSE_LEN = 4, 8, 80, 64


def median_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def lane_model():
    """(ModelConfig with LoRA, frozen base, adapters) of SmolLM2-135M's shape, random weights."""
    cfg = models.ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                             num_layers=30, num_heads=9, num_kv_heads=3, tie_embeddings=True,
                             max_position_embeddings=2048)
    cfg = cfg.replace(lora=lora.LoraConfig(rank=16, alpha=32.0))
    params = models.init_params(cfg, jax.random.key(0))
    params = jax.tree_util.tree_map_with_path(  # B = 0 would make the adapters' path trivial
        lambda p, x: x + 0.01 if p[-1].key == "lora_b" else x, params)
    base, adapters = lora.split(params, cfg)
    return cfg, base, adapters


def lane_batch():
    rng = np.random.default_rng(0)
    rows = PROMPTS * GROUP
    prompts = np.repeat(rng.integers(0, 49152, (PROMPTS, PROMPT_LEN)), GROUP, 0)
    responses = rng.integers(0, 49152, (rows, RESPONSE_LEN))
    return (prompts.astype(np.int32), np.ones((rows, PROMPT_LEN), bool),
            responses.astype(np.int32), np.ones((rows, RESPONSE_LEN), bool))


def measure(repeats: int) -> dict[str, float]:
    cfg, base, adapters = lane_model()
    batch = lane_batch()
    times = {}
    for impl in IMPLS:
        for name, logprobs, kw in (("pass", response_logprobs, {}),
                                   ("pass_shared", grouped_response_logprobs,
                                    {"group_size": GROUP})):
            loss = lambda a, lp=logprobs, kw=kw, model=cfg.with_kernels(impl): lp(
                lora.combine(base, a), model, *batch, **kw)[0].sum()
            times[f"{name}/{impl}"] = median_time(jax.jit(jax.grad(loss)), adapters,
                                                  repeats=repeats)
            print(f"{name}/{impl}: {times[f'{name}/{impl}']:.2f} s", flush=True)
    p = PROMPT_LEN
    probe = jnp.asarray(np.random.default_rng(1).normal(size=(cfg.hidden_size,)), jnp.float32)

    def body(a):
        tokens = jnp.concatenate([batch[0], batch[2]], axis=1)
        hidden = models.hidden_states(lora.combine(base, a), cfg, tokens)[:, p - 1:-1]
        return (hidden @ probe).sum()
    times["body"] = median_time(jax.jit(jax.grad(body)), adapters, repeats=repeats)
    print(f"body: {times['body']:.2f} s", flush=True)
    rows = PROMPTS * GROUP * RESPONSE_LEN
    hidden = jnp.asarray(np.random.default_rng(2).normal(size=(rows, cfg.hidden_size)) * 0.5,
                         jnp.float32)
    unembed = models.forward.unembed_matrix(base, cfg)
    targets = jnp.asarray(batch[2].reshape(-1))
    for impl in IMPLS:
        kernel = lambda h, impl=impl: kernels.fused_logprobs(h, unembed, targets,
                                                             impl=impl)[0].sum()
        times[f"kernel/{impl}"] = median_time(jax.jit(jax.grad(kernel)), hidden, repeats=repeats)
        print(f"kernel/{impl}: {times[f'kernel/{impl}']:.2f} s", flush=True)
    return times


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="timed calls per measurement")
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats must be >= 1, got {a.repeats}")
    times = measure(a.repeats)
    write_result(a.out, {"shapes": dict(prompts=PROMPTS, group=GROUP, prompt_len=PROMPT_LEN,
                                         response_len=RESPONSE_LEN), "repeats": a.repeats,
                         "backend": jax.default_backend(), **run_facts(), "seconds": times})


if __name__ == "__main__":
    main()
