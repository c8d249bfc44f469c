"""Do two code trees train the same? Runs the same commands under each tree (PYTHONPATH) and
compares every non-timing value of the runs' metrics.jsonl, step by step.

    python benchmarks/same_metrics.py --before=/path/to/old/checkout --after=. \
        --workdir=/tmp/same_metrics [--cases=demo,cooper3,two_process] [--out=results.json]

Each tree runs its own `coop-train` module (`--before_module`, `--after_module`: the command line
moved from `coop_jax.trainer.loop` to `coop_jax.trainer.cli`, and a tree from before the package
was regrouped by role runs `coop_jax.train`). Cases:
  demo         the README's `make demo` (configs/default.py, its embedded defaults)
  cooper3      3 Cooper steps on configs/default.py (perturbed negatives; each tree's own config
               names its RM: since the default starts Cooper from the reward-hacking plan's
               trained RM, compare only trees on the same side of that change)
  two_process  `python -m coop_jax.launch.local --num_processes=2 --devices_per_process=4` of 3
               steps on configs/default.py
A value counts as equal when both are None, or both are numbers with no difference at all, or
both are equal otherwise; timing keys (time/*, *_seconds, tokens_per_second) are left out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

CASES = {
    "demo": ([], []),
    # one perturbed pair per group, as the demo's Cooper defaults were before issue 64
    "cooper3": ([], ["--config.reward.type=cooper", "--config.cooper.negative=perturb",
                     "--config.cooper.pairs_per_group=1",
                     "--config.cooper.reference_positive=False", "--config.train.steps=3"]),
    "two_process": (["-m", "coop_jax.launch.local", "--num_processes=2",
                     "--devices_per_process=4", "--", sys.executable],
                    ["--config.train.steps=3"]),
}
TIMING = ("time/", "tokens_per_second", "seconds", "wall")


def _command(case: str, module: str, workdir: str) -> list[str]:
    launcher, overrides = CASES[case]
    train = ["-m", module, "--config=configs/default.py", f"--workdir={workdir}", *overrides]
    return [sys.executable, *launcher, *train]


def run_case(case: str, tree: str, module: str, workdir: str) -> dict:
    cmd = _command(case, module, workdir)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    env.pop("XLA_FLAGS", None)
    if os.path.exists(workdir):  # a kept run would be resumed, not run again
        raise SystemExit(f"{workdir} exists: give a new --workdir")
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    t0 = time.time()
    with open(workdir + ".log", "w") as log:
        rc = subprocess.run(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"{case} under {tree} failed (rc {rc}); log {workdir}.log")
    return {"command": " ".join(cmd[1:]), "tree": tree, "wall_s": time.time() - t0}


def _rows(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def differences(before: list[dict], after: list[dict], added: frozenset = frozenset()
                ) -> tuple[int, list[str]]:
    """(values compared, one line per difference); `added`: metrics the after tree newly logs,
    left out of the comparison (any other key in one tree only is a difference)."""
    if [r.get("step") for r in before] != [r.get("step") for r in after]:
        return 0, [f"steps differ: {[r.get('step') for r in before]} vs "
                   f"{[r.get('step') for r in after]}"]
    compared, diffs = 0, []
    for ra, rb in zip(before, after):
        keys = {k for k in ra.keys() | rb.keys()
                if not any(t in k for t in TIMING) and not (k in added and k not in ra)}
        for k in sorted(keys):
            compared += 1
            if k not in ra or k not in rb:
                diffs.append(f"step {ra.get('step')}: {k} only in {'after' if k in rb else 'before'}")
            elif not _same(ra[k], rb[k]):
                diffs.append(f"step {ra.get('step')}: {k} {ra[k]!r} vs {rb[k]!r}")
    return compared, diffs


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the old checkout (its repository root)")
    p.add_argument("--after", default=".", help="the new checkout")
    p.add_argument("--before_module", default="coop_jax.trainer.loop")
    p.add_argument("--after_module", default="coop_jax.trainer.cli")
    p.add_argument("--workdir", default="/tmp/same_metrics")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out", default="", help="write the comparison here as JSON")
    p.add_argument("--added", default="", help="comma-separated metrics only the after tree "
                   "logs (new diagnostics), left out of the comparison")
    a = p.parse_args(argv)
    report = {}
    for case in a.cases.split(","):
        if case not in CASES:
            p.error(f"--cases: unknown case {case!r}; one of {list(CASES)}")
        runs = {}
        for side, tree, module in (("before", a.before, a.before_module),
                                   ("after", a.after, a.after_module)):
            workdir = os.path.join(os.path.abspath(a.workdir), f"{case}_{side}")
            runs[side] = run_case(case, tree, module, workdir)
            runs[side]["rows"] = _rows(workdir)
        added = frozenset(k for k in a.added.split(",") if k)
        compared, diffs = differences(runs["before"].pop("rows"), runs["after"].pop("rows"),
                                      added)
        report[case] = {"values_compared": compared, "differences": diffs,
                        "added_metrics": sorted(added), **runs}
        print(f"{case}: {compared} values compared, {len(diffs)} differ", flush=True)
        for d in diffs[:20]:
            print("   ", d)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=2)
    return report


if __name__ == "__main__":
    main()
