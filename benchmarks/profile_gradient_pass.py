"""Op-level profile of the learner's gradient pass: coop_jax (XLA:CPU) against the computation
TRL's GRPOTrainer runs for it (transformers + peft, torch CPU), on the same shapes.

Both sides take the gradient, with respect to LoRA adapters (r16, alpha 32, every projection), of
the summed log-probabilities of 64 response tokens after an 80-token prompt, for 4 prompts x 8
rollouts, on a decoder of SmolLM2-135M's shape with random weights, in fp32:
- coop_jax: `models.response_logprobs` (unshared) and `grouped_response_logprobs` (each prompt
  once per group, the default step), with the `xla` log-prob kernel, under `jax.profiler`; each
  profiled HLO instruction is put in a category from the compiled HLO's opcodes.
- torch: `model(ids, logits_to_keep=65)` and TRL's own `selective_log_softmax`, as its
  `_get_per_token_logps_and_entropies` does, under `torch.profiler` (self time per aten op).

Op times are summed over the profiled calls and divided by their number; they are per-op busy
time, so with intra-op threads they need not add up to the wall time.

    pip install -e ".[bench]"
    python benchmarks/profile_gradient_pass.py --out docs/results/learner_step/profile.json

Run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learner_breakdown import GROUP, PROMPT_LEN, RESPONSE_LEN, lane_batch, lane_model  # noqa: E402
from results import run_facts, write_result  # noqa: E402

from coop_jax.models import lora  # noqa: E402
from coop_jax.models.logprobs import grouped_response_logprobs, response_logprobs  # noqa: E402

CONTROL_FLOW = {"while", "conditional", "call"}  # containers: their bodies' ops are profiled
TOP = 15


# ----------------------------------------------------------------------------- HLO categories
def hlo_opcodes(hlo_text: str) -> dict[str, tuple[str, str]]:
    """instruction name -> (category, model site), for every instruction of the compiled module.
    The site is the instruction's `op_name` with the layer index and the jit prefix taken out."""
    bodies = dict(re.findall(r"\n(?:ENTRY )?%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}", hlo_text, re.S))
    ops = {}
    for body in bodies.values():
        for name, opcode, rest in re.findall(
                r"^\s*(?:ROOT )?%?([\w.\-]+) = [^=]*? ([a-z][\w\-]*)\((.*)$", body, re.M):
            site = re.search(r'op_name="(?:jit\([^)]*\)/)?([^"]*)"', rest)
            site = re.sub(r"layers_\d+", "layers_*", site.group(1)) if site else "?"
            ops[name] = (_category(opcode, rest, bodies), site)
    return ops


def _category(opcode: str, rest: str, bodies: dict[str, str]) -> str:
    if opcode == "fusion":
        called = re.search(r"calls=%?([\w.\-]+)", rest)
        body = bodies.get(called.group(1), "") if called else ""
        if re.search(r" (dot|convolution)\(", body):
            return "matmul"
        if re.search(r" reduce(-window)?\(", body):
            return "reduction fusion"
        if re.search(r" (copy|transpose)\(", body):
            return "elementwise fusion, layout change"
        return "elementwise fusion"
    if opcode in ("dot", "convolution"):
        return "matmul"
    if opcode in ("copy", "transpose"):
        return "copy / transpose"
    return opcode


# ------------------------------------------------------------------------------ coop_jax side
def jax_gradient_passes():
    cfg, base, adapters = lane_model()
    batch = lane_batch()
    passes = {}
    for name, logprobs, kw in (("coop_jax unshared", response_logprobs, {}),
                               ("coop_jax shared prompt", grouped_response_logprobs,
                                {"group_size": GROUP})):
        loss = lambda a, lp=logprobs, kw=kw: lp(lora.combine(base, a), cfg.with_kernels("xla"),
                                                 *batch, **kw)[0].sum()
        passes[name] = jax.jit(jax.grad(loss))
    return passes, adapters


def profile_jax(fn, args, calls: int) -> dict:
    compiled = fn.lower(*args).compile()
    ops = hlo_opcodes(compiled.as_text())
    jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory() as trace_dir:
        t0 = time.perf_counter()
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(compiled(*args))
        wall = (time.perf_counter() - t0) / calls
        path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
        with gzip.open(path) as f:
            events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    per_op = collections.Counter()
    for e in events:
        op = (e.get("args") or {}).get("hlo_op")
        if e.get("ph") == "X" and op and ops.get(op, ("",))[0] not in CONTROL_FLOW:
            per_op[op] += e["dur"] / 1e6 / calls
    by_category, by_site = collections.Counter(), collections.Counter()
    for op, seconds in per_op.items():
        category, site = ops.get(op, ("unknown", "?"))
        by_category[category] += seconds
        by_site[(category, site)] += seconds
    return {"wall_s": wall, "op_s": sum(per_op.values()), "by_category": dict(by_category),
            "top_ops": [(site, category, s) for (category, site), s in by_site.most_common(TOP)]}


# --------------------------------------------------------------------------------- torch side
TORCH_CATEGORIES = (("matmul", ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm")),
                    ("attention", ("scaled_dot_product", "flash_attention", "_efficient_attention")),
                    ("softmax", ("softmax", "log_softmax")),
                    ("copy / transpose", ("copy_", "clone", "contiguous", "transpose", "t",
                                          "permute", "cat", "index_select", "gather", "to")),
                    ("reduction", ("sum", "mean", "logsumexp", "max", "amax")))


def torch_category(name: str) -> str:
    op = name.removeprefix("aten::")
    for category, keys in TORCH_CATEGORIES:
        if any(op == k or op.startswith(k + "_backward") or op.startswith("_" + k)
               or (len(k) > 3 and k in op) for k in keys):
            return category
    return "elementwise / other"


def torch_gradient_pass():
    import peft
    import torch
    import transformers
    from trl.trainer.utils import selective_log_softmax
    torch.manual_seed(0)
    hf = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                  num_hidden_layers=30, num_attention_heads=9,
                                  num_key_value_heads=3, tie_word_embeddings=True,
                                  max_position_embeddings=2048)
    model = transformers.LlamaForCausalLM(hf).float()
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    prompts, _, responses, _ = lane_batch()
    ids = torch.from_numpy(np.concatenate([prompts, responses], 1)).long()
    completion = ids[:, PROMPT_LEN:]

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                       logits_to_keep=RESPONSE_LEN + 1).logits[:, :-1]
        selective_log_softmax(logits, completion).sum().backward()
    return step


def profile_torch(step, calls: int) -> dict:
    import torch
    step()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
    wall = (time.perf_counter() - t0) / calls
    per_op = {e.key: e.self_cpu_time_total / 1e6 / calls for e in prof.key_averages()
              if e.self_cpu_time_total > 0}
    by_category = collections.Counter()
    for op, seconds in per_op.items():
        by_category[torch_category(op)] += seconds
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:TOP]
    return {"wall_s": wall, "op_s": sum(per_op.values()), "by_category": dict(by_category),
            "top_ops": [(op, torch_category(op), s) for op, s in top]}


def profile_side(side: str, calls: int, threads: int) -> dict:
    if side == "torch":
        import torch
        torch.set_num_threads(threads)
        return {"torch (TRL's computation)": profile_torch(torch_gradient_pass(), calls)}
    passes, adapters = jax_gradient_passes()
    return {name: profile_jax(fn, (adapters,), calls) for name, fn in passes.items()}


def print_table(results: dict) -> None:
    categories = sorted({c for r in results.values() for c in r["by_category"]},
                        key=lambda c: -max(r["by_category"].get(c, 0) for r in results.values()))
    print("| category | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for c in categories:
        print(f"| {c} | " + " | ".join(f"{r['by_category'].get(c, 0):.2f}"
                                      for r in results.values()) + " |")
    print("| **sum of op times** | " + " | ".join(f"{r['op_s']:.2f}" for r in results.values())
          + " |")
    print("| wall time per call | " + " | ".join(f"{r['wall_s']:.2f}" for r in results.values())
          + " |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2, help="profiled calls per side, after a warm-up")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--out", default=None, help="JSON file for the results")
    p.add_argument("--side", choices=("both", "torch", "coop_jax"), default="both",
                   help="both: each side in its own process (together they outgrow 24 GiB)")
    a = p.parse_args(argv)
    for flag in ("calls", "threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if a.side != "both":
        json.dump(profile_side(a.side, a.calls, a.threads), sys.stdout)
        return
    results = {}
    for side in ("torch", "coop_jax"):
        done = subprocess.run([sys.executable, __file__, f"--side={side}", f"--calls={a.calls}",
                               f"--threads={a.threads}"], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"the {side} side failed:\n{done.stderr[-3000:]}")
        results.update(json.loads(done.stdout))
    print_table(results)
    for name, r in results.items():
        print(f"\n{name}: top ops (s per call)")
        for op, category, seconds in r["top_ops"]:
            print(f"  {seconds:7.3f}  {category:20s} {op}")
    write_result(a.out, {"shapes": dict(prompts=4, group=GROUP, prompt_len=PROMPT_LEN,
                                         response_len=RESPONSE_LEN), "calls": a.calls,
                         "torch_threads": a.threads, **run_facts(), "profiles": results})


if __name__ == "__main__":
    main()
