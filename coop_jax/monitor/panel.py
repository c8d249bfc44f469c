"""The monitor's plot panel (`coop-report`'s curves.png): per group of runs, the proxy (RM) reward
against the rule accuracy of the same rollouts, the RM's on-policy agreement with the rule (each
a 10-step trailing mean of the runs' mean), its false-accepts on the hack probes, and a red mark
at each run's first alarm (replayed from its metrics). How to read it: docs/monitor.md."""
from __future__ import annotations

import math
from typing import Any, Sequence

from coop_jax.monitor.detector import first_alarm, replay
from coop_jax.monitor.settings import MonitorSettings
from coop_jax.stats import finite_number, values_by_step

# (metrics.jsonl key, legend label, line style, smoothed), all rates in [0, 1]; the per-step
# ones as trailing means over SMOOTHING logged steps, the probes (scored every few steps) as they are
PANEL_CURVES = (
    ("proxy_reward_mean", "proxy (RM) reward", "-", True),
    ("rule_accuracy", "rule accuracy", "--", True),
    ("rm_rule_agreement", "RM-rule agreement", ":", True),
    ("probe/rm_false_accept", "probe false-accepts", "-.", False),
)
SMOOTHING = 10
# a run has a monitor panel when it logs one of these (an RM scored its rollouts or probes)
PANEL_KEYS = ("proxy_reward_mean", "rm_rule_agreement", "probe/rm_false_accept")


def has_panel(rows: Sequence[dict]) -> bool:
    """Whether a run's rows have what the panel shows."""
    return any(math.isfinite(finite_number(r.get(k))) for r in rows for k in PANEL_KEYS)


def mean_curve(runs: Sequence[Sequence[dict]], key: str) -> tuple[list[float], list[float]]:
    """(steps, mean over the runs that logged each step) of one metric."""
    by_step = values_by_step(runs, key)
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def trailing_mean(values: Sequence[float], window: int = SMOOTHING) -> list[float]:
    """Each value's mean with the up to `window - 1` values before it."""
    return [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1))
            for i in range(len(values))]


def draw_panel(ax: Any, runs: Sequence[Sequence[dict]], color: str, title: str,
               settings: MonitorSettings | None = None) -> list:
    """Draw the panel of one group's runs on `ax`; the runs' first alarms (None: none)."""
    for key, label, style, smooth in PANEL_CURVES:
        steps, mean = mean_curve(runs, key)
        if steps:
            ax.plot(steps, trailing_mean(mean) if smooth else mean, style, color=color, lw=1.3,
                    label=label)
    alarms = [first_alarm(replay(rows, settings)) for rows in runs]
    for alarm in alarms:
        if alarm is not None:
            ax.axvline(alarm.step, color="red", lw=1.0, alpha=0.7)
            ax.text(alarm.step, 0.98, f" {alarm.signal}", rotation=90, fontsize=6, color="red",
                    va="top", ha="right", transform=ax.get_xaxis_transform())
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("rate", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower left")
    return alarms
