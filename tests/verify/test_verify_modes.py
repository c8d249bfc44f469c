"""Extraction modes: the papers' strict answer matching next to coop_jax's lenient one."""

import pytest

from coop_jax.verify import EXTRACTION_MODES, RuleVerifier, extract_answer, verify, verify_detailed

# (text, lenient, strict_boxed, strict_hash)
EXTRACT = [
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", "\\frac{1}{2}", None),
    ("$\\boxed{3}$ or $\\boxed{4}$", "3, 4", "4", None),  # strict: the last box only
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}", "\\{1, 2\\}", None),
    ("\\boxed{ 7 }", "7", "7", None),
    ("it is \\boxed 5$ done", "5", "5", None),
    ("\\fbox{6}", "6", None, None),
    ("The answer is 5.", "5", None, None),  # no box: no answer for strict_boxed
    ("unclosed \\boxed{12", None, None, None),
    ("She pays 3 * 6 = 18 dollars.\n#### 18", "18", None, "18"),
    ("#### 1,200", "1,200", None, "1200"),
    ("#### 18\nlater\n#### 19", "19", None, "19"),
    ("#### -3.5", "-3.5", None, "-3.5"),
    ("####18", "18", None, None),  # strict: exactly one space after ####
    ("#### $18", "$18", None, None),
    ("#### 18 \\boxed{19}", "19", "19", "18"),
    ("", None, None, None),
]


@pytest.mark.parametrize("text,lenient,boxed,hashed", EXTRACT)
def test_extraction_modes(text, lenient, boxed, hashed):
    assert extract_answer(text) == lenient
    assert extract_answer(text, "lenient") == lenient
    assert extract_answer(text, "strict_boxed") == boxed
    assert extract_answer(text, "strict_hash") == hashed


# (reference, completion, lenient, strict_boxed, strict_hash)
VERIFY = [
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}}", True, True, False),
    ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}", True, False, False),  # strict: exact string
    ("\\frac{1}{2}", "\\boxed{0.5}", True, False, False),
    ("\\frac{1}{2}", "The answer is \\frac{1}{2}.", True, False, False),
    ("Solution ... so it is \\boxed{7}.", "\\boxed{7}", True, True, False),
    ("18", "work\n#### 18", True, False, True),
    ("Janet ... <<16-3=13>>13\n#### 1,200", "so\n#### 1200", True, False, True),
    ("1,200", "#### 1,200", True, False, True),
    ("18", "#### 18.0", True, False, False),
    ("18", "The answer is 18.", True, False, False),
    ("18", "#### 19", False, False, False),
]


@pytest.mark.parametrize("reference,completion,lenient,boxed,hashed", VERIFY)
def test_verify_modes(reference, completion, lenient, boxed, hashed):
    assert verify(reference, completion) is lenient
    assert verify(reference, completion, "strict_boxed") is boxed
    assert verify(reference, completion, "strict_hash") is hashed


def test_unknown_mode_is_a_clear_error():
    assert EXTRACTION_MODES == ("lenient", "strict_boxed", "strict_hash", "strict_numeric")
    for call in (lambda: extract_answer("1", "boxed"), lambda: verify("1", "1", "strict"),
                 lambda: verify_detailed("1", "1", "")):
        with pytest.raises(ValueError, match="extraction must be one of"):
            call()
    with pytest.raises(ValueError, match="extraction must be one of"):
        RuleVerifier(num_workers=1, extraction="exact")


# (completion, strict_numeric's answer) for the synthetic question 7+2-3 (reference 6)
NUMERIC = [
    ("7+2-3", None),                      # the restated question: lenient accepts it (= 6)
    ("#### 7+2-3", None), ("\\boxed{7+2-3}", None),  # an unevaluated expression after a marker
    ("#### 6", "6"), ("7+2=9. 9-3=6. #### 6", "6"), ("7+2=9. 9-3=6. \\boxed{6}", "6"),
    ("#### 06", "6"), ("#### 6 #### 6", "6"),  # one integer, however written or repeated
    ("#### 5 #### 6", None), ("\\boxed{6} #### 5", None), ("#### 6 or 7", None),  # hedges
    ("6", None), ("The answer is 6.", None),  # no answer marker
    ("7+2=9. 9-3=6. #### ", None), ("\\boxed{6", None), ("", None),  # truncated
]


@pytest.mark.parametrize("completion,answer", NUMERIC)
def test_strict_numeric_needs_an_integer_after_the_marker(completion, answer):
    assert extract_answer(completion, "strict_numeric") == answer
    assert verify("6", completion, "strict_numeric") is (answer == "6")


def test_strict_numeric_gold_rejects_the_restated_question():
    assert verify("6", "7+2-3")  # the lenient rules: equal to 6
    assert not verify("6", "7+2-3", "strict_numeric")
    assert verify("6", "#### 6", "strict_numeric")
    assert verify("-3", "1-4=-3. #### -3", "strict_numeric")
    assert verify("1-4=-3. #### -3", "#### -3", "strict_numeric")  # a full-solution reference
    assert not verify("6", "#### " + "9" * 5000, "strict_numeric")  # no int() of a huge literal


def test_rule_verifier_uses_its_extraction_mode():
    refs = ["\\frac{1}{2}", "18", "18"]
    comps = ["\\boxed{\\dfrac{1}{2}}", "work\n#### 18", "The answer is 18."]
    with RuleVerifier(num_workers=1, timeout_s=30, extraction="strict_boxed") as v:
        assert v.verify_batch(refs, comps) == [False, False, False]
        assert v.extract_batch(["\\boxed{3}, \\boxed{4}", "#### 5"]) == ["4", None]
    with RuleVerifier(num_workers=1, timeout_s=30, extraction="strict_hash") as v:
        got = v.verify_batch_detailed(refs, comps)
        assert [r.correct for r in got] == [False, True, False]
        assert [r.extracted for r in got] == [None, "18", None]


def test_cli_extraction_flag(tmp_path):
    import json
    import subprocess
    import sys

    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"reference": "18", "completion": "so\n#### 18"},
            {"reference": "18", "completion": "The answer is \\boxed{18}."}]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [sys.executable, "-m", "coop_jax.verify", "--in", str(inp), "--out", str(out),
           "--workers", "1", "--extraction", "strict_hash"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["correct"], g["extracted"]) for g in got] == [(True, "18"), (False, None)]
    proc = subprocess.run(cmd[:-1] + ["exact"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--extraction" in proc.stderr
