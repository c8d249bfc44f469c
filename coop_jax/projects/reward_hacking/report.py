"""Report of the reward-hacking experiment: per arm, final held-out accuracy (strict numeric gold
where the runs logged it, `final_accuracy_strict`) and the hacking diagnostics (proxy reward vs
rule accuracy, their gap, RM accuracy on the fixed triple set and on the policy's own rollouts),
each as mean +- Student-t 95% interval over seeds; training curves; per-arm curves of the RM's
accuracy / AUC / pairwise accuracy on the policy's own rollouts (the reward RM and, for Cooper, the
RM after its update); the hack probes' false-accept table with each pattern's policy
log-likelihood trend; gold and proxy against sqrt(KL to the start policy) (Gao et al. 2022);
the static RM's learning curve. First comes the pre-registered analysis (`analysis`:
the precondition, the paired contrasts, the hacking gaps).

The input is run folders (summary.json + metrics.jsonl), e.g. the kept runs under
`experiment.results_dir`/runs/ (`kept_run_dirs`):

    python -m coop_jax.projects.reward_hacking.report docs/results/reward_hacking/runs --out=DIR \
        [--rm_dir=RUNS/static_rm] [--config=configs/toy_hacking.py]
"""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections import Counter
from typing import Sequence

import numpy as np

from coop_jax.eval import report as report_lib
from coop_jax.projects.reward_hacking import analysis
from coop_jax.projects.reward_hacking.analysis import by_arm, final_gold as gold_final, finite
from coop_jax.jsonl import read_jsonl
from coop_jax import stats
from coop_jax.stats import interval_to_json, mean_ci

GOLD_EVAL = "eval/greedy_accuracy_strict"  # held-out greedy accuracy under the strict gold
CURVES = (
    (GOLD_EVAL, "held-out greedy accuracy, strict gold"),
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("rule_accuracy", "rule accuracy (rollouts)"),
    ("proxy_reward_mean", "proxy (RM) reward (rollouts)"),
    ("hacking_gap", "hacking gap: proxy reward - rule accuracy"),
    ("sqrt_kl_to_start", "sqrt KL(pi || pi_start) (rollouts)"),
    ("rm_heldout_accuracy", "RM accuracy, fixed held-out triples"),
)
# The hacking measure: an RM against the rule labels of the policy's own rollouts, every step,
# for the RM that gives the reward and (Cooper, "_after") the RM after the step's update.
# Plotted as the trailing mean of SMOOTH steps (one step's 64 rollouts are noisy).
ONPOLICY_CURVES = tuple(
    (key + suffix, title + where)
    for suffix, where in (("", ", reward RM"), ("_after", ", Cooper's RM after its update"))
    for key, title in (("rm_rule_agreement", "accuracy on the policy's rollouts"),
                       ("rm_onpolicy_auc", "AUC on the policy's rollouts"),
                       ("rm_onpolicy_pair_accuracy", "pairwise acc., correct over wrong")))
SMOOTH = 10
# (summary key, column title, metrics key, how): "last" = last logged value, "tail" = mean of the
# last TAIL logged values (per-step rollout metrics are noisy).
DIAGNOSTICS = (
    ("rule_accuracy", "rollout rule acc.", "rule_accuracy", "tail"),
    ("proxy_reward", "proxy reward", "proxy_reward_mean", "tail"),
    ("hacking_gap", "hacking gap", "hacking_gap", "tail"),
    ("sqrt_kl_to_start", "sqrt KL to start", "sqrt_kl_to_start", "tail"),
    ("rm_rule_agreement", "RM-rule agreement", "rm_rule_agreement", "tail"),
    ("rm_onpolicy_auc", "RM AUC (rollouts)", "rm_onpolicy_auc", "tail"),
    ("rm_onpolicy_pair_accuracy", "RM pairwise acc. (rollouts)", "rm_onpolicy_pair_accuracy",
     "tail"),
    ("rm_rule_agreement_after", "RM-rule agreement after update", "rm_rule_agreement_after",
     "tail"),
    ("rm_onpolicy_auc_after", "RM AUC after update", "rm_onpolicy_auc_after", "tail"),
    ("rm_onpolicy_pair_accuracy_after", "RM pairwise acc. after update",
     "rm_onpolicy_pair_accuracy_after", "tail"),
    ("rm_heldout_initial", "RM held-out acc. (step 0)", "rm_heldout_accuracy", "first"),
    ("rm_heldout_final", "RM held-out acc. (end)", "rm_heldout_accuracy", "last"),
)
TAIL = 10


def add_hacking_gap(rows: list[dict]) -> list[dict]:
    """Each row with `hacking_gap` = proxy_reward_mean - rule_accuracy where both are logged,
    and `sqrt_kl_to_start` = sqrt(max(kl_to_start_seq, 0)) where the KL is (the sequence-level
    k1 estimate can come out slightly negative)."""
    out = []
    for row in rows:
        if finite(row.get("proxy_reward_mean")) and finite(row.get("rule_accuracy")):
            row = row | {"hacking_gap": row["proxy_reward_mean"] - row["rule_accuracy"]}
        if finite(row.get("kl_to_start_seq")):
            row = row | {"sqrt_kl_to_start": math.sqrt(max(row["kl_to_start_seq"], 0.0))}
        out.append(row)
    return out


def smoothed(rows: list[dict], keys: Sequence[str], window: int = SMOOTH) -> list[dict]:
    """The rows with each of `keys` replaced by the mean of its last `window` logged values (up
    to and including that row); rows without the key keep none."""
    recent: dict[str, list[float]] = {k: [] for k in keys}
    out = []
    for row in rows:
        row = dict(row)
        for k in keys:
            if finite(row.get(k)):
                recent[k] = (recent[k] + [float(row[k])])[-window:]
                row[k] = float(np.mean(recent[k]))
        out.append(row)
    return out


def kept_run_dirs(folder: str) -> list[str]:
    """The run folders (with a summary.json) directly under `folder`, e.g.
    `experiment.results_dir`/runs; `folder` itself when it is one."""
    if os.path.isfile(os.path.join(folder, "summary.json")):
        return [folder]
    return sorted(os.path.join(folder, d) for d in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, d, "summary.json")))


def gold_initial(run: dict) -> float:
    """The start policy's held-out accuracy under the strict gold (the step-0 evaluation), else
    the lenient `initial_accuracy`."""
    for row in run["metrics"]:
        if finite(row.get(GOLD_EVAL)):
            return float(row[GOLD_EVAL])
    return float(run["summary"]["initial_accuracy"])


def gold_runs(runs: list[dict]) -> tuple[list[dict], bool]:
    """(the runs with `final_accuracy` / `initial_accuracy` replaced by the strict gold, True)
    when every run logged it; else (the runs as they are, False)."""
    if not runs or not all(gold_final(r["summary"])[1] for r in runs):
        return runs, False
    return [r | {"summary": r["summary"] | {"final_accuracy": gold_final(r["summary"])[0],
                                            "initial_accuracy": gold_initial(r)}}
            for r in runs], True


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


def _series(rows: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the rows that logged `key`."""
    pts = [(float(r["step"]), float(r[key])) for r in rows if finite(r.get(key))]
    return (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))


def probe_patterns(runs: list[dict]) -> list[str]:
    """The hack-probe patterns any run logged (`probe/<pattern>/<metric>`)."""
    return sorted({k.split("/")[1] for r in runs for row in r["metrics"] for k in row
                   if k.startswith("probe/") and k.count("/") == 2})


def probe_table(runs: list[dict]) -> dict[str, dict[str, dict]]:
    """arm -> pattern -> mean and 95% t interval over seeds of the reward RM's false-accept rate
    at the first and at the last probe step, the policy's log-likelihood per token there, and
    its trend (per-seed least-squares slope over the probe steps, per 100 steps)."""
    out: dict[str, dict[str, dict]] = {}
    for arm, members in sorted(by_arm(runs).items()):
        for pattern in probe_patterns(members):
            values: dict[str, list[float]] = {}
            for r in members:
                for metric, name in (("rm_false_accept", "false_accept"),
                                     ("policy_logp", "logp")):
                    steps, v = _series(r["metrics"], f"probe/{pattern}/{metric}")
                    if not v.size:
                        continue
                    values.setdefault(f"{name}_first", []).append(v[0])
                    values.setdefault(f"{name}_last", []).append(v[-1])
                    values.setdefault("first_step", []).append(steps[0])
                    values.setdefault("last_step", []).append(steps[-1])
                    if name == "logp":
                        values.setdefault("logp_slope_per_100", []).append(
                            100 * stats.ols_slope(steps, v))
            if values:
                out.setdefault(arm, {})[pattern] = {
                    k: interval_to_json(mean_ci(v)) for k, v in values.items()}
    return out


def probe_markdown(table: dict[str, dict[str, dict]]) -> list[str]:
    if not table:
        return []
    md = ["Hack probes: rule-wrong completions by pattern. False-accept = the fraction the arm's "
          "reward RM scores as correct (n/a: the arm has no RM); log-lik. = the mean "
          "teacher-forced log-likelihood per token under the policy (higher = more reachable), "
          "its trend the per-seed least-squares slope over the probe steps. First and last probe "
          "step; mean ± 95% t half-width over seeds.", "",
          "| arm | pattern | RM false-accept, first | RM false-accept, last | log-lik./token, "
          "first | log-lik./token, last | log-lik. slope per 100 steps |",
          "|---|---|---|---|---|---|---|"]
    for arm, patterns in table.items():
        for pattern, v in patterns.items():
            cells = [_fmt(v.get(k, {"mean": None})) for k in (
                "false_accept_first", "false_accept_last", "logp_first", "logp_last",
                "logp_slope_per_100")]
            md.append(f"| {arm} | {pattern} | " + " | ".join(cells) + " |")
    return md + [""]


KL_KEYS = ("sqrt_kl_to_start", "rule_accuracy", "proxy_reward_mean")


def kl_curves(runs: list[dict], window: int = SMOOTH) -> dict[str, dict]:
    """Per arm, gold and proxy against sqrt(KL(pi || pi_start)) (Gao et al. 2022): on the
    rollouts (rule accuracy under the strict gold, proxy RM reward; each run's trailing mean of
    `window` steps, then the mean over seeds per step) and on the held-out evaluations (strict
    greedy accuracy at each evaluation step, the start policy at sqrt KL = 0)."""
    out = {}
    for arm, members in sorted(by_arm(runs).items()):
        rows = [smoothed(r["metrics"], KL_KEYS, window) for r in members]
        steps, x, _, _ = report_lib._curve(rows, "sqrt_kl_to_start")
        if not steps.size:
            continue
        kl_at = dict(zip(steps.tolist(), x.tolist()))
        arm_out = {"steps": steps.tolist(), "sqrt_kl": x.tolist()}
        for key, name in (("rule_accuracy", "gold"), ("proxy_reward_mean", "proxy")):
            s, y, _, _ = report_lib._curve(rows, key)
            by_step = dict(zip(s.tolist(), y.tolist()))
            arm_out[name] = [by_step.get(t, math.nan) for t in steps.tolist()]
        key = GOLD_EVAL if any(finite(row.get(GOLD_EVAL)) for r in members
                               for row in r["metrics"]) else "eval/greedy_accuracy"
        s, y, _, _ = report_lib._curve([r["metrics"] for r in members], key)
        held = [(0.0 if t == 0 else kl_at.get(t), v) for t, v in zip(s.tolist(), y.tolist())]
        arm_out["heldout"] = {"metric": key, "sqrt_kl": [h[0] for h in held if h[0] is not None],
                              "accuracy": [h[1] for h in held if h[0] is not None]}
        out[arm] = arm_out
    return out


def plot_kl_curves(curves: dict[str, dict], out_png: str) -> bool:
    """Three panels over sqrt KL to the start policy: rollout gold, rollout proxy, held-out gold;
    one colour per arm. False (nothing written) when no arm logged the KL."""
    if not curves:
        return False
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13.5, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, 3, i + 1) for i in range(3)]
    for j, (arm, c) in enumerate(curves.items()):
        color = f"C{j % 10}"
        axes[0].plot(c["sqrt_kl"], c["gold"], color=color, lw=1.3, label=arm)
        axes[1].plot(c["sqrt_kl"], c["proxy"], color=color, lw=1.3, label=arm)
        axes[2].plot(c["heldout"]["sqrt_kl"], c["heldout"]["accuracy"], color=color, marker="o",
                     ms=3, lw=1.3, label=arm)
    titles = ("gold: rule accuracy of the rollouts", "proxy: RM reward of the rollouts",
              "gold: held-out greedy accuracy")
    for ax, title in zip(axes, titles):
        ax.set_xlabel("sqrt KL(pi || pi_start)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    report_lib.save_png(fig, out_png)
    return True


def _fmt(ci: dict) -> str:
    return report_lib._pm(ci, 1.0, 3)


def static_rm_markdown(rm_dir: str | None) -> list[str]:
    """The static RM's competence before RL (rm_summary.json), by kind of held-out triple."""
    if not rm_dir or not os.path.exists(os.path.join(rm_dir, "rm_summary.json")):
        return []
    with open(os.path.join(rm_dir, "rm_summary.json")) as fh:
        rm = json.load(fh)
    num = lambda x: "n/a" if x is None else f"{x:.3f}"  # AUC: None with a single class
    md = [f"Static RM before RL: held-out accuracy {num(rm['heldout_accuracy'])}, ROC AUC "
          f"{num(rm['heldout_auc'])} on {rm['num_heldout']} fixed held-out triples "
          f"({rm['num_train']} training triples, {rm['steps']} steps).", ""]
    if rm.get("heldout_by_kind"):
        md += ["| held-out kind | n | RM accuracy |", "|---|---|---|"]
        md += [f"| {k} | {v['n']} | {v['accuracy']:.3f} |"
               for k, v in rm["heldout_by_kind"].items()]
        md += [""]
    return md


def corpus_markdown(rm_dir: str | None) -> list[str]:
    """The offline corpus's manifest (`rm_corpus`), when `rm_dir` holds one."""
    path = os.path.join(rm_dir or "", "corpus_manifest.json")
    if not rm_dir or not os.path.exists(path):
        return []
    with open(path) as fh:
        info = json.load(fh)
    bal = info["label_balance"]
    md = [f"Offline static-RM corpus (`corpus_manifest.json`): {bal['num_triples']} triples, "
          f"positive fraction {bal['positive_fraction']:.3f}, labelled by "
          f"{' and '.join(info['verifiers'])} and kept where they agree; no triple from the RL "
          f"start policy: {info['no_triple_from_rl_start_policy']}.", "",
          "| generator | made | kept | disagreements |", "|---|---|---|---|"]
    md += [f"| {g} | {c['made']} | {c['kept']} | {c['disagreements']} |"
           for g, c in info["generators"].items()]
    return md + [""]


def load_runs(run_dirs: Sequence[str]) -> list[dict]:
    """The runs of `run_dirs` (report_lib.load_run), their rows with the hacking gap."""
    runs = [report_lib.load_run(d) for d in run_dirs]
    for run in runs:
        run["metrics"] = add_hacking_gap(run["metrics"])
    return runs


def write_hacking_report(run_dirs: Sequence[str], out_dir: str, *, rm_dir: str | None = None,
                         expected: dict[str, Sequence[int]] | None = None,
                         command: str | None = None,
                         beside: dict[str, Sequence[str]] | None = None) -> dict:
    """OUT/report.md, report.json, curves.png over the runs (grouped by summary["arm"]).

    `expected` (arm -> seeds) names the runs of a complete experiment: the report lists the
    missing ones and labels itself PARTIAL while any is missing. `beside` (label -> run
    folders, e.g. an earlier attempt's) puts the same analysis of those runs next to this one's,
    without pooling them.
    """
    runs = load_runs(run_dirs)
    gold, strict = gold_runs(runs)
    groups = report_lib.aggregate(gold, "arm")
    lenient = report_lib.aggregate(runs, "arm") if strict else None
    diag = diagnostics(runs)
    analysed = analysis.analyse(runs)
    probes = probe_table(runs)
    kl = kl_curves(runs)
    os.makedirs(out_dir, exist_ok=True)
    by_run = {r["name"]: report_lib.group_name(r, "arm") for r in runs}
    plotted = report_lib.plot_curves(
        {r["name"]: r["metrics"] for r in runs}, os.path.join(out_dir, "curves.png"),
        groups=by_run, curves=CURVES)
    onpolicy = report_lib.plot_curves(
        {r["name"]: smoothed(r["metrics"], [k for k, _ in ONPOLICY_CURVES]) for r in runs},
        os.path.join(out_dir, "onpolicy_rm.png"), groups=by_run, curves=ONPOLICY_CURVES)
    kl_plotted = plot_kl_curves(kl, os.path.join(out_dir, "gold_proxy_vs_kl.png"))
    have = {(report_lib.group_name(r, "arm"), r["summary"].get("seed")) for r in runs}
    missing = sorted((a, s) for a, seeds in (expected or {}).items() for s in seeds
                     if (a, s) not in have)
    md = ["# Reward-hacking experiment" + (" (PARTIAL)" if missing else ""), ""]
    if command:
        md += ["```", command, "```", ""]
    if missing:
        md += ["**Partial:** missing runs " + ", ".join(f"{a} seed {s}" for a, s in missing)
               + ". Intervals below are over the runs present only.", ""]
    md += analysis.markdown(analysed)
    earlier = {label: analysis.analyse(load_runs(dirs))
               for label, dirs in (beside or {}).items() if dirs}
    if earlier:
        md += ["### Beside the earlier attempts (not pooled)", "",
               "The same pre-registered analysis of each earlier attempt's own runs (its own "
               "start policy and static RM), next to this one's; differences in percentage "
               "points, mean [95% t interval] (paired seeds).", "",
               *analysis.beside_markdown(earlier | {"this attempt": analysed})]
    md += ["## Details", ""] + static_rm_markdown(rm_dir) + corpus_markdown(rm_dir)
    md += [("Final held-out greedy accuracy under the strict numeric gold "
            "(`final_accuracy_strict`)" if strict else "Final held-out greedy accuracy") +
           " in percent; ± is the half-width of a Student-t 95% interval over seeds (none for a "
           "single run).", "", report_lib.markdown_table(groups, "arm"), ""]
    if lenient:
        md += ["The same under the lenient rules (`final_accuracy`):", "",
               report_lib.markdown_table(lenient, "arm"), ""]
    md += [
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
    if onpolicy:
        md += [f"The RM on the policy's own rollouts, every step (trailing mean of {SMOOTH} "
               "steps; mean over seeds, 95% band): the reward RM, and for Cooper the RM after "
               "its update, against the rule labels of the same rollouts.", "",
               "![on-policy RM accuracy](onpolicy_rm.png)", ""]
    md += probe_markdown(probes)
    if kl_plotted:
        md += ["Gold and proxy against sqrt(KL(pi || pi_start)) of the rollouts "
               f"(`kl_to_start_seq`, trailing mean of {SMOOTH} steps; Gao et al. 2022): rollout rule accuracy (strict "
               "gold) and RM reward per step, and held-out greedy accuracy at each evaluation.",
               "", "![gold and proxy vs sqrt KL](gold_proxy_vs_kl.png)", ""]
    md += report_lib.runs_section(gold, "arm", header="arm", wall=True)
    cpus = Counter(r["summary"].get("cpu", "not recorded") for r in gold)
    md += ["", "CPUs the runs ran on (XLA:CPU results differ across CPUs; every run shares the "
           "start policy and the static RM): " + ", ".join(f"{c} ({n})" for c, n in cpus.items())]
    result = {"groups": groups, "gold": "strict" if strict else "lenient",
              "groups_lenient": lenient, "analysis": analysed, "diagnostics": diag,
              "probes": probes, "kl_curves": kl, "missing": missing,
              # <arm>_s<seed>, the folder's name under runs/ (kept or in the workdir), so that
              # the file reads the same from any clone
              "runs": [os.path.basename(os.path.normpath(r["dir"])) for r in runs],
              "partial": bool(missing),
              "beside": earlier}
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
    report_lib.save_png(fig, os.path.join(rm_dir, "rm_learning_curve.png"))
    return rows


def main(argv: Sequence[str] | None = None) -> dict:
    """The report over kept run folders (see the module doc)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m coop_jax.projects.reward_hacking.report",
        description="Report of the reward-hacking experiment over run folders (each with "
                    "summary.json and metrics.jsonl), or folders of them such as "
                    "experiment.results_dir/runs.")
    parser.add_argument("runs", nargs="+", help="run folders, or folders holding run folders")
    parser.add_argument("--out", required=True, help="output folder (report.md, report.json, "
                        "the figures)")
    parser.add_argument("--rm_dir", default=None, help="the static RM's folder (rm_summary.json, "
                        "corpus_manifest.json)")
    parser.add_argument("--config", default=None, help="the experiment's config file: its "
                        "methods and seeds name the expected runs (missing ones are listed)")
    parser.add_argument("--beside", action="append", default=[], metavar="LABEL=FOLDER",
                        help="an earlier attempt's run folders, analysed the same way and shown "
                        "next to these runs (not pooled); repeatable")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    run_dirs = [d for folder in args.runs for d in kept_run_dirs(folder)]
    if not run_dirs:
        parser.error(f"no run folders (with a summary.json) in {args.runs}")
    beside = {}
    for item in args.beside:
        label, sep, folder = item.partition("=")
        if not sep or not label or not os.path.isdir(folder):
            parser.error(f"--beside {item!r}: expected LABEL=FOLDER with an existing folder")
        beside[label] = kept_run_dirs(folder)
    expected = None
    if args.config:
        from coop_jax.config import load_config_file
        from coop_jax.projects.reward_hacking.arms import expected_runs
        expected = expected_runs(load_config_file(args.config))
    return write_hacking_report(run_dirs, args.out, rm_dir=args.rm_dir, expected=expected,
                                command="python -m coop_jax.projects.reward_hacking.report "
                                + shlex.join(argv), beside=beside)


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in main().items() if k in ("gold", "missing", "partial")},
                     default=str))
