"""Synthetic arithmetic-reasoning task for the CPU demo.

Questions are short integer expressions evaluated left to right, e.g. ``7+12-5``; the worked
solution is one step per operator, ``7+12=19. 19-5=14. #### 14`` (or ``\\boxed{14}``), and the
reference is the final integer as a string. When ``*`` follows a ``+``/``-`` chain the chain is
parenthesised (``(2+3)*4``), so the question also reads correctly with the usual precedence.
Texts are plain ASCII and short so a tiny character-level model can learn the task in minutes.

``surface="words"`` writes the same chain as a short story problem for a pretrained LM ("Maya
has 7 shells. She finds 12 more. How many shells does Maya have now?"): ``+``/``-`` only, each
subtrahend at most the running total and each operand at least 1, so every count stays a
non-negative whole number (a ``-`` after a total of 0 becomes a ``+``). The worked solution
and the reference are those of the expression.
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from typing import Any

import numpy as np

Record = dict[str, Any]

ALLOWED_OPS = "+-*"
ANSWER_FORMATS = ("####", "boxed")
SPLITS = ("train", "test")
SURFACES = ("expression", "words")
# Hash-bucket holdout: a question belongs to "test" iff crc32(question) % _HOLDOUT_MOD == 0, so the
# train and test splits never share a question whatever their sizes and seeds.
_HOLDOUT_MOD = 10
_OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}
_TOKEN_RE = re.compile(r"\d+|[-+*()]")
# One worked step "19-5=14." of a solution (a policy's completion may carry spaces around symbols).
_STEP_RE = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)")
_FINAL_RE = re.compile(r"(####\s*)(-?\d+)|(\\boxed\{\s*)(-?\d+)(\s*\})")


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Difficulty knobs of the synthetic task."""

    num_operands_min: int = 2
    num_operands_max: int = 3
    max_operand: int = 20
    ops: str = "+-"
    answer_format: str = "####"
    surface: str = "expression"

    def __post_init__(self) -> None:
        for name in ("num_operands_min", "num_operands_max", "max_operand"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"SyntheticConfig.{name} must be an int, got {value!r}")
        if self.num_operands_min < 2:
            raise ValueError(
                f"SyntheticConfig.num_operands_min must be >= 2, got {self.num_operands_min}")
        if self.num_operands_max < self.num_operands_min:
            raise ValueError(
                "SyntheticConfig.num_operands_max must be >= num_operands_min, got "
                f"{self.num_operands_max} < {self.num_operands_min}")
        if self.max_operand < 1:
            raise ValueError(f"SyntheticConfig.max_operand must be >= 1, got {self.max_operand}")
        if not isinstance(self.ops, str) or not self.ops:
            raise ValueError(f"SyntheticConfig.ops must be a non-empty string, got {self.ops!r}")
        if set(self.ops) - set(ALLOWED_OPS) or len(set(self.ops)) != len(self.ops):
            raise ValueError(
                f"SyntheticConfig.ops must be distinct characters from {ALLOWED_OPS!r}, "
                f"got {self.ops!r}")
        if self.surface not in SURFACES:
            raise ValueError(f"SyntheticConfig.surface must be one of {SURFACES}, "
                             f"got {self.surface!r}")
        if self.surface == "words" and (set(self.ops) - set("+-") or self.max_operand < 1):
            raise ValueError("SyntheticConfig.surface='words' needs ops from '+-' and "
                             f"max_operand >= 1, got ops={self.ops!r}, "
                             f"max_operand={self.max_operand}")
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"SyntheticConfig.answer_format must be one of {ANSWER_FORMATS}, "
                f"got {self.answer_format!r}")


def _apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def format_answer(value: int | str, answer_format: str) -> str:
    """The final-answer marker, ``#### 14`` or ``\\boxed{14}``."""
    if answer_format == "####":
        return f"#### {value}"
    if answer_format == "boxed":
        return f"\\boxed{{{value}}}"
    raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


def render_question(operands: list[int], ops: list[str]) -> str:
    """``7+12-5``; a ``+``/``-`` chain followed by ``*`` is parenthesised."""
    if len(ops) != len(operands) - 1:
        raise ValueError(f"need len(ops) == len(operands) - 1, got {len(ops)} and {len(operands)}")
    expr, has_additive = str(operands[0]), False
    for op, operand in zip(ops, operands[1:]):
        if op == "*" and has_additive:
            expr, has_additive = f"({expr})", False
        expr += f"{op}{operand}"
        has_additive = has_additive or op in "+-"
    return expr


def solve(operands: list[int], ops: list[str], answer_format: str = "####") -> tuple[str, int]:
    """The worked left-to-right solution and the final value."""
    value, steps = operands[0], []
    for op, operand in zip(ops, operands[1:]):
        new = _apply(op, value, operand)
        steps.append(f"{value}{op}{operand}={new}.")
        value = new
    return " ".join(steps + [format_answer(value, answer_format)]), value


def make_rephrase(question: str) -> str:
    """A second surface form: ``7+12-5`` -> ``What is 7 plus 12 minus 5?``."""
    tokens = _TOKEN_RE.findall(question)
    if not tokens or "".join(tokens) != question.replace(" ", ""):
        raise ValueError(f"question is not a synthetic arithmetic expression: {question!r}")
    words = " ".join(_OP_WORDS.get(tok, tok) for tok in tokens)
    body = words.replace("( ", "(").replace(" )", ")")
    return f"What is {body}?"


def make_problem(rng: np.random.Generator, cfg: SyntheticConfig | None = None, *,
                 uid: str | None = None) -> Record:
    """One random problem as a record; ``uid`` defaults to ``synthetic:<question>``."""
    cfg = SyntheticConfig() if cfg is None else cfg
    k = int(rng.integers(cfg.num_operands_min, cfg.num_operands_max + 1))
    ops = [cfg.ops[int(i)] for i in rng.integers(0, len(cfg.ops), size=k - 1)]
    if cfg.surface == "words":
        operands, ops = _story_operands(rng, ops, cfg.max_operand)
        expression = render_question(operands, ops)
        question = render_story(rng, operands, ops)
        rephrased = f"What is {expression}?"
    else:
        operands = [int(x) for x in rng.integers(0, cfg.max_operand + 1, size=k)]
        question = render_question(operands, ops)
        rephrased = make_rephrase(question)
    solution, value = solve(operands, ops, cfg.answer_format)
    return {
        "id": uid if uid is not None else f"synthetic:{question}",
        "question": question,
        "reference": str(value),
        "solution": solution,
        "rephrased": rephrased,
    }


_NAMES = (("Tom", "He"), ("Anna", "She"), ("Sam", "He"), ("Lily", "She"), ("Ben", "He"),
          ("Maya", "She"), ("Leo", "He"), ("Emma", "She"), ("Jack", "He"), ("Sara", "She"),
          ("Omar", "He"), ("Nina", "She"), ("Raj", "He"), ("Zoe", "She"), ("Ivan", "He"),
          ("Mia", "She"))
_OBJECTS = ("apples", "books", "coins", "stickers", "pencils", "marbles", "cookies", "cards",
            "stamps", "shells", "balloons", "crayons", "buttons", "toy cars", "seeds", "beads")
_GAINS = ("{p} gets {n} more.", "{p} finds {n} more.", "{p} buys {n} more.",
          "A friend gives {o} {n} more.")
_LOSSES = ("{p} gives away {n}.", "{p} loses {n}.", "{p} uses {n}.", "{p} sells {n}.")
_ASKS = ("How many {x} does {name} have now?", "How many {x} does {name} have in the end?")


def _story_operands(rng: np.random.Generator, ops: list[str], max_operand: int
                    ) -> tuple[list[int], list[str]]:
    """Operands in [1, max_operand], every subtrahend at most the running total (a `-` after a
    total of 0 becomes a `+`)."""
    value = int(rng.integers(1, max_operand + 1))
    operands, story_ops = [value], []
    for op in ops:
        op = "+" if value == 0 else op
        n = int(rng.integers(1, (max_operand if op == "+" else min(value, max_operand)) + 1))
        operands.append(n)
        story_ops.append(op)
        value = value + n if op == "+" else value - n
    return operands, story_ops


def render_story(rng: np.random.Generator, operands: list[int], ops: list[str]) -> str:
    """The chain as a story problem: a name, an object, one sentence per operation."""
    name, pronoun = _NAMES[int(rng.integers(len(_NAMES)))]
    objects = _OBJECTS[int(rng.integers(len(_OBJECTS)))]
    sentences = [f"{name} has {operands[0]} {objects}."]
    for op, n in zip(ops, operands[1:]):
        phrasings = _GAINS if op == "+" else _LOSSES
        text = phrasings[int(rng.integers(len(phrasings)))]
        sentences.append(text.format(p=pronoun, n=n, o="him" if pronoun == "He" else "her"))
    sentences.append(_ASKS[int(rng.integers(len(_ASKS)))].format(x=objects, name=name))
    return " ".join(sentences)


def holdout_split(question: str) -> str:
    """``"test"`` for ~1/10 of all possible questions (by a stable hash), else ``"train"``."""
    return "test" if zlib.crc32(question.encode("ascii")) % _HOLDOUT_MOD == 0 else "train"


def make_dataset(n: int, seed: int, cfg: SyntheticConfig | None = None, *,
                 split: str | None = None) -> list[Record]:
    """``n`` problems, deterministic given (seed, cfg, split); ids are unique.

    ``split=None`` samples from all questions; ``"train"``/``"test"`` restrict to the two disjoint
    hash buckets of :func:`holdout_split`. Questions may repeat within a dataset.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be None or one of {SPLITS}, got {split!r}")
    cfg = SyntheticConfig() if cfg is None else cfg
    split_code = 0 if split is None else 1 + SPLITS.index(split)
    rng = np.random.default_rng([int(seed), split_code])
    prefix = f"synthetic-{split or 'all'}-{seed}"
    records: list[Record] = []
    max_tries = 100 * n + 1000
    tries = 0
    while len(records) < n:
        tries += 1
        if tries > max_tries:
            raise ValueError(
                f"could not draw {n} '{split}' questions from {cfg}: the question space is too "
                "small for the hash holdout; raise max_operand or num_operands_max")
        rec = make_problem(rng, cfg, uid=f"{prefix}-{len(records)}")
        if split is None or holdout_split(rec["question"]) == split:
            records.append(rec)
    return records


def _chain_from_question(question: str) -> list[tuple[int, str, int]] | None:
    """(left, op, right) of every left-to-right step of a synthetic question (parentheses only
    group what left-to-right order already evaluates first)."""
    tokens = [t for t in _TOKEN_RE.findall(question) if t not in "()"]
    if len(tokens) < 3 or len(tokens) % 2 == 0:
        return None
    operands, ops = [int(t) for t in tokens[::2]], tokens[1::2]
    steps, value = [], operands[0]
    for op, b in zip(ops, operands[1:]):
        steps.append((value, op, b))
        value = _apply(op, value, b)
    return steps


def consistent_wrong_solution(question: str, solution: str, rng: np.random.Generator,
                              answer_format: str = "####") -> str | None:
    """A plausible wrong solution: one early slip carried consistently to a wrong final answer.

    The offline stand-in for Cooper's LLM rewrite of a correct solution into a plausible wrong
    one. One step of ``solution`` gets either a misread right operand (``19-5`` -> ``19-7``) or an
    arithmetic slip in its result (``19-5=14`` -> ``19-5=13``), chosen among the first half of the
    steps; every later step then starts from the wrong value and is computed correctly, and the
    final answer is the last computed value. Unlike replacing only the final answer, every step
    stays consistent with the one before, so the error shows only against the question or the
    reference answer. A solution without worked steps is rebuilt from ``question`` (the question
    itself is never changed). None when no slip changes the final answer (e.g. ``x*0`` later on).
    """
    steps = [(m, (int(m[1]), m[2], int(m[3]))) for m in _STEP_RE.finditer(solution)]
    final = list(_FINAL_RE.finditer(solution))
    if not steps:
        chain = _chain_from_question(question)
        if chain is None:
            return None
        worked, _ = _render_chain(chain, answer_format)
        return consistent_wrong_solution(question, worked, rng, answer_format)
    n = len(steps)
    early = max(1, (n + 1) // 2)
    for _ in range(8):  # a slip can vanish in a later "*0": draw again
        i = int(rng.integers(0, early))
        delta = int(rng.integers(1, 4)) * (1 if rng.random() < 0.5 else -1)
        misread = rng.random() < 0.5
        new_steps, value = [], None
        for j, (_, (a, op, b)) in enumerate(steps):
            if value is not None:
                a = value
            if j == i and misread:
                b = b + delta if b + delta >= 0 else b - delta
            result = _apply(op, a, b)
            if j == i and not misread:
                result += delta
            new_steps.append((a, op, b, result))
            value = result
        written = final[-1].group(2) or final[-1].group(4) if final else steps[-1][0][4]
        if value == int(written):
            continue
        pieces, at = [], 0
        for (m, _), (a, op, b, result) in zip(steps, new_steps):
            pieces += [solution[at:m.start()], f"{a}{op}{b}={result}"]
            at = m.end()
        tail = solution[at:]
        if final and final[-1].start() >= at:
            f = _FINAL_RE.search(tail, final[-1].start() - at)
            tail = (tail[:f.start()] + (f"{f.group(1)}{value}" if f.group(1) is not None
                                        else f"{f.group(3)}{value}{f.group(5)}") + tail[f.end():])
        else:
            tail = tail.rstrip() + " " + format_answer(value, answer_format)
        return "".join(pieces) + tail
    return None


def _render_chain(chain: list[tuple[int, str, int]], answer_format: str) -> tuple[str, int]:
    steps, value = [], chain[0][0]
    for a, op, b in chain:
        value = _apply(op, a, b)
        steps.append(f"{a}{op}{b}={value}.")
    return " ".join(steps + [format_answer(value, answer_format)]), value


ERROR_KINDS = ("correct", "final_mismatch", "consistent_wrong", "other", "no_answer")


def solution_error_kind(question: str, reference: str, completion: str) -> str:
    """What kind of solution ``completion`` is, for diagnostics of RM triples.

    ``correct``: the final answer equals ``reference``. ``final_mismatch``: every step is right
    but the final answer differs from the last computed value (the SFT data's off-by-one errors,
    and what ``perturb`` produces). ``consistent_wrong``: each step starts from the previous
    step's result and the final answer is the last result, yet it is wrong (a misread operand or
    an arithmetic slip carried through). ``other``: anything else with a final answer; ``no_answer``: none.
    """
    final = list(_FINAL_RE.finditer(completion))
    if not final:
        return "no_answer"
    answer = int(final[-1].group(2) or final[-1].group(4))
    if str(answer) == reference.strip():
        return "correct"
    steps = [(int(m[1]), m[2], int(m[3]), int(m[4])) for m in _STEP_RE.finditer(completion)]
    if not steps:
        return "other"
    if any(s[0] != prev[3] for prev, s in zip(steps, steps[1:])):
        return "other"  # a step does not start from the previous result
    if answer == steps[-1][3]:
        return "consistent_wrong"
    right = ([s[:3] for s in steps] == _chain_from_question(question)
             and all(_apply(op, a, b) == r for a, op, b, r in steps))
    return "final_mismatch" if right else "other"
