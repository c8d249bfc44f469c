"""Olympiad-style answer forms (issue 14): each form's accepts and the near-misses that must
stay rejected. Every pair goes end to end through ``verify(reference, completion)``."""

import pytest

from coop_jax.verify import extract_answer, verify

# (reference, completion, expected); the reference may be a bare answer or a full solution.
DECIMAL_COMMA = [
    ("3.75", "The answer is 3,75.", True), ("3,75", "\\boxed{3.75}", True),
    ("3.75", "\\boxed{3{,}75}", True), ("0.125", "\\boxed{0,125}", True),
    ("-2.5", "\\boxed{-2,5}", True), ("1,5", "\\boxed{1,50}", True), ("0.5", "\\boxed{0,500}", True),
    ("12500", "\\boxed{12,500}", True), ("\\{1, 5\\}", "\\boxed{1,5}", True),
    # a comma before exactly three digits is a thousands separator, never a decimal comma
    ("12.5", "\\boxed{12,500}", False), ("12,500", "\\boxed{12.5}", False),
    ("1.25", "\\boxed{1,250}", False), ("3.75", "\\boxed{3,750}", False),
    ("2,125", "\\boxed{2.125}", False), ("500", "\\boxed{0,500}", False),
    ("3,75", "\\boxed{375}", False), ("3,75", "\\boxed{3.075}", False),
    ("1.5", "\\boxed{1, 5}", False), ("1.5", "\\boxed{1,5,0}", False),
]

OUTSIDE_BOX = [
    ("12", "Answer: $ 12 $", True), ("12", "So the answer is \\( 12 \\).", True),
    ("12", "Work.\nAnswer:\n\\[\n12\n\\]", True), ("12", "Work.\n**Answer**\n\n$$ 12 $$", True),
    ("\\frac{1}{2}", "Work.\n### Final Answer\n\\[\n\\frac{1}{2}\n\\]\n", True),
    ("9", "Answer \\[ 9 \\]", True), ("9", "Answer \\( 9 \\)", True), ("9", "Answer $$ \n 9 \n $$", True),
    ("12", "### Answer\n\n12", True),
    ("12", "Work.\nAnswer:\n\\[\n13\n\\]", False), ("12", "Answer:\n\\[\n12 + 1\n\\]", False),
    ("12", "Answer:\n\\[\n12", False),
    ("9", "Answer $ \n 9 \n $", False), ("9", "Answer \\( \n 9 \n \\)", False),  # inline math is one line
    ("12", "The answer is \\(12\\)... no wait, the answer is \\(13\\).", False),
    ("12", "**Answer**\nWe first compute 12 apples and then many more steps follow", False),
]

SEVERAL_BOXES = [
    ("2, -3", "In the first case x = \\boxed{2}. In the second case, x = \\boxed{-3}.", True),
    ("\\{-3, 2\\}", "So \\boxed{2} and also \\boxed{-3}", True),
    ("One needs \\boxed{1} paper and \\boxed{2} bins.", "1,2", True),
    ("One needs \\boxed{1} paper and \\boxed{2} bins.", "\\boxed{2, 1}", True),
    # an intermediate or extra box is never read as part of the answer
    ("2", "First \\boxed{2}. Hmm, no: \\boxed{-3}", False),
    ("-3", "First \\boxed{-3}. Hmm, no: \\boxed{2}", False),
    ("2, -3", "\\boxed{5} then \\boxed{2} then \\boxed{-3}", False),
    ("\\{-3, 2\\}", "\\boxed{2} and later again \\boxed{2}", False),
    ("(2,-3)", "x is \\boxed{-3} and y is \\boxed{2}", False),
    ("One needs \\boxed{1} paper and \\boxed{2} bins.", "\\boxed{2, 1, 3}", False),
    ("One needs \\boxed{1} paper and \\boxed{2} bins.", "\\boxed{1}", False),
]

LABELLED = [
    ("(4,1)", "\\boxed{(a,b)=(4,1)}", True), ("2:3", "\\boxed{AB:CD=2:3}", True),
    ("7", "\\boxed{|PQ|=7}", True), ("7", "\\boxed{\\lvert PQ \\rvert = 7}", True),
    ("(5,2),(7,2)", "\\boxed{p=5,q=2;p=7,q=2}", True),
    ("(5,2),(7,2)", "\\boxed{p=7,q=2; p=5,q=2}", True),
    ("f(x)=1 \\text{ or } f(x)=-1", "\\boxed{f(x)=-1 \\text{ or } f(x)=1}", True),
    ("(a,b)=(4,1)", "\\boxed{(4,1)}", True), ("|PQ|=7", "\\boxed{7}", True),
    ("p=5,q=2", "\\boxed{q=2, p=5}", True), ("p=5,q=2", "\\boxed{(5,2)}", True),
    ("(5,2),(7,2)", "\\boxed{p=5, q=2 \\text{ and } p=7, q=2}", True),
    ("(5,2),(7,2)", "\\boxed{(p,q) \\in \\{(7,2),(5,2)\\}}", True), ("\\{2,3\\}", "\\boxed{a=3, b=2}", True),
    # the left-hand side is never the answer, and values keep their labels
    ("(4,1)", "\\boxed{(a,b)=(1,4)}", False), ("4", "\\boxed{(a,b)=(4,1)}", False),
    ("2:3", "\\boxed{AB:CD=3:2}", False), ("7", "\\boxed{|PQ|=8}", False),
    ("5", "\\boxed{|x|=5}", False), ("10", "\\boxed{2x=10}", False),
    ("(5,2),(7,2)", "\\boxed{p=2,q=5;p=2,q=7}", False), ("(5,2),(7,2)", "\\boxed{p=5,q=2}", False),
    ("p=5,q=2", "\\boxed{p=2, q=5}", False), ("p=5,q=2", "\\boxed{(2,5)}", False),
    ("(5,2),(7,2)", "\\boxed{p=5, q=2, p=2, q=7}", False),
    ("(5,2),(7,2)", "\\boxed{p=5, q=2, q=7}", False), ("(5,2),(7,2)", "\\boxed{(p,q) \\in \\{(5,2)\\}}", False),
    ("f(x)=1 \\text{ or } f(x)=-1", "\\boxed{f(x)=1}", False),
]

CHAINS = [
    ("x \\in [-1,4]", "\\boxed{-1 \\le x \\le 4}", True), ("(2,5)", "\\boxed{2<y<5}", True),
    ("[-2,-1] \\cup [1,2]", "\\boxed{1 \\le |z| \\le 2}", True),
    ("(-3,3)", "\\boxed{|x|<3}", True), ("(-\\infty,-2)\\cup(2,\\infty)", "\\boxed{|x|>2}", True),
    ("[-2,2]", "\\boxed{-1 \\le |z| \\le 2}", True), ("(-2,0)\\cup(0,2)", "\\boxed{0<|x|<2}", True),
    ("[-2,-1] \\cup [1,2]", "\\boxed{1 < |z| \\le 2}", False),
    ("[-2,-1] \\cup [1,2]", "\\boxed{1 \\le z \\le 2}", False),
    ("x \\in [-1,4]", "\\boxed{-1 < x \\le 4}", False), ("(2,5)", "\\boxed{2 \\le y < 5}", False),
    ("(-3,3)", "\\boxed{|x| \\le 3}", False), ("(-\\infty,-2)\\cup(2,\\infty)", "\\boxed{|x| \\ge 2}", False),
]

LISTS = [
    ("\\{-3,-1,4\\}", "\\boxed{-3;-1;4}", True), ("-1, 4, -3", "\\boxed{4; -3; -1}", True),
    ("\\{(1,2),(3,4)\\}", "\\boxed{(3,4),(1,2)}", True), ("\\{(1,2),(3,4)\\}", "\\boxed{(3,4); (1,2)}", True),
    ("\\{-3,-1,4\\}", "\\boxed{-3;-1}", False), ("\\{-3,-1,4\\}", "\\boxed{-3;1;4}", False),
    ("\\{(1,2),(3,4)\\}", "\\boxed{(2,1),(3,4)}", False), ("(1,2),(3,4)", "\\boxed{(1,2);(4,3)}", False),
    ("\\{-3,-1,4\\}", "\\boxed{-3;;4}", False),
]

# Percent policy: the sign may be dropped (50% = 50); a bare number strictly between 0 and 1 is
# read as a proportion (50% = 0.5) and then only that way; so 100% != 1 and 0.5% != 0.5.
PERCENT = [
    ("45", "\\boxed{45 percent}", True), ("45\\%", "\\boxed{45 pct}", True),
    ("45", "\\boxed{45 percentage}", True), ("45\\%", "The answer is 45 per cent.", True),
    ("45\\%", "\\boxed{45\\text{ percent}}", True), ("50\\%", "\\boxed{0.5}", True),
    ("50\\%", "\\boxed{\\frac12}", True), ("50\\%", "\\boxed{50}", True), ("0.5", "\\boxed{50\\%}", True),
    ("50", "\\boxed{50\\%}", True), ("0\\%", "\\boxed{0}", True), ("2.5\\%", "\\boxed{0.025}", True),
    ("45", "\\boxed{46 percent}", False), ("45\\%", "\\boxed{4.5 pct}", False),
    ("4.5", "\\boxed{45 percent}", False), ("1", "\\boxed{100\\%}", False),  # found by fuzzing
    ("100\\%", "\\boxed{1}", False), ("150\\%", "\\boxed{1.5}", False), ("2", "\\boxed{200\\%}", False),
    ("0.5", "\\boxed{0.5\\%}", False), ("0.5\\%", "\\boxed{0.5}", False),
]

_A = "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"
_B = "\\begin{pmatrix}3&4\\\\1&2\\end{pmatrix}"
MATRICES_RATIOS = [
    ("\\begin{pmatrix}4&6\\\\4&6\\end{pmatrix}", f"\\boxed{{{_A}+{_B}}}", True),
    ("\\begin{pmatrix}5&8\\\\13&20\\end{pmatrix}", f"\\boxed{{{_A}{_B}}}", True),
    ("\\begin{pmatrix}2\\\\6\\end{pmatrix}", "\\boxed{2\\begin{pmatrix}1\\\\3\\end{pmatrix}}", True),
    ("\\begin{pmatrix}5&8\\\\13&20\\end{pmatrix}", f"\\boxed{{{_A} \\cdot {_B}}}", True),
    (f"{_A} - {_B}", "\\boxed{\\begin{pmatrix}-2&-2\\\\2&2\\end{pmatrix}}", True),
    ("\\frac{7}{32}", "\\boxed{7:32}", True), ("7:32", "\\boxed{\\frac{7}{32}}", True),
    ("2:3", "\\boxed{\\frac{2}{3}}", True),
    ("\\begin{pmatrix}4&6\\\\4&7\\end{pmatrix}", f"\\boxed{{{_A}+{_B}}}", False),
    ("\\begin{pmatrix}5&8\\\\13&20\\end{pmatrix}", f"\\boxed{{{_B}{_A}}}", False),
    ("\\begin{pmatrix}4&6\\\\4&6\\end{pmatrix}", f"\\boxed{{{_A}^{{2}}}}", False),
    ("\\frac{7}{32}", "\\boxed{7:31}", False), ("\\frac{7}{32}", "\\boxed{32:7}", False),
    ("7:32", "\\boxed{7.32}", False), ("12:00", "\\boxed{1:00}", False), ("3:30", "\\boxed{3:03}", False),
]

# Found by fuzzing: a number pulled out of an unclosed box followed by random LaTeX.
BROKEN_BOX = [
    ("1", "The answer is \\boxed{i\\cdot/1\\right)\\pm0-\\le", False),
    ("1", "The answer is \\boxed{i\\cdot/1\\right)\\pm0-\\le\\frac{ab} x^{2 \\sqrt", False),
    ("1", "The answer is \\boxed{i\\cdot/1\\right)\\pm0-\\le}} 1", False),
    ("1", "First \\boxed{1}. The answer is \\boxed{1 + \\frac{", False),
    ("12", "So the answer is \\boxed{12", False),
    ("1", "<think>\\boxed{1}</think>The answer is \\boxed{1\\cdot(", False),
]

TABLE = (DECIMAL_COMMA + OUTSIDE_BOX + SEVERAL_BOXES + LABELLED + CHAINS + LISTS + PERCENT
         + MATRICES_RATIOS + BROKEN_BOX)


@pytest.mark.parametrize("reference,completion,expected", TABLE)
def test_answer_forms(reference, completion, expected):
    assert verify(reference, completion) is expected


def test_every_form_has_accepts_and_near_misses():
    for table in (DECIMAL_COMMA, OUTSIDE_BOX, SEVERAL_BOXES, LABELLED, CHAINS, LISTS, PERCENT,
                  MATRICES_RATIOS):
        assert {e for _, _, e in table} == {True, False}


@pytest.mark.parametrize("completion", [c for _, c, _ in BROKEN_BOX])
def test_broken_final_box_gives_no_answer(completion):
    assert extract_answer(completion) is None


def test_lone_number_is_not_taken_from_latex_junk():
    assert extract_answer("Therefore the value is \\frac{ab}{1 x^{\\sqrt{.") is None
    assert extract_answer("Therefore, Jane started 3 hours ago.") == "3"
