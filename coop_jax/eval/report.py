"""`coop-report`: aggregate training runs into a markdown table and training curves.

    coop-report RUN_DIR... [--out=DIR] [--group_by=method]

Each RUN_DIR holds `summary.json` (at least `initial_accuracy`, `final_accuracy`, `steps`,
`wall_seconds`; optionally `method` / `reward_type`, `seed`) and `metrics.jsonl` (one object per
logged step with `step` and any of the metrics in CURVES). Runs are grouped (by default on
`method`, falling back to `reward_type`, then the folder name); each group reports the mean over
its runs with a Student-t 95% interval over seeds. Writes OUT/report.md, OUT/report.json and
OUT/curves.png.
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import numpy as np
from absl import flags
from absl.app import UsageError

from coop_jax.stats import interval_to_json, mean_ci, values_by_step
from coop_jax import jsonl
from coop_jax.jsonl import read_json, read_jsonl
from coop_jax.monitor import MonitorSettings, first_alarm, replay
from coop_jax.monitor import panel as monitor_panel

logger = logging.getLogger(__name__)

# (metrics.jsonl key, subplot title), in plotting order.
CURVES = (
    ("reward_mean", "reward (mean)"),
    ("proxy_reward_mean", "proxy (RM) reward"),
    ("rule_accuracy", "rule accuracy (rollouts)"),
    ("eval/headline_accuracy", "held-out headline accuracy"),  # eval.headline: avg@k or greedy
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("rm_rule_agreement", "RM-rule agreement"),
    ("kl", "KL to reference"),
    ("response_length", "response length (tokens)"),
)
REQUIRED_SUMMARY_KEYS = ("initial_accuracy", "final_accuracy")


def load_run(run_dir: str) -> dict[str, Any]:
    """``{"name", "dir", "summary", "metrics"}`` of one run folder (metrics sorted by step)."""
    path = os.path.join(run_dir, "summary.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run_dir}: no summary.json")
    summary = read_json(path)
    for key in REQUIRED_SUMMARY_KEYS:
        if not isinstance(summary.get(key), (int, float)) or isinstance(summary.get(key), bool):
            raise ValueError(f"{path}: '{key}' must be a number, got {summary.get(key)!r}")
    metrics = []
    mpath = os.path.join(run_dir, "metrics.jsonl")
    if jsonl.exists(mpath):  # or the kept metrics.jsonl.xz
        metrics = read_jsonl(mpath)
        for row in metrics:
            if not isinstance(row.get("step"), (int, float)):
                raise ValueError(f"{mpath}: every line needs a numeric 'step', got {row!r:.80}")
    else:
        logger.warning("%s: no metrics.jsonl; the run has no curves", run_dir)
    metrics.sort(key=lambda r: r["step"])
    name = os.path.basename(os.path.normpath(run_dir))
    return {"name": name, "dir": os.path.abspath(run_dir), "summary": summary, "metrics": metrics}


def _lookup(d: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def group_name(run: dict, group_by: str = "method") -> str:
    """``summary[group_by]`` (a dotted path is allowed); for "method" falls back to
    ``reward_type``; else the run's folder name."""
    value = _lookup(run["summary"], group_by)
    if value is None and group_by == "method":
        value = run["summary"].get("reward_type")
    return str(value) if value is not None else run["name"]


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def aggregate(runs: list[dict], group_by: str = "method") -> dict[str, dict]:
    """Per group: runs, seeds, and mean / t-interval of final, initial accuracy and gain."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(group_name(run, group_by), []).append(run)
    out = {}
    for name, members in groups.items():
        final = [_number(r["summary"]["final_accuracy"]) for r in members]
        initial = [_number(r["summary"]["initial_accuracy"]) for r in members]
        out[name] = {
            "runs": [r["name"] for r in members],
            "seeds": [r["summary"].get("seed") for r in members],
            "n": len(members),
            "final_accuracy": interval_to_json(mean_ci(final)),
            "initial_accuracy": interval_to_json(mean_ci(initial)),
            "gain": interval_to_json(mean_ci(np.subtract(final, initial))),
            "steps": interval_to_json(mean_ci([_number(r["summary"].get("steps"))
                                               for r in members])),
            "wall_seconds": interval_to_json(mean_ci([_number(r["summary"].get("wall_seconds"))
                                                      for r in members])),
        }
    return out


def _pm(ci: dict, scale: float = 100.0, digits: int = 2) -> str:
    if ci.get("mean") is None:
        return "n/a"
    text = f"{ci['mean'] * scale:.{digits}f}"
    if ci.get("half_width") is not None:
        text += f" ± {ci['half_width'] * scale:.{digits}f}"
    return text


def markdown_table(groups: dict[str, dict], group_by: str = "method") -> str:
    """The report table; accuracies in percent, ± the 95% t half-width over seeds."""
    lines = [f"| {group_by} | runs | final accuracy (%) | initial accuracy (%) | gain (pp) | "
             "steps | wall (s) |", "|---|---|---|---|---|---|---|"]
    for name, g in sorted(groups.items()):
        lines.append(f"| {name} | {g['n']} | {_pm(g['final_accuracy'])} | "
                     f"{_pm(g['initial_accuracy'])} | {_pm(g['gain'])} | "
                     f"{_pm(g['steps'], 1, 0)} | {_pm(g['wall_seconds'], 1, 0)} |")
    return "\n".join(lines)


def _curve(rows_of_runs: list[list[dict]], key: str):
    """Steps, mean, low, high (t interval where >= 2 runs logged the step) of one metric."""
    by_step = values_by_step(rows_of_runs, key)
    steps = sorted(by_step)
    stats = [mean_ci(by_step[s]) for s in steps]
    return (np.array(steps), np.array([s["mean"] for s in stats]),
            np.array([s["ci_low"] for s in stats]), np.array([s["ci_high"] for s in stats]))


def _row_lengths(n: int, max_cols: int = 3) -> list[int]:
    """Panels per row, as even as the rows allow, longer rows first: 4 -> [2, 2], 5 -> [3, 2]."""
    nrows = math.ceil(n / max_cols)
    base, extra = divmod(n, nrows)
    return [base + 1] * extra + [base] * (nrows - extra)


def _panel_axes(fig, n: int) -> list:
    """``n`` axes filling the figure's grid: a shorter row's panels are wider, no cell is empty."""
    rows = _row_lengths(n)
    width = math.lcm(*rows)
    grid = fig.add_gridspec(len(rows), width)
    return [fig.add_subplot(grid[r, j * (width // k):(j + 1) * (width // k)])
            for r, k in enumerate(rows) for j in range(k)]


def curves_figure(metrics_rows_by_run: dict[str, list[dict]],
                  groups: dict[str, str] | None = None,
                  curves: tuple[tuple[str, str], ...] = CURVES,
                  monitor: MonitorSettings | None = None) -> tuple[Any, list[str]]:
    """The matplotlib Figure of :func:`plot_curves` and the metric keys it plots (then
    "monitor/<group>" for each monitor panel); ``(None, [])`` when it has no panel."""
    import matplotlib.lines
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: no global backend state
    from matplotlib.ticker import MaxNLocator

    groups = groups or {name: name for name in metrics_rows_by_run}
    missing = set(metrics_rows_by_run) - set(groups)
    if missing:
        raise ValueError(f"groups has no label for runs {sorted(missing)}")
    present = [(k, t) for k, t in curves
               if any(math.isfinite(_number(r.get(k)))
                      for rows in metrics_rows_by_run.values() for r in rows)]
    members: dict[str, list[list[dict]]] = {}
    for run, rows in metrics_rows_by_run.items():
        members.setdefault(groups[run], []).append(rows)
    watched = [g for g in sorted(members) if monitor is not None
               and any(monitor_panel.has_panel(rows) for rows in members[g])]
    if not present and not watched:
        return None, []
    # one colour per group in every subplot, also where a group logged nothing
    colors = {label: f"C{j % 10}" for j, label in enumerate(sorted(members))}
    rows = _row_lengths(len(present) + len(watched))
    fig = Figure(figsize=(4.5 * rows[0], 3.2 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = _panel_axes(fig, len(present) + len(watched))
    for ax, label in zip(axes[len(present):], watched):
        monitor_panel.draw_panel(ax, members[label], colors[label], f"monitor: {label}",
                                 monitor)
    for i, (ax, (key, title)) in enumerate(zip(axes, present)):
        for label in sorted(members):
            steps, mean, low, high = _curve(members[label], key)
            if not len(steps):
                continue
            ax.plot(steps, mean, label=label, lw=1.5, color=colors[label])
            band = np.isfinite(low)
            if band.any():
                ax.fill_between(steps, np.where(band, low, mean), np.where(band, high, mean),
                                color=colors[label], alpha=0.2, lw=0)
        ax.set_title(key, fontsize=9)  # the metrics.jsonl name
        ax.set_xlabel("step")
        ax.set_ylabel(title, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        if i == 0:
            handles = [matplotlib.lines.Line2D([], [], color=colors[g], label=g) for g in colors]
            ax.legend(handles=handles, fontsize=8)
    return fig, [k for k, _ in present] + [f"monitor/{g}" for g in watched]


def plot_curves(metrics_rows_by_run: dict[str, list[dict]], out_png: str,
                groups: dict[str, str] | None = None,
                curves: tuple[tuple[str, str], ...] = CURVES,
                monitor: MonitorSettings | None = None) -> list[str]:
    """One subplot per (key, title) of `curves` that any run logged (the title labels its y
    axis); one line per group (the mean over its runs, with a shaded 95% band where at least two
    runs logged the step). With `monitor`, also the monitor panel (`coop_jax.monitor.panel`) of
    each group whose runs an RM scored, with the alarms the monitor raises on replaying them.

    ``groups`` maps run name -> group label (default: every run is its own group). Returns the
    metric keys plotted; writes nothing when there are none.
    """
    fig, plotted = curves_figure(metrics_rows_by_run, groups, curves, monitor)
    if fig is None:
        logger.warning("no plottable metrics (%s); %s not written",
                       ", ".join(k for k, _ in curves), out_png)
        return []
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    save_png(fig, out_png)
    return plotted


def save_png(fig, path: str, dpi: int = 110) -> None:
    """`fig` as a 256-colour palette PNG, without dithering: for line plots no visible change,
    and about 2.5 times fewer bytes than matplotlib's RGBA (the results travel with the tree)."""
    import io

    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    image = Image.open(buf).convert("RGB")
    image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True)


def write_report(run_dirs: list[str], out_dir: str, group_by: str = "method") -> dict:
    """Load runs, write OUT/report.md, report.json and curves.png; return the aggregate."""
    if not run_dirs:
        raise ValueError("no run folders given")
    runs = [load_run(d) for d in run_dirs]
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):  # folder names collide: key runs by full path instead
        for r in runs:
            r["name"] = r["dir"]
    groups = aggregate(runs, group_by)
    os.makedirs(out_dir, exist_ok=True)
    plotted = plot_curves({r["name"]: r["metrics"] for r in runs},
                          os.path.join(out_dir, "curves.png"),
                          groups={r["name"]: group_name(r, group_by) for r in runs},
                          monitor=MonitorSettings())
    md = ["# coop_jax run report", "",
          f"{len(runs)} runs grouped by `{group_by}`. Accuracies in percent; ± is the half-width "
          "of a Student-t 95% interval over the runs of a group (none for a single run).", "",
          markdown_table(groups, group_by), ""]
    if plotted:
        md += ["![training curves](curves.png)", "",
               "Curves: mean over each group's runs, shaded 95% t interval where at least two "
               "runs logged the step.", ""]
    md += runs_section(runs, group_by)
    alarms = monitor_alarms(runs)
    if alarms:
        md += ["", "## Monitor", "", "The reward-hacking monitor replayed over each run's "
               "metrics (its default settings; docs/monitor.md): the first alarm.", "",
               "| run | alarm step | signal |", "|---|---|---|"]
        md += [f"| {name} | {a['step'] if a else '–'} | {a['signal'] if a else '–'} |"
               for name, a in alarms.items()]
    result = {"group_by": group_by, "groups": groups, "curves": plotted,
              "runs": [r["dir"] for r in runs], "monitor_alarms": alarms}
    save_report(out_dir, md, result)
    return result


def monitor_alarms(runs: list[dict]) -> dict[str, dict | None]:
    """{run name: its first monitor alarm (`Alarm.to_json`) or None} of the runs an RM scored."""
    out = {}
    for r in runs:
        if monitor_panel.has_panel(r["metrics"]):
            alarm = first_alarm(replay(r["metrics"]))
            out[r["name"]] = alarm and alarm.to_json()
    return out


def runs_section(runs: list[dict], group_by: str, header: str = "group",
                 wall: bool = False) -> list[str]:
    """Markdown lines of the per-run table (``wall``: add the wall-clock seconds column)."""
    extra = " wall (s) |" if wall else ""
    md = ["## Runs", "", f"| run | {header} | seed | initial | final | steps |{extra}",
          "|---" * (7 if wall else 6) + "|"]
    for r in runs:
        s = r["summary"]
        md.append(f"| {r['name']} | {group_name(r, group_by)} | {s.get('seed', '')} | "
                  f"{100 * s['initial_accuracy']:.2f} | {100 * s['final_accuracy']:.2f} | "
                  f"{s.get('steps', '')} |" + (f" {s.get('wall_seconds', 0):.0f} |" if wall else ""))
    return md


def save_report(out_dir: str, md: list[str], result: dict) -> None:
    """Write OUT/report.md from the markdown lines and OUT/report.json from ``result``."""
    with open(os.path.join(out_dir, "report.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    with open(os.path.join(out_dir, "report.json"), "w") as fh:
        json.dump(result, fh, indent=2)


def define_flags(fv: flags.FlagValues, argv: list[str]) -> None:
    del argv
    flags.DEFINE_string("out", None, "output folder (default: the common parent of the runs, or "
                        "the run itself when there is one)", flag_values=fv)
    flags.DEFINE_string("group_by", "method", "summary.json key (dotted path allowed) to group "
                        "runs by", flag_values=fv)


def main(argv: list[str]) -> dict:
    """Parse `argv` (argv[0] is the program name, then the RUN_DIRs), write the report, return
    its result."""
    from coop_jax.console import parse_args

    fv, rest = parse_args(define_flags, argv, __doc__)
    run_dirs = rest[1:]
    if not run_dirs:
        raise UsageError("give at least one RUN_DIR (a folder with summary.json)")
    for d in run_dirs:
        if not os.path.isdir(d):
            raise UsageError(f"RUN_DIR {d!r} is not a folder")
    out = fv.out or (run_dirs[0] if len(run_dirs) == 1 else
                     os.path.commonpath([os.path.abspath(d) for d in run_dirs]))
    try:
        result = write_report(run_dirs, out, fv.group_by)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(str(e)) from e
    for name, g in sorted(result["groups"].items()):
        print(f"{name}: n={g['n']} final accuracy {_pm(g['final_accuracy'])}% "
              f"(gain {_pm(g['gain'])} pp)")
    print(f"wrote {os.path.join(out, 'report.md')}")
    return result


def run() -> None:
    """Console-script entry point."""
    from coop_jax.console import run_console
    run_console(main, "coop-report")


if __name__ == "__main__":
    run()
