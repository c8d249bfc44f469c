"""Equations, inequalities and labels: the relation part of :mod:`coop_jax.verify.parse`.

* ``label = value`` marks an assignment when the left-hand side names the quantity asked
  for (``x``, ``a_1``, ``f(x)``, ``AB``, ``|PQ|``, ``(a,b)``, a ratio of named quantities
  ``AB:CD``, ``A_1:A_2``, ``\\frac{PQ}{QR}``); only such a
  left-hand side may be dropped, so ``2x = 10`` never matches ``10``.
* Inequalities in one variable become intervals: ``x > 2`` -> ``(2, \\infty)``,
  ``-1 \\le x \\le 4`` -> ``[-1, 4]``, ``1 \\le |z| \\le 2`` -> ``[-2,-1] \\cup [1,2]``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Callable

import sympy

from coop_jax.verify import symbolic
from coop_jax.verify.values import Opaque, Relation, Scalar, Seq, Union, Value

_SYM = r"[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?"
# A named quantity inside a ratio label: "A_1", "x", "PQ", "|PQ|", "[ABC]" (an area).
_NAME = rf"(?:{_SYM}|[A-Z]{{2,3}}|\|[A-Z]{{1,3}}\||\[[A-Z]{{2,4}}\]|\\overline\{{[A-Z]{{2}}\}})"
# Left-hand sides that name the quantity asked for: "x", "a_1", "\\theta", "AB", "f(3)",
# "m\\angle ABC", "P(x)", "|PQ|", "(a,b)", and ratios of named quantities: "AB:CD",
# "A_1:A_2", "a:b:c", "PQ/QR", "\\frac{PQ}{QR}", "\\frac{[ABC]}{[DEF]}" (never with a number in
# them, so "2x = 10" and "\\frac{x}{2} = 1" keep their left-hand side). "<label> = value" then
# matches "value".
LABEL_RE = re.compile(
    rf"^(?:{_SYM}(?:\([^()=]{{1,12}}\))?|\\[a-zA-Z]+|[A-Z]{{2,3}}"
    r"|(?:m\s*)?\\angle\s*[A-Za-z]{1,3}|\\overline\{[A-Z]{2}\}|\|[A-Z]{1,3}\|"
    rf"|{_NAME}(?::{_NAME})+|{_NAME}/{_NAME}|\\frac\{{{_NAME}\}}\{{{_NAME}\}}"
    rf"|\(\s*{_SYM}(?:\s*,\s*{_SYM})+\s*\))$")
OPS = {r"\le": "<=", r"\ge": ">=", r"\ne": "!=", r"\approx": "~", "<=": "<=", ">=": ">=",
       "!=": "!=", "<": "<", ">": ">", "=": "="}
_FLIP = {">": "<", ">=": "<="}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_INF = Scalar(sympy.oo, r"\infty")
_NEG_INF = Scalar(-sympy.oo, r"-\infty")


def is_label(lhs: str) -> bool:
    return bool(LABEL_RE.match(lhs.replace(" ", "")) or LABEL_RE.match(lhs))


def is_symbol(v: Value) -> bool:
    return isinstance(v, Scalar) and getattr(v.value, "is_Symbol", False)


def is_constant(v: Value) -> bool:
    if not isinstance(v, Scalar):
        return False
    return isinstance(v.value, Fraction) or not v.value.free_symbols


def _abs_of_symbol(v: Value) -> bool:
    return (isinstance(v, Scalar) and isinstance(v.value, sympy.Abs)
            and v.value.args[0].is_Symbol)


def _sign(v: Scalar) -> int | None:
    """Sign of a real constant, or None when it is not a known real number."""
    x = symbolic.as_sympy(v.value)
    if not x.is_real:
        return None
    return 1 if x.is_positive else -1 if x.is_negative else 0 if x.is_zero else None


def _neg(v: Scalar) -> Scalar:
    return Scalar(-v.value, "-(" + v.src + ")")


def _solve_linear(lhs: Value, rhs: Value) -> tuple[Scalar, Scalar, bool] | None:
    """``a x + b (op) c`` in one symbol -> (x, root, whether op flips), else None."""
    if not (isinstance(lhs, Scalar) and isinstance(rhs, Scalar)):
        return None
    d = symbolic.as_sympy(lhs.value) - symbolic.as_sympy(rhs.value)
    syms = d.free_symbols
    if len(syms) != 1:
        return None
    x = next(iter(syms))
    try:
        poly = sympy.Poly(d, x)
    except sympy.PolynomialError:
        return None
    if poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_real and b.is_real) or a == 0:
        return None
    return Scalar(x, str(x)), Scalar(-b / a, "root"), bool(a < 0)


def _abs_interval(lo: Scalar | None, op_lo: str, hi: Scalar | None, op_hi: str) -> Value | None:
    """Solution set of ``lo op_lo |x| op_hi hi`` (either bound may be None); ops are < or <=."""
    s_lo = _sign(lo) if lo is not None else -1
    s_hi = _sign(hi) if hi is not None else 1
    if s_lo is None or s_hi is None or s_hi < 0 or (s_hi == 0 and op_hi == "<"):
        return None
    open_hi, open_lo = ")" if op_hi == "<" else "]", "(" if op_lo == "<" else "["
    if s_lo < 0 or (s_lo == 0 and op_lo == "<="):  # the lower bound always holds
        if hi is None:
            return None  # every real number
        return Seq((_neg(hi), hi), "tuple", "(" if op_hi == "<" else "[", open_hi)
    left_open = "(" if hi is None or op_hi == "<" else "["
    left = Seq((_NEG_INF if hi is None else _neg(hi), _neg(lo)), "tuple", left_open,
               ")" if op_lo == "<" else "]")
    right = Seq((lo, _INF if hi is None else hi), "tuple", open_lo, ")" if hi is None else open_hi)
    return Union((left, right))


def relation_to_interval(ops: list[str], vals: list[Value]) -> Value | None:
    """``x > 2`` -> ``(2, \\infty)``, ``-2 \\le x < 7`` -> ``[-2, 7)``, ``|x| < 3`` ->
    ``(-3, 3)``; else None."""
    if len(vals) == 2:
        (a, b), op = vals, ops[0]
        if op not in ("<", "<=", ">", ">="):
            return None
        if (is_symbol(b) or _abs_of_symbol(b)) and is_constant(a):  # "2 < x" is "x > 2"
            a, b = b, a
            op = _MIRROR[op]
        if _abs_of_symbol(a) and is_constant(b):
            if op in ("<", "<="):
                return _abs_interval(None, "<", b, op)
            return _abs_interval(b, _FLIP[op], None, "<")
        if not (is_symbol(a) and is_constant(b)):
            solved = _solve_linear(a, b)  # "-x > -1" is "x < 1"
            if solved is None:
                return None
            a, b, flip = solved
            op = _MIRROR[op] if flip else op
        if op in ("<", "<="):
            return Seq((_NEG_INF, b), "tuple", "(", ")" if op == "<" else "]")
        return Seq((b, _INF), "tuple", "(" if op == ">" else "[", ")")
    mid = vals[1] if len(vals) == 3 else None
    if (mid is not None and (is_symbol(mid) or _abs_of_symbol(mid))
            and is_constant(vals[0]) and is_constant(vals[2])):
        lo, hi, (op1, op2) = vals[0], vals[2], ops
        if op1 in (">", ">=") and op2 in (">", ">="):
            lo, hi, op1, op2 = hi, lo, _FLIP[op2], _FLIP[op1]
        if op1 in ("<", "<=") and op2 in ("<", "<="):
            if _abs_of_symbol(mid):
                return _abs_interval(lo, op1, hi, op2)
            return Seq((lo, hi), "tuple", "(" if op1 == "<" else "[", ")" if op2 == "<" else "]")
    return None


def parse_relation(parts: list[str], seps: list[str], parse: Callable[[str], Value]) -> Value:
    """Value of ``parts[0] seps[0] parts[1] ...``; ``parse`` reads each side."""
    ops = [OPS[x] for x in seps]
    if "~" in ops:  # "x \\approx 3.14" is "x = 3.14"; "= 1/3 \\approx 0.33" keeps the exact 1/3
        k = ops.index("~")
        if k == 0 and LABEL_RE.match(parts[0].replace(" ", "")):
            ops[0] = "="
        else:
            parts, ops = parts[:k + 1], ops[:k]
        if "~" in ops:
            return Opaque(" ".join(parts))
        if len(parts) == 1:
            return parse(parts[0])
    vals = [parse(p) for p in parts]
    if any(isinstance(v, Opaque) for v in vals) or any(not p for p in parts):
        return Opaque(" ".join(parts))
    if all(o == "=" for o in ops):
        if all(is_constant(v) for v in vals):  # "12 \times 3 = 36": keep it only if true
            ok = all(symbolic.exprs_equal(v.value, vals[-1].value) for v in vals[:-1])
            return vals[-1] if ok else Opaque(" = ".join(parts))
        label = is_label(parts[0])
        if len(parts) == 2:
            return Relation("=", vals[0], vals[1], label)
        if label:  # "x = 2 + 3 = 5"
            return Relation("=", vals[0], vals[-1], True)
        return Opaque(" = ".join(parts))
    interval = relation_to_interval(ops, vals)
    if interval is not None:
        return interval
    if len(parts) == 2:
        op = ops[0]
        lhs, rhs = vals
        if op in _FLIP:
            op, lhs, rhs = _FLIP[op], rhs, lhs
        return Relation(op, lhs, rhs)
    return Opaque(" ".join(parts))
