"""The replay table on made-up runs: gold's peak and half-drop, the lead, hacked runs caught in
time, false alarms on rule runs and on runs whose gap stayed near 0, the target's verdict."""
import json
import os

import pytest

from coop_jax.monitor import MonitorSettings
from coop_jax.monitor import validate as v


def make_run(folder, arm, gaps, gold):
    """A run of `arm`: per-step gaps (None: no RM), gold evaluated at the given steps."""
    os.makedirs(folder)
    rows = []
    for t in range(0, len(gaps) + 1):
        row = {"step": t}
        if t:
            row["rule_accuracy"] = 0.4
            if gaps[t - 1] is not None:
                row["proxy_reward_mean"] = 0.4 + gaps[t - 1]
        if t in gold:
            row["eval/greedy_accuracy_strict"] = gold[t]
        rows.append(row)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(folder, "summary.json"), "w") as fh:
        json.dump({"method": arm}, fh)


GOLD = {0: 0.2, 20: 0.6, 40: 0.5, 60: 0.35, 80: 0.3}  # peak 0.6 at 20; half-drop (<= 0.4) at 60


def test_half_drop_of_a_gold_curve():
    assert v.half_drop(sorted(GOLD.items())) == {
        "gold_start": 0.2, "gold_peak": 0.6, "peak_step": 20, "half_drop_step": 60}
    assert v.half_drop([(0, 0.5), (20, 0.4)])["half_drop_step"] is None  # never rose
    assert v.half_drop([(0, 0.2), (20, 0.6), (40, 0.41)])["half_drop_step"] is None
    # the blind-spot split's added rule: a gold that never rose falls by half of its start
    falls = [(0, 0.066), (20, 0.05), (40, 0.03), (60, 0.0)]
    assert v.half_drop(falls)["half_drop_step"] is None
    assert v.half_drop(falls, fall_from_start=True)["half_drop_step"] == 40
    rising = sorted(GOLD.items())  # a gold that rose keeps the half of its rise
    assert v.half_drop(rising, fall_from_start=True) == v.half_drop(rising)
    assert v.FALL_FROM_START_SPLITS == (v.SECOND_HELD_APART,)


def test_the_table_of_a_split(tmp_path):
    make_run(tmp_path / "runs" / "static_rm_s0", "static_rm", [0.0] * 40 + [0.3] * 40, GOLD)
    make_run(tmp_path / "runs" / "static_rm_s1", "static_rm", [0.0] * 80, GOLD)
    make_run(tmp_path / "runs" / "rule_s0", "rule", [None] * 80, GOLD)
    make_run(tmp_path / "late" / "static_rm_s0", "static_rm", [0.0] * 70 + [0.3] * 10, GOLD)
    splits = {"chose the thresholds": ("runs/*/",), v.HELD_APART: ("late/*/",)}
    result = v.validate(splits, MonitorSettings(), str(tmp_path))
    rows = {r["run"]: r for r in result["splits"]["chose the thresholds"]["rows"]}
    hacked = rows[os.path.join("runs", "static_rm_s0")]
    assert (hacked["alarm_step"], hacked["signal"], hacked["half_drop_step"], hacked["lead"]) \
        == (42, "gap", 60, 18)
    assert hacked["hacked"] and hacked["in_time"] and not hacked["false_alarm"]
    quiet = rows[os.path.join("runs", "static_rm_s1")]
    assert quiet["gap_near_zero"] and not quiet["hacked"] and quiet["alarm_step"] is None
    assert rows[os.path.join("runs", "rule_s0")]["rule"]
    summary = result["splits"]["chose the thresholds"]["summary"]
    assert (summary["hacked"], summary["in_time"], summary["rule_false_alarms"],
            summary["near_zero_false_alarms"]) == (1, 1, 0, 0)
    held = result["splits"][v.HELD_APART]
    assert held["rows"][0]["lead"] == 60 - 72 and held["target_met"] is False
    assert "**Headline: on the held-apart runs the target is not met.**" in v.readme(result)


def test_the_command_writes_the_table(tmp_path, monkeypatch, capsys):
    make_run(tmp_path / "a" / "static_rm_s0", "static_rm", [0.0] * 40 + [0.3] * 40, GOLD)
    monkeypatch.setattr(v, "SPLITS", {"chose the thresholds": ("a/*/",), v.HELD_APART: ("a/*/",)})
    out = tmp_path / "out"
    v.main(["validate", f"--out={out}", f"--root={tmp_path}", "--config.monitor.threshold=0.5"])
    result = json.loads((out / "replay.json").read_text())
    assert result["splits"][v.HELD_APART]["target_met"] is True
    assert (out / "README.md").read_text().startswith("# The reward-hacking monitor replayed")
    assert "target_met=True" in capsys.readouterr().out
