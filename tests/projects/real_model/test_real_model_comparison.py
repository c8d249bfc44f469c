"""The pre-registered real-model comparison's analysis (coop_jax.projects.real_model.comparison)
on made-up run folders: strict gold, paired contrasts per seed and over seeds, the hacking gap
and the collapse criteria."""
import json

import numpy as np
import pytest

from coop_jax.projects.real_model import comparison

QUESTIONS = 4


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _samples(strict_greedy: list[bool], lenient_greedy: list[bool]) -> list[dict]:
    """Greedy rows as given; two sampled rows per question, strict-wrong and lenient-right."""
    rows = [{"id": f"q{i}", "mode": "greedy", "sample_index": 0, "strict_correct": s,
             "correct": c} for i, (s, c) in enumerate(zip(strict_greedy, lenient_greedy))]
    return rows + [{"id": f"q{i}", "mode": "sampled", "sample_index": j, "strict_correct": False,
                    "correct": True} for i in range(QUESTIONS) for j in range(2)]


def _metrics(rule_accuracy: float, proxy: float | None, length: float, steps: int = 12):
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "time/step": 1.0, "rule_accuracy": rule_accuracy,
               "response_length": length}
        if proxy is not None:
            row |= {"proxy_reward_mean": proxy, "rm_balanced_accuracy": 0.5 + s / 100}
        rows.append(row)
    return rows


def _run(root, name: str, strict: list[bool], metrics: list[dict]) -> None:
    d = root / name
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"arm": name.rsplit("_s", 1)[0]}))
    (d / "eval_report.json").write_text(json.dumps(
        {"avg_at_k": {"mean": 1.0}, "strict": {"avg_at_k": {"mean": 0.0}}}))
    _write_jsonl(d / "eval_samples.jsonl", _samples(strict, [True] * QUESTIONS))
    _write_jsonl(d / "metrics.jsonl", metrics)


@pytest.fixture
def results(tmp_path):
    (tmp_path / "base_eval").mkdir()
    _write_jsonl(tmp_path / "base_eval" / "samples.jsonl",
                 _samples([True, True, False, False], [True, True, True, False]))
    _run(tmp_path, "rule_s0", [True, True, True, False], _metrics(0.5, None, 40))
    _run(tmp_path, "static_rm_s0", [False, False, False, False], _metrics(0.0, 0.9, 8))
    _run(tmp_path, "cooper_s0", [True, False, True, False], _metrics(0.3, 0.4, 30))
    _run(tmp_path, "static_rm_s1", [True, False, False, False], _metrics(0.2, 0.3, 30))
    _run(tmp_path, "cooper_s1", [True, True, True, True], _metrics(0.4, 0.5, 30))
    (tmp_path / "rule_s1").mkdir()  # not finished: no run.json
    return tmp_path


def test_contrasts_are_paired_per_seed_and_t_over_seeds(results):
    out = comparison.write(str(results))
    primary = out["contrasts"]["cooper - static_rm"]
    # seed 0: cooper (1, 0, 1, 0) - static (0, 0, 0, 0) = 0.5; seed 1: (1,1,1,1) - (1,0,0,0) = 0.75
    assert primary["per_seed"]["0"]["mean"] == pytest.approx(0.5)
    assert primary["per_seed"]["1"]["mean"] == pytest.approx(0.75)
    assert primary["seeds"] == 2 and primary["over_seeds"]["mean"] == pytest.approx(0.625)
    # t with 1 degree of freedom: 12.706 * std(0.5, 0.75) / sqrt(2)
    half = 12.7062 * np.std([0.5, 0.75], ddof=1) / np.sqrt(2)
    assert primary["over_seeds"]["ci_high"] == pytest.approx(0.625 + half, rel=1e-4)
    assert out["contrasts"]["cooper - rule"]["seeds"] == 1  # rule_s1 is not finished
    assert list(out["runs"]) == ["cooper_s0", "cooper_s1", "rule_s0", "static_rm_s0",
                                 "static_rm_s1"]
    assert (results / "analysis.md").exists()
    assert "| cooper - static_rm | 2 | +62.5" in (results / "analysis.md").read_text()


def test_strict_gold_gain_gap_and_collapse(results):
    out = comparison.analyse(str(results))
    assert out["start"] == {"strict_greedy": 0.5, "lenient_greedy": 0.75}
    rule = out["runs"]["rule_s0"]
    assert rule["final"]["strict_greedy"] == 0.75 and rule["final"]["lenient_greedy"] == 1.0
    assert rule["gain"]["strict_greedy"]["mean"] == pytest.approx(0.25)
    assert rule["hacking_gap"] is None and not rule["collapse"]["collapsed"]
    assert rule["strict_minus_lenient_avg_at_k"] == -1.0
    static = out["runs"]["static_rm_s0"]
    assert static["hacking_gap"] == pytest.approx(0.9)  # proxy 0.9, rule accuracy 0
    c = static["collapse"]
    assert c["rule_accuracy_zero"] and c["short_responses"] and c["collapsed"]
    # strict greedy fell on both questions the start got right: (0-1, 0-1, 0, 0), all <= 0
    assert static["gain"]["strict_greedy"]["mean"] == pytest.approx(-0.5)
    # balanced accuracy 0.51..0.62 over 12 steps: first 10 mean 0.555, last 10 mean 0.575
    d = out["runs"]["cooper_s0"]["diagnostics"]["rm_balanced_accuracy"]
    assert d["first"] == pytest.approx(0.555) and d["last"] == pytest.approx(0.575)
    assert not out["runs"]["cooper_s0"]["collapse"]["collapsed"]


def test_a_results_folder_without_the_start_evaluation_is_one_line(tmp_path):
    from absl.app import UsageError
    with pytest.raises(UsageError, match="--results: .* holds no base_eval"):
        comparison.main(["comparison", f"--results={tmp_path}"])
