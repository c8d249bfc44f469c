"""The `monitor` section's settings, declared in the config schema (coop_jax.config.monitor):
`MonitorSettings`, the frozen, checked form the detector reads, `FIELD_DOCS` and
`monitor_section()`, the ConfigDict of its defaults.
Why the defaults are what they are: docs/monitor.md and docs/results/monitor/README.md.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from coop_jax.config.fields import defaults
from coop_jax.config.monitor import (ACTIONS, DEFAULT_SIGNALS, SIGNAL_NAMES, MonitorSettings,
                                     parse_signals)

__all__ = ["ACTIONS", "DEFAULT_SIGNALS", "FIELD_DOCS", "MonitorSettings", "SIGNAL_NAMES",
           "monitor_section", "parse_signals"]

FIELD_DOCS = {f.name: f.metadata["doc"] for f in dataclasses.fields(MonitorSettings)}


def monitor_section() -> ml_collections.ConfigDict:
    """The `monitor` section with its defaults."""
    return ml_collections.ConfigDict(defaults(MonitorSettings))
