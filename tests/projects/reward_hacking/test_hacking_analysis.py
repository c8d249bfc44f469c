"""The reward-hacking report's reading of the new metrics, on made-up runs: strict gold as the
headline, the on-policy RM curves, the hack-probe table, gold / proxy against sqrt KL, kept run
folders as the input."""
import json
import math
import os

import numpy as np
import pytest

from coop_jax import stats
from coop_jax.eval import report as report_lib
from coop_jax.projects.reward_hacking import report

STEPS = 20


def fake_run(root, arm, seed, *, final_strict=0.5, final=0.6, rm_acc=lambda step: 0.9,
             proxy=0.6, rule=0.5, kl_rate=0.01, probes=True, strict=True):
    """A run folder: summary.json and metrics.jsonl with every metric the report reads."""
    d = os.path.join(root, f"{arm}_s{seed}")
    os.makedirs(d)
    summary = {"arm": arm, "method": arm, "seed": seed, "steps": STEPS, "initial_accuracy": 0.3,
               "final_accuracy": final, "wall_seconds": 5.0}
    if strict:
        summary["final_accuracy_strict"] = final_strict
    with open(os.path.join(d, "summary.json"), "w") as fh:
        json.dump(summary, fh)
    has_rm = arm not in ("rule", "random")
    with open(os.path.join(d, "metrics.jsonl"), "w") as fh:
        for step in range(STEPS + 1):
            row = {"step": step}
            if step % 10 == 0:
                row["eval/greedy_accuracy"] = 0.3 + step / STEPS * (final - 0.3)
                if strict:
                    row["eval/greedy_accuracy_strict"] = 0.25 + step / STEPS * (final_strict - 0.25)
                if probes:
                    for pattern in ("praise", "empty"):
                        row[f"probe/{pattern}/policy_logp"] = -3.0 + 0.01 * step
                        if has_rm:
                            row[f"probe/{pattern}/rm_false_accept"] = 0.1 + 0.02 * step
            if step:
                row |= {"rule_accuracy": rule, "kl_to_start_seq": kl_rate * step,
                        "kl_to_start": kl_rate}
                if has_rm:
                    row |= {"proxy_reward_mean": proxy, "rm_rule_agreement": rm_acc(step),
                            "rm_onpolicy_auc": rm_acc(step), "rm_onpolicy_pair_accuracy": 0.8}
                    if arm.startswith("cooper"):
                        row |= {"rm_rule_agreement_after": 0.95, "rm_onpolicy_auc_after": 0.97,
                                "rm_onpolicy_pair_accuracy_after": 0.9}
            fh.write(json.dumps(row) + "\n")
    return d


def test_ols_slope():
    assert stats.ols_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert stats.ols_slope([0, 1, 2, np.nan], [0, -1, -2, 5]) == pytest.approx(-1.0)
    assert math.isnan(stats.ols_slope([1, 1], [0, 1]))
    assert math.isnan(stats.ols_slope([1], [0]))


def test_derived_metrics_and_smoothing():
    rows = report.add_hacking_gap([
        {"step": 1, "proxy_reward_mean": 0.7, "rule_accuracy": 0.5, "kl_to_start_seq": 4.0},
        {"step": 2, "kl_to_start_seq": -0.01}])
    assert rows[0]["hacking_gap"] == pytest.approx(0.2)
    assert rows[0]["sqrt_kl_to_start"] == pytest.approx(2.0)
    assert rows[1]["sqrt_kl_to_start"] == 0.0 and "hacking_gap" not in rows[1]
    smooth = report.smoothed([{"step": i, "x": float(i)} for i in range(5)] +
                                     [{"step": 5}], ["x"], window=2)
    assert [r.get("x") for r in smooth] == [0.0, 0.5, 1.5, 2.5, 3.5, None]


def test_kept_run_dirs(tmp_path):
    a = fake_run(tmp_path, "rule", 0)
    b = fake_run(tmp_path, "static_rm", 0)
    os.makedirs(tmp_path / "not_a_run")
    assert report.kept_run_dirs(str(tmp_path)) == sorted([a, b])
    assert report.kept_run_dirs(a) == [a]


def test_strict_gold_is_the_headline_when_every_run_has_it(tmp_path):
    dirs = [fake_run(tmp_path, "rule", 0, final_strict=0.4, final=0.7)]
    runs = [report_lib.load_run(d) for d in dirs]
    gold, strict = report.gold_runs(runs)
    assert strict and gold[0]["summary"]["final_accuracy"] == 0.4
    assert gold[0]["summary"]["initial_accuracy"] == pytest.approx(0.25)  # the step-0 eval
    runs.append(report_lib.load_run(fake_run(tmp_path, "static_rm", 0, strict=False)))
    gold, strict = report.gold_runs(runs)
    assert not strict and gold[0]["summary"]["final_accuracy"] == 0.7


def test_probe_table_first_last_and_logp_trend(tmp_path):
    runs = [report_lib.load_run(fake_run(tmp_path, arm, s)) for arm in ("static_rm", "rule")
            for s in (0, 1)]
    assert report.probe_patterns(runs) == ["empty", "praise"]
    table = report.probe_table(runs)
    praise = table["static_rm"]["praise"]
    assert praise["false_accept_first"]["mean"] == pytest.approx(0.1)
    assert praise["false_accept_last"]["mean"] == pytest.approx(0.5)
    assert praise["logp_slope_per_100"]["mean"] == pytest.approx(1.0)
    assert praise["first_step"]["mean"] == 0 and praise["last_step"]["mean"] == STEPS
    assert "false_accept_first" not in table["rule"]["praise"]  # no RM
    assert table["rule"]["praise"]["logp_last"]["mean"] == pytest.approx(-2.8)
    md = "\n".join(report.probe_markdown(table))
    assert "| rule | praise | n/a | n/a | -3.000" in md


def test_gold_and_proxy_against_sqrt_kl(tmp_path):
    runs = [report_lib.load_run(fake_run(tmp_path, "static_rm", s, kl_rate=0.04 * (s + 1)))
            for s in (0, 1)]
    for r in runs:
        r["metrics"] = report.add_hacking_gap(r["metrics"])
    curves = report.kl_curves(runs, window=1)["static_rm"]
    assert curves["steps"][0] == 1 and len(curves["steps"]) == STEPS
    # mean over the two seeds of sqrt(0.04 * step) and sqrt(0.08 * step) at step 4
    expected = (math.sqrt(0.16) + math.sqrt(0.32)) / 2
    assert curves["sqrt_kl"][3] == pytest.approx(expected)
    assert curves["gold"][0] == pytest.approx(0.5) and curves["proxy"][0] == pytest.approx(0.6)
    held = curves["heldout"]
    assert held["metric"] == "eval/greedy_accuracy_strict"
    assert held["sqrt_kl"][0] == 0.0 and held["accuracy"][0] == pytest.approx(0.25)
    assert len(held["sqrt_kl"]) == 3 and held["sqrt_kl"][-1] > held["sqrt_kl"][1] > 0
    out = tmp_path / "kl.png"
    assert report.plot_kl_curves({"static_rm": curves}, str(out))
    assert out.stat().st_size > 0
    assert not report.plot_kl_curves({}, str(tmp_path / "none.png"))


def test_report_over_kept_runs_reads_the_new_metrics(tmp_path):
    root = tmp_path / "results" / "runs"
    for arm in ("rule", "static_rm", "cooper_consistent_wrong"):
        for s in (0, 1):
            fake_run(root, arm, s, final_strict=0.4 + 0.1 * s)
    out = report.main([str(root), "--out", str(tmp_path / "out")])
    assert out["gold"] == "strict" and not out["partial"]
    assert out["groups"]["rule"]["final_accuracy"]["mean"] == pytest.approx(0.45)
    assert out["groups_lenient"]["rule"]["final_accuracy"]["mean"] == pytest.approx(0.6)
    diag = out["diagnostics"]
    assert diag["cooper_consistent_wrong"]["rm_onpolicy_auc_after"]["mean"] == pytest.approx(0.97)
    assert diag["static_rm"]["rm_onpolicy_auc_after"]["mean"] is None
    assert diag["static_rm"]["sqrt_kl_to_start"]["mean"] > 0
    assert set(out["probes"]) == {"rule", "static_rm", "cooper_consistent_wrong"}
    for name in ("curves.png", "onpolicy_rm.png", "gold_proxy_vs_kl.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "strict numeric gold" in md and "onpolicy_rm.png" in md and "| static_rm | praise" in md
    assert "python -m coop_jax.projects.reward_hacking.report" in md
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "out"), "--out", str(tmp_path / "o2")])


# ---------------------------------------------------------------- the pre-registered analysis
from coop_jax.projects.reward_hacking import analysis  # noqa: E402


_load = report.load_runs


def test_paired_contrast_and_tail_mean():
    c = analysis.paired_contrast({0: 0.5, 1: 0.7, 2: 0.4, 3: 0.9},
                                         {0: 0.4, 1: 0.5, 2: 0.5})
    assert c["seeds"] == [0, 1, 2] and c["differences"] == pytest.approx([0.1, 0.2, -0.1])
    assert c["mean"] == pytest.approx(0.2 / 3) and c["n"] == 3
    assert c["ci_low"] < 0 < c["ci_high"]
    one = analysis.paired_contrast({0: 0.5}, {0: 0.1, 1: 0.2})
    assert one["mean"] == pytest.approx(0.4) and one["half_width"] is None
    rows = [{"step": s, "g": float(s)} for s in range(1, 11)] + [{"step": 11}]
    assert analysis.tail_mean(rows, "g", 0.2) == pytest.approx(9.5)  # steps 9, 10
    assert math.isnan(analysis.tail_mean(rows, "missing"))


def test_contrasts_pair_on_shared_seeds_and_report_every_sign(tmp_path):
    dirs = [fake_run(tmp_path, "static_rm", s, final_strict=0.5 + 0.01 * s) for s in range(5)]
    dirs += [fake_run(tmp_path, "cooper_consistent_wrong", s,
                      final_strict=0.6 + 0.01 * s + 0.001 * s * s) for s in range(5)]
    dirs += [fake_run(tmp_path, "rule", s, final_strict=0.45 + 0.011 * s) for s in range(5)]
    dirs += [fake_run(tmp_path, "random", s, final_strict=0.3 + 0.002 * s) for s in range(3)]
    result = analysis.analyse(_load(dirs))
    assert result["gold"] == "strict"
    c = {x["name"]: x for x in result["contrasts"]}
    primary = c["cooper_consistent_wrong - static_rm"]
    assert primary["role"] == "primary" and primary["seeds"] == [0, 1, 2, 3, 4]
    assert primary["mean"] == pytest.approx(0.1 + 0.001 * np.mean(np.arange(5) ** 2))
    assert primary["ci_low"] > 0
    assert c["rule - static_rm"]["mean"] < 0  # reported whatever its sign
    assert c["random - static_rm"]["seeds"] == [0, 1, 2]
    assert c["random - static_rm"]["mean"] == pytest.approx(np.mean(
        [0.3 + 0.002 * s - 0.5 - 0.01 * s for s in range(3)]))
    assert c["cooper_rollout - static_rm"]["ran"] is False
    gaps = result["hacking_gaps"]
    assert set(gaps) == {"static_rm", "cooper_consistent_wrong"}  # rule / random: no RM
    assert gaps["static_rm"]["mean"] == pytest.approx(0.1)  # proxy 0.6 - rule 0.5
    md = "\n".join(analysis.markdown(result))
    assert "| cooper_rollout - static_rm | secondary | — | not run | — |" in md
    assert "| random - static_rm | secondary | 0,1,2 |" in md


def test_precondition_hacked_by_a_falling_rm_accuracy(tmp_path):
    falling = [fake_run(tmp_path, "static_rm", s,
                        rm_acc=lambda t, s=s: 0.95 - (0.01 + 0.001 * s) * t) for s in range(3)]
    pc = analysis.analyse(_load(falling))["precondition"]
    assert pc["occurred"] and pc["rm_accuracy_falls"] and not pc["gap_exceeds_threshold"]
    assert pc["slope_per_100_steps"]["mean"] == pytest.approx(-1.1)
    assert pc["statement"].startswith("The precondition occurred")


def test_precondition_hacked_by_the_gap(tmp_path):
    wide = [fake_run(tmp_path, "static_rm", s, proxy=0.7 + 0.01 * s, rule=0.5) for s in range(3)]
    pc = analysis.analyse(_load(wide))["precondition"]
    assert pc["occurred"] and pc["gap_exceeds_threshold"] and not pc["rm_accuracy_falls"]
    assert pc["final_gap"] == pytest.approx(0.21)


def test_precondition_did_not_occur(tmp_path):
    # noisy but flat RM accuracy: the slopes' interval straddles 0; a gap of 0.05
    flat = [fake_run(tmp_path, "static_rm", s, proxy=0.55,
                     rm_acc=lambda t, s=s: 0.9 + (0.001 if s % 2 else -0.001) * t)
            for s in range(4)]
    result = analysis.analyse(_load(flat))
    pc = result["precondition"]
    assert pc["occurred"] is False and pc["slope"]["ci_low"] < 0 < pc["slope"]["ci_high"]
    assert "the precondition did not occur" in pc["statement"].lower()
    assert "not evidence for or against Cooper" in pc["statement"]
    assert analysis.precondition({})["occurred"] is None
    out = report.write_hacking_report(flat, str(tmp_path / "out"))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "The precondition did not occur" in md and "## Pre-registered analysis" in md
    assert out["analysis"]["precondition"]["occurred"] is False


def test_an_earlier_attempt_is_reported_beside_and_not_pooled(tmp_path):
    """`--beside LABEL=FOLDER`: the same analysis of an earlier attempt's runs in its own column;
    this attempt's contrasts are computed over its own runs only."""
    for s in (0, 1, 2):
        fake_run(tmp_path / "a1", "static_rm", s, final_strict=0.5)
        fake_run(tmp_path / "a1", "cooper_consistent_wrong", s, final_strict=0.4 + 0.01 * s)
    for s in (0, 1):
        fake_run(tmp_path / "a2", "static_rm", s, final_strict=0.3)
        fake_run(tmp_path / "a2", "cooper_consistent_wrong", s, final_strict=0.5 + 0.02 * s)
    out = report.main([str(tmp_path / "a2"), "--out", str(tmp_path / "out"),
                               "--beside", f"attempt 1={tmp_path / 'a1'}"])
    earlier = out["beside"]["attempt 1"]["contrasts"][0]
    now = out["analysis"]["contrasts"][0]
    assert earlier["seeds"] == [0, 1, 2] and earlier["mean"] == pytest.approx(-0.09)
    assert now["seeds"] == [0, 1] and now["mean"] == pytest.approx(0.21)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| | attempt 1 | this attempt |" in md
    row = next(line for line in md.splitlines()
               if line.startswith("| cooper_consistent_wrong - static_rm (pp) |"))
    assert "-9.00 [" in row and "(3 pairs)" in row and "+21.00 [" in row and "(2 pairs)" in row
    assert "| cooper_rollout - static_rm (pp) | not run | not run |" in md
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "a2"), "--out", str(tmp_path / "o2"),
                             "--beside", str(tmp_path / "a1")])  # no LABEL=
