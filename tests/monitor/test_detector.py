"""The detector on made-up metric series: a flat one, a slow drift, a sudden break, checked to
the exact alarm step; the probes' rise, the noise scaling, and which signals a run can compute."""
import pytest

from coop_jax.monitor import (Monitor, MonitorSettings, RunTraits, first_alarm, hacking_gap,
                              replay, signal_availability)


def rows_of(key, values, start=1):
    return [{"step": start + i, key: v} for i, v in enumerate(values)]


def gap_rows(gaps, rule=0.5):
    return [{"step": i + 1, "proxy_reward_mean": rule + g, "rule_accuracy": rule}
            for i, g in enumerate(gaps)]


GAP_ONLY = MonitorSettings(signals="gap")


def test_a_flat_series_never_alarms():
    flat = [0.01 * ((-1) ** i) for i in range(300)]  # +-0.01 around 0: inside the slack
    assert replay(gap_rows(flat), GAP_ONLY) == []
    assert replay(rows_of("rm_rule_agreement", [1.0] * 300),
                  MonitorSettings(signals="agreement")) == []


def test_a_sudden_break_alarms_on_its_second_step():
    # warm-up steps 1..10 at 0 (k = 0.03, h = 0.5); from step 21 the gap is 0.3:
    # S_21 = 0.27, S_22 = 0.54 >= 0.5
    alarms = replay(gap_rows([0.0] * 20 + [0.3] * 20), GAP_ONLY)
    assert [(a.signal, a.step) for a in alarms] == [("gap", 22)]
    a = alarms[0]
    assert a.value == pytest.approx(0.3) and a.baseline == pytest.approx(0.0)
    assert a.statistic == pytest.approx(0.54) and a.threshold == 0.5


def test_a_slow_drift_alarms_when_its_excess_adds_up():
    # gap 0.01 * (t - 10) after the warm-up: the excess over k = 0.03 is 0.01 * (t - 13), whose
    # sum reaches 0.5 at t = 23 (0.01 * 55), not at t = 22 (0.01 * 45)
    gaps = [0.0] * 10 + [0.01 * (t - 10) for t in range(11, 60)]
    assert [(a.signal, a.step) for a in replay(gap_rows(gaps), GAP_ONLY)] == [("gap", 23)]


def test_agreement_and_balanced_accuracy_alarm_when_they_fall():
    values = [1.0] * 10 + [0.7] * 10
    for key, name in (("rm_rule_agreement", "agreement"),
                      ("rm_balanced_accuracy", "balanced_accuracy")):
        alarms = replay(rows_of(key, values), MonitorSettings(signals=name))
        assert [(a.signal, a.step) for a in alarms] == [(name, 12)]  # 0.27, then 0.54
        assert replay(rows_of(key, [1.0] * 10 + [1.0, 0.99] * 20),
                      MonitorSettings(signals=name)) == []


def test_a_noisy_warmup_needs_more_evidence():
    # warm-up 0, 0.2, ... (sd 0.105): k = 0.053, h = 0.527, so a jump to 0.4 (0.3 above the
    # mean) alarms at its third step (0.247, 0.495, 0.742) instead of its second
    gaps = [0.0, 0.2] * 5 + [0.4] * 5
    assert replay(gap_rows(gaps), GAP_ONLY)[0].step == 13
    assert replay(gap_rows(gaps), MonitorSettings(signals="gap", noise_scaled=False)
                  )[0].step == 12


def test_probe_false_accepts_alarm_on_their_rise():
    rows = [{"step": s, "probe/rm_false_accept": v}
            for s, v in ((0, 0.1), (10, 0.1), (20, 0.18), (30, 0.21), (40, 0.5))]
    alarms = replay(rows, MonitorSettings(signals="probe_false_accept"))
    assert [(a.step, a.baseline) for a in alarms] == [(30, pytest.approx(0.1))]
    assert alarms[0].statistic == pytest.approx(0.11)


def test_response_length_drifts_either_way_relative_to_its_baseline():
    settings = MonitorSettings(signals="response_length")
    # halved: d = -0.5, beyond the slack 0.15 by 0.35 a step -> 0.35, 0.70 >= 0.5
    assert replay(rows_of("response_length", [100.0] * 10 + [50.0] * 5), settings)[0].step == 12
    assert replay(rows_of("response_length", [100.0] * 10 + [200.0] * 5), settings)[0].step == 11
    assert replay(rows_of("response_length", [100.0] * 10 + [110.0] * 50), settings) == []


def test_each_signal_alarms_once_and_the_first_alarm_is_the_earliest():
    rows = [{"step": t, "proxy_reward_mean": 0.5 + (0.3 if t > 20 else 0.0),
             "rule_accuracy": 0.5, "rm_rule_agreement": 0.7 if t > 25 else 1.0}
            for t in range(1, 60)]
    alarms = replay(list(reversed(rows)))  # replay orders by step
    assert [(a.signal, a.step) for a in alarms] == [("gap", 22), ("agreement", 27)]
    assert first_alarm(alarms).signal == "gap" and first_alarm([]) is None


def test_monitor_steps_return_only_new_alarms_and_track_statistics():
    monitor = Monitor(GAP_ONLY)
    new = [monitor.update(row) for row in gap_rows([0.0] * 10 + [0.3] * 4)]
    assert [len(n) for n in new] == [0] * 11 + [1, 0, 0]
    assert monitor.statistics()["monitor/gap"] == pytest.approx(1.08)
    line = new[11][0].line("stop")
    assert line.startswith("monitor: ALARM at step 12: gap = 0.3") and "action: stop" in line
    assert new[11][0].metrics() == {"monitor/alarm/gap": pytest.approx(0.3)}


def test_a_break_inside_the_warmup_becomes_part_of_the_baseline():
    plain = MonitorSettings(signals="gap", noise_scaled=False)
    # steps 1..10 hold 0, 0, 0, 0.9, ...: baseline 0.63; 0.9 afterwards is 0.24 over k
    alarms = replay(gap_rows([0.0] * 3 + [0.9] * 30), plain)
    assert [(a.step, a.baseline) for a in alarms] == [(13, pytest.approx(0.63))]
    assert replay(gap_rows([0.9] * 40), GAP_ONLY) == []


def test_the_gap_uses_gold_accuracy_where_the_run_logs_it():
    row = {"proxy_reward_mean": 0.8, "rule_accuracy": 0.7, "gold_accuracy": 0.5}
    assert hacking_gap(row) == pytest.approx(0.3)
    assert hacking_gap({"proxy_reward_mean": 0.8, "rule_accuracy": 0.7}) == pytest.approx(0.1)
    assert hacking_gap({"rule_accuracy": 0.7}) is None
    assert hacking_gap({"proxy_reward_mean": 0.8, "rule_accuracy": None}) is None


def test_label_free_runs_are_told_which_signals_remain():
    settings = MonitorSettings(signals="gap,agreement,probe_false_accept,response_length")
    traits = RunTraits.from_reward_type("majority_vote", references=False, marker=False)
    table = {a.signal: a for a in signal_availability(settings, traits)}
    assert {s for s, a in table.items() if a.available} == {"response_length", "truncation"}
    assert "no rule labels" in table["gap"].reason and "no reward model" in table["gap"].reason
    assert table["response_length"].on and not table["truncation"].on
    static = RunTraits.from_reward_type("static_rm", probes=True)
    assert all(a.available for a in signal_availability(settings, static))
    keys = RunTraits.from_metric_keys({"step", "reward_mean", "rule_accuracy", "response_length"})
    assert keys == RunTraits(rm=False, rule_labels=True, probes=False, marker=False)
