"""Cooper's pair labeller as its own rule (`cooper.pair_labels`), the gold of the RM's
diagnostics (`verifier.gold`), the run header that says which is which, the rollouts' marker
rate, and the format probes' metrics; then a tiny Cooper run with strict pairs and gold."""
import concurrent.futures
import json
import os

import numpy as np
import pytest

from conftest import REPO, repo_config

from coop_jax.data.answer_forms import FORMS, format_probes
from coop_jax.rm import cooper
from coop_jax.trainer import loop, probes, setup
from coop_jax.trainer.rollouts import (HostTools, RolloutSettings, RolloutSetup, ScoredRollouts,
                                       label_rollouts, marker_rate, rm_pairs)
from coop_jax.trainer.rewards import reward_source
from coop_jax.verify import RuleVerifier

# one prompt (reference 13), four rollouts: marked right, unmarked right, marked wrong, bare right
TEXTS = ["6+7=13.\n#### 13", "6+7=13.\nThe answer is: 13", "6+7=12.\n#### 12", "13"]
RECORDS = [{"question": "6+7", "reference": "13", "solution": "6+7=13. #### 13"}]


@pytest.fixture(scope="module")
def verifiers():
    with RuleVerifier(1, 5.0, extraction="lenient") as lenient, \
            RuleVerifier(1, 5.0, extraction="strict_numeric") as strict:
        yield lenient, strict


def _tools(reward, pairs, gold):
    return HostTools(reward, reward, concurrent.futures.ThreadPoolExecutor(1),
                     pair_verifier=pairs, gold_verifier=gold)


def test_each_role_labels_under_its_own_rule(verifiers):
    lenient, strict = verifiers
    rule = label_rollouts(_tools(lenient, strict, strict), ["13"] * 4, TEXTS)
    assert rule.reward.tolist() == [1, 1, 0, 1]   # lenient: any stated 13
    assert rule.pairs.tolist() == [1, 0, 0, 0]    # strict: 13 after "####" only
    assert rule.gold is rule.pairs                # one verifier, one pass
    assert rule.metrics["rule_accuracy"] == 0.75 and rule.metrics["gold_accuracy"] == 0.25
    assert rule.pair_extracted == ["13", None, "12", None]
    same = label_rollouts(_tools(lenient, None, None), ["13"] * 4, TEXTS)
    assert same.pairs is same.reward and same.gold is same.reward
    assert "gold_accuracy" not in same.metrics


def test_pairs_take_the_pair_labels_not_the_rewards(verifiers, monkeypatch):
    """With strict pair labels the unmarked right answer is the negative of the rollout pair;
    with the rewards' lenient labels it would have been the positive's group-mate."""
    lenient, strict = verifiers
    c = repo_config("tiny_test")
    c.reward.type, c.cooper.negative = "cooper", "rollout"
    c.rollout.group_size = 4
    source = reward_source("cooper")
    setup = RolloutSetup(RolloutSettings.from_config(c, source), None, source, None, None,
                         rm_tokenizer=object(), rm_format=None)
    pairs_of = {}
    for name, pair_verifier in (("lenient", None), ("strict", strict)):
        tools = _tools(lenient, pair_verifier, pair_verifier)
        rule = label_rollouts(tools, ["13"] * 4, TEXTS)
        scored = ScoredRollouts([rule.reward], rule, None, {})
        made = {}  # the pair texts, in place of their RM tokens
        monkeypatch.setattr(cooper, "tokenize_pairs",
                            lambda tok, records, texts, fmt: made.setdefault("p", texts))
        rm_pairs(setup, 0, RECORDS, TEXTS, scored, tools)
        pairs_of[name] = made["p"][0]
    assert pairs_of["lenient"] == (TEXTS[0], TEXTS[2])
    assert pairs_of["strict"] == (TEXTS[0], TEXTS[1])


def test_the_header_names_each_rule_and_flags_a_labeller_that_is_not_the_gold():
    c = repo_config("default")
    c.reward.type = "cooper"
    lines = setup.rule_header(c, trains_rm=True, has_rm=True)
    assert lines == ["rule labels: lenient (verifier.extraction=auto)",
                     "Cooper's pair labels: lenient (cooper.pair_labels=auto)",
                     "RM diagnostics against the gold: lenient (verifier.gold=auto)"]
    c.verifier.gold = "strict_numeric"
    lines = setup.rule_header(c, trains_rm=True, has_rm=True)
    assert lines[-1].startswith("NOTE: Cooper's pairs are labelled lenient but the run is "
                                "measured against strict_numeric")
    c.cooper.pair_labels = "strict_numeric"
    assert not any(line.startswith("NOTE") for line in setup.rule_header(c, True, True))
    c.reward.type = "static_rm"
    assert len(setup.rule_header(c, trains_rm=False, has_rm=True)) == 2


def test_a_bad_labeller_is_one_line_naming_the_field():
    c = repo_config("default")
    c.cooper.pair_labels = "strictest"
    with pytest.raises(ValueError, match="cooper.pair_labels"):
        setup.validate_config(c)
    c = repo_config("default")
    c.verifier.gold = "boxed"
    with pytest.raises(ValueError, match="verifier.gold"):
        setup.validate_config(c)


def test_marker_rate_counts_the_rollouts_that_write_the_marker():
    assert marker_rate(TEXTS, "####") == {"rollout/marker_rate": 0.5}
    assert marker_rate(TEXTS, None) == {}


def test_format_metrics_average_each_form_and_the_unmarked_gap(monkeypatch):
    made = format_probes(RECORDS * 2, 2)
    # right answers: hash 2, answer_is 1, repeated 0, others -1; wrong answers: -3
    right_score = {"hash": 2.0, "answer_is": 1.0, "repeated": 0.0}
    monkeypatch.setattr(probes, "score_triples", lambda *a, **k: np.array(
        [right_score.get(p["form"], -1.0) if p["label"] else -3.0 for p in made]))
    m = probes.format_metrics(made, (None, None, None, None), "####")
    assert m["format/hash/right_score"] == 2.0 and m["format/bare/right_score"] == -1.0
    assert all(m[f"format/{form}/wrong_score"] == -3.0 for form in FORMS)
    assert m["format/unmarked_minus_marked"] == pytest.approx((1.0 + 0.0) / 2 - 2.0)


def test_a_tiny_cooper_run_with_strict_pairs_logs_gold_marker_and_format_probes(tmp_path):
    """The demo's start policy on the tiny config: Cooper with strict_numeric pair labels and
    gold, format probes every step. The gold is never above the lenient rule accuracy (a strict
    right answer is a lenient one), the evaluation reports the strict gold, and the format
    probes' scores exist at steps 0-2."""
    c = repo_config("tiny_test")
    c.model.hf_path = os.path.join(str(REPO), "docs", "results", "reward_hacking", "plan",
                                   "inputs", "start_policy")
    c.data.max_prompt_len = 16
    c.rollout.update(group_size=4, prompts_per_step=4, max_new_tokens=40)
    c.reward.type, c.cooper.negative = "cooper", "rollout_hardest"
    c.cooper.update(pair_labels="strict_numeric", reference_positive=True)
    c.verifier.gold = "strict_numeric"
    c.probes.update(format_questions=2, every=1)
    c.evals.policy.every = 2
    loop.train(c, str(tmp_path))
    with open(os.path.join(tmp_path, "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        assert 0.0 <= r["gold_accuracy"] <= r["rule_accuracy"] <= 1.0
        assert 0.0 <= r["rollout/marker_rate"] <= 1.0
        assert r["rm_valid_pairs"] == r["pairs/valid"]
    for r in rows:
        assert np.isfinite([r[f"format/{f}/{k}_score"] for f in FORMS
                            for k in ("right", "wrong")]).all()
        assert np.isfinite(r["format/unmarked_minus_marked"])
    assert 0.0 <= rows[-1]["eval/greedy_accuracy_strict"] <= rows[-1]["eval/greedy_accuracy"]
