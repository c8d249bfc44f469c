"""The monitor of a training run (`coop_jax.monitor.live`): its verdict per logged row (the alarm's
line and event, the checkpoint and the stop), its header, and its state rebuilt on a resume."""
import pytest

from coop_jax.monitor import MonitorSettings, RunTraits
from coop_jax.monitor.live import QUIET, RunMonitor

SETTINGS = dict(enabled=True, signals="gap", warmup_steps=3)


def rows(break_at: int, steps: int = 12) -> list[dict]:
    """Step 0 (no RM metrics, as the initial evaluation), then a flat gap of 0 with noise of
    0.01 that jumps to 0.4 from step `break_at` on."""
    out = [{"step": 0, "eval/greedy_accuracy": 0.3}]
    for step in range(1, steps + 1):
        gap = (0.4 if step >= break_at else 0.0) + (0.01 if step % 2 else -0.01)
        out.append({"step": step, "rule_accuracy": 0.5, "proxy_reward_mean": 0.5 + gap})
    return out


def test_warn_logs_the_line_and_the_event_and_checkpoints_the_first_alarm_only():
    monitor = RunMonitor(MonitorSettings(**SETTINGS, action="warn", checkpoint_on_alarm=True))
    verdicts = {r["step"]: monitor.observe(r) for r in rows(break_at=6)}
    assert all(verdicts[s] == QUIET for s in range(4))  # warm-up: steps 0-3, no statistic yet
    assert verdicts[4].metrics == {"monitor/gap": 0.0} and not verdicts[4].alarms
    # the CUSUM past the baseline (0.0033) less k = 0.03: 0.39 at step 6 -> 0.357 (< h = 0.5),
    # then 0.41 at step 7 -> 0.733
    alarm_step = next(s for s, v in verdicts.items() if v.alarms)
    assert alarm_step == 7
    v = verdicts[7]
    assert v.metrics["monitor/alarm/gap"] == pytest.approx(0.41)
    assert v.metrics["monitor/gap"] == pytest.approx(0.35667 + 0.37667, abs=1e-4)
    assert len(v.lines) == 1 and v.lines[0].startswith("monitor: ALARM at step 7: gap = 0.41 ")
    assert v.lines[0].endswith("action: warn") and "\n" not in v.lines[0]
    assert v.checkpoint and not v.stop
    assert not any(verdicts[s].alarms or verdicts[s].checkpoint for s in range(8, 13))
    assert monitor.first_alarm is v.alarms[0] and monitor.first_alarm.signal == "gap"


def test_stop_checkpoints_and_stops_and_without_checkpoint_on_alarm_warn_does_neither():
    stop = RunMonitor(MonitorSettings(**SETTINGS, action="stop", checkpoint_on_alarm=False))
    warn = RunMonitor(MonitorSettings(**SETTINGS, action="warn", checkpoint_on_alarm=False))
    for row in rows(break_at=6)[:8]:
        s, w = stop.observe(row), warn.observe(row)
    assert s.stop and s.checkpoint and s.lines[0].endswith("action: stop")
    assert w.alarms and not w.stop and not w.checkpoint


@pytest.mark.parametrize("interrupted_at", [2, 5, 7, 9])
def test_a_resumed_monitor_alarms_as_an_uninterrupted_one(interrupted_at):
    settings = MonitorSettings(**SETTINGS)
    series = rows(break_at=6)
    whole = RunMonitor(settings)
    live = {r["step"]: whole.observe(r).alarms for r in series}
    resumed = RunMonitor(settings)
    # the kept rows, as the run wrote them (with its monitor metrics), and a row past the
    # checkpoint that the resume drops
    replayed = resumed.replay(series[:interrupted_at + 2][::-1], interrupted_at)
    assert [a.step for a in replayed] == [7] * (interrupted_at >= 7)
    after = {r["step"]: resumed.observe(r).alarms for r in series[interrupted_at + 1:]}
    assert after == {s: a for s, a in live.items() if s > interrupted_at}
    assert [a.step for a in whole.monitor.alarms] == [7]


def test_the_header_says_which_signals_the_run_cannot_compute():
    monitor = RunMonitor(MonitorSettings(enabled=True))
    rule = monitor.header(RunTraits.from_reward_type("rule"))
    assert rule[0] == "monitor: on (action warn); watching no signal"
    assert any(line.startswith("monitor: cannot compute gap: no reward model") for line in rule)
    assert len(rule) == 5  # the 4 default signals all need an RM
    static = monitor.header(RunTraits.from_reward_type("static_rm"))
    assert static[0] == "monitor: on (action warn); watching gap, agreement, balanced_accuracy"
    assert static[1:] == ["monitor: cannot compute probe_false_accept: no hack probes are scored "
                          "(set probes.triples and evals.probes.every)"]
