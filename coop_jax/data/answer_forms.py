"""One answer written in several forms: the format probes of a task, built from its records.

A task asks for its final answer behind a marker (`answer_marker`: "####" on the synthetic task
and GSM8K, "\\boxed" on MATH). A policy rewarded by a lenient judge may drift to other forms
("The answer is: 13") that a strict gold rejects. The probes hold each record's worked solution
with its final answer restated in every form of `FORMS`, once with the right value and once with
a wrong one, so a reward model's score per form shows whether it tells the forms apart.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

MARKERS = ("####", "\\boxed")

# form -> text(body, value): `body` is the worked solution without its final answer ("" allowed)
FORMS: dict[str, Callable[[str, str], str]] = {
    "hash": lambda body, v: f"{body}\n#### {v}".lstrip(),
    "answer_is": lambda body, v: f"{body}\nThe answer is: {v}".lstrip(),
    "bare": lambda body, v: v,
    "boxed": lambda body, v: f"{body}\n\\boxed{{{v}}}".lstrip(),
    "repeated": lambda body, v: f"{body}\nThe answer is {v}.\n\nThe answer is {v}.".lstrip(),
}
MARKED_FORM = {"####": "hash", "\\boxed": "boxed"}
# the forms that state the answer after the body without any marker (the drift a strict gold
# rejects); "bare" drops the working too, so it is not among them
UNMARKED_FORMS = ("answer_is", "repeated")

_INTEGER = re.compile(r"-?\d+")


def answer_marker(records: Sequence[dict]) -> str | None:
    """The marker the records' worked solutions put before their final answer (the first of
    MARKERS that most solutions hold), None when they have none."""
    solutions = [r.get("solution") or "" for r in records]
    counts = {m: sum(m in s for s in solutions) for m in MARKERS}
    best = max(counts, key=counts.get) if solutions else None
    return best if best and 2 * counts[best] > len(solutions) else None


def solution_body(solution: str, marker: str) -> str:
    """`solution` without its final answer: the text before the last `marker`."""
    at = solution.rfind(marker)
    return (solution[:at] if at >= 0 else solution).rstrip()


def wrong_value(reference: str) -> str | None:
    """A wrong value for an integer reference (reference + 1), None for any other."""
    value = reference.replace(",", "").strip()
    return str(int(value) + 1) if _INTEGER.fullmatch(value) else None


def _wrong_body(body: str, right: str, wrong: str) -> str:
    """The body with its last statement of the right value changed to the wrong one, so the
    working and the stated answer agree."""
    at = body.rfind(right)
    return body if at < 0 else body[:at] + wrong + body[at + len(right):]


def format_probes(records: Sequence[dict], num_questions: int, marker: str | None = None
                  ) -> list[dict]:
    """Triples {question, reference, completion, label, form} of the first `num_questions`
    records with an integer reference and a worked solution: each form of FORMS with the right
    value (label true) and a wrong one (label false)."""
    marker = marker or answer_marker(records) or "####"
    out = []
    for r in records:
        if len(out) >= 2 * len(FORMS) * num_questions:
            break
        right, wrong = r["reference"].replace(",", "").strip(), wrong_value(r["reference"])
        if wrong is None or not r.get("solution"):
            continue
        body = solution_body(r["solution"], marker)
        for form, text in FORMS.items():
            for value, label, b in ((right, True, body),
                                    (wrong, False, _wrong_body(body, right, wrong))):
                out.append({"question": r["question"], "reference": r["reference"],
                            "completion": text(b, value), "label": label, "form": form})
    return out
