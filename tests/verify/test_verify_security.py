"""Untrusted model text is never evaluated as Python, and pathological answers are cheap."""

import time

import pytest
import sympy.parsing.sympy_parser as sympy_parser

from coop_jax.verify import answers_equivalent, extract_answer, verify_detailed


def _injections(marker: str) -> list[str]:
    cmd = f"__import__('os').system('touch {marker}')"
    return [
        cmd, f"\\boxed{{{cmd}}}", f"The answer is {cmd}.", f"#### {cmd}",
        f"\\boxed{{(lambda: {cmd})()}}", f"\\boxed{{eval(\"{cmd}\")}}",
        f"\\boxed{{exec('import os; os.system(\"touch {marker}\")')}}",
        "\\boxed{().__class__.__bases__[0].__subclasses__()}",
        f"\\boxed{{\\text{{{cmd}}}}}", f"\\boxed{{x = {cmd}}}", f"\\boxed{{\\{{{cmd}, 1\\}}}}",
        f"\\boxed{{\\frac{{{cmd}}}{{2}}}}", f"\\boxed{{\\sqrt{{{cmd}}}}}",
        "\\boxed{__builtins__.__dict__['eval']('1+1')}", "\\boxed{getattr(__builtins__, 'exit')()}",
        "\\boxed{Symbol('x').__class__.__init__.__globals__}",
    ]


def test_injection_strings_have_no_side_effect(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    seen: list[str] = []
    real_parse_expr = sympy_parser.parse_expr

    def recording_parse_expr(s, *args, **kwargs):
        seen.append(s)
        return real_parse_expr(s, *args, **kwargs)

    monkeypatch.setattr(sympy_parser, "parse_expr", recording_parse_expr)
    for text in _injections(str(marker)):
        for ref in ("2", text, "\\frac{1}{2}", "x"):
            assert verify_detailed(ref, text).error is None
        answers_equivalent(text, text + "+1")
        extract_answer(text)
    assert not marker.exists()
    # sympify/parse_expr (which eval Python) only ever sees plain numeric tokens
    assert all(s.replace(".", "").isdigit() for s in seen), seen


@pytest.mark.parametrize("completion", [
    "\\boxed{9^{9^{9^9}}}", "\\boxed{10^{10^{10}}!}", "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{(10^{100})!}", "\\boxed{x^{10^{10}}}", "\\boxed{(x+1)^{100000}}",
    "\\boxed{\\binom{10^{100}}{10^{50}}}", "\\boxed{\\Gamma(10^{9})}", "\\boxed{e^{e^{e^{e^{10}}}}}",
    "\\boxed{\\sin(10^{10000}\\pi)}", "\\boxed{10^{-10^{10}}}", "\\boxed{1.5e100000}",
    "\\boxed{\\sum_{n=1}^{10^{10}} n}", "\\boxed{\\int_0^1 x dx}", "\\boxed{((5!)!)!}",
    "{" * 10000 + "1" + "}" * 10000, "\\boxed{" * 10000, "\\boxed{" * 5000 + "1" + "}" * 5000,
    "\\frac{" * 3000, "The answer is " + "(" * 5000, "#### " + "1," * 200000, "x" * (1 << 20),
    "\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}",
])
def test_pathological_answers_are_cheap_in_process(completion):
    t0 = time.monotonic()
    r = verify_detailed("1", completion)
    assert not r.correct
    assert time.monotonic() - t0 < 3.0
