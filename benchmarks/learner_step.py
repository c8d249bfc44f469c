"""The learner step's options, side by side: arms that differ only in their config overrides.

Each arm is a name and the overrides that make it (`--arm NAME:FIELD=VALUE,FIELD=VALUE`); the
first is the baseline. The script runs `coop-train` in fresh processes on the same config and
seed, one run of every arm per pair, the order rotated from pair to pair, and reports:

- the update time (`time/update`, median over the steps after `--skip`) of each run, and each
  arm's ratio to the baseline in the same pair;
- whether every non-timing metric of every step is the same as the baseline's, with the largest
  absolute and relative difference of each metric that is not bitwise equal (the learner's
  shapes, `shape/...`, are left out: they are what an arm changes).

The default arms are the learner's three shortcuts (issue 39, items 1-3), turned on in turn:

    full     none: two forward passes, full width, every row runs its prompt
    reused   rl.reuse_loss_forward: one forward pass on an on-policy step (old_is_current)
    trimmed  + rl.pad_buckets=4: padding cut to the batch (train_batch.trim_padding)
    shared   + rl.share_prompt_prefix: each prompt runs once per group (the defaults)

    python benchmarks/learner_step.py --config configs/default.py --steps 20 --pairs 2 --skip 2 \
        --out docs/results/learner_step/demo.json
    python benchmarks/learner_step.py --config configs/smollm2_arithmetic.py --steps 4 \
        --set evals.policy.every=1000 --set data.num_eval=0 \
        --out docs/results/learner_step/smollm2.json

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
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from results import run_facts, write_result  # noqa: E402
DEFAULT_ARMS = (
    "full:rl.reuse_loss_forward=False,rl.pad_buckets=0,rl.share_prompt_prefix=False",
    "reused:rl.reuse_loss_forward=True,rl.pad_buckets=0,rl.share_prompt_prefix=False",
    "trimmed:rl.reuse_loss_forward=True,rl.pad_buckets=4,rl.share_prompt_prefix=False",
    "shared:rl.reuse_loss_forward=True,rl.pad_buckets=4,rl.share_prompt_prefix=True")
VOLATILE = ("time/", "tokens_per_second", "shape/")


def parse_arm(text: str) -> tuple[str, list[str]]:
    """"NAME:FIELD=VALUE,FIELD=VALUE" -> (NAME, ["FIELD=VALUE", ...])."""
    name, _, overrides = text.partition(":")
    if not name or any("=" not in o for o in overrides.split(",") if overrides):
        raise argparse.ArgumentTypeError(f"--arm must be NAME:FIELD=VALUE[,FIELD=VALUE], "
                                         f"got {text!r}")
    return name, [o for o in overrides.split(",") if o]


def run_arm(arm: str, pair: int, a, base: str) -> dict:
    workdir = os.path.join(base, f"{arm}_{pair}")
    cmd = [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={a.config}",
           f"--workdir={workdir}",
           f"--config.train.steps={a.steps}"]
    cmd += [f"--config.{o}" for o in a.set + dict(a.arm)[arm]]
    print(f"[{arm} {pair}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    rows = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    updates = [r["time/update"] for r in rows if r["step"] > a.skip and "time/update" in r]
    shapes = sorted({tuple(sorted((k, r[k]) for k in r if k.startswith("shape/") and
                                  k != "shape/compiled")) for r in rows if "loss" in r})
    return {"arm": arm, "pair": pair, "rows": rows, "process_wall_s": time.perf_counter() - t0,
            "median_update_s": statistics.median(updates) if updates else None,
            "timed_steps": len(updates), "shapes": [dict(s) for s in shapes],
            "compiled": max((r.get("shape/compiled", 0) for r in rows), default=0)}


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


def summarise_pair(pair: int, runs: list[dict]) -> dict:
    """Each arm's update time and ratio to the baseline (the first arm) in one pair, and its
    metrics against the baseline's."""
    by_arm = [r for r in runs if r["pair"] == pair]
    base = by_arm[0]
    return {"pair": pair, "arms": {r["arm"]: {
        "update_s": r["median_update_s"], "ratio": r["median_update_s"] / base["median_update_s"],
        "compiled": r["compiled"], "metrics": compare(base["rows"], r["rows"])}
        for r in by_arm}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "default.py"))
    p.add_argument("--steps", type=int, default=10, help="RL steps of each run")
    p.add_argument("--pairs", type=int, default=2, help="rounds of one run of every arm")
    p.add_argument("--skip", type=int, default=1, help="steps left out of the timing (compile)")
    p.add_argument("--arm", action="append", type=parse_arm, default=None,
                   metavar="NAME:FIELD=VALUE,...", help="an arm (repeat; the first is the "
                   "baseline); default: " + " ".join(DEFAULT_ARMS))
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a further config override of every arm, e.g. "
                   "--set evals.policy.every=1000")
    p.add_argument("--out", default=None, help="JSON file for the results")
    a = p.parse_args(argv)
    a.arm = a.arm or [parse_arm(t) for t in DEFAULT_ARMS]
    names = [name for name, _ in a.arm]
    if a.steps <= a.skip:
        p.error(f"--steps ({a.steps}) must exceed --skip ({a.skip})")
    if len(set(names)) != len(names):
        p.error(f"--arm names must differ, got {names}")
    runs = []
    with tempfile.TemporaryDirectory() as base:
        for pair in range(a.pairs):
            shift = pair % len(names)
            order = names[shift:] + names[:shift]
            runs += sorted((run_arm(arm, pair, a, base) for arm in order),
                           key=lambda r: names.index(r["arm"]))
    pairs = [summarise_pair(pair, runs) for pair in range(a.pairs)]
    result = {"config": os.path.relpath(a.config, ROOT), "steps": a.steps, "skip": a.skip,
              "arms": dict(a.arm), "overrides": a.set, **run_facts(), "pairs": pairs,
              "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}
    print(json.dumps(pairs, indent=1))
    write_result(a.out, result)


if __name__ == "__main__":
    main()
