"""The reward-hacking monitor: per-step metrics in, alarms out (docs/monitor.md).

* `settings`: the `monitor` section (`monitor_section()`) and `MonitorSettings`;
* `signals`: what each signal reads and which a run can compute (`signal_availability`);
* `detector`: `Monitor` (one step at a time) and `replay` (a whole run's rows);
* `probes`: master-key probes for any dataset; `cli`: `coop-monitor replay`;
* `live`: `RunMonitor`, the monitor of a training run (its verdict on each logged row, its
  state rebuilt on a resume);
* `panel`: the plot panel of `coop-report`; `validate`: the replay table over the committed runs.
"""
from coop_jax.monitor.detector import Alarm, Monitor, first_alarm, replay
from coop_jax.monitor.settings import (DEFAULT_SIGNALS, FIELD_DOCS, SIGNAL_NAMES,
                                       MonitorSettings, monitor_section)
from coop_jax.monitor.signals import (SIGNALS, Availability, RunTraits, hacking_gap,
                                      signal_availability)

__all__ = ["Alarm", "Availability", "DEFAULT_SIGNALS", "FIELD_DOCS", "Monitor", "MonitorSettings",
           "RunTraits", "SIGNALS", "SIGNAL_NAMES", "first_alarm", "hacking_gap",
           "monitor_section", "replay", "signal_availability"]
