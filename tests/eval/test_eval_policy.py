"""evaluate_policy / generate_completions end to end on a tiny random model, and the scoring and
RM-metric paths with forced (known) inputs."""
import jax
import numpy as np
import pytest

from conftest import tiny_model_config
from coop_jax import models, sampling
from coop_jax.rm import scoring as rm_scoring
from coop_jax.data import format_prompt, load_split
from coop_jax.eval import evaluate as ev
from coop_jax.hf.tokenizer import load_tokenizer
from coop_jax.rm.input import RMInputFormat
from coop_jax.verify import RuleVerifier

# One sampler shape for every test here (4 prompts, 64 prompt tokens, 16 new tokens): the greedy
# and the k-sample samplers compile once each for the whole module.
SHAPES = dict(max_prompt_len=64, max_new_tokens=16, batch_size=4)
K = 4
INTERVAL_KEYS = ("greedy_accuracy", "avg_at_k", "pass_at_k", "mean_response_length")


@pytest.fixture(scope="module")
def tiny():
    cfg = tiny_model_config()
    return cfg, models.init_params(cfg, jax.random.key(0)), load_tokenizer()


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(num_workers=1, timeout_s=10.0) as v:
        yield v


@pytest.fixture(scope="module")
def synthetic_records():
    return load_split("synthetic", "test", num_examples=4, seed=0)


@pytest.fixture(scope="module")
def gsm8k_records(shared_data):
    return load_split("gsm8k", "test", data_dir=shared_data / "gsm8k", num_examples=4)


@pytest.fixture(scope="module")
def synthetic_eval(tiny, verifier, synthetic_records):
    cfg, params, tok = tiny
    return ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic",
                              verifier=verifier, k=K, seed=0, **SHAPES)


def _check_report(report, rows, records, k, greedy=True):
    for key in INTERVAL_KEYS:
        if key == "greedy_accuracy" and not greedy:
            assert key not in report
            continue
        ci = report[key]
        assert set(ci) == {"mean", "ci_low", "ci_high"}
        assert ci["ci_low"] <= ci["mean"] <= ci["ci_high"]
    for key in ("greedy_accuracy", "avg_at_k", "pass_at_k"):
        if key in report:
            assert 0.0 <= report[key]["ci_low"] and report[key]["ci_high"] <= 1.0
    assert 1 <= report["mean_response_length"]["mean"] <= SHAPES["max_new_tokens"]
    assert report["avg_at_k"]["mean"] <= report["pass_at_k"]["mean"]
    assert report["num_problems"] == len(records) and report["k"] == k
    assert len(rows) == len(records) * (k + greedy) == report["num_completions"]
    ids = [r["id"] for r in records]
    for row in rows:
        assert set(row) >= {"id", "prompt", "completion", "extracted", "correct", "mode",
                            "sample_index"}
        assert row["id"] in ids and isinstance(row["correct"], bool)
        assert 1 <= row["length"] <= SHAPES["max_new_tokens"]
    sampled = [r for r in rows if r["mode"] == "sampled"]
    assert sorted({r["sample_index"] for r in sampled}) == list(range(k))
    assert sum(r["mode"] == "greedy" for r in rows) == (len(records) if greedy else 0)


def test_evaluate_policy_synthetic(synthetic_eval, synthetic_records):
    report, rows = synthetic_eval
    _check_report(report, rows, synthetic_records, K)
    assert report["temperature"] == 0.7 and report["top_p"] == 0.95
    first = synthetic_records[0]
    assert rows[0]["prompt"] == format_prompt("synthetic", first["question"])
    assert rows[0]["reference"] == first["reference"]


def test_evaluate_policy_gsm8k(tiny, verifier, gsm8k_records, synthetic_eval):
    cfg, params, tok = tiny
    report, rows = ev.evaluate_policy(params, cfg, tok, gsm8k_records, template="gsm8k",
                                      verifier=verifier, k=K, seed=0, **SHAPES)
    _check_report(report, rows, gsm8k_records, K)
    assert all(r["prompt"].endswith('output the final answer after "####".') for r in rows)
    assert report["greedy_accuracy"]["mean"] < 0.5  # a random model


def test_seeds_and_greedy_only(tiny, verifier, synthetic_records, synthetic_eval):
    cfg, params, tok = tiny
    report, rows = synthetic_eval
    again = ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic",
                               verifier=verifier, k=K, seed=0, **SHAPES)[1]
    assert [r["completion"] for r in again] == [r["completion"] for r in rows]
    other = ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic",
                               verifier=verifier, k=K, seed=1, **SHAPES)[1]
    pick = lambda rs, mode: [r["completion"] for r in rs if r["mode"] == mode]
    assert pick(other, "greedy") == pick(rows, "greedy")
    assert pick(other, "sampled") != pick(rows, "sampled")
    # The training loop's fast path: greedy only.
    g_report, g_rows = ev.evaluate_policy(params, cfg, tok, synthetic_records,
                                          template="synthetic", verifier=None, k=0, **SHAPES)
    assert "avg_at_k" not in g_report and g_report["k"] == 0
    assert [r["completion"] for r in g_rows] == pick(rows, "greedy")
    assert g_report["greedy_accuracy"] == report["greedy_accuracy"]
    # Sampled only.
    s_report, s_rows = ev.evaluate_policy(params, cfg, tok, synthetic_records,
                                          template="synthetic", verifier=verifier, k=K,
                                          greedy=False, seed=0, **SHAPES)
    _check_report(s_report, s_rows, synthetic_records, K, greedy=False)
    assert [r["completion"] for r in s_rows] == pick(rows, "sampled")


def test_generate_completions_pads_the_last_batch(tiny, synthetic_records, synthetic_eval):
    cfg, params, tok = tiny
    prompts = [format_prompt("synthetic", r["question"]) for r in synthetic_records]
    texts, lengths = sampling.generate_completions(params, cfg, tok, prompts + prompts[:1],
                                             temperature=0.0, **SHAPES)
    assert len(texts) == len(lengths) == 5 and all(len(t) == 1 for t in texts)
    greedy = [r["completion"] for r in synthetic_eval[1] if r["mode"] == "greedy"]
    assert [t[0] for t in texts[:4]] == greedy
    assert texts[4] == texts[0] and lengths[4] == lengths[0]
    # No sampled token is ever an embedding-padding id (>= len(tokenizer)).
    assert all(ch.isprintable() or ch == "\n" for t in texts for ch in t[0])


def test_the_continuous_engine_evaluates_like_the_static_sampler(tiny, verifier,
                                                                  synthetic_records,
                                                                  synthetic_eval):
    """engine="continuous" (the trainer's evaluation under rollout.engine=continuous): greedy,
    the same completions through 3 slots as the static sampler's, up to a near-tie of a random
    model; sampled, the completions do not depend on the slot count."""
    cfg, params, tok = tiny
    report, rows = ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic",
                                      verifier=verifier, k=2, seed=0, engine="continuous",
                                      slots=3, **SHAPES)
    _check_report(report, rows, synthetic_records, 2)
    pick = lambda rs, mode: [r["completion"] for r in rs if r["mode"] == mode]
    static = pick(synthetic_eval[1], "greedy")
    same = sum(a == b for a, b in zip(pick(rows, "greedy"), static))
    assert same >= len(static) - 1, (pick(rows, "greedy"), static)
    five = ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic",
                              verifier=verifier, k=2, greedy=False, seed=0,
                              engine="continuous", slots=5, **SHAPES)[1]
    assert pick(five, "sampled") == pick(rows, "sampled")
    with pytest.raises(ValueError, match="engine must be one of"):
        sampling.generate_completions(params, cfg, tok, ["x"], temperature=0.0,
                                      engine="paged", **SHAPES)


def test_the_trainers_evaluation_follows_rollout_engine():
    from conftest import repo_config
    from coop_jax.config import typed
    from coop_jax.trainer.evaluators import EvalSettings
    c = repo_config("tiny_test")
    engine_of = lambda s: (s.engine, s.slots)
    assert engine_of(EvalSettings.from_config(typed(c))) == ("static", 0)
    c.rollout.update(engine="continuous", slots=3)
    assert engine_of(EvalSettings.from_config(typed(c))) == ("continuous", 3)


def test_evaluate_policy_rejects_bad_arguments(tiny, synthetic_records):
    cfg, params, tok = tiny
    with pytest.raises(ValueError, match="nothing to evaluate"):
        ev.evaluate_policy(params, cfg, tok, synthetic_records, template="synthetic", k=0,
                           greedy=False, **SHAPES)
    with pytest.raises(ValueError, match="records is empty"):
        ev.evaluate_policy(params, cfg, tok, [], template="synthetic", **SHAPES)
    with pytest.raises(ValueError, match=r"records\[0\]\['reference'\]"):
        ev.evaluate_policy(params, cfg, tok, [{"question": "1+1"}], template="synthetic",
                           **SHAPES)


def test_score_policy_with_reference_solutions(verifier, synthetic_records, gsm8k_records):
    """Known correctness: reference solutions are right, '#### 123456789' and '' are wrong."""
    records = synthetic_records + gsm8k_records
    prompts = [format_prompt("raw", r["question"]) for r in records]
    greedy = ([[r["solution"]] for r in records], [[10] for _ in records])
    sampled = ([[r["solution"], "#### 123456789", r["solution"], ""] for r in records],
               [[2, 4, 6, 8] for _ in records])
    report, rows = ev.score_policy(records, prompts, verifier, greedy=greedy, sampled=sampled)
    assert report["greedy_accuracy"] == {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    assert report["avg_at_k"] == {"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5}
    assert report["pass_at_k"]["mean"] == 1.0 and report["k"] == 4
    assert report["mean_response_length"]["mean"] == 5.0  # from the sampled completions
    assert report["num_correct_samples"] == 2 * len(records)
    assert report["extraction_rate"] == pytest.approx((8 + 3 * 8) / 40)
    correct = [r["correct"] for r in rows if r["mode"] == "sampled"]
    assert correct == [True, False, True, False] * len(records)
    assert [r["extracted"] for r in rows[:8]] == [r["reference"] for r in records]
    # Half the problems right: greedy accuracy 0.5 with a non-degenerate interval.
    half = ([[r["solution"] if i % 2 else "#### 123456789"] for i, r in enumerate(records)],
            [[1] for _ in records])
    rep = ev.score_policy(records, prompts, None, greedy=half)[0]
    assert rep["greedy_accuracy"]["mean"] == 0.5
    assert 0.0 <= rep["greedy_accuracy"]["ci_low"] < 0.5 < rep["greedy_accuracy"]["ci_high"] <= 1


def test_evaluate_reward_model_metrics_with_known_scores(monkeypatch):
    triples = [{"question": "1+1", "reference": "2", "completion": f"#### {c}", "label": y}
               for c, y in [(2, True), (3, False), (2, 1), (5, 0), (2, True), (7, False)]]
    scores = np.array([2.0, -1.0, 0.5, 0.7, -0.2, -3.0])
    monkeypatch.setattr(rm_scoring, "score_triples", lambda *a, **k: scores)
    rm_cfg = tiny_model_config(num_labels=1)
    fmt = RMInputFormat(max_len=64, template="raw")
    report, rows = rm_scoring.evaluate_reward_model(None, rm_cfg, None, triples, fmt=fmt)
    # predictions: T F T T F F vs labels T F T F T F -> 4/6 right
    assert report["accuracy"]["mean"] == pytest.approx(4 / 6)
    # positives 2.0, 0.5, -0.2 vs negatives -1.0, 0.7, -3.0: 7 of 9 pairs ordered right
    assert report["roc_auc"]["mean"] == pytest.approx(7 / 9)
    for key in ("accuracy", "roc_auc"):
        assert report[key]["ci_low"] <= report[key]["mean"] <= report[key]["ci_high"]
    assert report["num_positive"] == report["num_negative"] == 3
    assert [r["predicted"] for r in rows] == [True, False, True, True, False, False]
    with pytest.raises(ValueError, match=r"triples\[0\]\['label'\]"):
        rm_scoring.evaluate_reward_model(None, rm_cfg, None, [dict(triples[0], label="yes")],
                                         fmt=fmt)


def test_gsm8k_is_also_scored_with_the_references_strict_scorer(verifier):
    """Two problems, one greedy and two sampled completions each; "The answer is 7" is right for
    the lenient headline verifier and wrong for verl's strict "#### <number>" scorer."""
    import contextlib
    records = [{"question": "3+4", "reference": "7"}, {"question": "5+5", "reference": "10"}]
    greedy = ([["The answer is 7"], ["#### 10"]], [[3], [2]])
    sampled = ([["#### 7", "The answer is 7"], ["#### 11", "The answer is 10"]], [[2, 3], [2, 3]])
    with contextlib.ExitStack() as stack:
        also = ev.strict_verifiers("gsm8k", 1, 5.0, stack)
        assert ev.strict_verifiers("math500", 1, 5.0, stack) == {}
        report, rows = ev.score_policy(records, ["p1", "p2"], verifier, greedy=greedy,
                                       sampled=sampled, also=also)
    assert report["greedy_accuracy"]["mean"] == 1.0              # lenient: both right
    assert report["strict"]["greedy_accuracy"]["mean"] == 0.5    # strict: only "#### 10"
    assert report["avg_at_k"]["mean"] == pytest.approx((1.0 + 0.5) / 2)
    assert report["strict"]["avg_at_k"]["mean"] == pytest.approx((0.5 + 0.0) / 2)
    assert [r["strict_correct"] for r in rows if r["mode"] == "greedy"] == [False, True]
    with contextlib.ExitStack() as stack:  # the synthetic task's gold: an integer after "####"
        assert set(ev.strict_verifiers("synthetic", 1, 5.0, stack)) == {"strict"}
    assert [r["correct"] for r in rows if r["mode"] == "greedy"] == [True, True]  # the headline's
