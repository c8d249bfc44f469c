"""The demo's Cooper example, with and without hard negatives (issue 64): the pre-registered plan
of docs/results/demo_cooper/plan.md.

    python -m coop_jax.projects.demo_cooper --workdir=runs/demo_cooper --commit
    python -m coop_jax.projects.demo_cooper --analysis_only

Arms on `configs/default.py`, paired by seed (seed-major order): `rule` (the rule demo),
`cooper` (the README's Cooper command: the policy's first wrong rollout as the negative) and
`cooper_hard` (the hardest negative, 2 pairs per group, the reference solution as the positive of
groups with no right rollout). Each run's summary and metrics go to
RESULTS/runs/<arm>_s<seed>/ (committed as it ends with --commit; a rerun skips kept runs), then
RESULTS/analysis.md, analysis.json and curves.png: per run the final and peak greedy accuracy,
the mean RM agreement with the rule and hacking gap over the last 20 steps, per step both, and
the plan's verdict.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
from absl import flags
from absl.app import UsageError

from coop_jax.console import parse_flags, run_console
from coop_jax.eval.report import save_png
from coop_jax.metrics_writer import read_metrics
from coop_jax.projects import run_store
from coop_jax.projects.reward_hacking.analysis import paired_contrast, tail_mean
from coop_jax.trainer import loop

CONFIG = "configs/default.py"
RESULTS = "docs/results/demo_cooper"
SEEDS = (0, 1, 2)
# arm -> config overrides; both Cooper arms spell out every pair setting they differ in, so
# neither depends on the config's Cooper defaults
ARMS: dict[str, dict] = {
    "rule": {"reward.type": "rule"},
    "cooper": {"reward.type": "cooper", "cooper.negative": "rollout",
               "cooper.pairs_per_group": 1, "cooper.reference_positive": False},
    "cooper_hard": {"reward.type": "cooper", "cooper.negative": "rollout_hardest",
                    "cooper.pairs_per_group": 2, "cooper.reference_positive": True},
}
TAIL = 0.25  # the last 20 of 80 steps
# the plan's "holds": every seed's tail agreement and gap, and the final accuracy's margin
MIN_AGREEMENT, MAX_GAP, ACCURACY_MARGIN = 0.90, 0.05, 0.05


def run_config(config, arm: str, seed: int):
    c = config.copy_and_resolve_references()
    c.seed = seed
    for field, value in ARMS[arm].items():
        section, name = field.split(".")
        c[section][name] = value
    return c


def runner(config, command: str) -> run_store.RunFn:
    def run(arm: str, seed: int, run_dir: str) -> dict:
        cpu = time.process_time()
        summary = loop.train(run_config(config, arm, seed), run_dir)
        return summary | {"arm": arm, "cpu_seconds": time.process_time() - cpu,
                          "cpu": run_store.cpu_model(), "command": command}
    return run


# ---------------------------------------------------------------------- analysis
def per_step(rows: list[dict]) -> list[dict]:
    """Each training step's RM agreement with the rule and hacking gap (proxy - rule)."""
    return [{"step": r["step"], "rm_rule_agreement": r["rm_rule_agreement"],
             "hacking_gap": r["proxy_reward_mean"] - r["rule_accuracy"]}
            for r in rows if r.get("rm_rule_agreement") is not None
            and r.get("proxy_reward_mean") is not None]


def endpoints(rows: list[dict]) -> dict:
    """One run's endpoints: final, peak (and its step) greedy held-out accuracy; for RM arms the
    tail (last 20 steps) mean RM agreement and hacking gap."""
    evals = [(r["step"], r["eval/greedy_accuracy"]) for r in rows
             if r.get("eval/greedy_accuracy") is not None]
    peak_step, peak = max(evals, key=lambda e: e[1])  # the first of equal peaks
    out = {"start": evals[0][1], "final": evals[-1][1], "peak": peak, "peak_step": peak_step,
           "evaluations": [{"step": s, "greedy_accuracy": a} for s, a in evals]}
    steps = per_step(rows)
    if steps:
        out |= {"tail_agreement": tail_mean(steps, "rm_rule_agreement", TAIL),
                "tail_gap": tail_mean(steps, "hacking_gap", TAIL), "per_step": steps}
    return out


def load_runs(results: str) -> dict[str, dict[int, dict]]:
    """arm -> seed -> {"summary", "endpoints"} of the kept runs."""
    out: dict[str, dict[int, dict]] = {}
    for arm in ARMS:
        for seed in SEEDS:
            folder = run_store.kept_dir(results, arm, seed)
            summary = run_store.read_summary(folder)
            if summary is not None:
                out.setdefault(arm, {})[seed] = {"summary": summary,
                                                 "endpoints": endpoints(read_metrics(folder))}
    return out


def verdict(runs: dict[str, dict[int, dict]]) -> dict:
    """The plan's decision: whether cooper_hard holds (needs every planned run of both Cooper
    arms)."""
    hard, base = runs.get("cooper_hard", {}), runs.get("cooper", {})
    if set(hard) != set(SEEDS) or set(base) != set(SEEDS):
        return {"complete": False}
    ends = {s: r["endpoints"] for s, r in hard.items()}
    h1 = all(e["tail_agreement"] >= MIN_AGREEMENT for e in ends.values())
    h2 = all(e["tail_gap"] <= MAX_GAP for e in ends.values())
    diff = float(np.mean([ends[s]["final"] - base[s]["endpoints"]["final"] for s in SEEDS]))
    h3 = diff >= -ACCURACY_MARGIN
    return {"complete": True, "agreement_every_seed": h1, "gap_every_seed": h2,
            "final_not_worse": h3, "final_difference": diff, "holds": h1 and h2 and h3}


CONTRASTS = [("cooper_hard", "cooper", key) for key in ("final", "peak", "tail_agreement",
                                                       "tail_gap")] + [
    ("cooper_hard", "rule", "final"), ("cooper", "rule", "final")]


def _by_seed(runs: dict, arm: str, key: str) -> dict[int, float]:
    return {s: r["endpoints"][key] for s, r in runs.get(arm, {}).items()}


def analyse(results: str) -> dict:
    runs = load_runs(results)
    contrasts = {f"{a} - {b}: {key}": paired_contrast(_by_seed(runs, a, key),
                                                      _by_seed(runs, b, key))
                 for a, b, key in CONTRASTS}
    kept = {arm: {str(s): r["endpoints"] | {k: r["summary"].get(k) for k in
                                            ("cpu", "wall_seconds", "command")}
                  for s, r in by_seed.items()} for arm, by_seed in runs.items()}
    return {"runs": kept, "contrasts": contrasts, "verdict": verdict(runs)}


def _num(x, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else \
        f"{x:+.{digits}f}" if digits < 0 else f"{x:.{digits}f}"


def markdown(result: dict) -> list[str]:
    md = ["# The demo's Cooper example, with and without hard negatives: analysis", "",
          "Written by `python -m coop_jax.projects.demo_cooper --analysis_only` from the kept runs "
          "([plan](plan.md)). Greedy held-out accuracy on the demo's 128 questions (lenient, "
          "the demo's gold); the tail is the last 20 of 80 steps; the hacking gap is the proxy "
          "reward minus the rollouts' rule accuracy.", "",
          "| run | start | peak (step) | final | tail RM agreement | tail gap | CPU | wall |",
          "|---|---|---|---|---|---|---|---|"]
    for arm, by_seed in result["runs"].items():
        for seed, e in sorted(by_seed.items()):
            md.append(f"| {arm}_s{seed} | {_num(e['start'])} | {_num(e['peak'])} "
                      f"({e['peak_step']}) | {_num(e['final'])} | "
                      f"{_num(e.get('tail_agreement'))} | {_num(e.get('tail_gap'))} | "
                      f"{e.get('cpu') or '-'} | {(e.get('wall_seconds') or 0) / 60:.1f} min |")
    md += ["", "Paired by seed (mean, 95% t interval over seeds):", "",
           "| contrast | seeds | per seed | mean [95% CI] |", "|---|---|---|---|"]
    for name, c in result["contrasts"].items():
        per = ", ".join(f"{d:+.3f}" for d in c["differences"])
        md.append(f"| {name} | {len(c['seeds'])} | {per or '-'} | {_num(c['mean'])} "
                  f"[{_num(c['ci_low'])}, {_num(c['ci_high'])}] |")
    v = result["verdict"]
    md += [""]
    if not v["complete"]:
        md.append("**Verdict:** not yet (the plan's runs of both Cooper arms are not all kept).")
    else:
        md.append(f"**Verdict: cooper_hard {'holds' if v['holds'] else 'does not hold'}** "
                  f"(tail RM agreement >= {MIN_AGREEMENT} on every seed: "
                  f"{v['agreement_every_seed']}; tail gap <= {MAX_GAP} on every seed: "
                  f"{v['gap_every_seed']}; final accuracy minus cooper's, mean "
                  f"{v['final_difference']:+.3f}, not below -{ACCURACY_MARGIN}: "
                  f"{v['final_not_worse']}).")
    return md + [""]


def plot(result: dict, path: str) -> None:
    """Per-step RM agreement and hacking gap of every RM run, and the greedy evaluations."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colors = {"rule": "tab:green", "cooper": "tab:red", "cooper_hard": "tab:blue"}
    for arm, by_seed in result["runs"].items():
        for seed, e in sorted(by_seed.items()):
            label = arm if seed == "0" else None
            ev = e["evaluations"]
            axes[0].plot([x["step"] for x in ev], [x["greedy_accuracy"] for x in ev],
                         color=colors[arm], label=label, marker="o", alpha=0.7)
            steps = e.get("per_step", [])
            for ax, key in ((axes[1], "rm_rule_agreement"), (axes[2], "hacking_gap")):
                if steps:
                    ax.plot([x["step"] for x in steps], [x[key] for x in steps],
                            color=colors[arm], label=label, alpha=0.6, lw=0.8)
    for ax, title in zip(axes, ("greedy held-out accuracy", "RM agreement with the rule",
                                "hacking gap (proxy - rule)")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=80)
    plt.close(fig)


def write(results: str) -> list[str]:
    """analysis.md / analysis.json / curves.png in `results`; the files written."""
    result = analyse(results)
    paths = [os.path.join(results, n) for n in ("analysis.json", "analysis.md", "curves.png")]
    with open(paths[0], "w") as fh:
        json.dump(result, fh, indent=1)
    with open(paths[1], "w") as fh:
        fh.write("\n".join(markdown(result)))
    plot(result, paths[2])
    return paths


# ---------------------------------------------------------------------- the command
def _define(fv: flags.FlagValues, argv: list[str]) -> None:
    from ml_collections import config_flags

    d = dict(flag_values=fv)
    config_flags.DEFINE_config_file("config", CONFIG, "the demo config file; --config.x.y=v "
                                    "overrides a field of every run (shortened settings for "
                                    "tests)", lock_config=True, sys_argv=argv, **d)
    flags.DEFINE_string("workdir", "runs/demo_cooper", "working folder (the runs' checkpoints)",
                        **d)
    flags.DEFINE_string("results", RESULTS, "results folder (kept runs, analysis)", **d)
    flags.DEFINE_list("arms", list(ARMS), f"arms to run, of {list(ARMS)}", **d)
    flags.DEFINE_list("seeds", [str(s) for s in SEEDS], "seeds to run", **d)
    flags.DEFINE_boolean("commit", False, "git-commit each finished run and the analysis", **d)
    flags.DEFINE_boolean("analysis_only", False, "only rewrite the analysis from kept runs", **d)


def main(argv: list[str]) -> None:
    f = parse_flags(_define, argv, __doc__)
    bad = [a for a in f.arms if a not in ARMS]
    if bad:
        raise UsageError(f"--arms: {bad[0]!r} is not one of {list(ARMS)}")
    if not f.analysis_only:
        config = f.config
        seeds = [int(s) for s in f.seeds]
        runs = [(arm, seed) for seed in seeds for arm in f.arms]
        command = " ".join(["python -m coop_jax.projects.demo_cooper", *argv[1:]])
        if f.commit:
            run_store.ensure_committable(f.results)
        run_store.run_all(runs, runner(config, command), workdir=f.workdir,
                          settings=run_store.settings(config), results_dir=f.results,
                          commit=f.commit, what="demo Cooper comparison: run")
    paths = write(f.results)
    if f.commit:
        for path in paths:
            run_store.git_commit(path, "demo Cooper comparison: the analysis")
    print(open(paths[1]).read())


def run() -> None:
    run_console(main, "coop_jax.projects.demo_cooper")


if __name__ == "__main__":
    run()
