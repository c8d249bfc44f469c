"""Equivalence policy: when does a candidate answer match a reference answer?

One policy for every dataset, precision first:

* identical normalised strings match (this is also the only way an :class:`Opaque`
  answer -- unparseable or too expensive to evaluate -- can match);
* scalars compare exactly (``Fraction``/sympy) before a 60-digit relative check; against a
  percent, a bare number strictly between 0 and 1 is a proportion (``25\\%`` = ``0.25``) and
  any other is the percentage without its sign (``25\\%`` = ``25``, ``100\\%`` != ``1``);
* ``3,75`` is also the decimal 3.75 against a number (never with three digits after the
  comma: ``12,500`` is 12500), and a clock-shaped ``7:32`` is also the ratio 7/32;
* sets and bare comma lists are order-free, tuples are ordered, and a two-element tuple
  must keep its brackets (``[2,5)`` is not ``(2,5)``); a one-element set is its element;
* a labelled answer ``x=5`` / ``|PQ|=7`` / ``(a,b)=(4,1)`` / ``A_1:A_2=3:5`` /
  ``\\frac{PQ}{QR}=\\frac{2}{3}`` matches its value; ``p=5, q=2`` is a labelled tuple; other
  equations match up to a non-zero factor, inequalities up to a positive one, and ``x > 2`` is
  ``(2, \\infty)``; ``1:2:3`` is an ordered ratio;
* sums and products are compared unevaluated, up to the order of terms and factors inside;
* ``\\pm`` expands to a two-element set, so ``\\pm 2021`` does not match ``2021``;
* matrices match elementwise, and a column/row vector also matches a tuple;
* base-``b`` answers (``52_8``) match the same digits, multiple-choice letters match the
  letter (``(C) 12`` also matches a reference ``12``), words (``\\text{Evelyn}``) and clock
  times (``12:00``) match as normalised text;
* the only float tolerance besides the 60-digit check: a decimal literal with at least
  ``LONG_DECIMAL_DIGITS`` significant digits (a float printout such as
  ``4.123105625617661``) matches an exact value that rounds to it (``\\sqrt{17}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Callable

from coop_jax.verify import symbolic
from coop_jax.verify.extract import all_boxed, extract_answer, final_boxes, reference_answer
from coop_jax.verify.normalize import MAX_ANSWER_CHARS, Normalized, normalize
from coop_jax.verify.parse import parse_value
from coop_jax.verify.strict import check_mode, strict_reference
from coop_jax.verify.values import (BaseNum, Choice, Matrix, Opaque, Relation, Scalar, Seq, Text,
                                    Union, Value)

_MAX_DEPTH = 8
LONG_DECIMAL_DIGITS = 10


@dataclass(frozen=True)
class VerifyResult:
    """Verdict for one (reference, completion) pair."""

    correct: bool
    extracted: str | None
    timed_out: bool = False
    error: str | None = None


@lru_cache(maxsize=8192)
def _parse_normalized(norm: Normalized) -> Value:
    return parse_value(norm.text, norm.percent, norm.was_text)


def _unwrap(v: Value) -> Value:
    while True:
        if isinstance(v, Seq) and v.kind in ("set", "bare") and len(v.items) == 1:
            v = v.items[0]
        elif isinstance(v, Union) and len(v.parts) == 1:
            v = v.parts[0]
        else:
            return v


def _is_assignment(v: Value) -> bool:
    return isinstance(v, Relation) and v.assign


def _ordered(a: tuple, b: tuple, depth: int) -> bool:
    return len(a) == len(b) and all(values_equal(x, y, depth + 1) for x, y in zip(a, b))


def _unordered(a: tuple, b: tuple, depth: int) -> bool:
    if len(a) != len(b):
        return False
    unused = list(b)
    for x in a:
        for k, y in enumerate(unused):
            if values_equal(x, y, depth + 1):
                del unused[k]
                break
        else:
            return False
    return True


def _long_decimal_eq(dec: Scalar, other: Scalar) -> bool:
    """A decimal literal with >= LONG_DECIMAL_DIGITS significant digits (a float printout such
    as ``4.123105625617661``) matches an exact non-decimal value that rounds to it."""
    if (dec.decimal is None or other.decimal is not None or dec.percent != other.percent
            or dec.decimal[0] < LONG_DECIMAL_DIGITS):
        return False
    return symbolic.rounds_to(other.value, dec.value, dec.decimal[1])


def _scalar_eq(r: Scalar, c: Scalar, depth: int) -> bool:
    if r.percent != c.percent:
        return _percent_eq(r, c)
    if symbolic.exprs_equal(r.value, c.value):
        return True
    if _long_decimal_eq(r, c) or _long_decimal_eq(c, r):
        return True
    return False


def _percent_eq(r: Scalar, c: Scalar) -> bool:
    """One side has a percent sign: a bare number strictly between 0 and 1 is a proportion
    (``0.5`` = ``50\\%``), any other bare number is the percentage without its sign
    (``50`` = ``50\\%``, ``1`` != ``100\\%``). Exactly one reading is tried."""
    pct, bare = (r, c) if r.percent else (c, r)
    if symbolic.is_proper_fraction(bare.value):
        return symbolic.exprs_equal(pct.value / 100, bare.value)
    return symbolic.exprs_equal(pct.value, bare.value)


def _assigned_labels(items: tuple) -> list[str] | None:
    """The labels when every item assigns a value to a plain label (``x=-2, x=1``), else None."""
    if not all(_is_assignment(v) and isinstance(v.lhs, Scalar) for v in items):
        return None
    return [v.lhs.src.replace(" ", "") for v in items]


def _seq_eq(r: Seq, c: Seq, depth: int) -> bool:
    if r.alt is not None and c.alt is not None and _scalar_eq(r.alt, c.alt, depth):
        return True  # "1,5" = "1,50": both are the same decimal
    if len(r.items) != len(c.items):
        return False
    kinds = {r.kind, c.kind}
    if r.labels and c.labels:  # "p=5, q=2" = "q=2, p=5"
        if sorted(r.labels) != sorted(c.labels):
            return False
        order = [c.labels.index(x) for x in r.labels]
        return _ordered(r.items, tuple(c.items[k] for k in order), depth)
    if (r.labels or c.labels) and kinds & {"set", "bare"}:
        named, other = (r, c) if r.labels else (c, r)
        got = _assigned_labels(other.items)
        if got is not None and sorted(got) != sorted(named.labels):
            return False  # "p=5, p=2" is not "p=5, q=2"
        return _unordered(r.items, c.items, depth)  # "a=2, b=3" against the set {2, 3}
    if kinds == {"tuple"}:
        if len(r.items) == 2 and (r.open, r.close) != (c.open, c.close):
            return False
        return _ordered(r.items, c.items, depth)
    if kinds == {"tuple", "set"}:
        return False
    if "tuple" in kinds:  # a tuple against a bare list: the bare list must not drop interval brackets
        t = r if r.kind == "tuple" else c
        if len(t.items) == 2 and (t.open, t.close) != ("(", ")"):
            return False
        return _ordered(r.items, c.items, depth)
    return _unordered(r.items, c.items, depth)


def _ratio_eq(t: Text, s: Scalar) -> bool:
    """``7:32`` against ``\\frac{7}{32}``: a clock-shaped ratio read as its quotient."""
    return t.ratio is not None and not s.percent and symbolic.exprs_equal(t.ratio, s.value)


def _union_eq(r: Union, c: Union, depth: int) -> bool:
    return _unordered(r.parts, c.parts, depth)


def _same_label(a: Value, b: Value) -> bool:
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return a.src.replace(" ", "") == b.src.replace(" ", "") or a.value == b.value
    return a == b


def _rel_eq(r: Relation, c: Relation, depth: int) -> bool:
    if r.op != c.op:
        return False
    if _is_assignment(r) and _is_assignment(c) and _same_label(r.lhs, c.lhs):
        return values_equal(r.rhs, c.rhs, depth + 1)
    if all(isinstance(x, Scalar) for x in (r.lhs, r.rhs, c.lhs, c.rhs)):
        d1 = symbolic.as_sympy(r.lhs.value) - symbolic.as_sympy(r.rhs.value)
        d2 = symbolic.as_sympy(c.lhs.value) - symbolic.as_sympy(c.rhs.value)
        return symbolic.proportional(d1, d2, positive=r.op in ("<", "<="))
    return values_equal(r.lhs, c.lhs, depth + 1) and values_equal(r.rhs, c.rhs, depth + 1)


def _matrix_eq(r: Matrix, c: Matrix, depth: int) -> bool:
    if len(r.rows) != len(c.rows):
        return False
    return all(_ordered(x, y, depth) for x, y in zip(r.rows, c.rows))


def _vector(m: Matrix) -> tuple | None:
    if len(m.rows) == 1:
        return m.rows[0]
    if all(len(row) == 1 for row in m.rows):
        return tuple(row[0] for row in m.rows)
    return None


def _matrix_seq_eq(m: Matrix, s: Seq, depth: int) -> bool:
    vec = _vector(m)
    return vec is not None and s.kind in ("tuple", "bare") and _ordered(vec, s.items, depth)


def _base_scalar_eq(b: BaseNum, s: Scalar, depth: int) -> bool:
    v = s.value
    return isinstance(v, Fraction) and v.denominator == 1 and str(v.numerator) == b.digits


_Handler = Callable[[Value, Value, int], bool]
_HANDLERS: dict[tuple[type, type], _Handler] = {
    (Scalar, Scalar): _scalar_eq,
    (Text, Text): lambda r, c, d: r.value == c.value,
    (Text, Scalar): lambda r, c, d: _ratio_eq(r, c),
    (Scalar, Text): lambda r, c, d: _ratio_eq(c, r),
    (Seq, Scalar): lambda r, c, d: r.alt is not None and _scalar_eq(r.alt, c, d),
    (Scalar, Seq): lambda r, c, d: c.alt is not None and _scalar_eq(r, c.alt, d),
    (Choice, Choice): lambda r, c, d: r.letter == c.letter,
    (BaseNum, BaseNum): lambda r, c, d: (r.digits, r.base) == (c.digits, c.base),
    (BaseNum, Scalar): _base_scalar_eq,
    (Scalar, BaseNum): lambda r, c, d: c.base == 10 and _base_scalar_eq(c, r, d),
    (Seq, Seq): _seq_eq,
    (Union, Union): _union_eq,
    (Union, Seq): lambda r, c, d: c.kind == "bare" and _unordered(r.parts, c.items, d),
    (Seq, Union): lambda r, c, d: r.kind == "bare" and _unordered(r.items, c.parts, d),
    (Relation, Relation): _rel_eq,
    (Matrix, Matrix): _matrix_eq,
    (Matrix, Seq): _matrix_seq_eq,
    (Seq, Matrix): lambda r, c, d: _matrix_seq_eq(c, r, d),
}


def values_equal(ref: Value, cand: Value, depth: int = 0) -> bool:
    """Policy dispatch on the (reference, candidate) value types; see module docstring."""
    if depth > _MAX_DEPTH:
        return False
    ref, cand = _unwrap(ref), _unwrap(cand)
    if isinstance(ref, Opaque) or isinstance(cand, Opaque):
        return False
    if _is_assignment(ref) and not isinstance(cand, Relation):
        return values_equal(ref.rhs, cand, depth + 1)
    if _is_assignment(cand) and not isinstance(ref, Relation):
        return values_equal(ref, cand.rhs, depth + 1)
    if (isinstance(cand, Seq) and cand.kind == "bare" and not isinstance(ref, (Seq, Union))
            and all(values_equal(ref, c, depth + 1) for c in cand.items)):
        return True  # "\boxed{15\frac{39}{40}}, \boxed{\frac{639}{40}}": one answer, two forms
    if isinstance(cand, Choice) and not isinstance(ref, Choice) and cand.rest:
        return values_equal(ref, parse_value(cand.rest), depth + 1)  # "(C) 12" against "12"
    if isinstance(ref, Choice) and not isinstance(cand, Choice) and ref.rest:
        return values_equal(parse_value(ref.rest), cand, depth + 1)
    handler = _HANDLERS.get((type(ref), type(cand)))
    return bool(handler(ref, cand, depth)) if handler is not None else False


def _squash(s: str) -> str:
    return s.replace(" ", "")


def answers_equivalent(a: str, b: str) -> bool:
    """True when answer strings ``a`` (the reference) and ``b`` state the same answer."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    na, nb = normalize(a), normalize(b)
    if not na.text or not nb.text:
        return False
    if _squash(na.text) == _squash(nb.text) and na.percent == nb.percent:
        return True
    if len(na.text) > MAX_ANSWER_CHARS or len(nb.text) > MAX_ANSWER_CHARS:
        return False
    return values_equal(_parse_normalized(na), _parse_normalized(nb))


def _collection_size(answer: str, labelled: bool = False) -> int:
    """Number of items when ``answer`` is an unordered collection (set, bare list, union), or
    with ``labelled`` also a labelled tuple (``x_1=2, x_2=5``)."""
    norm = normalize(answer)
    if not norm.text or len(norm.text) > MAX_ANSWER_CHARS:
        return 0
    v = _parse_normalized(norm)
    if isinstance(v, Seq) and (v.kind in ("set", "bare") or labelled and v.labels):
        return len(v.items)
    return len(v.parts) if isinstance(v, Union) else 0


def _several_boxes(reference: str, completion: str, ref: str, cand: str) -> str | None:
    """Answer stated in several separate boxes (``\\boxed{2} ... \\boxed{-3}``) that matches an
    unordered collection with exactly as many items on the other side; else None. Boxes that
    each name their quantity (``\\boxed{x_1=2}``, or ``x_1 = \\boxed{2}``, which is read as
    ``x_1=2``) may also match a labelled tuple (``x_1=2, x_2=5``), label by label.

    A completion's boxes count only when their number equals the reference's item count, so an
    intermediate box (one box too many) or a hedge against a single-value reference is never
    read as part of the answer.
    """
    if "box" not in completion and "box" not in reference:
        return None  # the common case, decided without a scan
    boxes = final_boxes(completion, labels=True)
    named = all("=" in b for b in boxes)
    if len(boxes) >= 2 and _collection_size(ref, named) == len(boxes):
        joined = ", ".join(boxes)
        if answers_equivalent(ref, joined):
            return joined
    ref_boxes = all_boxed(reference, labels=True)
    named = all("=" in b for b in ref_boxes)
    if len(ref_boxes) >= 2 and _collection_size(cand, named) == len(ref_boxes):
        if answers_equivalent(", ".join(ref_boxes), cand):
            return cand
    return None


def verify_detailed(reference: str, completion: str, extraction: str = "lenient") -> VerifyResult:
    """Extract the answers of both texts and decide equivalence (never raises on bad text).

    ``extraction`` selects the answer matching (:data:`EXTRACTION_MODES`): ``"lenient"`` uses
    the equivalence policy above; the strict modes compare the strictly extracted answers as
    exact strings, as the reference implementations do.
    """
    check_mode(extraction)
    extracted = None
    try:
        extracted = extract_answer(completion, extraction)
        if extraction != "lenient":
            ok = extracted is not None and isinstance(reference, str) and (
                extracted == strict_reference(reference, extraction))
            return VerifyResult(ok, extracted)
        ref = reference_answer(reference)
        if extracted is None or ref is None:
            return VerifyResult(False, extracted)
        if answers_equivalent(ref, extracted):
            return VerifyResult(True, extracted)
        several = _several_boxes(reference, completion, ref, extracted)
        return VerifyResult(several is not None, several or extracted)
    except (Exception, RecursionError, MemoryError) as exc:  # a verifier bug must not stop training
        return VerifyResult(False, extracted, error=f"{type(exc).__name__}: {exc}"[:200])


def verify(reference: str, completion: str, extraction: str = "lenient") -> bool:
    """True when ``completion`` states an answer equivalent to ``reference``'s.

    ``reference`` may be a bare answer (``18``, ``\\frac{14}{3}``) or a full solution
    (``#### 18``, ``\\boxed{...}``). Runs in-process with cost guards but no hard timeout;
    use :class:`coop_jax.verify.RuleVerifier` for untrusted text at scale.
    """
    return verify_detailed(reference, completion, extraction).correct
