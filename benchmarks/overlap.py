"""`rollout.overlap` on and off, side by side: step time and learning on the demo config.

Runs `coop-train` twice, in fresh processes, on the same config (the demo, configs/default.py, by
default), once in series and once with `rollout.overlap=True` (one-step off-policy: step t+1's
rollouts are sampled by the parameters update t starts from, and their host half runs in a thread
while the device updates). Reports each run's mean step time after the first --skip steps
(compilation), the stage times, the held-out accuracy curve and the final greedy accuracy, and
writes them to one JSON file.

    python benchmarks/overlap.py                      # the demo's 80 RL steps, both modes
    nice -n 19 python benchmarks/overlap.py --steps 4 --sft-steps 20 --out /tmp/overlap.json
                                                      # a quick check that it runs

Step times are wall times: run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {"series": False, "overlap": True}
STAGES = ("time/step", "time/sample", "time/verify", "time/update", "time/rollout_wait")
EVAL_KEYS = ("eval/greedy_accuracy", "eval/sampled_accuracy")


def _rows(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarise(workdir: str, skip: int, wall: float) -> dict:
    """One run's step times (steps after `skip`), accuracy curves and summary."""
    rows = _rows(workdir)
    with open(os.path.join(workdir, "summary.json")) as f:
        summary = json.load(f)
    timed = [r for r in rows if r["step"] > skip and "time/step" in r]
    out = {
        "steps": summary["steps"], "timed_steps": len(timed),
        "mean_step_s": _mean([r["time/step"] for r in timed]),
        "median_step_s": statistics.median([r["time/step"] for r in timed]) if timed else None,
        "stage_means_s": {k: _mean([r[k] for r in timed if k in r]) for k in STAGES},
        "process_wall_s": wall,
        "train_wall_s": summary["wall_seconds"],
        "initial_greedy_accuracy": summary["initial_accuracy"],
        "final_greedy_accuracy": summary["final_accuracy"],
        "final_sampled_accuracy": summary["final_sampled_accuracy"],
        "eval_curve": [{"step": r["step"], **{k.split("/")[1]: r[k] for k in EVAL_KEYS if k in r}}
                       for r in rows if EVAL_KEYS[0] in r],
        "rule_accuracy": [r.get("rule_accuracy") for r in rows if r["step"] > 0],
    }
    # the behaviour policy's staleness as the PPO ratio sees it (0 in series, one epoch)
    out["mean_approx_kl_old"] = _mean([r["approx_kl_old"] for r in timed if "approx_kl_old" in r])
    return out


def run_mode(name: str, overlap: bool, a, base: str) -> dict:
    workdir = os.path.join(base, name)
    if os.path.exists(os.path.join(workdir, "checkpoints")):
        sys.exit(f"--workdir: {workdir} already holds a run (coop-train would resume it)")
    cmd = [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={a.config}",
           f"--workdir={workdir}",
           f"--config.rollout.overlap={overlap}"]
    if a.steps:
        cmd.append(f"--config.train.steps={a.steps}")
    if a.sft_steps is not None:
        cmd.append(f"--config.sft.steps={a.sft_steps}")
    cmd += [f"--config.{o}" for o in a.set]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    os.makedirs(workdir, exist_ok=True)
    log = os.path.join(workdir, "coop-train.log")
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode:
        with open(log) as f:
            sys.exit(f"[{name}] coop-train failed ({done.returncode}):\n{f.read()[-3000:]}")
    result = summarise(workdir, a.skip, time.perf_counter() - t0)
    print(f"[{name}] mean step {result['mean_step_s']:.3f} s, final greedy accuracy "
          f"{result['final_greedy_accuracy']}", flush=True)
    return result


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "default.py"))
    p.add_argument("--steps", type=int, default=0, help="RL steps (0: the config's)")
    p.add_argument("--sft-steps", type=int, default=None, help="SFT warm-start steps override")
    p.add_argument("--skip", type=int, default=2,
                   help="first steps left out of the step-time mean (compilation)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="further config overrides for both runs, e.g. --set evals.policy.every=10")
    p.add_argument("--workdir", default="", help="keep the two runs here (default: a temp dir)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "overlap",
                                                 "overlap.json"))
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = a.workdir or tmp
        runs = {name: run_mode(name, overlap, a, base) for name, overlap in MODES.items()}
    series, overlap = runs["series"]["mean_step_s"], runs["overlap"]["mean_step_s"]
    result = {
        "config": os.path.relpath(os.path.abspath(a.config), ROOT), "steps": a.steps or None,
        "sft_steps": a.sft_steps, "skip": a.skip, "overrides": a.set,
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "python": platform.python_version()},
        "runs": runs,
        "step_time_ratio": series / overlap if series and overlap else None,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in ("config", "step_time_ratio")}
                     | {name: {k: r[k] for k in ("mean_step_s", "final_greedy_accuracy")}
                        for name, r in runs.items()}, indent=2))
    return result


if __name__ == "__main__":
    main()
