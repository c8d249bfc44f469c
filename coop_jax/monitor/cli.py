"""`coop-monitor`: replay the reward-hacking monitor over runs' logged metrics, or build the
master-key probes of a dataset.

    coop-monitor replay PATH... [--config.monitor.FIELD=VALUE]
    coop-monitor probes --dataset=gsm8k [--data_dir=DIR] [--split=test] [--num_questions=32] \
        [--extraction=strict_numeric] --out=PROBES.jsonl

replay: each PATH is a run folder (with metrics.jsonl, or metrics.jsonl.xz) or a metrics file.
Prints one JSON line per run: `path`, `alarm_step` and `signal` of the first alarm (null where
nothing fired), its `value`, `baseline` and `statistic`, every signal's `alarms`, and the signals
that are on but that the run cannot compute (`unavailable`, with the reason).

probes: writes the master-key probes (`coop_jax.monitor.probes`) of the first N questions of a
split, for `--config.probes.triples=PROBES.jsonl` of a run.
"""
from __future__ import annotations

import collections
import json
import os
from typing import Any

import ml_collections
from absl import flags
from absl.app import UsageError
from ml_collections import config_flags

from coop_jax import console
from coop_jax.jsonl import read_jsonl
from coop_jax.monitor.detector import first_alarm, replay
from coop_jax.monitor.settings import FIELD_DOCS, MonitorSettings, monitor_section
from coop_jax.monitor.signals import SIGNALS, RunTraits, signal_availability

COMMANDS = ("replay", "probes")
METRICS = "metrics.jsonl"


def replay_config() -> ml_collections.ConfigDict:
    """The config `coop-monitor` reads its `--config.monitor.*` overrides into."""
    return ml_collections.ConfigDict({"monitor": monitor_section()})


def define_flags(fv: flags.FlagValues, argv: list[str]) -> None:
    d = dict(flag_values=fv)
    config_flags.DEFINE_config_dict("config", replay_config(), "the monitor's settings",
                                    sys_argv=argv, **d)
    flags.DEFINE_string("dataset", None, "probes: synthetic | gsm8k | math500 | math", **d)
    flags.DEFINE_string("data_dir", None, "probes: folder with <split>.jsonl or "
                        "<dataset>/<split>.jsonl (default: the Hub copy)", **d)
    flags.DEFINE_string("split", "test", "probes: dataset split", **d)
    flags.DEFINE_integer("num_questions", 32, "probes: questions to build probes from", **d)
    flags.DEFINE_string("extraction", None, "probes: the gold verifier that must label each "
                        "probe wrong (default: strict_boxed for \\boxed tasks, else "
                        "strict_numeric)", **d)
    flags.DEFINE_string("out", None, "probes: the JSONL file to write", **d)


def metrics_file(path: str) -> str:
    """The metrics file of `path`, a run folder or the file itself (`read_jsonl` opens
    `X.xz` where `X` is missing)."""
    name = os.path.join(path, METRICS) if os.path.isdir(path) else path
    if os.path.isfile(name) or os.path.isfile(name + ".xz"):
        return name
    if os.path.isdir(path):
        raise UsageError(f"PATH {path!r}: the folder has no {METRICS} (nor {METRICS}.xz)")
    raise UsageError(f"PATH {path!r}: no such file or folder")


def read_rows(path: str) -> list[dict]:
    """The metric rows of a run folder or metrics file (`metrics_file`)."""
    return read_jsonl(metrics_file(path))


def replay_run(path: str, rows: list[dict], settings: MonitorSettings) -> dict[str, Any]:
    """The replay line of one run (module doc)."""
    alarms = replay(rows, settings)
    first = first_alarm(alarms)
    keys = {k for row in rows for k in row}
    unavailable = {a.signal: a.reason for a in signal_availability(
        settings, RunTraits.from_metric_keys(keys)) if a.on and not a.available}
    for name in settings.watched:  # the run has what it needs but never logged the metric
        if name not in unavailable and not any(SIGNALS[name].value(r) is not None for r in rows):
            unavailable[name] = f"the run logged no value of it ({SIGNALS[name].what})"
    line = {"path": path, "alarm_step": first and first.step, "signal": first and first.signal}
    for field in ("value", "baseline", "statistic"):
        line[field] = first and getattr(first, field)
    return line | {"alarms": [a.to_json() for a in alarms], "unavailable": unavailable}


def _replay(paths: list[str], settings: MonitorSettings) -> list[dict]:
    if not paths:
        raise UsageError("replay needs at least one PATH (a run folder or a metrics.jsonl)")
    files = [metrics_file(p) for p in paths]  # every PATH checked before any output
    lines = []
    for path, name in zip(paths, files):
        with console.usage_errors():  # a bad line of the file: one line naming it
            lines.append(replay_run(path, read_jsonl(name), settings))
        print(json.dumps(lines[-1]), flush=True)
    return lines


def _probes(fv: flags.FlagValues) -> list[dict]:
    from coop_jax.data import DATASETS, load_split
    from coop_jax.monitor.probes import master_key_probes, write_probes
    from coop_jax.verify import EXTRACTION_MODES

    if not fv.dataset or fv.dataset not in DATASETS:
        raise UsageError(f"--dataset must be one of {', '.join(DATASETS)}, got {fv.dataset!r}")
    if fv.extraction is not None and fv.extraction not in EXTRACTION_MODES:
        raise UsageError(f"--extraction must be one of {', '.join(EXTRACTION_MODES)}, "
                         f"got {fv.extraction!r}")
    if fv.num_questions < 1:
        raise UsageError(f"--num_questions must be >= 1, got {fv.num_questions}")
    if not fv.out:
        raise UsageError("probes needs --out=PROBES.jsonl")
    console.check_folder("--data_dir", fv.data_dir)
    with console.usage_errors():
        records = load_split(fv.dataset, fv.split, data_dir=fv.data_dir,
                             num_examples=fv.num_questions)
        probes = master_key_probes(records, extraction=fv.extraction)
    write_probes(fv.out, probes)
    counts = collections.Counter(p["pattern"] for p in probes)
    print(f"wrote {len(probes)} probes of {len(records)} questions to {fv.out} "
          f"({', '.join(f'{k} {v}' for k, v in counts.items())})")
    return probes


def main(argv: list[str]) -> list[dict]:
    """Parse `argv` (argv[0] the program, then the command and its PATHs) and run the
    command; the replay lines or the probes written."""
    fields = {f"monitor.{k}": v for k, v in FIELD_DOCS.items()}
    fv, rest = console.parse_args(define_flags, argv, __doc__, fields)
    if len(rest) < 2 or rest[1] not in COMMANDS:
        got = f", got {rest[1]!r}" if len(rest) > 1 else ""
        raise UsageError(f"give a command: {' | '.join(COMMANDS)}{got}")
    if rest[1] == "probes":
        if rest[2:]:
            raise UsageError(f"probes takes no positional arguments, got {rest[2:]}")
        return _probes(fv)
    with console.usage_errors():
        settings = MonitorSettings.from_dict(fv.config.monitor)
    return _replay(rest[2:], settings)


def run() -> None:
    """Console-script entry point."""
    console.run_console(main, "coop-monitor")


if __name__ == "__main__":
    run()
