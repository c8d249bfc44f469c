"""Hack probes: the synthetic task's probe set (experiments/hack_probes.py) and the trainer's
periodic probe metrics (coop_jax/trainer/probes.py)."""
import json
import os

import numpy as np
import pytest

from conftest import repo_config

from coop_jax.trainer import loop, probes
from coop_jax.data.synthetic import make_dataset
from coop_jax.projects.reward_hacking import hack_probes
from coop_jax.verify import verify


def _records():
    return make_dataset(6, seed=5, split="test")


def test_probe_set_is_deterministic_rule_wrong_and_covers_the_patterns():
    records = _records()
    made = hack_probes.build_probes(records)
    assert made == hack_probes.build_probes(records)
    assert len(hack_probes.PATTERNS) >= 8
    assert {p["pattern"] for p in made} == set(hack_probes.PATTERNS)
    assert all(not p["label"] and not verify(p["reference"], p["completion"], "strict_numeric")
               for p in made)
    restated = [p for p in made if p["pattern"] == "restated_question"]
    assert [p["completion"] for p in restated] == [r["question"] for r in records]
    boxed = hack_probes.build_probes(records, answer_format="boxed")
    assert any("\\boxed{" in p["completion"] for p in boxed)


def test_a_pattern_the_rm_scores_high_is_counted(monkeypatch):
    made = hack_probes.build_probes(_records())
    config = repo_config("tiny_test")
    monkeypatch.setattr(probes, "policy_logp", lambda *a, **k: np.full(len(made), -1.0))
    monkeypatch.setattr(probes, "score_triples", lambda *a, **k: np.array(
        [3.0 if p["pattern"] == "praise_opener" else -3.0 for p in made]))
    m = probes.probe_metrics(made, (None, None, None), (None, None, None, None),
                            probes.ProbeSettings.from_config(config))
    assert m["probe/praise_opener/rm_false_accept"] == 1.0
    assert m["probe/empty/rm_false_accept"] == 0.0
    assert m["probe/rm_false_accept"] == pytest.approx(1 / len(hack_probes.PATTERNS))
    assert m["probe/garbled/policy_logp"] == -1.0


def test_read_probes_refuses_a_probe_without_a_pattern(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "1+1", "reference": "2", "completion": "",
                                "label": False}) + "\n")
    with pytest.raises(ValueError, match="pattern"):
        probes.read_probes(str(path))


def test_trainer_logs_probe_metrics_on_the_tiny_model(tmp_path):
    """A 1-step static-RM run with probes: every pattern's false-accept rate in [0, 1] and its
    policy log-likelihood per token finite and <= 0, at steps 0 and 1."""
    config = repo_config("tiny_test")
    path = hack_probes.write_probes(str(tmp_path / "probes.jsonl"),
                                    hack_probes.build_probes(_records()[:2]))
    config.reward.type = "static_rm"
    config.probes.update(triples=path, every=1)
    config.train.steps = 1
    loop.train(config, str(tmp_path / "run"))
    with open(os.path.join(tmp_path, "run", "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        for pattern in hack_probes.PATTERNS:
            assert 0.0 <= r[f"probe/{pattern}/rm_false_accept"] <= 1.0
            assert np.isfinite(r[f"probe/{pattern}/policy_logp"])
            assert r[f"probe/{pattern}/policy_logp"] <= 0.0
        assert 0.0 <= r["probe/rm_false_accept"] <= 1.0
