"""The learner step's old-log-prob pass, side by side: `rl.reuse_loss_forward` off and on.

On an on-policy step (one epoch, one mini-batch, rollouts of the current policy) the PPO ratio is
exactly 1 and the old log-probs are what the loss's own forward pass computes
(`train_step.old_is_current`). With `rl.reuse_loss_forward=True` (the default) the step takes them
from there; with False it runs the second forward pass it used to. This script runs `coop-train`
in fresh processes, alternating the two arms in pairs on the same config and seed, and reports:

- the update time (`time/update`, median over the steps after `--skip`) of each run, and the
  ratio reused / two-pass of each pair;
- whether every non-timing metric of every step is the same in both arms, with the largest
  absolute and relative difference of each metric that is not bitwise equal.

    python benchmarks/learner_step.py --config configs/default.py --steps 10 \
        --out docs/results/learner_step/demo.json
    python benchmarks/learner_step.py --config configs/smollm2_arithmetic.py --steps 3 \
        --set train.eval_every=1000 --out docs/results/learner_step/smollm2.json

Step times are wall times: run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from coop_jax.jsonl import read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = {"two_pass": False, "reused": True}
VOLATILE = ("time/", "tokens_per_second")


def run_arm(arm: str, pair: int, a, base: str) -> dict:
    workdir = os.path.join(base, f"{arm}_{pair}")
    cmd = [sys.executable, "-m", "coop_jax.train", f"--config={a.config}", f"--workdir={workdir}",
           f"--config.rl.reuse_loss_forward={ARMS[arm]}", f"--config.train.steps={a.steps}"]
    cmd += [f"--config.{o}" for o in a.set]
    print(f"[{arm} {pair}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    updates = [r["time/update"] for r in rows if r["step"] > a.skip and "time/update" in r]
    return {"arm": arm, "pair": pair, "rows": rows, "process_wall_s": time.perf_counter() - t0,
            "median_update_s": statistics.median(updates) if updates else None,
            "timed_steps": len(updates)}


def compare(rows_a: list[dict], rows_b: list[dict]) -> dict:
    """Every non-timing metric of every step: bitwise equal, or its largest differences."""
    if [r["step"] for r in rows_a] != [r["step"] for r in rows_b]:
        return {"same_steps": False}
    compared, differing = 0, {}
    for ra, rb in zip(rows_a, rows_b):
        keys = {k for k in ra.keys() | rb.keys() if not k.startswith(VOLATILE)}
        for k in sorted(keys):
            va, vb = ra.get(k, "<missing>"), rb.get(k, "<missing>")
            compared += 1
            if va == vb:
                continue
            d = differing.setdefault(k, {"steps": 0, "max_abs": 0.0, "max_rel": 0.0})
            d["steps"] += 1
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)):
                diff = abs(va - vb)
                d["max_abs"] = max(d["max_abs"], diff)
                d["max_rel"] = max(d["max_rel"], diff / max(abs(va), abs(vb), 1e-30))
            else:
                d["max_abs"] = d["max_rel"] = math.inf
    return {"same_steps": True, "values_compared": compared, "values_differing":
            sum(d["steps"] for d in differing.values()), "differing": differing}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "default.py"))
    p.add_argument("--steps", type=int, default=10, help="RL steps of each run")
    p.add_argument("--pairs", type=int, default=2, help="alternated (two_pass, reused) pairs")
    p.add_argument("--skip", type=int, default=1, help="steps left out of the timing (compile)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a further config override, e.g. --set train.eval_every=1000")
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    if a.steps <= a.skip:
        p.error(f"--steps ({a.steps}) must exceed --skip ({a.skip})")
    runs = []
    with tempfile.TemporaryDirectory() as base:
        for pair in range(a.pairs):
            order = ("two_pass", "reused") if pair % 2 == 0 else ("reused", "two_pass")
            runs += [run_arm(arm, pair, a, base) for arm in order]
    pairs = []
    for pair in range(a.pairs):
        arm = {r["arm"]: r for r in runs if r["pair"] == pair}
        two, reused = arm["two_pass"], arm["reused"]
        pairs.append({"pair": pair, "two_pass_update_s": two["median_update_s"],
                      "reused_update_s": reused["median_update_s"],
                      "ratio": reused["median_update_s"] / two["median_update_s"],
                      "metrics": compare(two["rows"], reused["rows"])})
    from coop_jax.experiments.reward_hacking import cpu_model
    result = {"config": os.path.relpath(a.config, ROOT), "steps": a.steps, "skip": a.skip,
              "overrides": a.set, "cpu": cpu_model(),
              "cores": os.cpu_count(), "command": " ".join(["python"] + sys.argv), "pairs": pairs,
              "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}
    print(json.dumps(pairs, indent=1))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
