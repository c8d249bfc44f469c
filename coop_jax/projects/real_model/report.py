"""The real-model lane's report: before / after held-out accuracy with paired intervals, step time
split, peak RSS, and Cooper's pair and RM diagnostics, from the files `real_model` copies.

Intervals are 95% percentile bootstraps over held-out questions (`stats.bootstrap_ci`). A gain
is paired: every run is evaluated on the same questions as the start policy, so the per-question
difference (after - before) is what is resampled.
"""
from __future__ import annotations

import json
import os

import numpy as np

from coop_jax.jsonl import read_jsonl
from coop_jax.stats import bootstrap_ci

# Step 1 compiles; the time split averages the steps after it.
TIMES = ("time/sample", "time/verify", "time/update", "time/step")
COOPER_METRICS = ("pairs/valid", "rm_heldout_accuracy", "rm_rule_agreement", "rm_onpolicy_auc",
                  "rm_onpolicy_pair_accuracy")


def per_question(samples: list[dict], key: str = "correct") -> dict[str, dict[str, np.ndarray]]:
    """mode -> id -> that question's correctness under `key` ("correct": the lenient headline,
    "strict_correct": strict gold) (greedy: one value; sampled: its k values)."""
    out: dict[str, dict[str, list]] = {}
    for s in samples:
        out.setdefault(s["mode"], {}).setdefault(s["id"], []).append(float(s[key]))
    return {mode: {i: np.asarray(v) for i, v in rows.items()} for mode, rows in out.items()}


def paired_gain(before: list[dict], after: list[dict]) -> dict[str, dict]:
    """Greedy accuracy and avg@k after - before, per question, with bootstrap intervals."""
    b, a = per_question(before), per_question(after)
    gains = {}
    for mode, name in (("greedy", "greedy_accuracy"), ("sampled", "avg_at_k")):
        ids = sorted(set(b.get(mode, {})) & set(a.get(mode, {})))
        if ids:
            diff = [a[mode][i].mean() - b[mode][i].mean() for i in ids]
            gains[name] = bootstrap_ci(diff) | {"questions": len(ids)}
    return gains


def step_rows(metrics: list[dict]) -> list[dict]:
    """The rows of training steps (not the evaluation-only rows, such as step 0)."""
    return [m for m in metrics if "time/step" in m]


def time_split(metrics: list[dict]) -> dict[str, float]:
    rows = [m for m in step_rows(metrics) if m["step"] > 1] or step_rows(metrics)
    return {k: float(np.mean([m[k] for m in rows if k in m])) for k in TIMES
            if any(k in m for m in rows)}


def training_curve(metrics: list[dict], key: str = "reward_mean", window: int = 10) -> dict:
    """The first and the last `window` steps' mean of `key`."""
    values = [m[key] for m in step_rows(metrics) if key in m]
    if not values:
        return {}
    return {"first": float(np.mean(values[:window])), "last": float(np.mean(values[-window:])),
            "window": min(window, len(values))}


def cooper_diagnostics(metrics: list[dict]) -> dict:
    steps = step_rows(metrics)
    out: dict = {}
    if any("pairs/valid" in m for m in steps):
        valid = [m.get("pairs/valid", 0) for m in steps]
        out["steps_with_pairs"] = f"{sum(v > 0 for v in valid)}/{len(valid)}"
        out["mean_pairs_per_step"] = float(np.mean(valid))
    for key in COOPER_METRICS[1:]:
        series = [(m["step"], m[key]) for m in metrics
                  if isinstance(m.get(key), (int, float)) and np.isfinite(m[key])]
        if series:
            out[key] = {"first": series[0][1], "last": series[-1][1],
                        "mean": float(np.mean([v for _, v in series])), "n": len(series)}
    return out


def summarize_run(run_dir: str, base_samples: list[dict]) -> dict:
    run = json.load(open(os.path.join(run_dir, "run.json")))
    report = json.load(open(os.path.join(run_dir, "eval_report.json")))
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    after = read_jsonl(os.path.join(run_dir, "eval_samples.jsonl"))
    return run | {
        "steps": len(step_rows(metrics)),
        "after": {k: report[k] for k in ("greedy_accuracy", "avg_at_k") if k in report},
        "gain": paired_gain(base_samples, after),
        "time_split_s": time_split(metrics),
        "reward_mean": training_curve(metrics),
        "cooper": cooper_diagnostics(metrics),
    }


def _pct(iv: dict) -> str:
    return (f"{100 * iv['mean']:+.1f} [{100 * iv['ci_low']:+.1f}, {100 * iv['ci_high']:+.1f}]"
            if "questions" in iv else
            f"{100 * iv['mean']:.1f} [{100 * iv['ci_low']:.1f}, {100 * iv['ci_high']:.1f}]")


def _markdown(base: dict, runs: dict[str, dict]) -> list[str]:
    md = ["# Real-model lane: SmolLM2-135M-Instruct on one-step story problems", "",
          f"Start policy, {base['num_problems']} held-out questions: greedy "
          f"{_pct(base['greedy_accuracy'])}%, avg@{base.get('k', '?')} "
          f"{_pct(base['avg_at_k'])}% (95% bootstrap intervals).", "",
          "| run | steps | greedy after | gain (paired) | avg@k after | gain (paired) | "
          "reward first→last 10 | s/step (sample / verify / update) | peak RSS GiB |",
          "|---|---|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        t, rw = r["time_split_s"], r["reward_mean"]
        md.append(
            f"| {name} | {r['steps']} | {_pct(r['after']['greedy_accuracy'])} | "
            f"{_pct(r['gain']['greedy_accuracy'])} | {_pct(r['after']['avg_at_k'])} | "
            f"{_pct(r['gain']['avg_at_k'])} | {rw.get('first', float('nan')):.3f}→"
            f"{rw.get('last', float('nan')):.3f} | {t.get('time/step', 0):.1f} "
            f"({t.get('time/sample', 0):.1f} / {t.get('time/verify', 0):.2f} / "
            f"{t.get('time/update', 0):.1f}) | "
            f"{(r['peak_rss_mib'] or float('nan')) / 1024:.2f} |")
    for name, r in runs.items():
        if r["cooper"]:
            md += ["", f"**{name}** ({r.get('arm', name)}, RM diagnostics): "
                   + json.dumps(r["cooper"])]
    md += ["", "Accuracies in %, gains in points. Commands: each run's `run.json`."]
    return md


def write_report(results: str) -> dict:
    """RESULTS/report.json and report.md over RESULTS/base_eval and every finished run."""
    base_dir = os.path.join(results, "base_eval")
    base = json.load(open(os.path.join(base_dir, "report.json")))
    base_samples = read_jsonl(os.path.join(base_dir, "samples.jsonl"))
    runs = {name: summarize_run(os.path.join(results, name), base_samples)
            for name in sorted(os.listdir(results))
            if os.path.exists(os.path.join(results, name, "run.json"))}
    out = {"base": {k: base[k] for k in ("greedy_accuracy", "avg_at_k", "k", "num_problems")
                    if k in base}, "runs": runs}
    with open(os.path.join(results, "report.json"), "w") as fh:
        json.dump(out, fh, indent=2)
    with open(os.path.join(results, "report.md"), "w") as fh:
        fh.write("\n".join(_markdown(out["base"], runs)) + "\n")
    return out
