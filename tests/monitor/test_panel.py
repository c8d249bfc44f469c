"""The monitor panel: drawn per group of runs an RM scored, with a mark at each run's first
alarm; coop-report adds it to curves.png and lists the alarms in report.md."""
import json

import pytest

from coop_jax.eval import report
from coop_jax.monitor import MonitorSettings, panel

pytest.importorskip("matplotlib")


def rm_run(break_at=30, steps=60):
    rows = [{"step": 0, "eval/greedy_accuracy": 0.3, "probe/rm_false_accept": 0.1}]
    rows += [{"step": t, "reward_mean": 0.5, "proxy_reward_mean": 0.4 + (0.3 if t >= break_at
                                                                           else 0.0),
              "rule_accuracy": 0.4, "rm_rule_agreement": 0.7 if t >= break_at else 1.0}
             for t in range(1, steps)]
    return rows


RULE_RUN = [{"step": t, "reward_mean": 0.4, "rule_accuracy": 0.4} for t in range(1, 60)]


def test_the_panel_of_a_group():
    from matplotlib.figure import Figure
    ax = Figure().add_subplot()
    alarms = panel.draw_panel(ax, [rm_run(30), rm_run(40)], "C0", "monitor: static_rm")
    assert [(a.signal, a.step) for a in alarms] == [("gap", 31), ("gap", 41)]
    assert [line.get_label() for line in ax.lines[:4]] == [
        "proxy (RM) reward", "rule accuracy", "RM-rule agreement", "probe false-accepts"]
    marks = [line for line in ax.lines[4:]]
    assert [line.get_xdata()[0] for line in marks] == [31, 41]
    assert [t.get_text().strip() for t in ax.texts] == ["gap", "gap"]
    assert panel.trailing_mean([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]
    assert not panel.has_panel(RULE_RUN) and panel.has_panel(rm_run())


def test_curves_get_a_monitor_panel_per_watched_group():
    runs = {"static_rm_s0": rm_run(), "rule_s0": RULE_RUN}
    groups = {"static_rm_s0": "static_rm", "rule_s0": "rule"}
    fig, plotted = report.curves_figure(runs, groups, monitor=MonitorSettings())
    assert plotted[-1] == "monitor/static_rm" and "monitor/rule" not in plotted
    assert fig.axes[-1].get_title() == "monitor: static_rm"
    assert report.curves_figure(runs, groups)[1][-1] == "rm_rule_agreement"  # no monitor: none


def test_coop_report_lists_the_alarms(tmp_path, capsys):
    for name, rows in (("static_rm_s0", rm_run()), ("rule_s0", RULE_RUN)):
        run = tmp_path / name
        run.mkdir()
        (run / "summary.json").write_text(json.dumps(
            {"method": name[:-3], "seed": 0, "initial_accuracy": 0.3, "final_accuracy": 0.4}))
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = report.main(["coop-report", str(tmp_path / "static_rm_s0"),
                          str(tmp_path / "rule_s0"), f"--out={tmp_path / 'out'}"])
    assert result["curves"][-1] == "monitor/static_rm"
    assert {k: v and v["step"] for k, v in result["monitor_alarms"].items()} == {
        "static_rm_s0": 31}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Monitor" in md and "| static_rm_s0 | 31 | gap |" in md
