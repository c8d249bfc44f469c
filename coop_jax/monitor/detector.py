"""The detector: per-step metric dicts in, alarms out. Pure Python (no JAX), deterministic: the
same rows give the same alarms, live or replayed from `metrics.jsonl`.

Per signal (`coop_jax.monitor.signals`):
* a baseline: the mean of the signal's values up to step `warmup_steps` (at least its first two
  values, for a sparse or late signal), and their standard deviation;
* then, for a per-step signal, a one-sided CUSUM of its deviation from the baseline in the bad
  direction (both directions for `response_length`, on the relative change):
  ``S_t = max(0, S_{t-1} + d_t - k)``, alarm when ``S_t >= h``; with `noise_scaled`,
  ``k = max(slack, sigma/2)`` and ``h = max(threshold, 5 sigma)``;
* for the hack probes (scored every few steps, without sampling noise): alarm when the
  false-accept rate is `probe_rise` above its baseline.
Each signal alarms at most once. Why a CUSUM and these numbers: docs/monitor.md.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping

from coop_jax.monitor.settings import MonitorSettings
from coop_jax.monitor.signals import SIGNALS, Signal

MIN_BASELINE = 2  # values a baseline holds at least


@dataclasses.dataclass(frozen=True)
class Alarm:
    """One signal's alarm: the step, the signal's value there, its baseline, and the statistic
    that crossed its threshold (the CUSUM, or the probes' rise)."""
    signal: str
    step: int
    value: float
    baseline: float
    statistic: float
    threshold: float

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def line(self, action: str = "warn") -> str:
        """The log line of the alarm (one line; `action` is what the run does next)."""
        s = SIGNALS[self.signal]
        stat = "rise" if s.statistic == "rise" else "CUSUM"
        return (f"monitor: ALARM at step {self.step}: {self.signal} = {self.value:.4g} "
                f"(baseline {self.baseline:.4g}; {stat} {self.statistic:.3g} >= "
                f"{self.threshold:.3g}): {s.what}; action: {action}")

    def metrics(self) -> dict:
        """The alarm as metrics of its step's metrics.jsonl row."""
        return {f"monitor/alarm/{self.signal}": self.value}


class _Tracker:
    """One signal's baseline and statistic."""

    def __init__(self, signal: Signal, settings: MonitorSettings):
        self.signal, self.settings = signal, settings
        self.base_values: list[float] = []
        self.baseline: float | None = None
        self.k = self.h = 0.0
        self.up = self.down = 0.0
        self.fired = False

    @property
    def statistic(self) -> float:
        return max(self.up, self.down)

    def _close(self) -> None:
        s, sig = self.settings, self.signal
        n = len(self.base_values)
        self.baseline = sum(self.base_values) / n
        var = sum((v - self.baseline) ** 2 for v in self.base_values) / (n - 1) if n > 1 else 0.
        sd = math.sqrt(var)
        if sig.statistic == "rise":
            self.k, self.h = 0.0, s.probe_rise
            return
        scale = abs(self.baseline) if sig.relative else 1.0
        sd = sd / scale if scale > 0 else 0.0
        k = s.length_slack if sig.relative else s.slack
        self.k, self.h = ((max(k, sd / 2), max(s.threshold, 5 * sd)) if s.noise_scaled
                          else (k, s.threshold))

    def update(self, step: int, x: float) -> Alarm | None:
        if self.baseline is None:
            if step <= self.settings.warmup_steps or len(self.base_values) < MIN_BASELINE:
                self.base_values.append(x)
                return None
            self._close()
        sig, base = self.signal, self.baseline
        d = x - base
        if sig.relative:
            d = d / abs(base) if base else 0.0
        if sig.statistic == "rise":
            self.up = max(d, 0.0)
        else:
            if sig.direction >= 0:
                self.up = max(0.0, self.up + d - self.k)
            if sig.direction <= 0:
                self.down = max(0.0, self.down - d - self.k)
        if self.fired or self.statistic < self.h:
            return None
        self.fired = True
        return Alarm(sig.name, step, x, base, self.statistic, self.h)


class Monitor:
    """Feed it each step's metrics (`update`); it returns that step's new alarms."""

    def __init__(self, settings: MonitorSettings | None = None):
        self.settings = settings or MonitorSettings()
        self._trackers = {name: _Tracker(SIGNALS[name], self.settings)
                          for name in self.settings.watched}
        self.alarms: list[Alarm] = []
        self.seen: set[str] = set()  # the metric keys seen so far

    def update(self, row: Mapping) -> list[Alarm]:
        """The alarms raised by one step's metrics (`row["step"]` and the logged keys)."""
        step = int(row["step"])
        self.seen.update(row)
        new = []
        for tracker in self._trackers.values():
            x = tracker.signal.value(row)
            if x is not None:
                alarm = tracker.update(step, x)
                if alarm is not None:
                    new.append(alarm)
        self.alarms += new
        return new

    def statistics(self) -> dict:
        """{"monitor/<signal>": its current statistic} of the signals past their warm-up."""
        return {f"monitor/{name}": t.statistic for name, t in self._trackers.items()
                if t.baseline is not None}

    def baselines(self) -> dict:
        return {name: t.baseline for name, t in self._trackers.items()
                if t.baseline is not None}


def replay(rows: Iterable[Mapping], settings: MonitorSettings | None = None) -> list[Alarm]:
    """Every alarm of a run's metric rows, in step order (rows without a numeric step are
    skipped)."""
    monitor = Monitor(settings)
    for row in in_step_order(rows):
        monitor.update(row)
    return monitor.alarms


def in_step_order(rows: Iterable[Mapping]) -> list[Mapping]:
    """The rows with a numeric step, sorted by it."""
    return sorted((r for r in rows if isinstance(r.get("step"), (int, float))
                   and not isinstance(r.get("step"), bool)), key=lambda r: r["step"])


def first_alarm(alarms: Iterable[Alarm]) -> Alarm | None:
    """The earliest alarm (on one step, the first in monitor.signals' order)."""
    alarms = list(alarms)
    return min(alarms, key=lambda a: a.step) if alarms else None
