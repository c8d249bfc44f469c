"""Which `rollout.engine` samples a shipped config's rollouts faster: coop-train run on the config
as shipped, once with `rollout.engine=static` and once with `continuous` (the config's
`rollout.slots` and `rollout.slot_halvings`), each for --steps steps in a fresh workdir and its
own process, the engines alternating --repeats times. From each run's metrics.jsonl: the median
over steps 2.. (step 1 compiles) of `time/sample`, `time/step` and the useful tokens per second
of sampling (`generated_tokens / time/sample`).

    python benchmarks/engine_choice.py [--configs default,smollm2_arithmetic,smollm2_gsm8k] \
        [--steps 12] [--repeats 2] [--set smollm2_gsm8k:data.data_dir=DIR] [--json out.json]

Evaluations are off (`--config.evals.<name>.every=-1`), so a run is its rollouts and updates;
everything else is the config's own. The engines draw different samples at the same seed
(per-request keys against per-step keys), so their lengths differ a little; each rate is its own
tokens over its own time.
Configs whose weights are not on this machine (the Qwen ones) cannot run here.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ENGINES = ("static", "continuous")


def run_once(config: str, engine: str, steps: int, extra: list[str]) -> dict:
    """One coop-train run; the medians of its steps after the first."""
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [sys.executable, "-m", "coop_jax.trainer.cli", f"--config=configs/{config}.py",
               f"--workdir={workdir}", f"--config.train.steps={steps}",
               *[f"--config.evals.{name}.every=-1" for name in ("policy", "rm_heldout", "probes")],
               f"--config.rollout.engine={engine}", *extra]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            raise SystemExit(f"{config} / {engine} failed:\n{done.stderr[-3000:]}")
        rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    rows = [r for r in rows if "time/sample" in r and r["step"] > 1]
    med = lambda key: statistics.median(r[key] for r in rows)
    return {"steps": len(rows), "wall_s": round(wall, 1),
            "time_sample_s": round(med("time/sample"), 4), "time_step_s": round(med("time/step"), 4),
            "sample_tok_per_s": round(statistics.median(
                r["generated_tokens"] / r["time/sample"] for r in rows), 1),
            "mean_generated_tokens": round(statistics.mean(r["generated_tokens"] for r in rows), 1),
            "padding_waste": round(med("rollout/padding_waste"), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="default,smollm2_arithmetic,smollm2_gsm8k",
                   help="comma-separated names under configs/")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=2, help="runs per engine, alternating")
    p.add_argument("--json", default=None, help="also write the runs here")
    p.add_argument("--set", action="append", default=[],
                   help="[CONFIG:]X=Y: an extra --config.X=Y for every run, or only for CONFIG's "
                        "(repeatable)")
    a = p.parse_args()
    if a.steps < 3 or a.repeats < 1:
        raise SystemExit("--steps must be >= 3 and --repeats >= 1")
    results = []
    for config in a.configs.split(","):
        extra = [f"--config.{s.split(':', 1)[-1]}" for s in a.set
                 if ":" not in s.split("=", 1)[0] or s.startswith(f"{config}:")]
        for rep in range(a.repeats):
            for engine in ENGINES:
                r = {"config": config, "engine": engine, "repeat": rep,
                     **run_once(config, engine, a.steps, extra)}
                print(json.dumps(r), flush=True)
                results.append(r)
    print(f"\n{'config':<18}{'engine':<12}{'time/sample s':>14}{'time/step s':>12}"
          f"{'sample tok/s':>13}{'vs static':>10}")
    for config in a.configs.split(","):
        median = {e: statistics.median(r["time_sample_s"] for r in results
                                       if r["config"] == config and r["engine"] == e)
                  for e in ENGINES}
        for e in ENGINES:
            runs = [r for r in results if r["config"] == config and r["engine"] == e]
            step = statistics.median(r["time_step_s"] for r in runs)
            rate = statistics.median(r["sample_tok_per_s"] for r in runs)
            print(f"{config:<18}{e:<12}{median[e]:>14.3f}{step:>12.3f}{rate:>13.1f}"
                  f"{median['static'] / median[e]:>9.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"settings": vars(a), "runs": results}, fh, indent=1)


if __name__ == "__main__":
    main()
