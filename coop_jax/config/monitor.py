"""The `monitor` and `wandb` sections: the reward-hacking monitor's settings (coop_jax.monitor,
docs/monitor.md; why the defaults are what they are: docs/results/monitor/README.md) and
Weights & Biases logging (metrics_writer.MetricWriter)."""
from __future__ import annotations

import dataclasses
from typing import Any

from coop_jax.config.fields import Section, field, non_negative, positive

# every signal the detector knows, in the order alarms are reported on the same step
SIGNAL_NAMES = ("gap", "agreement", "balanced_accuracy", "probe_false_accept",
                "response_length", "marker_rate", "truncation")
DEFAULT_SIGNALS = ("gap", "agreement", "balanced_accuracy", "probe_false_accept")
ACTIONS = ("warn", "stop")
WANDB_MODES = ("", "online", "offline", "disabled")


def parse_signals(value: Any) -> tuple[str, ...]:
    """The signal names of `value` (a comma-separated string or a sequence of names);
    ValueError when one is unknown or named twice."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError("not comma-separated signal names")
    names = tuple(n.strip() for n in names if n.strip())
    unknown = [n for n in names if n not in SIGNAL_NAMES]
    if unknown:
        raise ValueError(f"unknown signal {unknown[0]!r}")
    if len(set(names)) != len(names):
        raise ValueError("a signal named twice")
    return names


def _signal_names(value: str) -> str | None:
    try:
        parse_signals(value)
    except ValueError as e:
        return f"comma-separated names of {', '.join(SIGNAL_NAMES)}, each once ({e})"
    return None


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else ">= 1"


@dataclasses.dataclass(frozen=True)
class MonitorSettings(Section):
    """The reward-hacking monitor (coop_jax.monitor): which signals it watches, its CUSUM and
    what an alarm does."""
    action: str = field("warn", "on an alarm: warn (log it and go on) | stop (log it, then end "
                        "the run)", choices=ACTIONS)
    checkpoint_on_alarm: bool = field(True, "save a checkpoint at the step of the first alarm")
    enabled: bool = field(False, "run the reward-hacking monitor during training (off: the "
                          "trainer never calls it; `coop-monitor replay` runs it regardless)")
    length_slack: float = field(0.15, "response_length: CUSUM slack on the relative change of "
                                "the mean length (0.15: a sustained 15% change adds nothing)",
                                check=non_negative)
    noise_scaled: bool = field(True, "raise k to half and h to five times the warm-up's standard "
                               "deviation where that is larger (the textbook CUSUM k = sigma/2, "
                               "h = 5 sigma), so noisier runs need more evidence")
    probe_rise: float = field(0.10, "probe_false_accept: alarm when the RM's false-accept rate "
                              "on the hack probes rises this far above its baseline (the probes "
                              "are scored deterministically)", check=positive)
    signals: str = field(",".join(DEFAULT_SIGNALS), "comma-separated signals to watch: "
                         + ", ".join(SIGNAL_NAMES), check=_signal_names)
    slack: float = field(0.03, "CUSUM slack k, in the signal's units (a rate): a deviation from "
                         "the baseline smaller than this adds nothing", check=non_negative)
    threshold: float = field(0.5, "CUSUM threshold h: the alarm fires when the summed excess "
                             "deviation reaches it", check=positive)
    warmup_steps: int = field(10, "training steps whose values set each signal's baseline (mean "
                              "and noise); no alarm before the step after them",
                              check=_at_least_one)

    @property
    def watched(self) -> tuple[str, ...]:
        """The signals' names, in `signals`' order."""
        return parse_signals(self.signals)

    @classmethod
    def from_dict(cls, values) -> "MonitorSettings":
        """The checked settings of a `monitor` section (a ConfigDict or a dict)."""
        return cls.build(values, "monitor")


@dataclasses.dataclass(frozen=True)
class WandB(Section):
    """Weights & Biases logging of coop-train's metrics: off while `project` is empty."""
    dir: str = field("", "folder of the W&B run files (\"\": the workdir)")
    mode: str = field("", "W&B mode: \"\" (W&B's own, WANDB_MODE) | online | offline (no "
                      "network or account; `wandb sync` uploads later) | disabled",
                      choices=WANDB_MODES)
    project: str = field("", "Weights & Biases project to log every step's metrics to (\"\": no "
                         "W&B); the run is named after the workdir, a resumed run continues it")
