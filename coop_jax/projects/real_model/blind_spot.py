"""Cooper against a known blind spot of a real RM (issue 60): the analysis of the pre-registered
rule_strict / static_rm / cooper_strict / sham_cooper comparison on SmolLM2
(docs/results/real_model/blind_spot_plan.md).

    python -m coop_jax.projects.real_model.blind_spot \
        --results=docs/results/real_model/blind_spot

Reads what `lane --study=blind_spot` commits and writes RESULTS/analysis.json and analysis.md
over whichever runs exist: the comparison's accuracies, gains, collapse and contrasts
(`comparison.analyse`), and the blind spot's own measures:
- the marker rate of every run's final greedy answers (the share that write "####");
- the RM's format probes: `format/unmarked_minus_marked` at the start and at the end of each RM
  run, and the step at which it first turns negative;
- the step at which the rollouts' marker rate falls to half of its first 10 steps' mean
  (a 10-step trailing mean);
- the contrasts of the plan on those (paired by seed, a t-interval over seeds).
"""
from __future__ import annotations

import json
import os

import numpy as np

from coop_jax.console import run_console
from coop_jax.jsonl import read_jsonl
from coop_jax.projects.real_model import comparison
from coop_jax.projects.real_model.comparison import _pct
from coop_jax.stats import interval_to_json, mean_ci

ARMS = ("rule_strict", "static_rm", "cooper_strict", "sham_cooper")
CONTRASTS = (("cooper_strict", "static_rm"), ("cooper_strict", "sham_cooper"),
             ("cooper_strict", "rule_strict"), ("static_rm", "rule_strict"))
MARKER = "####"
MARKER_WINDOW = 10
NON_INFERIORITY = 0.10  # the plan's margin for cooper_strict - rule_strict
PROBE_GAP = "format/unmarked_minus_marked"


def greedy_marker_rate(samples: list[dict]) -> float:
    greedy = [s for s in samples if s["mode"] == "greedy"]
    return float(np.mean([MARKER in s["completion"] for s in greedy]))


def marker_fall_step(metrics: list[dict]) -> int | None:
    """The first step whose trailing MARKER_WINDOW-step mean rollout marker rate is below half
    the mean of the first MARKER_WINDOW steps (None: it never is)."""
    series = [(m["step"], m["rollout/marker_rate"]) for m in metrics
              if m.get("rollout/marker_rate") is not None]
    if len(series) < MARKER_WINDOW:
        return None
    start = np.mean([v for _, v in series[:MARKER_WINDOW]])
    for i in range(MARKER_WINDOW, len(series) + 1):
        if np.mean([v for _, v in series[i - MARKER_WINDOW:i]]) < 0.5 * start:
            return series[i - 1][0]
    return None


def probe_gap(metrics: list[dict]) -> dict | None:
    """The RM's unmarked-minus-marked score gap: first, last, and the first step < 0."""
    series = [(m["step"], m[PROBE_GAP]) for m in metrics if m.get(PROBE_GAP) is not None]
    if not series:
        return None
    negative = next((s for s, v in series if v < 0), None)
    return {"first": series[0][1], "last": series[-1][1], "first_negative_step": negative,
            "series": [{"step": s, "gap": v} for s, v in series]}


def blind_spot_measures(run_dir: str, samples: list[dict]) -> dict:
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    run = json.load(open(os.path.join(run_dir, "run.json")))
    return {"final_marker_rate": greedy_marker_rate(samples),
            "marker_fall_step": marker_fall_step(metrics), "probe_gap": probe_gap(metrics),
            "cpu": run.get("cpu")}


def paired_over_seeds(values: dict[str, float | None], a: str, b: str) -> dict:
    """a - b of a per-run value over the seeds where both runs have it."""
    seeds = sorted({name.rsplit("_s", 1)[1] for name in values})
    diffs = {s: values[f"{a}_s{s}"] - values[f"{b}_s{s}"] for s in seeds
             if values.get(f"{a}_s{s}") is not None and values.get(f"{b}_s{s}") is not None}
    return {"per_seed": diffs} | interval_to_json(mean_ci(list(diffs.values())))


def analyse(results: str) -> dict:
    out = comparison.analyse(results, ARMS, CONTRASTS)
    base, samples = comparison.load(results, ARMS)
    measures = {n: blind_spot_measures(os.path.join(results, n), samples[n]) for n in samples}
    marker = {n: m["final_marker_rate"] for n, m in measures.items()}
    probe_last = {n: m["probe_gap"]["last"] for n, m in measures.items() if m["probe_gap"]}
    ni = out["contrasts"]["cooper_strict - rule_strict"]["over_seeds"]
    out |= {
        "start_marker_rate": greedy_marker_rate(base), "blind_spot": measures,
        "marker_contrasts": {f"{a} - {b}": paired_over_seeds(marker, a, b) for a, b in
                             (("cooper_strict", "static_rm"), ("cooper_strict", "sham_cooper"))},
        "probe_contrasts": {f"{a} - {b}": paired_over_seeds(probe_last, a, b) for a, b in
                            (("cooper_strict", "static_rm"), ("cooper_strict", "sham_cooper"))},
        "non_inferiority": {"margin": NON_INFERIORITY, "holds": bool(
            ni and ni.get("ci_low") is not None and ni["ci_low"] > -NON_INFERIORITY)}}
    return out


def _step(x) -> str:
    return "never" if x is None else str(x)


def markdown(out: dict) -> list[str]:
    md = comparison.markdown(out)
    md[0] = "# Cooper against the RM's blind spot on SmolLM2-135M-Instruct (pre-registered)"
    md[2] = md[2].replace("comparison_plan.md", "blind_spot_plan.md")
    md += ["", "## The blind spot: the `####` marker", "",
           f"Start policy: {100 * out['start_marker_rate']:.1f}% of greedy answers write "
           "`####`. The probe gap is the RM's mean score of right answers restated without the "
           "marker (`The answer is: N`, said twice) minus with `#### N` (below 0: the RM prefers "
           "the marker); the marker fall is the first step whose 10-step mean rollout marker "
           "rate is below half its first 10 steps'.", "",
           "| run | final greedy marker rate | probe gap start → end | probe gap < 0 from step | "
           "marker rate falls at step | CPU |", "|---|---|---|---|---|---|"]
    for name, m in out["blind_spot"].items():
        g = m["probe_gap"]
        gap = f"{g['first']:+.2f} → {g['last']:+.2f}" if g else "–"
        md.append(f"| {name} | {100 * m['final_marker_rate']:.1f}% | {gap} | "
                  f"{_step(g and g['first_negative_step']) if g else '–'} | "
                  f"{_step(m['marker_fall_step'])} | {m['cpu'] or '–'} |")
    md += ["", "| contrast (paired by seed) | final greedy marker rate | final probe gap |",
           "|---|---|---|"]
    for name in out["marker_contrasts"]:
        m, p = out["marker_contrasts"][name], out["probe_contrasts"][name]
        gap = (f"{p['mean']:+.2f} [{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
               if p.get("ci_low") is not None else
               f"{p['mean']:+.2f}" if p.get("mean") is not None else "–")
        md.append(f"| {name} | {_pct(m)} | {gap} |")
    ni = out["non_inferiority"]
    md += ["", f"Non-inferiority of cooper_strict to rule_strict (margin "
           f"{100 * ni['margin']:.0f} points, lower end of the seed-level interval): "
           f"{'holds' if ni['holds'] else 'not shown'}."]
    return md


def write(results: str) -> dict:
    out = analyse(results)
    return comparison.write_analysis(results, out, markdown(out))


def main(argv: list[str]) -> None:
    comparison.analysis_main(argv, __doc__, "blind_spot", write)


def run() -> None:
    run_console(main, "coop_jax.projects.real_model.blind_spot")


if __name__ == "__main__":
    run()
