"""The monitor during a run (`coop-train` with `monitor.enabled`): what the training loop asks of
it at each logged step, and its state rebuilt on a resume.

`RunMonitor.observe(row)` takes a step's metrics row (every one the run logs, step 0 included)
and returns a `Verdict`: the step's new alarms, their log lines, the metrics to merge into the
row (`monitor/<signal>`: each signal's statistic past its warm-up; `monitor/alarm/<signal>`: the
signal's value at its alarm, the event), and whether to save a checkpoint and stop. A resumed
run first `replay`s the rows it kept, so it alarms where an uninterrupted run would: a signal
that alarmed before the interruption does not alarm again (a rerun after a `stop` goes on).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

from coop_jax.monitor.detector import Alarm, Monitor, in_step_order
from coop_jax.monitor.settings import MonitorSettings
from coop_jax.monitor.signals import RunTraits, signal_availability


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one step's row asks of the run."""
    alarms: tuple[Alarm, ...]
    lines: tuple[str, ...]   # one log line per alarm (`Alarm.line`)
    metrics: dict            # merged into the step's row
    checkpoint: bool         # save a checkpoint at this step
    stop: bool               # then end the run (monitor.action=stop)


QUIET = Verdict((), (), {}, False, False)  # a step without alarms, or a run without the monitor


class RunMonitor:
    """The monitor of one run (`MonitorSettings`, built once from `config.monitor`)."""

    def __init__(self, settings: MonitorSettings):
        self.settings = settings
        self.monitor = Monitor(settings)

    def header(self, traits: RunTraits) -> list[str]:
        """The run header's lines: the signals watched and the action, and each signal that is on
        but that this run cannot compute, with why."""
        s = self.settings
        availability = [a for a in signal_availability(s, traits) if a.on]
        watched = [a.signal for a in availability if a.available]
        lines = [f"monitor: on (action {s.action}); watching "
                 f"{', '.join(watched) if watched else 'no signal'}"]
        lines += [f"monitor: cannot compute {a.signal}: {a.reason}"
                  for a in availability if not a.available]
        return lines

    @property
    def first_alarm(self) -> Alarm | None:
        """The run's first alarm (what the progress bar shows), None before any."""
        return self.monitor.alarms[0] if self.monitor.alarms else None

    def replay(self, rows: Iterable[Mapping], up_to: int) -> list[Alarm]:
        """Feed the kept rows of the steps up to `up_to` (a resume's step), in step order, as
        the run logged them; their alarms (already logged then: not logged again)."""
        alarms = []
        for row in in_step_order(rows):
            if row["step"] <= up_to:
                alarms += self.monitor.update(row)
        return alarms

    def observe(self, row: Mapping) -> Verdict:
        """The verdict of one logged step's row (its "step" and metrics)."""
        first = not self.monitor.alarms
        alarms = tuple(self.monitor.update(row))
        metrics = self.monitor.statistics()
        for alarm in alarms:
            metrics |= alarm.metrics()
        stop = bool(alarms) and self.settings.action == "stop"
        checkpoint = stop or (bool(alarms) and first and self.settings.checkpoint_on_alarm)
        return Verdict(alarms, tuple(a.line(self.settings.action) for a in alarms), metrics,
                       checkpoint, stop)
