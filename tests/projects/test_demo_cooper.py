"""The demo-Cooper comparison (issue 64): endpoints and the plan's verdict, derived by hand from
made-up metric series; the command's arms check."""
import json
import os

import pytest

from coop_jax.projects import demo_cooper


def _rows(agreement, gap, evals):
    """80 training steps with constant agreement / gap, then greedy evaluations at `evals`."""
    rows = [{"step": 0, "eval/greedy_accuracy": evals[0]}]
    for step in range(1, 81):
        row = {"step": step, "rm_rule_agreement": agreement(step), "rule_accuracy": 0.5,
               "proxy_reward_mean": 0.5 + gap(step)}
        if step % 20 == 0:
            row["eval/greedy_accuracy"] = evals[step // 20]
        rows.append(row)
    return rows


def test_endpoints_take_the_last_twenty_steps_and_the_first_peak():
    rows = _rows(lambda s: 1.0 if s <= 60 else 0.7, lambda s: 0.0 if s <= 60 else 0.2,
                 [0.1, 0.4, 0.5, 0.5, 0.3])
    e = demo_cooper.endpoints(rows)
    assert (e["start"], e["peak"], e["peak_step"], e["final"]) == (0.1, 0.5, 40, 0.3)
    assert e["tail_agreement"] == pytest.approx(0.7)
    assert e["tail_gap"] == pytest.approx(0.2)
    assert len(e["per_step"]) == 80
    rule = demo_cooper.endpoints([{"step": 0, "eval/greedy_accuracy": 0.1},
                                  {"step": 1, "rule_accuracy": 0.2},
                                  {"step": 80, "eval/greedy_accuracy": 0.6}])
    assert "tail_gap" not in rule and rule["final"] == 0.6


def _kept(tmp_path, arm, seed, rows):
    folder = tmp_path / "runs" / f"{arm}_s{seed}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"seed": seed, "cpu": "test"}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_verdict_needs_every_seed_to_hold(tmp_path):
    drift = _rows(lambda s: 0.95 if s <= 40 else 0.75, lambda s: 0.15 if s > 40 else 0.0,
                  [0.15, 0.45, 0.55, 0.45, 0.40])
    held = _rows(lambda s: 0.97, lambda s: 0.01, [0.15, 0.45, 0.55, 0.55, 0.50])
    for seed in demo_cooper.SEEDS:
        _kept(tmp_path, "cooper", seed, drift)
        _kept(tmp_path, "cooper_hard", seed, held)
    result = demo_cooper.analyse(str(tmp_path))
    v = result["verdict"]
    assert v["holds"] and v["final_difference"] == pytest.approx(0.10)
    c = result["contrasts"]["cooper_hard - cooper: tail_gap"]
    assert c["seeds"] == [0, 1, 2] and c["mean"] == pytest.approx(0.01 - 0.15)
    # one seed whose tail gap is above 0.05: the variant does not hold
    bad = _rows(lambda s: 0.97, lambda s: 0.06, [0.15, 0.45, 0.55, 0.55, 0.50])
    (tmp_path / "runs" / "cooper_hard_s2" / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in bad))
    v = demo_cooper.analyse(str(tmp_path))["verdict"]
    assert not v["holds"] and not v["gap_every_seed"] and v["agreement_every_seed"]
    paths = demo_cooper.write(str(tmp_path))
    text = open(paths[1]).read()
    assert "**Verdict: cooper_hard does not hold**" in text and "| cooper_hard_s2 |" in text
    assert os.path.getsize(paths[2]) > 0


def test_an_incomplete_comparison_has_no_verdict(tmp_path):
    _kept(tmp_path, "cooper", 0, _rows(lambda s: 1.0, lambda s: 0.0, [0.1] * 5))
    assert demo_cooper.analyse(str(tmp_path))["verdict"] == {"complete": False}
