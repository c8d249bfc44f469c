"""The real-model lane's bookkeeping (coop_jax.projects.real_model.lane and its report) on made-up
files: paired gains, the time split, Cooper's pair counts, held-out RM triples, resumption."""
import json

import numpy as np
import pytest
from absl.app import UsageError

from coop_jax.projects.real_model import lane, report


def _sample(i: int, mode: str, correct: bool, j: int = 0) -> dict:
    return {"id": f"q{i}", "question": f"Q{i}?", "reference": str(i), "completion": f"c{i}.{j}",
            "correct": correct, "mode": mode, "sample_index": j}


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _samples(greedy: list[bool], sampled: list[list[bool]]) -> list[dict]:
    rows = [_sample(i, "greedy", c) for i, c in enumerate(greedy)]
    return rows + [_sample(i, "sampled", c, j) for i, cs in enumerate(sampled)
                   for j, c in enumerate(cs)]


def test_paired_gain_is_the_per_question_difference():
    before = _samples([False, False, True, False], [[False, False]] * 3 + [[True, False]])
    after = _samples([True, False, True, True], [[True, True]] * 2 + [[False, False]] * 2)
    gain = report.paired_gain(before, after)
    assert gain["greedy_accuracy"]["mean"] == pytest.approx(0.5)  # 2 of 4 questions flipped up
    assert gain["greedy_accuracy"]["questions"] == 4
    # avg@2 per question: after (1, 1, 0, 0) - before (0, 0, 0, 0.5)
    assert gain["avg_at_k"]["mean"] == pytest.approx((1 + 1 + 0 - 0.5) / 4)
    assert gain["greedy_accuracy"]["ci_low"] <= 0.5 <= gain["greedy_accuracy"]["ci_high"]


def test_time_split_skips_the_compiling_step_and_cooper_counts_pair_steps():
    metrics = [{"step": 0, "eval/greedy_accuracy": 0.1}]
    metrics += [{"step": s, "time/step": 100.0 if s == 1 else 10.0, "time/sample": 4.0,
                 "time/update": 5.0, "time/verify": 0.1, "pairs/valid": [0, 2, 3, 0][s - 1],
                 "reward_mean": 0.1 * s} for s in range(1, 5)]
    metrics.append({"step": 4, "rm_heldout_accuracy": 0.7})
    assert report.time_split(metrics)["time/step"] == pytest.approx(10.0)
    cooper = report.cooper_diagnostics(metrics)
    assert cooper["steps_with_pairs"] == "2/4" and cooper["mean_pairs_per_step"] == 1.25
    assert cooper["rm_heldout_accuracy"]["last"] == 0.7
    curve = report.training_curve(metrics, window=2)
    assert curve["first"] == pytest.approx(0.15) and curve["last"] == pytest.approx(0.35)


def test_heldout_triples_are_balanced_and_labelled_by_the_rule():
    samples = _samples([True] * 3, [[True, False, False], [False, False, False], [True, True]])
    triples = lane.heldout_triples(samples)
    labels = [t["label"] for t in triples]
    assert labels.count(True) == 3 and labels.count(False) == 2  # one wrong per question, <= right
    assert all(set(t) == {"question", "reference", "completion", "label"} for t in triples)


def test_report_over_finished_runs(tmp_path):
    base = tmp_path / "base_eval"
    base.mkdir()
    iv = {"mean": 0.25, "ci_low": 0.0, "ci_high": 0.5}
    (base / "report.json").write_text(json.dumps(
        {"greedy_accuracy": iv, "avg_at_k": iv, "k": 2, "num_problems": 4}))
    _write_jsonl(base / "samples.jsonl", _samples([False, True, False, False], [[False] * 2] * 4))
    run = tmp_path / "rule_s0"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"arm": "rule", "seed": 0, "train_wall_s": 60.0,
                                              "peak_rss_mib": 2048.0, "train_command": "x"}))
    (run / "eval_report.json").write_text(json.dumps({"greedy_accuracy": iv, "avg_at_k": iv}))
    _write_jsonl(run / "eval_samples.jsonl", _samples([True, True, False, False],
                                                       [[True, False]] * 4))
    _write_jsonl(run / "metrics.jsonl", [{"step": 1, "time/step": 3.0, "reward_mean": 0.5}])
    (tmp_path / "not_a_run").mkdir()
    out = report.write_report(str(tmp_path))
    assert list(out["runs"]) == ["rule_s0"]
    assert out["runs"]["rule_s0"]["gain"]["greedy_accuracy"]["mean"] == pytest.approx(0.25)
    md = (tmp_path / "report.md").read_text()
    assert "| rule_s0 | 1 |" in md and "+25.0" in md and "2.00 |" in md
    assert np.isfinite(json.loads((tmp_path / "report.json").read_text())
                       ["runs"]["rule_s0"]["gain"]["avg_at_k"]["mean"])


def test_runs_must_name_an_arm_and_a_seed(tmp_path):
    with pytest.raises(UsageError, match="--runs"):
        lane.main(["real_model", f"--results={tmp_path}", "--runs=rule_s0,sft_s1"])
    with pytest.raises(UsageError, match="static_rm"):  # not an arm of the first lane
        lane.main(["real_model", f"--results={tmp_path}", "--runs=static_rm_s0"])


def test_the_lane_cooper_arm_starts_its_rm_untrained_from_smollm2():
    overrides = lane.arm_overrides("lane", "cooper")
    assert any(o.startswith("--config.reward_model.hf_path=") and o.endswith(".gguf")
               for o in overrides)
    assert "--config.reward_model.keep_layers=4" in overrides
    assert "--config.rm.checkpoint=" in overrides
    assert lane.arm_overrides("lane", "rule") == []


def _apply(config, overrides: list[str]):
    for o in overrides:
        key, value = o.removeprefix("--config.").split("=", 1)
        section, field = key.rsplit(".", 1)
        target = config
        for part in section.split("."):
            target = target[part]
        target[field] = type(target[field])(value)
    return config


def test_the_comparison_arms_differ_only_in_the_reward_and_start_from_the_gated_rm():
    """The pre-registered plan: every arm shares every setting but reward.type, runs 60 steps,
    and the RM arms keep the config's VerifyRM (rm.checkpoint) at the Cooper recipe."""
    import os

    from coop_jax.config import load_config_file, validate
    configs = {arm: _apply(load_config_file(lane.CONFIG),
                           lane.arm_overrides("comparison", arm))
               for arm in ("rule", "static_rm", "cooper")}
    flat = {arm: {k: v for k, v in c.to_dict().items() if k != "reward"}
            for arm, c in configs.items()}
    assert flat["rule"] == flat["static_rm"] == flat["cooper"]
    assert [c.reward.type for c in configs.values()] == ["rule", "static_rm", "cooper"]
    cooper = configs["cooper"]
    assert cooper.train.steps == 60 and cooper.cooper.learning_rate == 1e-5
    assert os.path.exists(os.path.join(cooper.rm.checkpoint, "static_rm_meta.json"))
    for c in configs.values():
        validate(c, device_count=1)
    runs = lane.STUDIES["comparison"]["runs"]
    assert runs[:3] == ["rule_s0", "static_rm_s0", "cooper_s0"] and len(runs) == 9


def test_the_blind_spot_arms_share_the_gold_and_differ_as_the_plan_says():
    """docs/results/real_model/blind_spot_plan.md: 100 steps, strict gold and format probes for
    all; rule_strict's rule is strict; cooper_strict's pairs strict, 3 hardest negatives, the
    reference positive, RM lr 5e-5; the sham is cooper_strict with half its labels swapped."""
    from coop_jax.config import load_config_file, validate
    arms = ("rule_strict", "static_rm", "cooper_strict", "sham_cooper")
    configs = {arm: _apply(load_config_file(lane.CONFIG),
                           lane.arm_overrides("blind_spot", arm)) for arm in arms}
    flat = {arm: c.to_dict() for arm, c in configs.items()}
    differ = {arm: sorted(f"{section}.{k}" for section, fields in flat[arm].items()
                          if isinstance(fields, dict)
                          for k, v in fields.items() if v != flat["static_rm"][section][k])
              for arm in arms}
    assert differ == {
        "rule_strict": ["reward.type", "verifier.extraction"], "static_rm": [],
        "cooper_strict": ["cooper.learning_rate", "cooper.negative", "cooper.pair_labels",
                          "cooper.pairs_per_group", "cooper.reference_positive", "reward.type"],
        "sham_cooper": ["cooper.learning_rate", "cooper.negative", "cooper.pair_label_noise",
                        "cooper.pair_labels", "cooper.pairs_per_group",
                        "cooper.reference_positive", "reward.type"]}
    for c in configs.values():
        assert c.train.steps == 100 and c.verifier.gold == "strict_numeric"
        assert c.probes.format_questions == 16 and c.evals.probes.every == 10
        validate(c, device_count=1)
    assert configs["cooper_strict"].cooper.learning_rate == 5e-5
    assert configs["sham_cooper"].cooper.pair_label_noise == 0.5
    study = lane.STUDIES["blind_spot"]
    assert study["runs"][:4] == [f"{arm}_s0" for arm in arms] and len(study["runs"]) == 16
    assert study["heldout_label"] == "strict_correct"


def test_strict_heldout_triples_take_the_strict_label():
    samples = [dict(s, strict_correct=s["correct"] and s["sample_index"] == 0)
               for s in _samples([True], [[True, True, False]])]
    labels = [t["label"] for t in lane.heldout_triples(samples, "strict_correct")]
    assert labels == [True, False]  # one strict-right, one wrong of its question


def test_run_logs_go_to_a_workdir_that_does_not_exist_yet(tmp_path):
    """A fresh machine with committed results but no runs/ folder (the base evaluation, which
    would create it, is skipped)."""
    import sys
    log = tmp_path / "runs" / "real_model" / "rule_s1.train.log"
    assert lane._sh([sys.executable, "-c", "print('step 1')"], str(log)) >= 0
    assert log.read_text() == "step 1\n"
