"""Cooper's host side (`rm.cooper`): (positive, negative) pairs per strategy, the HTTP and local
rewriters, pair tokenisation."""
import numpy as np
import pytest

from conftest import save_tiny_hf_causal_lm
from fake_openai import FakeOpenAI

from coop_jax.rm import cooper
from coop_jax.trainer import rewards
from coop_jax import data
from coop_jax.hf.tokenizer import load_tokenizer
from coop_jax.rm.input import RMInputFormat, format_rm_input, tokenize_rm_inputs
from coop_jax.verify import RuleVerifier

G = 3
RECORDS = [{"question": "3+4", "reference": "7"}, {"question": "5+5", "reference": "10"},
           {"question": "half of one", "reference": "\\frac{1}{2}"},
           {"question": "2+9", "reference": "11"}]
TEXTS = [
    "3+4=8. #### 8", "3+4=7. #### 7", "3+4 is 7. #### 7",        # first correct: row 1
    "5+5=11. #### 11", "5+5=9. #### 9", "I do not know",          # no correct rollout
    "So \\boxed{\\frac{1}{2}}", "It is \\boxed{0.5}", "\\boxed{1/2}",  # all correct
    "2+9=11. #### 11", "2+9=12. #### 12", "2+9=10. #### 10",      # first correct: row 0
]


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(num_workers=1, timeout_s=5.0) as v:
        yield v


@pytest.fixture(scope="module")
def labelled(verifier):
    refs = [r["reference"] for r in RECORDS for _ in range(G)]
    labels, extracted, timeouts = rewards.rule_labels(verifier, refs, TEXTS)
    np.testing.assert_array_equal(labels, [0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0])
    assert timeouts == 0 and extracted[5] is None and extracted[1] == "7"
    return labels, extracted


def test_rollout_pairs_first_correct_and_first_incorrect(verifier, labelled):
    labels, extracted = labelled
    pairs, stats = cooper.build_pairs("rollout", RECORDS, TEXTS, labels, extracted, G,
                                      verifier=verifier)
    assert pairs == [(TEXTS[1], TEXTS[0]), None, None, (TEXTS[9], TEXTS[10])]
    assert stats == {"pairs/no_positive": 1, "pairs/no_negative": 1,
                     "pairs/negative_not_wrong": 0, "pairs/valid": 2}


def test_perturb_pairs_change_the_answer_and_are_verified_wrong(verifier, labelled):
    labels, extracted = labelled
    pairs, stats = cooper.build_pairs("perturb", RECORDS, TEXTS, labels, extracted, G,
                                      verifier=verifier, rng=np.random.default_rng(0))
    assert pairs[1] is None and stats["pairs/no_positive"] == 1
    assert stats["pairs/valid"] == 3 and stats["pairs/negative_not_wrong"] == 0
    for p, pos_row in ((0, 1), (2, 6), (3, 9)):
        pos, neg = pairs[p]
        assert pos == TEXTS[pos_row] and neg != pos
        answer = extracted[pos_row]
        # only the final answer changed: the text up to its last occurrence is untouched
        assert neg.startswith(pos[:pos.rfind(answer)])
        [res] = verifier.verify_batch_detailed([RECORDS[p]["reference"]], [neg])
        assert not res.correct and res.extracted not in (None, answer)
    # a non-numeric answer gets "+1"
    assert pairs[2][1] == "So \\boxed{\\frac{1}{2}+1}"


def test_positive_without_an_extracted_answer_has_no_negative(verifier):
    labels = np.array([1, 0, 1, 1], np.float32)  # a correct label whose answer was not extracted
    pairs, stats = cooper.build_pairs("perturb", RECORDS[:2], ["x", "y", "#### 10", "z"], labels,
                                      [None, None, "10", None], 2, verifier=verifier)
    assert pairs[0] is None and pairs[1] is not None
    assert stats["pairs/no_negative"] == 1 and stats["pairs/valid"] == 1


def test_perturb_answer_values():
    rng = np.random.default_rng(0)
    for answer in ("7", "-3", "1,000", "2.5"):
        for _ in range(20):
            out = cooper.perturb_answer(answer, rng)
            assert float(out) != float(answer.replace(",", ""))
            assert abs(float(out) - float(answer.replace(",", ""))) <= 9
    assert cooper.perturb_answer("x^2", rng) == "x^2+1"
    assert cooper.perturb_text("no answer", "7", rng) is None
    assert cooper.perturb_text("anything", "", rng) is None


def _asked_about(user: str) -> str:
    """The question a rewrite request is about (the text before the positive)."""
    problem = user.split("Correct response")[0]
    return next(r["question"] for r in RECORDS if r["question"] in problem)


def _rewrite_reply():
    half_calls = []

    def reply(body):
        question = _asked_about(body["messages"][1]["content"])
        if question == "3+4":
            return 200, "3+4=9. #### 9"                    # wrong: kept on the first try
        if question == "2+9":
            return 200, "2+9 is eleven, so #### 11.0"      # equivalent: rejected every try
        if question == "half of one":
            half_calls.append(1)                           # HTTP error first, then wrong
            return (500, None) if len(half_calls) == 1 else (200, "\\boxed{2}")
        return 200, "unexpected"

    return reply


def test_rewrite_pairs_over_http(verifier, labelled):
    """The assistant is sent the policy's full prompt (the question with its answer-format
    instruction) and the positive, and asked for a wrong solution."""
    labels, extracted = labelled
    prompts = [data.format_prompt("gsm8k", r["question"]) for r in RECORDS]
    with FakeOpenAI(_rewrite_reply()) as server:
        rewriter = cooper.http_rewriter(server.url + "/v1/", "assistant-x", timeout_s=10)
        pairs, stats = cooper.build_pairs("rewrite", RECORDS, TEXTS, labels, extracted, G,
                                          verifier=verifier, rewriter=rewriter, prompts=prompts)
    assert pairs == [(TEXTS[1], "3+4=9. #### 9"), None, (TEXTS[6], "\\boxed{2}"), None]
    assert stats == {"pairs/no_positive": 1, "pairs/no_negative": 0,
                     "pairs/negative_not_wrong": 1, "pairs/valid": 2}
    asked = [_asked_about(b["messages"][1]["content"]) for _, b in server.requests]
    # try 1: three prompts; try 2: the two still pending; try 3: only the equivalent one
    assert asked == ["3+4", "half of one", "2+9", "half of one", "2+9", "2+9"]
    for path, body in server.requests:
        assert path == "/v1/chat/completions" and body["model"] == "assistant-x"
        assert body["temperature"] == 0.7
        system, user = body["messages"]
        assert system["role"] == "system" and user["role"] == "user"
        assert "incorrect" in system["content"] and "wrong final answer" in system["content"]
        question = _asked_about(user["content"])
        pos = TEXTS[{"3+4": 1, "half of one": 6, "2+9": 9}[question]]
        assert question + " Let's think step by step" in user["content"]  # the full prompt
        assert 'output the final answer after "####"' in user["content"]  # its format
        assert pos in user["content"].split("Correct response")[1]
        assert body["max_tokens"] == len(pos.split()) + 500


@pytest.fixture(scope="module")
def strict_hash_verifier():
    with RuleVerifier(num_workers=1, timeout_s=5.0, extraction="strict_hash") as v:
        yield v


# (positive, candidate, kept by the reference's full-text rule, kept by the "extracted" rule
# under GSM8K's strict "#### <number>" extraction)
KEEP_CASES = [
    ("4+3=7. #### 7", "4+3=8. #### 8", True, True),        # a wrong final answer
    ("4+3=7. #### 7", "The answer is 8", True, False),     # wrong, but no "####": strict drops it
    ("4+3=7. #### 7", "I cannot solve this.", True, False),  # no answer: wrong for the reference
    ("4+3=7. #### 7", "so the sum is 7. #### 7", False, False),  # the same answer
    ("4+3=7. #### 7", "The answer is 7", False, False),    # the same answer, in words
    # an equivalent form: strict "####" matching compares strings (verl's gsm8k scorer), so the
    # extracted rule keeps it as a negative
    ("4+3=7. #### 7", "4+3 = 7.0, #### 7.0", False, True),
]


def test_keep_rules_on_hand_written_cases(verifier, strict_hash_verifier):
    positives = [c[0] for c in KEEP_CASES]
    candidates = [c[1] for c in KEEP_CASES]
    reference = cooper.keep_if_not_equivalent(verifier, positives, candidates)
    assert reference == [c[2] for c in KEEP_CASES]
    answers = strict_hash_verifier.extract_batch(positives)
    assert answers == ["7"] * len(KEEP_CASES)
    extracted = cooper.keep_if_wrong(strict_hash_verifier, answers, candidates)
    assert extracted == [c[3] for c in KEEP_CASES]


def test_build_pairs_uses_the_configured_keep_rule(verifier, strict_hash_verifier):
    """One prompt per case, G = 1, the case's candidate as the assistant's rewrite."""
    records = [{"question": f"q{i}", "reference": "7"} for i in range(len(KEEP_CASES))]
    texts = [c[0] for c in KEEP_CASES]
    by_question = {f"q{i}": c[1] for i, c in enumerate(KEEP_CASES)}
    rewriter = lambda items: [by_question[prompt] for prompt, _ in items]  # noqa: E731
    kept = {}
    for rule in ("reference", "extracted"):
        pairs, _ = cooper.build_pairs(
            "rewrite", records, texts, np.ones(len(texts)), ["7"] * len(texts), 1,
            verifier=strict_hash_verifier, rewriter=rewriter, tries=1, keep_rule=rule,
            full_text_verifier=verifier)
        kept[rule] = [p is not None for p in pairs]
    assert kept == {"reference": [c[2] for c in KEEP_CASES],
                    "extracted": [c[3] for c in KEEP_CASES]}
    with pytest.raises(ValueError, match="cooper.negative_check='lenient' is not one of"):
        cooper.build_pairs("rewrite", records, texts, np.ones(len(texts)), ["7"] * len(texts), 1,
                           verifier=verifier, rewriter=rewriter, keep_rule="lenient")


def test_http_rewriter_unreachable_server_gives_none():
    with FakeOpenAI(lambda body: (200, "x")) as server:
        url = server.url
    # the server is shut down: every request fails and yields None
    assert cooper.http_rewriter(url, "m", timeout_s=2)([("q", "p"), ("q2", "p2")]) == [None, None]


def test_tokenize_pairs_masks_missing_pairs():
    tok = load_tokenizer()
    pairs = [("3+4=7. #### 7", "3+4=8. #### 8"), None]
    out = cooper.tokenize_pairs(tok, RECORDS[:2], pairs, RMInputFormat(96, "synthetic"))
    np.testing.assert_array_equal(out.valid, [1.0, 0.0])
    assert out.valid.dtype == np.float32
    # the <question> is the full prompt ("q = " with the synthetic template) by default
    ids, mask = tokenize_rm_inputs(tok, [format_rm_input("3+4 = ", "7", "3+4=7. #### 7"),
                                         format_rm_input("5+5 = ", "10", "")], 96)
    np.testing.assert_array_equal(out.pos_tokens, ids)
    np.testing.assert_array_equal(out.pos_mask, mask)
    neg_ids, _ = tokenize_rm_inputs(tok, [format_rm_input("3+4 = ", "7", "3+4=8. #### 8")], 96)
    np.testing.assert_array_equal(out.neg_tokens[:1], neg_ids)
    assert out.pos_mask[:, 0].all()  # right-padded


def test_local_rewriter_with_a_tiny_hf_model(tmp_path):
    save_tiny_hf_causal_lm(tmp_path, max_position_embeddings=256)
    rewrite = cooper.local_rewriter(str(tmp_path), max_prompt_len=48, max_new_tokens=6)
    out = rewrite([("3+4", "3+4=7. #### 7"), ("5+5", "5+5=10. #### 10")])
    assert len(out) == 2 and all(isinstance(t, str) and len(t) <= 6 for t in out)
    again = rewrite([("3+4", "3+4=7. #### 7"), ("5+5", "5+5=10. #### 10")])
    assert len(again) == 2  # same shapes: no recompilation needed, fresh key per call
    assert rewrite([]) == []


def test_a_registered_strategy_goes_through_the_shared_keep_if_wrong_loop(verifier, labelled):
    labels, extracted = labelled
    calls = []

    @cooper.register_negative("_test_echo", retries=True)
    def echo(requests, *, rng, rewriter):
        calls.append(len(requests))
        # first try: the positive itself (verified correct, so rejected); then a wrong answer
        return [r.positive if len(calls) == 1 else "#### 999" for r in requests]

    try:
        pairs, stats = cooper.build_pairs("_test_echo", RECORDS, TEXTS, labels, extracted, G,
                                          verifier=verifier, tries=2)
        assert calls == [3, 3]
        assert [p is not None for p in pairs] == [True, False, True, True]
        assert stats["pairs/valid"] == 3 and stats["pairs/negative_not_wrong"] == 0
        calls.clear()
        pairs, stats = cooper.build_pairs("_test_echo", RECORDS, TEXTS, labels, extracted, G,
                                          verifier=verifier, tries=1)
        assert stats["pairs/negative_not_wrong"] == 3 and stats["pairs/valid"] == 0
    finally:
        cooper.NEGATIVE_STRATEGIES.unregister("_test_echo")
    with pytest.raises(ValueError, match="cooper.negative='nope' is not one of"):
        cooper.build_pairs("nope", RECORDS, TEXTS, labels, extracted, G, verifier=verifier)
