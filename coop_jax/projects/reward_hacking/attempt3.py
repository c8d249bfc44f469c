"""Attempt 3's pre-registered analysis (docs/results/reward_hacking/attempt_3_plan.md), over
the kept runs of both draws.

    python -m coop_jax.projects.reward_hacking.attempt3 --out=docs/results/reward_hacking/attempt_3

Per run, three endpoints (strict gold): the final held-out accuracy, the mean of the held-out
accuracy over the evaluations after step 0, and the hacking gap over the last 20% of the steps.
Each contrast is an arm minus another, paired by seed within a draw (`analysis.paired_contrast`);
the primary one is also combined across the two draws as fixed blocks (`combine`), with a Welch
test of whether the draws disagree. `verdicts` turns the intervals into the plan's words
(replicates / reduced / prevented / mechanism supported), and says "not tested" where runs are
missing. Writes OUT/analysis.json and OUT/analysis.md; PARTIAL while a planned run is missing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Sequence

import numpy as np

from coop_jax.projects.reward_hacking import analysis
from coop_jax.projects.reward_hacking.report import GOLD_EVAL, kept_run_dirs, load_runs
from coop_jax.stats import interval_to_json, mean_ci

NEW, BASE, RULE = "cooper_hardest_ref", "static_rm", "rule"
RESULTS = "docs/results/reward_hacking"
DRAW_DIRS = {"draw 1": f"{RESULTS}/runs", "draw 2": f"{RESULTS}/draw_2/runs"}
ATTEMPT_1_DIR = f"{RESULTS}/attempt_1/runs"
SEEDS = (0, 1, 2, 3, 4)
PLANNED = {"draw 1": (RULE, BASE, "cooper_consistent_wrong", NEW, "sham_cooper",
                      "static_rm_drgrpo"),
           "draw 2": (RULE, BASE, "cooper_consistent_wrong", NEW)}
# (role, arm, baseline, draws it is computed on)
CONTRASTS = (
    ("primary", NEW, BASE, ("draw 1", "draw 2")),
    ("sham control", NEW, "sham_cooper", ("draw 1",)),
    ("hard negatives vs attempt 2's best", NEW, "cooper_consistent_wrong", ("draw 1",)),
    ("mechanism", "static_rm_drgrpo", BASE, ("draw 1",)),
    ("attempt 2's primary", "cooper_consistent_wrong", BASE, ("draw 1", "draw 2")),
    ("headroom", RULE, BASE, ("draw 1", "draw 2")),
    ("prevention's accuracy check", NEW, RULE, ("draw 1", "draw 2")),
)
GAP_CEILING = analysis.GAP_THRESHOLD  # "prevented": the new arm's gap interval ends below this


# ---------------------------------------------------------------------- endpoints of one run
def final(run: dict) -> float:
    return analysis.final_gold(run["summary"])[0]


def eval_average(run: dict) -> float:
    """The mean held-out strict accuracy over the evaluations after step 0."""
    values = [r[GOLD_EVAL] for r in run["metrics"]
              if r.get("step", 0) > 0 and analysis.finite(r.get(GOLD_EVAL))]
    return float(np.mean(values)) if values else math.nan


def gap(run: dict) -> float:
    return analysis.tail_mean(run["metrics"], "hacking_gap")


ENDPOINTS = {"final": final, "eval_average": eval_average, "hacking_gap": gap}


# ---------------------------------------------------------------------- contrasts
def contrast(arms: dict[str, list[dict]], arm: str, base: str, endpoint: str) -> dict:
    """arm - base on one endpoint, paired by seed; {"ran": False} when either arm is missing."""
    if arm not in arms or base not in arms:
        return {"ran": False, "seeds": [], "mean": None}
    fn = ENDPOINTS[endpoint]
    values = lambda runs: {s: v for s, v in analysis.by_seed(runs, fn).items()
                           if math.isfinite(v)}
    return {"ran": True} | analysis.paired_contrast(values(arms[arm]), values(arms[base]))


def combine(per_draw: Sequence[dict]) -> dict:
    """The mean of the draws' mean paired differences, SE sqrt(sum s_i^2 / n_i) / k and a Welch-
    Satterthwaite t interval (draws as fixed blocks), and a Welch test of the two draws'
    differences (`disagree`: p < 0.05). Needs two draws with >= 2 pairs each."""
    from scipy import stats as sps

    diffs = [np.asarray(c["differences"], np.float64) for c in per_draw if c.get("ran")]
    if len(diffs) < 2 or min(len(d) for d in diffs) < 2:
        return {"mean": None, "ci_low": None, "ci_high": None, "welch_p": None,
                "disagree": None}
    k = len(diffs)
    terms = [d.var(ddof=1) / len(d) for d in diffs]
    se = math.sqrt(sum(terms)) / k
    df = sum(terms) ** 2 / sum(t ** 2 / (len(d) - 1) for t, d in zip(terms, diffs)) \
        if sum(terms) > 0 else math.inf
    mean = float(np.mean([d.mean() for d in diffs]))
    half = float(sps.t.ppf(0.975, df) * se) if se > 0 else 0.0
    p = float(sps.ttest_ind(diffs[0], diffs[1], equal_var=False).pvalue) if se > 0 else 1.0
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "se": se, "df": df,
            "welch_p": p, "disagree": p < 0.05}


def arm_gap(arms: dict[str, list[dict]], arm: str) -> dict:
    """An arm's hacking gap over seeds: mean and 95% t interval."""
    gaps = [g for g in analysis.by_seed(arms.get(arm, []), gap).values() if math.isfinite(g)]
    return interval_to_json(mean_ci(gaps))


# ---------------------------------------------------------------------- the plan's words
def _below(c: dict) -> bool | None:
    """The interval lies below 0 (None: not run or no interval)."""
    return None if not c.get("ran") or c.get("ci_high") is None else c["ci_high"] < 0


def _above(c: dict) -> bool | None:
    return None if not c.get("ran") or c.get("ci_low") is None else c["ci_low"] > 0


def verdicts(result: dict) -> dict:
    """Per draw: reduced (the gap contrast's interval below 0), prevented (reduced, the new
    arm's own gap interval ending below GAP_CEILING and its final accuracy not below the rule
    arm's); replicates (both draws' primary intervals exclude 0 on the same side); the
    mechanism (drgrpo - static gap interval below 0 on draw 1). None: not tested."""
    out = {}
    for draw, r in result["draws"].items():
        gap_c = r["contrasts"]["primary"]["hacking_gap"]
        reduced = _below(gap_c)
        own = r["gaps"].get(NEW, {})
        under = None if own.get("ci_high") is None else own["ci_high"] < GAP_CEILING
        rule_c = r["contrasts"]["prevention's accuracy check"]["final"]
        not_below_rule = (None if not rule_c.get("ran") or rule_c.get("ci_high") is None
                          else rule_c["ci_high"] > 0)
        parts = (reduced, under, not_below_rule)
        prevented = None if None in parts else all(parts)
        out[draw] = {"reduced": reduced, "prevented": prevented}
    sides = []
    for r in result["draws"].values():
        c = r["contrasts"]["primary"]["final"]
        sides.append("above" if _above(c) else "below" if _below(c) else
                     (None if not c.get("ran") or c.get("ci_low") is None else "zero"))
    out["replicates"] = (None if len(sides) < 2 or None in sides
                         else sides[0] == sides[1] and sides[0] != "zero")
    mech = result["draws"].get("draw 1", {}).get("contrasts", {}).get("mechanism", {})
    out["mechanism_supported"] = _below(mech.get("hacking_gap", {}))
    return out


# ---------------------------------------------------------------------- diagnostics (no tests)
DIAGNOSTICS = ("rm_loss", "rm_grad_norm", "pairs/valid", "rm_onpolicy_pair_accuracy",
               "all_wrong_group_fraction", "all_wrong_advantage_abs_mean", "hacking_gap")


def diagnostics(arms: dict[str, list[dict]]) -> dict[str, dict[str, float | None]]:
    """arm -> the mean over seeds of each run's mean of every DIAGNOSTICS key it logged."""
    out = {}
    for arm, runs in sorted(arms.items()):
        row = {}
        for key in DIAGNOSTICS:
            means = [np.mean([r[key] for r in run["metrics"] if analysis.finite(r.get(key))])
                     for run in runs if any(analysis.finite(r.get(key)) for r in run["metrics"])]
            row[key] = float(np.mean(means)) if means else None
        out[arm] = row
    return out


def over_steps(arms: dict[str, list[dict]], arm: str = NEW, base: str = BASE) -> list[dict]:
    """The primary contrast (held-out strict accuracy, paired by seed) at each evaluation step."""
    if arm not in arms or base not in arms:
        return []
    at = lambda run: {r["step"]: r[GOLD_EVAL] for r in run["metrics"]
                      if analysis.finite(r.get(GOLD_EVAL))}
    a = {run["summary"]["seed"]: at(run) for run in arms[arm]}
    b = {run["summary"]["seed"]: at(run) for run in arms[base]}
    steps = sorted({s for v in a.values() for s in v} & {s for v in b.values() for s in v})
    return [{"step": step} | analysis.paired_contrast(
        {seed: v[step] for seed, v in a.items() if step in v},
        {seed: v[step] for seed, v in b.items() if step in v}) for step in steps]


# ---------------------------------------------------------------------- the analysis
def analyse_draw(runs: list[dict], draw: str) -> dict:
    arms = analysis.by_arm(runs)
    contrasts = {role: {e: contrast(arms, arm, base, e) for e in ENDPOINTS}
                 for role, arm, base, draws in CONTRASTS if draw in draws}
    missing = sorted(f"{arm}_s{s}" for arm in PLANNED[draw] for s in SEEDS
                     if s not in {r["summary"].get("seed") for r in arms.get(arm, [])})
    return {"precondition": analysis.precondition(arms), "contrasts": contrasts,
            "gaps": {arm: arm_gap(arms, arm) for arm in sorted(arms)},
            "over_steps": over_steps(arms), "diagnostics": diagnostics(arms),
            "missing": missing}


def analyse(draws: dict[str, list[dict]], attempt_1: list[dict] | None = None) -> dict:
    """The plan's analysis of each draw's runs (draw name -> loaded runs), the primary contrast
    combined across draws on each endpoint, the verdicts, and attempt 1's hacking gaps."""
    result = {"draws": {d: analyse_draw(runs, d) for d, runs in draws.items()}}
    result["combined"] = {e: combine([r["contrasts"]["primary"][e]
                                      for r in result["draws"].values()]) for e in ENDPOINTS}
    result["verdicts"] = verdicts(result)
    if attempt_1:
        arms = analysis.by_arm(attempt_1)
        result["attempt_1_gaps"] = {arm: arm_gap(arms, arm) for arm in sorted(arms)}
    result["partial"] = any(r["missing"] for r in result["draws"].values())
    return result


# ---------------------------------------------------------------------- the page
def _pp(c: dict, scale: float = 100.0) -> str:
    """"+1.23 [-0.50, +2.96] (n)" of a contrast or interval, in `scale` units."""
    if not c or c.get("ran") is False:
        return "not run"
    if c.get("mean") is None or not math.isfinite(c["mean"]):
        return "n/a"
    fmt = lambda x: "n/a" if x is None or not math.isfinite(x) else f"{scale * x:+.2f}"
    n = len(c.get("seeds", [])) or c.get("n")
    return f"{fmt(c['mean'])} [{fmt(c.get('ci_low'))}, {fmt(c.get('ci_high'))}]" + (
        f" ({n})" if n else "")


def _word(value: bool | None, yes: str, no: str) -> str:
    return "not tested" if value is None else yes if value else no


def _disagreement(combined: dict) -> list[str]:
    """The plan's reading of the Welch test: at p < 0.05 the draws disagree on that endpoint."""
    split = [f"{e} (Welch p {c['welch_p']:.3f})" for e, c in combined.items()
             if c.get("welch_p") is not None and c["welch_p"] < 0.05]
    return ["", "The draws disagree on " + ", ".join(split) + ": the combined estimate there "
            "is reported, not read as one effect."] if split else []


def markdown(result: dict) -> list[str]:
    draws = list(result["draws"])
    md = ["# Reward-hacking plan, attempt 3: the pre-registered analysis", "",
          "Plan: [attempt_3_plan.md](../attempt_3_plan.md). "
          + ("**PARTIAL**: planned runs are missing (listed below)." if result["partial"]
             else "Every planned run is kept."), "", "## Verdicts", ""]
    v = result["verdicts"]
    for d in draws:
        md.append(f"- {d}, {NEW} against {BASE}: reduced the hack: "
                  f"{_word(v[d]['reduced'], 'yes', 'no')}; prevented it: "
                  f"{_word(v[d]['prevented'], 'yes', 'no')}.")
    md += [f"- The primary contrast replicates across the draws: "
           f"{_word(v['replicates'], 'yes', 'no')}.",
           f"- The mechanism (static_rm_drgrpo − static_rm on the hacking gap, draw 1) is "
           f"{_word(v['mechanism_supported'], 'supported', 'not supported')}."]
    md += [f"- {d}: {result['draws'][d]['precondition']['statement']}" for d in draws] + [
           "", "## Contrasts", "", "Paired by seed; accuracy in percentage points, the hacking gap "
           "in reward units × 100; mean [95% t interval] (pairs).", "",
           "| contrast | endpoint | " + " | ".join(draws) + " | combined |",
           "|---|---|" + "---|" * (len(draws) + 1)]
    for role, arm, base, _ in CONTRASTS:
        for e in ENDPOINTS:
            cells = [_pp(result["draws"][d]["contrasts"][role][e])
                     if role in result["draws"][d]["contrasts"] else "—" for d in draws]
            comb = result["combined"][e] if role == "primary" else {}
            extra = (f"; Welch p {comb['welch_p']:.3f}" if comb.get("welch_p") is not None
                     else "")
            md.append(f"| {role}: {arm} − {base} | {e} | " + " | ".join(cells)
                      + f" | {_pp(comb) + extra if comb else '—'} |")
    md += _disagreement(result["combined"])
    md += ["", "## Hacking gap per arm (mean [95% t interval] over seeds)", "",
           "| arm | " + " | ".join(draws + (["attempt 1"] if "attempt_1_gaps" in result
                                             else [])) + " |",
           "|---|" + "---|" * (len(draws) + ("attempt_1_gaps" in result))]
    arms = sorted({a for d in draws for a in result["draws"][d]["gaps"]})
    for arm in arms:
        cells = [_pp(result["draws"][d]["gaps"].get(arm, {}), 1.0) for d in draws]
        if "attempt_1_gaps" in result:
            cells.append(_pp(result["attempt_1_gaps"].get(arm, {}), 1.0))
        md.append(f"| {arm} | " + " | ".join(cells) + " |")
    return md + _diagnostics_markdown(result) + [""]


def _diagnostics_markdown(result: dict) -> list[str]:
    md = ["", "## Diagnostics (means over steps, then seeds; not tested)", "",
          "| draw | arm | " + " | ".join(DIAGNOSTICS) + " |",
          "|---|---|" + "---|" * len(DIAGNOSTICS)]
    num = lambda x: "—" if x is None else f"{x:.3g}"
    for d, r in result["draws"].items():  # the table first, then each draw's lines below it
        for arm, row in r["diagnostics"].items():
            md.append(f"| {d} | {arm} | " + " | ".join(num(row[k]) for k in DIAGNOSTICS) + " |")
    for d, r in result["draws"].items():
        if r["over_steps"]:
            md += ["", f"Primary contrast by evaluation step, {d} (pp): "
                   + ", ".join(f"{s['step']}: {_pp(s)}" for s in r["over_steps"])]
        if r["missing"]:
            md += ["", f"Missing on {d}: " + ", ".join(r["missing"])]
    return md


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m coop_jax.projects.reward_hacking.attempt3",
        description="Attempt 3's pre-registered analysis over the kept runs of both draws.")
    parser.add_argument("--draw1", default=DRAW_DIRS["draw 1"], help="draw 1's kept runs")
    parser.add_argument("--draw2", default=DRAW_DIRS["draw 2"], help="draw 2's kept runs")
    parser.add_argument("--attempt1", default=ATTEMPT_1_DIR, help="attempt 1's kept runs")
    parser.add_argument("--out", required=True, help="folder for analysis.json / analysis.md")
    args = parser.parse_args(argv)
    load = lambda d: load_runs(kept_run_dirs(d)) if os.path.isdir(d) else []
    result = analyse({"draw 1": load(args.draw1), "draw 2": load(args.draw2)},
                     attempt_1=load(args.attempt1))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "analysis.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=float)
    with open(os.path.join(args.out, "analysis.md"), "w") as fh:
        fh.write("\n".join(markdown(result)))
    print("\n".join(markdown(result)))
    return result


if __name__ == "__main__":
    main()
