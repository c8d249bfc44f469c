"""Table-driven tests of the rule verifier's extraction and equivalence policy."""

import pytest

from coop_jax.verify import answers_equivalent, extract_answer, verify, verify_detailed
from coop_jax.verify.normalize import match_brace, matching_braces

# (reference answer, candidate answer, expected verdict). Candidates are checked bare and
# inside \boxed{}.
EQUIV = [
    # integers, decimals, fractions, separators
    ("18", "18", True), ("18", "18.0", True), ("18", "18.00", True), ("18", "017", False),
    ("18", "-18", False), ("-50", "-50", True), ("-50", "50", False), ("0", "-0", True),
    ("1.25", "\\frac54", True), ("1.25", "5/4", True), ("1.25", "1.2", False),
    (".0000672", "0.0000672", True), (".0000672", "6.72\\times10^{-5}", True),
    (".0000672", "0.000067", False), ("3.21", "3.210", True), ("326.5", "\\frac{653}{2}", True),
    ("\\frac{14}{3}", "\\dfrac{14}{3}", True), ("\\frac{14}{3}", "\\tfrac{14}{3}", True),
    ("\\frac{14}{3}", "14/3", True), ("\\frac{14}{3}", "4\\frac{2}{3}", True),
    ("\\frac{14}{3}", "4.67", False), ("\\frac{14}{3}", "\\frac{3}{14}", False),
    ("\\frac13", "\\frac{1}{3}", True), ("\\frac 59", "\\frac{5}{9}", True),
    ("\\frac9{19}", "\\frac{9}{19}", True), ("\\frac43", "1\\frac13", True),
    ("\\frac{1}{3}", "0.\\overline{3}", True), ("\\frac{1}{3}", "0.333", False),
    ("\\frac{1}{6}", "0.1\\overline{6}", True), ("\\dfrac{33}{100}", "0.33", True),
    ("137 \\frac{1}{2}", "137.5", True), ("137 \\frac{1}{2}", "\\frac{275}{2}", True),
    ("1\\frac{4}{5}", "\\frac{9}{5}", True), ("1\\frac{4}{5}", "\\frac{4}{5}", False),
    ("2,125", "2125", True), ("1,450,000", "1450000", True), ("10,\\!080", "10080", True),
    ("11,\\! 111,\\! 111,\\! 100", "11111111100", True), ("58,500", "58500", True),
    ("2,125", "2.125", False), ("10080", "10{,}080", True), ("1000000", "1\\,000\\,000", True),
    # percent, currency, units, degrees, text
    ("25\\%", "25", True), ("25\\%", "0.25", True), ("25\\%", "25 percent", True),
    ("0.15", "15\\%", True), ("25\\%", "0.025", False), ("25\\%", "2.5\\%", False),
    ("\\$18.90", "18.90", True), ("\\$18.90", "18.9 dollars", True), ("\\$18.90", "\\$18.9", True),
    ("\\$36", "36 dollars", True), ("\\$32,\\!348", "32348", True), ("\\$18.90", "18.09", False),
    ("5.4 \\text{ cents}", "5.4", True), ("864 \\mbox{ inches}^2", "864", True),
    ("15\\mbox{ cm}^2", "15 \\text{cm}^2", True), ("15\\mbox{ cm}^2", "15", True),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}", True), ("18", "18 apples", True),
    ("90^\\circ", "90", True), ("90^\\circ", "90^{\\circ}", True), ("90^\\circ", "90 degrees", True),
    ("30^\\circ", "\\frac{\\pi}{6}", False), ("145^\\circ", "145\u00b0", True),
    ("\\text{Evelyn}", "Evelyn", True), ("\\text{Evelyn}", "\\text{evelyn}", True),
    ("\\text{east}", "East", True), ("\\text{east}", "west", False), ("\\text{even}", "odd", False),
    ("\\text{ellipse}", "\\text{an ellipse}", True), ("\\text{Navin}", "Luka", False),
    # multiple choice
    ("\\text{(C)}", "C", True), ("\\text{(C)}", "(C)", True), ("\\text{(C)}", "\\textbf{(C)}", True),
    ("\\text{(C)}", "(C) 12", True), ("\\text{(C)}", "D", False), ("\\text{(E)}", "(B)", False),
    ("\\text{(B)}", "B", True),
    # radicals, pi, complex, symbolic
    ("3\\sqrt{13}", "\\sqrt{117}", True), ("3\\sqrt{13}", "3\\sqrt{12}", False),
    ("11\\sqrt2", "11 \\sqrt{2}", True), ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}", True),
    ("\\frac{\\sqrt{3}}{3}", "0.57735", False), ("\\sqrt{51}", "\\sqrt{50}", False),
    ("4", "4\\sqrt2", False), ("2\\sqrt{113}", "\\sqrt{452}", True), ("\\pi", "3.14", False),
    ("288 \\pi", "288\\pi", True), ("8 \\pi", "\\pi \\cdot 8", True), ("12\\pi", "12", False),
    ("18+2\\pi", "2\\pi+18", True), ("6 - 5i", "6-5i", True), ("6 - 5i", "6+5i", False),
    ("-2 + 7i", "7i-2", True), ("1+274i", "1 + 274 i", True), ("1 - 12i", "1-12i", True),
    ("-\\frac{\\pi}{6}", "-\\frac{\\pi}{6}", True), ("-\\frac{\\pi}{6}", "\\frac{\\pi}{6}", False),
    ("\\tan^2 y + 1", "\\sec^2 y", True), ("\\cot x", "\\frac{\\cos x}{\\sin x}", True),
    ("\\cot x", "\\tan x", False), ("p - q", "-q + p", True), ("p - q", "q - p", False),
    ("x^5 - x^4 + x^3 - x^2 + x - 1", "(x-1)(x^4+x^2+1)", True),
    ("x^3+3x-6", "x^3+3x+6", False), ("(a+5)(b+2)", "ab+2a+5b+10", True),
    ("2k+2", "2(k+1)", True), ("2k+2", "2k", False), ("6r^2-4r-24", "2(3r^2-2r-12)", True),
    ("\\frac{11+9a}{20}", "\\frac{11}{20}+\\frac{9a}{20}", True), ("3R^2", "3R^2", True),
    ("1-\\frac{1}{e}", "1+\\frac{1}{e}", False), ("1-\\frac{1}{e}", "\\frac{e-1}{e}", True),
    ("\\frac{1}{2004!}", "\\frac{1}{2006!}", False), ("\\frac{1}{2004!}", "\\frac{1}{2004!}", True),
    ("\\frac{2005 \\cdot 2006}{2006!}", "\\frac{1}{2004!}", True), ("e^{-1000}", "0", False),
    ("2^{10}", "1024", True), ("2^{100}", "2^{100}+1", False), ("10!", "3628800", True),
    ("\\binom{5}{2}", "10", True), ("\\sqrt{3+2\\sqrt2}", "1+\\sqrt2", True),
    # plus-minus
    ("\\pm 2021", "2021", False), ("\\pm 2021", "2021, -2021", True), ("\\pm 2021", "\\pm2021", True),
    ("1 \\pm \\sqrt{19}", "1+\\sqrt{19}, 1-\\sqrt{19}", True), ("1 \\pm \\sqrt{19}", "1+\\sqrt{19}", False),
    ("3 \\pm 2 \\sqrt{2}", "3-2\\sqrt2, 3+2\\sqrt2", True),
    ("\\{1\\pm\\sqrt{5},-2\\}", "-2, 1+\\sqrt5, 1-\\sqrt5", True),
    ("\\{1\\pm\\sqrt{5},-2\\}", "1+\\sqrt5, 1-\\sqrt5", False),
    # sets, lists, tuples
    ("1,-2", "-2,1", True), ("1,-2", "1", False), ("1,-2", "1,-2,3", False), ("3, 5, 7", "7,5,3", True),
    ("3, 5, 7", "3, 5", False), ("\\{1,2\\}", "\\{2,1\\}", True), ("\\{1,2\\}", "2, 1", True),
    ("\\{1,2\\}", "(1,2)", False), ("\\{5\\}", "5", True), ("-2,1", "x=-2, x=1", True),
    ("(6,31,-1)", "(6, 31, -1)", True), ("(6,31,-1)", "(31,6,-1)", False), ("(6,31,-1)", "6,31,-1", True),
    ("(15,-29)", "(15, -29)", True), ("(15,-29)", "(-29,15)", False),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, 90^\\circ)", False),
    ("\\left( \\frac{3}{2}, -13 \\right)", "(1.5, -13)", True), ("(1,-16,-4,43)", "(1,-16,-4,42)", False),
    # intervals and inequalities
    ("(3,4]", "(3,4]", True), ("(3,4]", "(3,4)", False), ("(3,4]", "[3,4]", False),
    ("(2,\\infty)", "(2, \\infty)", True), ("(2,\\infty)", "x>2", True), ("(2,\\infty)", "x \\ge 2", False),
    ("(2,\\infty)", "[2,\\infty)", False), ("(-\\infty, 0]", "x \\le 0", True),
    ("(-\\infty, 0]", "(-\\infty, 0)", False), ("x \\in [-2,7]", "[-2,7]", True),
    ("x \\in [-2,7]", "-2 \\le x \\le 7", True), ("x \\in [-2,7]", "-2 < x \\le 7", False),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(3,\\infty)\\cup(-\\infty,2)", True),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty, 2] \\cup (3, \\infty)", False),
    ("(0,9) \\cup (9,36)", "(0,9)\\cup(9,36)", True), ("\\left(\\frac{3}{5},\\frac{8}{3}\\right]", "(0.6, 8/3]", True),
    ("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", "[\\pi^2/8, 5\\pi^2/4]", True),
    ("(-\\sqrt{3}, \\sqrt{3})", "-\\sqrt3 < x < \\sqrt3", True),
    # equations
    ("x=5", "5", True), ("5", "x=5", True), ("x=5", "x = 5", True), ("x=5", "6", False),
    ("x=5", "y=5", False), ("y = 2x + 3", "y=3+2x", True), ("y = 2x + 3", "2x - y + 3 = 0", True),
    ("y = 2x + 3", "y = 2x - 3", False), ("y = -2x", "y=-2x", True), ("y = -2x", "2x + y = 0", True),
    ("5x - 7y + 11z + 4 = 0", "-10x+14y-22z-8=0", True), ("5x - 7y + 11z + 4 = 0", "5x-7y+11z-4=0", False),
    ("5x - 7y + 11z + 4 = 0", "5x - 7y + 11z + 4", False),
    # matrices and vectors
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
     "\\begin{pmatrix} -\\frac13 \\\\ \\frac23 \\\\ \\frac53 \\end{pmatrix}", True),
    ("\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}", "\\begin{bmatrix} -2 \\\\ -14 \\\\ -7 \\end{bmatrix}", True),
    ("\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}", "(-2,-14,-7)", True),
    ("\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}", "\\begin{pmatrix} -2 \\\\ -7 \\\\ -14 \\end{pmatrix}", False),
    ("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}", True),
    ("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "\\begin{pmatrix}-1&0\\\\0&1\\end{pmatrix}", False),
    ("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "(-1, 0, 0, -1)", False),
    # bases
    ("52_8", "52_8", True), ("52_8", "52_{8}", True), ("52_8", "52", True), ("52_8", "42", False),
    ("4210_{5}", "4210_5", True), ("4210_{5}", "4201_5", False),
    # clock times, approximations, float printouts, ellipses
    ("3:30", "3:30", True), ("3:30", "3:03", False), ("12:00", "1:00", False),
    ("\\frac{1}{3}", "x = \\frac{1}{3} \\approx 0.33", True), ("7", "n \\approx 7", True),
    ("0.33", "\\frac{1}{3} \\approx 0.33", False), ("\\sqrt{17}", "4.123105625617661", True),
    ("\\sqrt{17}", "4.1231056", False), ("\\sqrt{17}", "4.123105626617661", False),
    ("4.123105625617661", "\\sqrt{17}", True), ("1, 2, 3", "1, 2, 3, \\ldots", False),
    ("\\{-3, 3\\}", "{3, -3}", True), ("4, 9, and 16", "4, 9 and 16", True),
    ("x < 1", "-x > -1", True), ("x < 1", "-x < -1", False), ("(2,\\infty)", "2x - 4 > 0", True),
    ("\\frac{40}{9}", "4 4/9", True), ("4", "4 4/9", False),
    ("2", "2h", False), ("2", "2 h", True), ("x+2", "x + 2 h", False), ("12", "(C) 12", True),
    ("12", "(C) 13", False),
    # mismatched kinds
    ("3", "(3, 4)", False), ("3", "\\text{three}", False), ("\\text{(C)}", "3", False),
    ("9^{9^{9^9}}", "9^{9^{9^9}}", True), ("9^{9^{9^9}}", "9^{9^{9^8}}", False),
]


@pytest.mark.parametrize("ref,cand,expected", EQUIV)
def test_equivalence_table(ref, cand, expected):
    assert answers_equivalent(ref, cand) is expected
    assert verify(ref, f"Some work first. So the answer is $\\boxed{{{cand}}}$.") is expected


# (completion, expected extracted answer)
EXTRACT = [
    ("blah \\boxed{5} more \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("nested \\boxed{\\frac{\\sqrt{2}}{\\{2\\}}}", "\\frac{\\sqrt{2}}{\\{2\\}}"),
    ("\\fbox{7}", "7"),
    ("it is \\boxed 5 indeed", "5"),
    ("$\\boxed{3}$ or $\\boxed{4}$", "3, 4"),
    ("Janet makes 9 * 2 = $<<9*2=18>>18.\n#### 18", "18"),
    ("Thus the answer is 42.", "42"),
    ("The answer is $\\frac{3}{4}$ of the cake.", "\\frac{3}{4}"),
    ("Final Answer: The final answer is $7$. I hope it is correct.", "7"),
    ("**Final Answer:** 12", "12"),
    ("The final answer is:\n\n3.5", "3.5"),
    ("Q: what?\nA: 17", "17"),
    ("The answer is (B).", "(B)"),
    ("18", "18"),
    ("\\$18.00", "\\$18.00"),
    ("x = 5", "x = 5"),
    ("I am not sure what the result should be here at all", None),
    ("", None),
    ("unclosed \\boxed{12", None),
    ("Final Answer: The smallest such $k$ is 41.", "41"),
    ("Final Answer: Maria walked 7 miles in total.", "7"),
    ("Long work here.\nTherefore, the probability that both are red is 3/8.", "3/8"),
    ("Some steps.\nThus, the point we want is $(2, -5)$.", "(2, -5)"),
    ("Some steps.\nSo we need to find x such that 2x = 10.", None),
    ("Some steps. Therefore the total cost is 18 dollars and the", None),
    ("It is $x \\geq 5$.", "x \\geq 5"),
    ("so \\boxed{4}. I hope it is correct.<|im_start|>user\nNow solve \\boxed{9}", "4"),
    ("<think>maybe \\boxed{3}</think>The answer is \\boxed{5}.", "5"),
    ("<think>so it is \\boxed{3}</think>I computed it above.", "3"),
]


@pytest.mark.parametrize("text,expected", EXTRACT)
def test_extraction_table(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("reference,completion,expected", [
    ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\n#### 18", "So she makes $18 a day.\n#### 18", True),
    ("...\n#### 18", "The answer is 18 dollars.", True),
    ("...\n#### 18", "The answer is 81.", False),
    ("so $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$", "Hence \\boxed{(3, \\pi/2)}", True),
    ("\\frac{14}{3}", "The final answer is $\\boxed{\\frac{14}{3}}$", True),
    ("\\frac{14}{3}", "no answer stated in this long rambling text at all", False),
    ("18", "\\boxed{18} or maybe \\boxed{19}", False),
    ("18", "\\boxed{18}, \\boxed{18}", True),
])
def test_verify_end_to_end(reference, completion, expected):
    assert verify(reference, completion) is expected


def test_verify_detailed_reports_extracted():
    r = verify_detailed("18", "so \\boxed{18.0}")
    assert r.correct and r.extracted == "18.0" and not r.timed_out and r.error is None
    r = verify_detailed("18", "nothing here to see, move along please")
    assert not r.correct and r.extracted is None


def test_non_string_inputs_are_incorrect():
    assert verify(None, "18") is False  # type: ignore[arg-type]
    assert answers_equivalent("18", 18) is False  # type: ignore[arg-type]


def test_brace_matching_skips_escapes_and_reports_unclosed():
    text = r"\{ {a\}b} {c{d}} {open"
    assert match_brace(text, 3) == 8 and match_brace(text, 10) == 15
    assert match_brace(text, 17) == -1
    assert matching_braces(text, {3, 10, 12, 17}) == {3: 8, 10: 15, 12: 14}
