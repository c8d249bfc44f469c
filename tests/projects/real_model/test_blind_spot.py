"""The blind-spot comparison's analysis (coop_jax.projects.real_model.blind_spot) on made-up
run folders: the final marker rate, the RM's format-probe gap and when it turns negative, when
the rollouts' marker rate falls, the paired contrasts and the non-inferiority margin; and the
first comparison's mended window (a metric logged fewer than 20 times)."""
import json

import pytest

from coop_jax.projects.real_model import blind_spot, comparison

Q = 4


def _jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _samples(strict: list[bool], marked: list[bool]) -> list[dict]:
    rows = [{"id": f"q{i}", "mode": "greedy", "sample_index": 0, "strict_correct": s,
             "correct": True, "completion": "#### 1" if m else "The answer is: 1"}
            for i, (s, m) in enumerate(zip(strict, marked))]
    return rows + [{"id": f"q{i}", "mode": "sampled", "sample_index": 0, "strict_correct": False,
                    "correct": True, "completion": ""} for i in range(Q)]


def _metrics(marker, gap=None, steps=30):
    """marker(step) -> the rollouts' marker rate; gap(step) -> the probe gap (every 10 steps)."""
    rows = []
    for s in range(0, steps + 1):
        row = {"step": s}
        if s:
            row |= {"time/step": 1.0, "rule_accuracy": 0.5, "response_length": 30,
                    "rollout/marker_rate": marker(s)}
        if gap is not None and s % 10 == 0:
            row[blind_spot.PROBE_GAP] = gap(s)
        rows.append(row)
    return rows


def _run(root, name, strict, marked, metrics):
    d = root / name
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"arm": name.rsplit("_s", 1)[0], "cpu": "test CPU"}))
    (d / "eval_report.json").write_text(json.dumps(
        {"avg_at_k": {"mean": 1.0}, "strict": {"avg_at_k": {"mean": 0.0}}}))
    _jsonl(d / "eval_samples.jsonl", _samples(strict, marked))
    _jsonl(d / "metrics.jsonl", metrics)


@pytest.fixture
def results(tmp_path):
    (tmp_path / "base_eval").mkdir()
    _jsonl(tmp_path / "base_eval" / "samples.jsonl", _samples([True, False, False, False],
                                                              [True, True, True, False]))
    keeps = lambda s: 0.8
    drops = lambda s: 0.8 if s <= 12 else 0.1  # the 10-step mean is < 0.4 first at step 18
    for seed, flip in ((0, 1.0), (1, 0.5)):
        _run(tmp_path, f"rule_strict_s{seed}", [True] * 4, [True] * 4, _metrics(keeps))
        _run(tmp_path, f"static_rm_s{seed}", [False] * 4, [False] * 4,
             _metrics(drops, gap=lambda s: 0.3))
        # cooper's RM comes to prefer the marker from step 20 (seed 0) / never (seed 1)
        _run(tmp_path, f"cooper_strict_s{seed}", [True, True, False, False],
             [True, True, True, False], _metrics(keeps, gap=lambda s, f=flip: 0.3 - f * s / 50))
        _run(tmp_path, f"sham_cooper_s{seed}", [False] * 4, [False, True, False, False],
             _metrics(drops, gap=lambda s: 0.3))
    return tmp_path


def test_the_blind_spot_measures_of_each_run(results):
    out = blind_spot.write(str(results))
    assert out["start_marker_rate"] == 0.75
    m = out["blind_spot"]
    assert m["cooper_strict_s0"]["final_marker_rate"] == 0.75
    assert m["static_rm_s0"]["final_marker_rate"] == 0.0
    assert m["static_rm_s0"]["marker_fall_step"] == 18 and m["rule_strict_s0"][
        "marker_fall_step"] is None
    assert m["cooper_strict_s0"]["probe_gap"]["first_negative_step"] == 20  # 0.3 - 20/50 < 0
    assert m["cooper_strict_s1"]["probe_gap"]["first_negative_step"] is None  # 0.3 - 0.3 = 0
    assert m["cooper_strict_s0"]["probe_gap"]["last"] == pytest.approx(0.3 - 30 / 50)
    assert m["rule_strict_s0"]["probe_gap"] is None
    assert m["cooper_strict_s0"]["cpu"] == "test CPU"
    marker = out["marker_contrasts"]["cooper_strict - static_rm"]
    assert marker["per_seed"] == {"0": 0.75, "1": 0.75} and marker["mean"] == 0.75
    probe = out["probe_contrasts"]["cooper_strict - sham_cooper"]
    assert probe["per_seed"] == pytest.approx({"0": -0.6, "1": -0.3})
    text = (results / "analysis.md").read_text()
    assert "| cooper_strict_s0 | 75.0% | +0.30 → -0.30 | 20 | never | test CPU |" in text
    assert "blind_spot_plan.md" in text


def test_the_primary_contrast_and_the_non_inferiority_margin(results):
    out = blind_spot.analyse(str(results))
    primary = out["contrasts"]["cooper_strict - static_rm"]
    assert primary["seeds"] == 2 and primary["over_seeds"]["mean"] == pytest.approx(0.5)
    # cooper_strict - rule_strict = -0.5 on both seeds: the interval is a point below -0.10
    ni = out["contrasts"]["cooper_strict - rule_strict"]["over_seeds"]
    assert ni["mean"] == pytest.approx(-0.5)
    assert out["non_inferiority"] == {"margin": 0.10, "holds": False}


def test_a_metric_logged_fewer_than_twenty_times_shows_its_first_and_last_value():
    rows = [{"step": s, "rm_heldout_accuracy": 0.7 + s / 100} for s in range(0, 61, 10)]
    rows += [{"step": s, "time/step": 1.0, "rule_accuracy": s / 60} for s in range(1, 61)]
    d = comparison.window_means(rows, ("rm_heldout_accuracy", "rule_accuracy"))
    assert d["rm_heldout_accuracy"] == {"first": 0.7, "last": pytest.approx(1.3), "n": 7}
    assert d["rule_accuracy"]["first"] == pytest.approx(sum(range(1, 11)) / 600)
    assert d["rule_accuracy"]["last"] == pytest.approx(sum(range(51, 61)) / 600)
