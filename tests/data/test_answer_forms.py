"""Format probes: one answer written in several forms, built from a task's records
(`coop_jax.data.answer_forms`), on synthetic-, GSM8K- and MATH-style records."""
from coop_jax.data.answer_forms import (FORMS, answer_marker, format_probes, solution_body,
                                        wrong_value)

SYNTHETIC = {"question": "Maya has 20 marbles. She gets 4 more. How many marbles does Maya have "
                         "now?", "reference": "24", "solution": "20+4=24. #### 24"}
GSM8K = {"question": "Tom buys 3 packs of 6 eggs. How many eggs?", "reference": "18",
         "solution": "He buys 3 * 6 = <<3*6=18>>18 eggs.\n#### 18"}
MATH = {"question": "What is $2^3$?", "reference": "8",
        "solution": "$2^3 = 2\\cdot 2\\cdot 2 = 8$, so the answer is $\\boxed{8}$."}
FRACTION = {"question": "Half of 1?", "reference": "\\frac{1}{2}",
            "solution": "It is $\\boxed{\\frac{1}{2}}$."}


def test_the_marker_is_what_most_solutions_hold():
    assert answer_marker([SYNTHETIC, GSM8K, MATH]) == "####"
    assert answer_marker([MATH, FRACTION]) == "\\boxed"
    assert answer_marker([{"question": "q", "reference": "1", "solution": None}]) is None
    assert answer_marker([]) is None


def test_each_form_restates_the_worked_solution_right_and_wrong():
    probes = format_probes([SYNTHETIC], 1)
    assert len(probes) == 2 * len(FORMS)
    by = {(p["form"], p["label"]): p["completion"] for p in probes}
    assert by["hash", True] == "20+4=24.\n#### 24"
    assert by["hash", False] == "20+4=25.\n#### 25"  # the working agrees with the wrong answer
    assert by["answer_is", True] == "20+4=24.\nThe answer is: 24"
    assert by["bare", False] == "25"
    assert by["boxed", True] == "20+4=24.\n\\boxed{24}"
    assert by["repeated", True] == "20+4=24.\nThe answer is 24.\n\nThe answer is 24."
    assert {p["question"] for p in probes} == {SYNTHETIC["question"]}
    assert {p["reference"] for p in probes} == {"24"}


def test_gsm8k_and_math_records_keep_their_working():
    gsm = {(p["form"], p["label"]): p["completion"] for p in format_probes([GSM8K], 1)}
    assert gsm["answer_is", True] == "He buys 3 * 6 = <<3*6=18>>18 eggs.\nThe answer is: 18"
    assert gsm["hash", False] == "He buys 3 * 6 = <<3*6=18>>19 eggs.\n#### 19"
    math = {(p["form"], p["label"]): p["completion"]
            for p in format_probes([MATH], 1, marker="\\boxed")}
    body = "$2^3 = 2\\cdot 2\\cdot 2 = 8$, so the answer is $"
    assert math["boxed", True] == body + "\n\\boxed{8}"
    assert math["hash", False] == body.replace("= 8", "= 9") + "\n#### 9"


def test_only_integer_answers_with_a_solution_make_probes_up_to_the_count():
    records = [FRACTION, {**SYNTHETIC, "solution": ""}, SYNTHETIC, GSM8K, MATH]
    probes = format_probes(records, 2)
    assert [p["reference"] for p in probes[::2 * len(FORMS)]] == ["24", "18"]
    assert len(probes) == 4 * len(FORMS)
    assert wrong_value("1,024") == "1025" and wrong_value("-3") == "-2"
    assert wrong_value("\\frac{1}{2}") is None
    assert solution_body("a #### 1 then #### 2", "####") == "a #### 1 then"
