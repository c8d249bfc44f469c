"""Keep rate and cost of the `rewrite` negative strategy's assistant, one try per request.

Takes correct samples from a triples file (by default the reward-hacking experiment's
initial-policy training triples), asks the configured assistant (`cooper.assistant_hf_path` or
`cooper.assistant_url`; configs/toy_hacking.py uses SmolLM2-135M-Instruct) to rewrite them in
batches of `--batch` as Cooper does, and keeps a rewrite only if it has a final answer the rule
verifier says is wrong (Cooper's keep-if-wrong check).

    python benchmarks/rewrite_keep_rate.py OUT.json [--config configs/toy_hacking.py] \
        [--triples runs/hacking/static_rm/train_triples.jsonl] [--n 64] [--batch 8]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time

import numpy as np

from coop_jax.rm import cooper
from coop_jax.rm.input import read_triples
from coop_jax.verify import RuleVerifier, extract_answer


def load_config(path: str):
    spec = importlib.util.spec_from_file_location("rewrite_keep_rate_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--config", default="configs/toy_hacking.py")
    p.add_argument("--triples", default="runs/hacking/static_rm/train_triples.jsonl")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    config = load_config(a.config)
    positives = [t for t in read_triples(a.triples) if t["label"]]
    if len(positives) < a.n:
        raise SystemExit(f"--triples: {a.triples} has {len(positives)} correct samples, "
                         f"fewer than --n={a.n}")
    rng = np.random.default_rng(a.seed)
    picked = [positives[i] for i in rng.choice(len(positives), a.n, replace=False)]
    rewriter = cooper.make_rewriter(cooper.AssistantSettings.from_config(config))
    rows, seconds = [], []
    with RuleVerifier(config.verifier.num_workers, config.verifier.timeout_s) as verifier:
        for start in range(0, a.n, a.batch):
            batch = picked[start:start + a.batch]
            t0 = time.time()
            outs = rewriter([(t["question"], t["completion"]) for t in batch])
            seconds.append(time.time() - t0)
            keep = cooper.keep_if_wrong(
                verifier, [extract_answer(t["completion"]) for t in batch], outs)
            rows += [{"question": t["question"], "positive": t["completion"], "rewrite": o,
                      "kept": bool(k)} for t, o, k in zip(batch, outs, keep)]
    kept = sum(r["kept"] for r in rows)
    out = {"requests": len(rows), "kept": kept, "keep_rate": kept / len(rows),
           "seconds_per_batch": seconds,
           "mean_seconds_after_first": float(np.mean(seconds[1:])) if len(seconds) > 1 else None,
           "examples": rows}
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(json.dumps({k: v for k, v in out.items() if k != "examples"}, indent=2))


if __name__ == "__main__":
    main()
