"""Synthetic arithmetic task and prompt templates."""
import operator
import re
import subprocess
import sys

import numpy as np
import pytest

from coop_jax.data import PROMPT_TEMPLATES, format_prompt
from conftest import REPO
from coop_jax.data.synthetic import (
    SyntheticConfig,
    holdout_split,
    make_dataset,
    make_problem,
    make_rephrase,
)

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_TOKEN = re.compile(r"\s*(\d+|[-+*()])")


def safe_eval(expr: str) -> int:
    """Integer +, -, * and parentheses with the usual precedence (recursive descent, no eval)."""
    tokens, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        assert m, f"bad character at {pos} in {expr!r}"
        tokens.append(m.group(1))
        pos = m.end()
    i = 0

    def peek():
        return tokens[i] if i < len(tokens) else None

    def take():
        nonlocal i
        i += 1
        return tokens[i - 1]

    def factor():
        tok = take()
        if tok == "(":
            v = expr_()
            assert take() == ")"
            return v
        assert tok.isdigit(), tok
        return int(tok)

    def term():
        v = factor()
        while peek() == "*":
            take()
            v *= factor()
        return v

    def expr_():
        v = term()
        while peek() in ("+", "-"):
            v = v + term() if take() == "+" else v - term()
        return v

    v = expr_()
    assert i == len(tokens), f"trailing tokens in {expr!r}"
    return v


def rephrase_to_expr(text: str) -> str:
    body = re.fullmatch(r"What is (.*)\?", text).group(1)
    return body.replace(" plus ", "+").replace(" minus ", "-").replace(" times ", "*")


def test_safe_eval_itself():
    assert safe_eval("7+12-5") == 14
    assert safe_eval("2+3*4") == 14
    assert safe_eval("(2+3)*4-1") == 19


@pytest.mark.parametrize("cfg", [
    SyntheticConfig(),
    SyntheticConfig(answer_format="boxed"),
    SyntheticConfig(num_operands_min=2, num_operands_max=5, max_operand=50, ops="+-*"),
    SyntheticConfig(ops="*", max_operand=3),
])
def test_answers_are_correct(cfg):
    for rec in make_dataset(300, seed=3, cfg=cfg):
        value = safe_eval(rec["question"])
        assert rec["reference"] == str(value)
        assert safe_eval(rephrase_to_expr(rec["rephrased"])) == value
        marker = f"#### {value}" if cfg.answer_format == "####" else f"\\boxed{{{value}}}"
        assert rec["solution"].endswith(marker)
        # Each step "a op b=c." is correct arithmetic and chains into the next.
        steps = re.findall(r"(-?\d+)([-+*])(\d+)=(-?\d+)\.", rec["solution"])
        assert len(steps) == len(re.findall(r"[-+*]", rec["question"]))
        prev = None
        for a, op, b, c in steps:
            assert _OPS[op](int(a), int(b)) == int(c)
            assert prev is None or int(a) == prev
            prev = int(c)
        assert prev == value
        assert rec["solution"].isascii() and rec["question"].isascii()


def test_default_lengths_are_short():
    data = make_dataset(2000, seed=0, cfg=SyntheticConfig())
    assert max(len(r["question"]) for r in data) <= 24
    assert max(len(r["solution"]) for r in data) <= 48
    assert max(len(r["rephrased"]) for r in data) <= 32
    boxed = make_dataset(2000, seed=0, cfg=SyntheticConfig(answer_format="boxed"))
    assert max(len(r["solution"]) for r in boxed) <= 48


def test_deterministic_and_unique_ids():
    a = make_dataset(200, seed=7)
    assert a == make_dataset(200, seed=7)
    assert a != make_dataset(200, seed=8)
    assert len({r["id"] for r in a}) == 200
    assert make_dataset(50, seed=7) == a[:50]  # prefix-stable
    rng = np.random.default_rng(0)
    assert make_problem(rng)["id"].startswith("synthetic:")


def test_example_format():
    rec = {"question": "7+12-5"}
    assert make_rephrase(rec["question"]) == "What is 7 plus 12 minus 5?"
    assert make_rephrase("(2+3)*4") == "What is (2 plus 3) times 4?"
    with pytest.raises(ValueError, match="not a synthetic"):
        make_rephrase("7 + x")
    data = make_dataset(100, seed=0)
    assert all(set(r) == {"id", "question", "reference", "solution", "rephrased"} for r in data)
    two = next(r for r in data if r["question"].count("+") + r["question"].count("-") == 2)
    a, op1, b, op2, c = re.fullmatch(r"(\d+)([-+])(\d+)([-+])(\d+)", two["question"]).groups()
    mid = safe_eval(f"{a}{op1}{b}")
    assert two["solution"] == f"{a}{op1}{b}={mid}. {mid}{op2}{c}={two['reference']}. " \
                              f"#### {two['reference']}"


def test_train_test_splits_disjoint():
    cfg = SyntheticConfig()
    train = make_dataset(1000, seed=0, cfg=cfg, split="train")
    test = make_dataset(200, seed=0, cfg=cfg, split="test")
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert all(holdout_split(r["question"]) == "test" for r in test)
    assert len({r["id"] for r in train + test}) == 1200
    with pytest.raises(ValueError, match="split"):
        make_dataset(3, seed=0, split="validation")
    with pytest.raises(ValueError, match="seed"):
        make_dataset(3, seed=-1)
    with pytest.raises(ValueError, match="n must be"):
        make_dataset(-1, seed=0)
    with pytest.raises(ValueError, match="too small"):
        # None of 0-0, 0-1, 1-0, 1-1 falls in the test bucket.
        tiny = SyntheticConfig(num_operands_max=2, max_operand=1, ops="-")
        assert all(holdout_split(f"{a}-{b}") == "train" for a in (0, 1) for b in (0, 1))
        make_dataset(5, seed=0, cfg=tiny, split="test")


@pytest.mark.parametrize("kwargs, field", [
    ({"num_operands_min": 1}, "num_operands_min"),
    ({"num_operands_min": 3, "num_operands_max": 2}, "num_operands_max"),
    ({"max_operand": 0}, "max_operand"),
    ({"max_operand": 2.5}, "max_operand"),
    ({"ops": ""}, "ops"),
    ({"ops": "+/"}, "ops"),
    ({"ops": "++"}, "ops"),
    ({"answer_format": "answer:"}, "answer_format"),
])
def test_config_validation(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=field):
        SyntheticConfig(**kwargs)


def test_templates():
    q = "Tom has 3 apples. How many?"
    assert format_prompt("gsm8k", q) == (
        q + ' Let\'s think step by step and output the final answer after "####".')
    assert format_prompt("boxed", q) == (
        q + " Let's think step by step and output the final answer within \\boxed{}.")
    assert format_prompt("raw", q) == q
    assert format_prompt("synthetic", "7+12-5") == "7+12-5 = "
    assert format_prompt("raw", "{question} {}") == "{question} {}"  # braces pass through
    assert set(PROMPT_TEMPLATES) >= {"gsm8k", "boxed", "synthetic", "raw"}
    with pytest.raises(ValueError, match="allowed"):
        format_prompt("nope", q)
    with pytest.raises(ValueError, match="non-empty"):
        format_prompt("raw", "  ")


def test_chat_template():
    class FakeChatTokenizer:
        def __init__(self):
            self.calls = []

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            self.calls.append((messages, tokenize, add_generation_prompt))
            return f"<user>{messages[0]['content']}</user><assistant>"

    tok = FakeChatTokenizer()
    out = format_prompt("boxed", "1+1?", tokenizer=tok, chat=True)
    expected = "1+1? Let's think step by step and output the final answer within \\boxed{}."
    assert out == f"<user>{expected}</user><assistant>"
    assert tok.calls == [([{"role": "user", "content": expected}], False, True)]
    with pytest.raises(ValueError, match="apply_chat_template"):
        format_prompt("raw", "x", chat=True)


def test_package_import_does_not_load_tensorflow_or_jax():
    code = ("import sys, coop_jax.data; "
            "bad = [m for m in ('tensorflow', 'tensorflow_datasets', 'jax') if m in sys.modules]; "
            "assert not bad, bad")
    repo_root = REPO
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo_root)


# ----------------------------------------------------------- consistent wrong solutions
_STEP = re.compile(r"(-?\d+)([-+*])(-?\d+)=(-?\d+)")


def _check_consistent_wrong(question, solution, wrong, reference):
    from coop_jax.verify import verify

    steps = _STEP.findall(wrong)
    assert steps, wrong
    prev = None
    for a, op, b, result in steps:
        if prev is not None:
            assert int(a) == prev, f"step does not start from the previous result: {wrong}"
        prev = int(result)
    final = int(re.search(r"(?:####\s*|\\boxed\{)(-?\d+)", wrong).group(1))
    assert final == prev, f"final answer is not the last computed value: {wrong}"
    assert not verify(reference, wrong), f"{wrong} verifies against {reference}"
    # exactly one slip: one step has a wrong result or a right operand that differs from the
    # question's, and the chain before it is untouched
    truth = _STEP.findall(solution)
    assert len(truth) == len(steps)
    first_diff = next(i for i, (s, t) in enumerate(zip(steps, truth)) if s != t)
    assert steps[:first_diff] == truth[:first_diff]
    a, op, b, result = steps[first_diff]
    misread = b != truth[first_diff][2]
    slip = int(result) != _OPS[op](int(a), int(b))
    assert misread != slip, (solution, wrong)


@pytest.mark.parametrize("cfg", [SyntheticConfig(), SyntheticConfig(
    num_operands_min=2, num_operands_max=5, max_operand=30, ops="+-*", answer_format="boxed")])
def test_consistent_wrong_solution_is_consistent_and_wrong(cfg):
    from coop_jax.data.synthetic import consistent_wrong_solution, solution_error_kind

    rng = np.random.default_rng(0)
    made = 0
    for rec in make_dataset(300, seed=5, cfg=cfg):
        wrong = consistent_wrong_solution(rec["question"], rec["solution"], rng,
                                          cfg.answer_format)
        if wrong is None:  # only when every slip is absorbed by a later "*0"
            assert "*0" in rec["question"].replace("(", "").replace(")", "")
            continue
        made += 1
        _check_consistent_wrong(rec["question"], rec["solution"], wrong, rec["reference"])
        assert solution_error_kind(rec["question"], rec["reference"], wrong) == "consistent_wrong"
    assert made >= 290


def test_consistent_wrong_solution_keeps_the_text_around_the_steps():
    from coop_jax.data.synthetic import consistent_wrong_solution

    rng = np.random.default_rng(1)
    text = "16-13=3. 3-5=-2. #### -2 done"
    wrong = consistent_wrong_solution("16-13-5", text, rng)
    assert wrong.endswith(" done") and wrong.count(".") == 2
    _check_consistent_wrong("16-13-5", "16-13=3. 3-5=-2. #### -2", wrong[:-5], "-2")
    # the slip is early: the first step here (two steps -> first half is step 0)
    assert not wrong.startswith("16-13=3.")


def test_consistent_wrong_solution_without_steps_rebuilds_from_the_question():
    from coop_jax.data.synthetic import consistent_wrong_solution

    wrong = consistent_wrong_solution("7+12-5", "#### 14", np.random.default_rng(2))
    _check_consistent_wrong("7+12-5", "7+12=19. 19-5=14. #### 14", wrong, "14")
    assert consistent_wrong_solution("hello", "no steps", np.random.default_rng(0)) is None


def test_solution_error_kind():
    from coop_jax.data.synthetic import consistent_wrong_solution, solution_error_kind

    q, ref, good = "16-13-5", "-2", "16-13=3. 3-5=-2. #### -2"
    assert solution_error_kind(q, ref, good) == "correct"
    assert solution_error_kind(q, ref, "16-13=3. 3-5=-2. #### -1") == "final_mismatch"
    wrong = consistent_wrong_solution(q, good, np.random.default_rng(0))
    assert solution_error_kind(q, ref, wrong) == "consistent_wrong"
    assert solution_error_kind(q, ref, "16-13=3. 3-5=-3. #### -3") == "consistent_wrong"
    assert solution_error_kind(q, ref, "16-13=3. 4-5=-1. #### -1") == "other"  # broken chain
    assert solution_error_kind(q, ref, "16-13=4. 4-5=-1. #### -3") == "other"
    assert solution_error_kind(q, ref, "16-13=3. 3-5=-2.") == "no_answer"


def test_story_surface_counts_stay_whole_and_match_the_expression():
    cfg = SyntheticConfig(num_operands_max=3, ops="+-", max_operand=20, surface="words")
    records = make_dataset(300, seed=1, cfg=cfg, split="test")
    for r in records:
        expression = r["rephrased"].removeprefix("What is ").removesuffix("?")
        numbers = [int(n) for n in re.findall(r"\d+", r["question"])]
        assert numbers == [int(n) for n in re.findall(r"\d+", expression)]
        assert all(1 <= n <= 20 for n in numbers)
        # left to right, every running total is a non-negative count, the last one the answer
        value, steps = numbers[0], re.findall(r"[-+]", expression)
        for op, n in zip(steps, numbers[1:]):
            value = value + n if op == "+" else value - n
            assert value >= 0
        assert str(value) == r["reference"] and r["solution"].endswith(f"#### {value}")
        assert r["question"].endswith("?") and holdout_split(r["question"]) == "test"
    assert len({r["question"] for r in records}) == len(records)  # a large question space


@pytest.mark.parametrize("kwargs", [dict(surface="words", ops="+*"), dict(surface="prose")])
def test_story_surface_validation(kwargs):
    with pytest.raises(ValueError, match="surface"):
        SyntheticConfig(**kwargs)
