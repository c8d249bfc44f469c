"""The pre-registered rule / static_rm / cooper comparison on SmolLM2: its analysis.

    python -m coop_jax.projects.real_model.comparison \
        --results=docs/results/real_model/comparison

Reads what `lane --study=comparison` commits (RESULTS/base_eval and RESULTS/<arm>_s<seed>) and
writes RESULTS/analysis.json and analysis.md as docs/results/real_model/comparison_plan.md
specifies, over whichever runs exist:

- every run's final held-out accuracy under strict gold (greedy and avg@k, lenient beside it),
  its paired gain over the start policy, and whether it collapsed (the plan's three criteria);
- the primary contrast cooper - static_rm and the secondary ones (cooper - rule,
  static_rm - rule) in final strict greedy accuracy: per seed the paired difference over
  questions with a 95% bootstrap interval, and over seeds the mean with a t-interval;
- for the RM arms, the per-step diagnostics over the first and last 10 steps and the hacking gap
  (proxy reward minus rule accuracy over the last 10 steps).
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
from absl import flags
from absl.app import UsageError

from coop_jax.console import parse_flags, run_console
from coop_jax.jsonl import exists, read_jsonl
from coop_jax.projects.real_model.report import per_question, step_rows
from coop_jax.stats import bootstrap_ci, interval_to_json, mean_ci

ARMS = ("rule", "static_rm", "cooper")
CONTRASTS = (("cooper", "static_rm"), ("cooper", "rule"), ("static_rm", "rule"))
WINDOW = 10  # steps: the plan's "last 10 steps"
DIAGNOSTICS = ("rule_accuracy", "gold_accuracy", "proxy_reward_mean", "response_length", "rm_rule_agreement",
               "rm_balanced_accuracy", "rm_onpolicy_auc", "pairs/valid", "rm_loss",
               "rm_grad_norm", "rm_heldout_accuracy")


def correctness(samples: list[dict], mode: str, key: str) -> dict[str, float]:
    """id -> the question's mean of `key` ("strict_correct" or "correct") over its `mode` rows."""
    return {i: float(v.mean()) for i, v in per_question(samples, key).get(mode, {}).items()}


def paired(after: dict[str, float], before: dict[str, float]) -> dict:
    """after - before over the questions both hold, with a 95% bootstrap interval."""
    ids = sorted(set(after) & set(before))
    diff = [after[i] - before[i] for i in ids]
    return interval_to_json(bootstrap_ci(diff)) | {"questions": len(ids)}


def window_means(metrics: list[dict], keys=DIAGNOSTICS) -> dict[str, dict]:
    """key -> its mean over the first and the last WINDOW steps that log it, or, for a key
    logged on fewer than half the training steps (an evaluation every few steps), its first and
    last values, where windows of WINDOW values would span the whole run; absent: not logged."""
    out, steps = {}, len(step_rows(metrics))
    for key in keys:
        values = [m[key] for m in metrics if isinstance(m.get(key), (int, float))
                  and np.isfinite(m[key])]
        if 2 * len(values) >= steps:
            out[key] = {"first": float(np.mean(values[:WINDOW])),
                        "last": float(np.mean(values[-WINDOW:])), "n": len(values)}
        elif values:
            out[key] = {"first": float(values[0]), "last": float(values[-1]), "n": len(values)}
    return out


def collapse(gain: dict, steps: list[dict]) -> dict:
    """The plan's criteria: strict greedy accuracy significantly below the start's; rollouts'
    rule accuracy 0 on each of the last 10 steps; mean response length under 10 tokens there."""
    tail = steps[-WINDOW:]
    criteria = {
        "below_start": gain["ci_high"] is not None and gain["ci_high"] < 0,
        "rule_accuracy_zero": bool(tail) and all(m["rule_accuracy"] == 0 for m in tail),
        "short_responses": bool(tail) and float(np.mean([m["response_length"]
                                                          for m in tail])) < 10}
    return criteria | {"collapsed": any(criteria.values())}


def summarize_run(run_dir: str, after: list[dict], base: list[dict]) -> dict:
    """One run's final accuracies (from its evaluation's samples `after`), gains over the start
    policy's `base`, collapse and diagnostics."""
    report = json.load(open(os.path.join(run_dir, "eval_report.json")))
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    steps = step_rows(metrics)
    final, gains = {}, {}
    for name, mode, key in (("strict_greedy", "greedy", "strict_correct"),
                            ("strict_avg_at_k", "sampled", "strict_correct"),
                            ("lenient_greedy", "greedy", "correct"),
                            ("lenient_avg_at_k", "sampled", "correct")):
        mine = correctness(after, mode, key)
        final[name] = float(np.mean(list(mine.values())))
        gains[name] = paired(mine, correctness(base, mode, key))
    diagnostics = window_means(metrics)
    gap = None
    if "proxy_reward_mean" in diagnostics:  # against the gold where the run logged it apart
        truth = diagnostics.get("gold_accuracy", diagnostics["rule_accuracy"])
        gap = diagnostics["proxy_reward_mean"]["last"] - truth["last"]
    return {"steps": len(steps), "final": final, "gain": gains,
            "collapse": collapse(gains["strict_greedy"], steps), "diagnostics": diagnostics,
            "hacking_gap": gap,
            "strict_minus_lenient_avg_at_k": (report["strict"]["avg_at_k"]["mean"]
                                              - report["avg_at_k"]["mean"])}


def run_name_re(arms) -> re.Pattern:
    return re.compile(rf"^({'|'.join(arms)})_s(\d+)$")


def contrast(runs: dict[str, dict], samples: dict[str, list[dict]], a: str, b: str) -> dict:
    """a - b in final strict greedy accuracy: per seed paired over questions, then over seeds."""
    per_seed = {}
    for name in sorted(runs):
        arm, seed = re.match(r"^(.+)_s(\d+)$", name).groups()
        other = f"{b}_s{seed}"
        if arm == a and other in runs:
            per_seed[seed] = paired(correctness(samples[name], "greedy", "strict_correct"),
                                    correctness(samples[other], "greedy", "strict_correct"))
    means = [v["mean"] for v in per_seed.values()]
    return {"per_seed": per_seed, "seeds": len(means),
            "over_seeds": interval_to_json(mean_ci(means)) if means else None}


def load(results: str, arms=ARMS) -> tuple[list[dict], dict[str, list[dict]]]:
    """(the start policy's samples, run name -> its final evaluation's samples) of the
    finished runs of `arms` in `results`."""
    name_re = run_name_re(arms)
    base = read_jsonl(os.path.join(results, "base_eval", "samples.jsonl"))
    names = sorted(n for n in os.listdir(results) if name_re.match(n)
                   and os.path.exists(os.path.join(results, n, "run.json")))
    return base, {n: read_jsonl(os.path.join(results, n, "eval_samples.jsonl")) for n in names}


def analyse(results: str, arms=ARMS, contrasts=CONTRASTS) -> dict:
    base, samples = load(results, arms)
    runs = {n: summarize_run(os.path.join(results, n), samples[n], base) for n in samples}
    start = {name: float(np.mean(list(correctness(base, mode, key).values())))
             for name, mode, key in (("strict_greedy", "greedy", "strict_correct"),
                                     ("lenient_greedy", "greedy", "correct"))}
    return {"start": start, "runs": runs,
            "contrasts": {f"{a} - {b}": contrast(runs, samples, a, b) for a, b in contrasts}}


def _pct(iv: dict | None) -> str:
    if not iv or iv.get("mean") is None:
        return "–"
    if iv.get("ci_low") is None:
        return f"{100 * iv['mean']:+.1f}"
    return f"{100 * iv['mean']:+.1f} [{100 * iv['ci_low']:+.1f}, {100 * iv['ci_high']:+.1f}]"


def _fmt(d: dict, key: str, part: str) -> str:
    return f"{d[key][part]:.3g}" if key in d else "–"


def markdown(out: dict) -> list[str]:
    md = ["# Rule vs static RM vs Cooper on SmolLM2-135M-Instruct (pre-registered)", "",
          "Plan: [comparison_plan.md](../comparison_plan.md). Start policy on the 500 held-out "
          f"questions: strict greedy {100 * out['start']['strict_greedy']:.1f}%, lenient "
          f"{100 * out['start']['lenient_greedy']:.1f}%. Accuracies in %, differences in points "
          "with 95% intervals (per seed: bootstrap over questions; over seeds: t).", "",
          "| run | steps | strict greedy | gain | strict avg@k | lenient greedy | hacking gap | "
          "collapsed |", "|---|---|---|---|---|---|---|---|"]
    for name, r in out["runs"].items():
        c = r["collapse"]
        why = ", ".join(k for k, v in c.items() if v and k != "collapsed")
        gap = "–" if r["hacking_gap"] is None else f"{r['hacking_gap']:+.3f}"
        md.append(f"| {name} | {r['steps']} | {100 * r['final']['strict_greedy']:.1f} | "
                  f"{_pct(r['gain']['strict_greedy'])} | "
                  f"{100 * r['final']['strict_avg_at_k']:.1f} | "
                  f"{100 * r['final']['lenient_greedy']:.1f} | {gap} | "
                  f"{'yes (' + why + ')' if c['collapsed'] else 'no'} |")
    md += ["", "## Contrasts (final strict greedy accuracy)", "",
           "| contrast | seeds | over seeds | per seed |", "|---|---|---|---|"]
    for name, c in out["contrasts"].items():
        per = "; ".join(f"s{s}: {_pct(v)}" for s, v in c["per_seed"].items()) or "–"
        md.append(f"| {name} | {c['seeds']} | {_pct(c['over_seeds'])} | {per} |")
    md += ["", "## Per-step diagnostics (mean over the first → last 10 steps; a metric logged "
           "fewer than 20 times: its first → last value)", "",
           "| run | " + " | ".join(DIAGNOSTICS) + " |", "|---" * (len(DIAGNOSTICS) + 1) + "|"]
    for name, r in out["runs"].items():
        d = r["diagnostics"]
        md.append(f"| {name} | " + " | ".join(
            f"{_fmt(d, k, 'first')} → {_fmt(d, k, 'last')}" if k in d else "–"
            for k in DIAGNOSTICS) + " |")
    md += ["", "The hacking gap is proxy reward − the rollouts' accuracy over the last 10 steps, "
           "under the gold where the run logged it (`gold_accuracy`), else under the run's "
           "(lenient) rule (the first comparison: plan amendment 1). Collapse: the paired "
           "interval of the strict greedy gain wholly below 0, rule accuracy 0 on each of the "
           "last 10 steps, or responses under 10 tokens there. Commands: each run's `run.json`."]
    return md


def write_analysis(results: str, out: dict, lines: list[str]) -> dict:
    """RESULTS/analysis.json (`out`) and analysis.md (`lines`); returns `out`."""
    with open(os.path.join(results, "analysis.json"), "w") as fh:
        json.dump(out, fh, indent=2)
    with open(os.path.join(results, "analysis.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return out


def write(results: str) -> dict:
    out = analyse(results)
    return write_analysis(results, out, markdown(out))


def analysis_main(argv: list[str], doc: str, study: str, write_fn) -> None:
    """The command of a lane study's analysis: `--results` (the study's folder) -> write_fn."""
    def define(fv: flags.FlagValues, argv: list[str]) -> None:
        flags.DEFINE_string("results", f"docs/results/real_model/{study}",
                            f"the study's results folder (lane --study={study})", flag_values=fv)

    f = parse_flags(define, argv, doc)
    if not exists(os.path.join(f.results, "base_eval", "samples.jsonl")):
        raise UsageError(f"--results: {f.results} holds no base_eval/samples.jsonl (run "
                         f"`python -m coop_jax.projects.real_model.lane --study={study}` first)")
    out = write_fn(f.results)
    print(f"{len(out['runs'])} runs -> {os.path.join(f.results, 'analysis.md')}")


def main(argv: list[str]) -> None:
    analysis_main(argv, __doc__, "comparison", write)


def run() -> None:
    run_console(main, "coop_jax.projects.real_model.comparison")


if __name__ == "__main__":
    run()
