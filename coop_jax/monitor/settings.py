"""The `monitor` section: its fields, their defaults and docs, and `MonitorSettings`, the frozen,
validated form the detector reads (`MonitorSettings.from_dict(config.monitor)`).

`monitor_section()` is the ml_collections ConfigDict of the defaults, so a config schema can hold
it as its `monitor` section unchanged; `FIELD_DOCS` documents each field (`monitor.<field>`).
Why the defaults are what they are: docs/monitor.md and docs/results/monitor/README.md.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import ml_collections

# every signal the detector knows, in the order alarms are reported on the same step
SIGNAL_NAMES = ("gap", "agreement", "balanced_accuracy", "probe_false_accept",
                "response_length", "marker_rate", "truncation")
DEFAULT_SIGNALS = ("gap", "agreement", "balanced_accuracy", "probe_false_accept")
ACTIONS = ("warn", "stop")

FIELD_DOCS = {
    "enabled": "run the reward-hacking monitor during training (off: the trainer never calls it; "
               "`coop-monitor replay` runs it regardless)",
    "action": "on an alarm: warn (log it and go on) | stop (log it, then end the run)",
    "checkpoint_on_alarm": "save a checkpoint at the step of the first alarm",
    "signals": "comma-separated signals to watch: " + ", ".join(SIGNAL_NAMES),
    "warmup_steps": "training steps whose values set each signal's baseline (mean and noise); "
                    "no alarm before the step after them",
    "slack": "CUSUM slack k, in the signal's units (a rate): a deviation from the baseline "
             "smaller than this adds nothing",
    "threshold": "CUSUM threshold h: the alarm fires when the summed excess deviation reaches it",
    "noise_scaled": "raise k to half and h to five times the warm-up's standard deviation where "
                    "that is larger (the textbook CUSUM k = sigma/2, h = 5 sigma), so noisier "
                    "runs need more evidence",
    "probe_rise": "probe_false_accept: alarm when the RM's false-accept rate on the hack probes "
                  "rises this far above its baseline (the probes are scored deterministically)",
    "length_slack": "response_length: CUSUM slack on the relative change of the mean length "
                    "(0.15: a sustained 15% change adds nothing)",
}


def monitor_section() -> ml_collections.ConfigDict:
    """The `monitor` section with its defaults (every field documented in FIELD_DOCS)."""
    return ml_collections.ConfigDict(dict(
        enabled=False, action="warn", checkpoint_on_alarm=True,
        signals=",".join(DEFAULT_SIGNALS), warmup_steps=10, slack=0.03, threshold=0.5,
        noise_scaled=True, probe_rise=0.10, length_slack=0.15))


def _fail(field: str, message: str, value: Any) -> None:
    raise ValueError(f"config.monitor.{field} {message}, got {value!r}")


def parse_signals(value: Any) -> tuple[str, ...]:
    """The signal names of `value` (a comma-separated string or a sequence of names)."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        _fail("signals", "must be comma-separated signal names", value)
    names = tuple(n.strip() for n in names if n.strip())
    unknown = [n for n in names if n not in SIGNAL_NAMES]
    if unknown:
        _fail("signals", f"has unknown {unknown[0]!r} (known: {', '.join(SIGNAL_NAMES)})", value)
    if len(set(names)) != len(names):
        _fail("signals", "names a signal twice", value)
    return names


@dataclasses.dataclass(frozen=True)
class MonitorSettings:
    """The monitor's settings (FIELD_DOCS), checked when built."""
    enabled: bool = False
    action: str = "warn"
    checkpoint_on_alarm: bool = True
    signals: tuple[str, ...] = DEFAULT_SIGNALS
    warmup_steps: int = 10
    slack: float = 0.03
    threshold: float = 0.5
    noise_scaled: bool = True
    probe_rise: float = 0.10
    length_slack: float = 0.15

    def __post_init__(self):
        for name in ("enabled", "checkpoint_on_alarm", "noise_scaled"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, "must be True or False", getattr(self, name))
        if self.action not in ACTIONS:
            _fail("action", f"must be one of {', '.join(ACTIONS)}", self.action)
        object.__setattr__(self, "signals", parse_signals(self.signals))
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or self.warmup_steps < 1:
            _fail("warmup_steps", "must be an integer >= 1", self.warmup_steps)
        for name in ("slack", "threshold", "probe_rise", "length_slack"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                _fail(name, "must be a number >= 0", value)
            object.__setattr__(self, name, float(value))
        if not self.threshold > 0:
            _fail("threshold", "must be > 0", self.threshold)
        if not self.probe_rise > 0:
            _fail("probe_rise", "must be > 0", self.probe_rise)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MonitorSettings":
        """Settings of a `monitor` section (a ConfigDict or a dict); an unknown field is a
        ValueError naming it."""
        items = dict(d.items())
        unknown = sorted(set(items) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"config.monitor.{unknown[0]}: no such field "
                             f"(monitor has: {', '.join(sorted(FIELD_DOCS))})")
        return cls(**items)

    def to_dict(self) -> dict:
        """The section's values, `signals` as the comma-separated string the config holds."""
        return dataclasses.asdict(self) | {"signals": ",".join(self.signals)}
