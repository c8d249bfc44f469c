"""Report of the reward-hacking experiment: per arm, final held-out accuracy and the hacking
diagnostics (proxy reward vs rule accuracy, their gap, RM accuracy on the fixed triple set and on
the policy's own rollouts), each as mean +- Student-t 95% interval over seeds; training curves;
the static RM's learning curve.
"""
from __future__ import annotations

import json
import math
import os
from typing import Sequence

import numpy as np

from coop_jax.eval import report as report_lib
from coop_jax.jsonl import read_jsonl
from coop_jax.stats import interval_to_json, mean_ci

CURVES = (
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("rule_accuracy", "rule accuracy (rollouts)"),
    ("proxy_reward_mean", "proxy (RM) reward (rollouts)"),
    ("hacking_gap", "hacking gap: proxy reward - rule accuracy"),
    ("rm_heldout_accuracy", "RM accuracy, fixed held-out triples"),
    ("rm_rule_agreement", "RM-rule agreement (rollouts)"),
    # the hacking measure: the reward RM against the rule labels of the policy's own rollouts
    ("rm_onpolicy_auc", "RM AUC on the policy's rollouts"),
    ("rm_onpolicy_pair_accuracy", "RM pairwise acc., correct over wrong rollouts"),
)
# (summary key, column title, metrics key, how): "last" = last logged value, "tail" = mean of the
# last TAIL logged values (per-step rollout metrics are noisy).
DIAGNOSTICS = (
    ("rule_accuracy", "rollout rule acc.", "rule_accuracy", "tail"),
    ("proxy_reward", "proxy reward", "proxy_reward_mean", "tail"),
    ("hacking_gap", "hacking gap", "hacking_gap", "tail"),
    ("rm_rule_agreement", "RM-rule agreement", "rm_rule_agreement", "tail"),
    ("rm_onpolicy_auc", "RM AUC (rollouts)", "rm_onpolicy_auc", "tail"),
    ("rm_onpolicy_pair_accuracy", "RM pairwise acc. (rollouts)", "rm_onpolicy_pair_accuracy",
     "tail"),
    ("rm_heldout_initial", "RM held-out acc. (step 0)", "rm_heldout_accuracy", "first"),
    ("rm_heldout_final", "RM held-out acc. (end)", "rm_heldout_accuracy", "last"),
)
TAIL = 10


def add_hacking_gap(rows: list[dict]) -> list[dict]:
    """Each row with `hacking_gap` = proxy_reward_mean - rule_accuracy where both are logged."""
    out = []
    for row in rows:
        if isinstance(row.get("proxy_reward_mean"), (int, float)) and isinstance(
                row.get("rule_accuracy"), (int, float)):
            row = row | {"hacking_gap": row["proxy_reward_mean"] - row["rule_accuracy"]}
        out.append(row)
    return out


def _value(rows: list[dict], key: str, how: str) -> float:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))
              and math.isfinite(r[key])]
    if not values:
        return math.nan
    return {"first": values[0], "last": values[-1], "tail": float(np.mean(values[-TAIL:]))}[how]


def diagnostics(runs: list[dict]) -> dict[str, dict]:
    """Per arm: mean and 95% t interval over its runs of every DIAGNOSTICS value."""
    arms: dict[str, list[dict]] = {}
    for run in runs:
        arms.setdefault(report_lib.group_name(run, "arm"), []).append(run)
    out = {}
    for arm, members in arms.items():
        out[arm] = {}
        for name, _, key, how in DIAGNOSTICS:
            values = [_value(r["metrics"], key, how) for r in members]
            values = [v for v in values if math.isfinite(v)]
            out[arm][name] = interval_to_json(mean_ci(values)) if values else {"mean": None}
    return out


def _fmt(ci: dict) -> str:
    return report_lib._pm(ci, 1.0, 3)


def write_hacking_report(run_dirs: Sequence[str], out_dir: str, *, rm_dir: str | None = None,
                         expected: dict[str, Sequence[int]] | None = None,
                         command: str | None = None) -> dict:
    """OUT/report.md, report.json, curves.png over the runs (grouped by summary["arm"]).

    `expected` (arm -> seeds) names the runs of a complete experiment: the report lists the
    missing ones and labels itself PARTIAL while any is missing.
    """
    runs = [report_lib.load_run(d) for d in run_dirs]
    for run in runs:
        run["metrics"] = add_hacking_gap(run["metrics"])
    groups = report_lib.aggregate(runs, "arm")
    diag = diagnostics(runs)
    os.makedirs(out_dir, exist_ok=True)
    plotted = report_lib.plot_curves(
        {r["name"]: r["metrics"] for r in runs}, os.path.join(out_dir, "curves.png"),
        groups={r["name"]: report_lib.group_name(r, "arm") for r in runs}, curves=CURVES)
    have = {(report_lib.group_name(r, "arm"), r["summary"].get("seed")) for r in runs}
    missing = sorted((a, s) for a, seeds in (expected or {}).items() for s in seeds
                     if (a, s) not in have)
    md = ["# Reward-hacking experiment" + (" (PARTIAL)" if missing else ""), ""]
    if command:
        md += ["```", command, "```", ""]
    if missing:
        md += ["**Partial:** missing runs " + ", ".join(f"{a} seed {s}" for a, s in missing)
               + ". Intervals below are over the runs present only.", ""]
    if rm_dir and os.path.exists(os.path.join(rm_dir, "rm_summary.json")):
        with open(os.path.join(rm_dir, "rm_summary.json")) as fh:
            rm = json.load(fh)
        num = lambda x: "n/a" if x is None else f"{x:.3f}"  # AUC: None with a single class
        md += [f"Static RM before RL: held-out accuracy {num(rm['heldout_accuracy'])}, ROC AUC "
               f"{num(rm['heldout_auc'])} on {rm['num_heldout']} fixed held-out triples "
               f"({rm['num_train']} training triples, {rm['steps']} steps).", ""]
        if rm.get("heldout_by_kind"):
            md += ["| held-out kind | n | RM accuracy |", "|---|---|---|"]
            md += [f"| {k} | {v['n']} | {v['accuracy']:.3f} |"
                   for k, v in rm["heldout_by_kind"].items()]
            md += [""]
    md += ["Final held-out greedy accuracy in percent; ± is the half-width of a Student-t 95% "
           "interval over seeds (none for a single run).", "",
           report_lib.markdown_table(groups, "arm"), "",
           f"Hacking diagnostics (rollout metrics: mean of the last {TAIL} steps; the hacking gap "
           "is proxy reward minus rule accuracy of the same rollouts; RM held-out accuracy is on "
           "the fixed triple set, which includes consistent-but-wrong solutions):", "",
           "| arm | " + " | ".join(t for _, t, _, _ in DIAGNOSTICS) + " |",
           "|---" * (len(DIAGNOSTICS) + 1) + "|"]
    for arm in sorted(diag):
        md.append(f"| {arm} | " + " | ".join(_fmt(diag[arm][n]) for n, _, _, _ in DIAGNOSTICS)
                  + " |")
    md += [""]
    if plotted:
        md += ["![training curves](curves.png)", ""]
    md += report_lib.runs_section(runs, "arm", header="arm", wall=True)
    result = {"groups": groups, "diagnostics": diag, "missing": missing,
              "runs": [r["dir"] for r in runs], "partial": bool(missing)}
    report_lib.save_report(out_dir, md, result)
    return result


def rm_learning_curve(rm_dir: str, batch_size: int) -> list[dict]:
    """(examples seen, held-out accuracy, AUC) rows from the RM's rm_metrics.jsonl."""
    rows = read_jsonl(os.path.join(rm_dir, "rm_metrics.jsonl"))
    return [{"step": r["step"], "examples_seen": r["step"] * batch_size,
             "heldout_accuracy": r["heldout/accuracy"], "heldout_auc": r.get("heldout/auc")}
            for r in rows if "heldout/accuracy" in r]


def plot_rm_learning_curve(rm_dir: str, batch_size: int) -> list[dict]:
    """rm_learning_curve.json and .png in `rm_dir`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = rm_learning_curve(rm_dir, batch_size)
    with open(os.path.join(rm_dir, "rm_learning_curve.json"), "w") as fh:
        json.dump(rows, fh, indent=2)
    fig = Figure(figsize=(5, 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = [r["examples_seen"] for r in rows]
    ax.plot(x, [r["heldout_accuracy"] for r in rows], marker="o", label="accuracy")
    ax.plot(x, [r["heldout_auc"] for r in rows], marker="s", label="ROC AUC")
    ax.axhline(0.9, color="grey", ls=":", lw=1)
    ax.set_xlabel("training examples seen")
    ax.set_title("static RM on the fixed held-out triples", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(os.path.join(rm_dir, "rm_learning_curve.png"), dpi=110)
    return rows
