"""Guarded LaTeX -> sympy conversion and exact-first scalar comparison.

* :func:`to_sympy` parses with ``latex2sympy2_extended`` (an ANTLR grammar, so model text
  is never ``eval``-ed), keeps the tree unevaluated until :func:`cost_ok` has bounded the
  size of every number it would create (towers like ``9^{9^{9^9}}`` or ``10^{10^{10}}!``
  are refused), then evaluates it.
* :func:`exprs_equal` decides equality exactly where it can (rationals, structural
  identity, automatic simplification) and only then evaluates both sides at 60 significant
  digits, accepting a *relative* difference below 1e-40. Tiny values are therefore never
  confused (``1/2004!`` vs ``1/2006!``, ``e^{-1000}`` vs ``0``).
* Expressions with free symbols are compared at several fixed pseudo-random points.
* Sums and products are never evaluated: each is held as one symbol (:func:`_hold`).
"""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction

import sympy
from latex2sympy2_extended import latex2sympy
from latex2sympy2_extended.latex2sympy2 import ConversionConfig

MAX_DIGITS = 20_000  # numbers with more digits than this are never built
MAX_FACTORIAL = 5_000
MAX_SYMBOLIC_EXPONENT = 1_000
REL_TOL = sympy.Float("1e-40", 60)
PRECISION = 60

_CONF = ConversionConfig(interpret_as_mixed_fractions=True, lowercase_symbols=True)
_DECIMAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
_I_SYMBOL = sympy.Symbol("i")
_BAD_NODES = (sympy.Integral, sympy.Limit, sympy.Derivative, sympy.Piecewise)
# Sums and products are kept unevaluated, each as one opaque symbol (see :func:`_hold`).
_HELD_NODES = (sympy.Sum, sympy.Product)
_HELD_PREFIX = "held:"
# "\\sum_k" (no bounds): read as a sum over all k, which the grammar can parse.
_UNBOUNDED = re.compile(r"\\(sum|prod)\s*_\s*(?:\{\s*([a-zA-Z])\s*\}|([a-zA-Z]))(?!\s*\^)")
_NONFINITE = (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)


def _rng_points(n_syms: int, n_points: int = 5) -> list[list[sympy.Rational]]:
    rng = random.Random(20240917 + n_syms)
    pts = []
    for k in range(n_points):
        lo, hi = (0.2, 3.0) if k < 3 else (-3.0, -0.2)  # positive points first, then negative
        pts.append([sympy.Rational(round(rng.uniform(lo, hi) * 10007), 10007) for _ in range(n_syms)])
    return pts


def _decimals_to_fracs(s: str) -> str:
    def rep(m: re.Match) -> str:
        whole, frac = m.group(1) or "0", m.group(2)
        return r"(\frac{%d}{%d})" % (int(whole + frac), 10 ** len(frac))
    return _DECIMAL.sub(rep, s)


def _abs_bound(e: sympy.Basic) -> float:
    """Upper bound on |e| for a symbol-free subtree small enough to evaluate; else inf."""
    if _digits(e) > 12:
        return math.inf
    try:
        return float(abs(complex(e.doit().evalf(20))))
    except Exception:
        return math.inf


def _digits(e: sympy.Basic) -> float:
    """Rough upper bound on the decimal digits of any number built by evaluating ``e``."""
    if e.is_Integer:
        return e.p.bit_length() * 0.302 + 1
    if e.is_Rational:
        return max(e.p.bit_length(), e.q.bit_length()) * 0.302 + 1
    if e.is_Number:
        return 20.0  # Float
    if not e.args:
        return 1.0  # symbols and constants such as pi, E, I
    if isinstance(e, (sympy.Pow, sympy.exp)):
        base, exp = e.args if isinstance(e, sympy.Pow) else (sympy.E, e.args[0])
        db = _digits(base)
        if exp.free_symbols:
            if any(p.exp.free_symbols for p in exp.atoms(sympy.Pow)) or exp.atoms(sympy.exp):
                return math.inf  # x^{x^{x}}: towers with symbolic exponents explode numerically
            return db + _digits(exp)
        xv = _abs_bound(exp)
        if math.isinf(xv):
            return math.inf
        if base.free_symbols:
            return math.inf if xv > MAX_SYMBOLIC_EXPONENT else db * max(xv, 1.0)
        if base in (sympy.S.Zero, sympy.S.One, sympy.S.NegativeOne):
            return 1.0
        return max(db, 1.0) * max(xv, 1.0)
    if isinstance(e, (sympy.factorial, sympy.factorial2, sympy.subfactorial, sympy.gamma,
                      sympy.binomial, sympy.RisingFactorial, sympy.FallingFactorial)):
        if any(a.free_symbols for a in e.args):
            return sum(_digits(a) for a in e.args)
        n = max(_abs_bound(a) for a in e.args)
        if n > MAX_FACTORIAL:
            return math.inf
        return n * math.log10(max(n, 2.0)) + 1
    return sum(_digits(a) for a in e.args)


def cost_ok(expr: sympy.Basic) -> bool:
    """True when evaluating ``expr`` creates no number with more than MAX_DIGITS digits."""
    try:
        return _digits(expr) <= MAX_DIGITS
    except RecursionError:
        return False


def _hold(expr: sympy.Expr) -> sympy.Expr:
    """Replace every sum/product node by a symbol named after the node, innermost first.

    The node is never evaluated (``\\sum_{n=1}^{10^{10}} n!`` stays cheap); two sums match
    when their parsed trees are identical, and those are canonical up to the order of the
    factors and terms inside (``\\sum_k a_k b_{n-k}`` = ``\\sum_k b_{n-k} a_k``).
    """
    return expr.replace(lambda e: isinstance(e, _HELD_NODES),
                        lambda e: sympy.Symbol(_HELD_PREFIX + sympy.srepr(e)))


def _unbounded(m: re.Match) -> str:
    return r"\%s_{%s=-\infty}^{\infty}" % (m.group(1), m.group(2) or m.group(3))


def to_sympy(s: str) -> sympy.Expr | None:
    """Evaluated sympy expression for a LaTeX scalar, or None (unparseable or unsafe).

    Sums and products stay unevaluated (:func:`_hold`); integrals, limits, derivatives and
    piecewise functions are refused.
    """
    try:
        if "\\sum" in s or "\\prod" in s:
            s = _UNBOUNDED.sub(_unbounded, s)
        expr = latex2sympy(_decimals_to_fracs(s), normalization_config=None,
                           conversion_config=_CONF)
        if not isinstance(expr, sympy.Expr) or expr.has(*_BAD_NODES) or not cost_ok(expr):
            return None
        if expr.has(*_HELD_NODES):
            expr = _hold(expr)
        expr = expr.doit()
        if not isinstance(expr, sympy.Expr) or expr.has(sympy.zoo, sympy.nan):
            return None  # "1/0", "12:00" read as a ratio: never equal to anything
        if _I_SYMBOL in expr.free_symbols:
            expr = expr.xreplace({_I_SYMBOL: sympy.I})
        floats = expr.atoms(sympy.Float)
        if floats:
            expr = expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
        return expr
    except (Exception, RecursionError):
        return None


_MAX_MATRIX_CELLS = 64


def to_matrix(s: str) -> list[list[sympy.Expr]] | None:
    """Entries of a sum/product/scalar multiple of explicit matrices, evaluated; else None.

    Powers of matrices and anything :func:`cost_ok` refuses are left unevaluated (None).
    """
    try:
        expr = latex2sympy(_decimals_to_fracs(s), normalization_config=None,
                           conversion_config=_CONF)
        if not isinstance(expr, sympy.MatrixExpr) or expr.has(sympy.MatPow, *_BAD_NODES,
                                                               *_HELD_NODES):
            return None
        if any(m.rows * m.cols > _MAX_MATRIX_CELLS for m in expr.atoms(sympy.ImmutableMatrix)):
            return None
        if not all(cost_ok(e) for m in expr.atoms(sympy.ImmutableMatrix) for e in m):
            return None
        value = expr.doit()
        if not isinstance(value, sympy.MatrixBase) or value.rows * value.cols > _MAX_MATRIX_CELLS:
            return None
        rows = [[sympy.nsimplify(e) if e.has(sympy.Float) else e for e in value.row(i)]
                for i in range(value.rows)]
        if any(not isinstance(e, sympy.Expr) or e.has(sympy.zoo, sympy.nan) for r in rows for e in r):
            return None
        return rows
    except (Exception, RecursionError):
        return None


def as_sympy(v: object) -> sympy.Expr:
    """Fraction -> Rational; sympy values pass through."""
    if isinstance(v, Fraction):
        return sympy.Rational(v.numerator, v.denominator)
    return v  # type: ignore[return-value]


def _close(va: sympy.Expr, vb: sympy.Expr) -> bool | None:
    """Relative closeness of two evaluated numbers; None when either is not finite."""
    if not (va.is_number and vb.is_number) or va.has(*_NONFINITE) or vb.has(*_NONFINITE):
        return None
    try:
        diff = sympy.Abs(va - vb).evalf(PRECISION)
        scale = sympy.Max(sympy.Abs(va), sympy.Abs(vb)).evalf(PRECISION)
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not (diff.is_Number and scale.is_Number):
        return None
    if scale == 0:
        return True
    return bool(diff <= scale * REL_TOL)


def _evalf(e: sympy.Expr, subs: dict) -> sympy.Expr:
    return e.evalf(PRECISION, subs=subs) if subs else e.evalf(PRECISION)


def exprs_equal(a: object, b: object) -> bool:
    """Exact-first equality of two scalars (Fraction or sympy expression)."""
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    a, b = as_sympy(a), as_sympy(b)
    if a == b:
        return True
    if a.has(*_NONFINITE) or b.has(*_NONFINITE):
        return False
    try:
        d = a - b
        if d == 0:
            return True
        if d.is_Rational:
            return False
        syms = sorted(a.free_symbols | b.free_symbols, key=str)
        if not syms:
            return bool(_close(_evalf(a, {}), _evalf(b, {})))
        verdicts = []
        for pt in _rng_points(len(syms)):
            subs = dict(zip(syms, pt))
            v = _close(_evalf(a, subs), _evalf(b, subs))
            if v is False:
                return False
            if v is True:
                verdicts.append(v)
        if len(verdicts) >= 3:
            return True
        if sympy.count_ops(d) <= 200:
            return sympy.simplify(d) == 0
        return False
    except (Exception, RecursionError):
        return False


def proportional(d1: object, d2: object, positive: bool = False) -> bool:
    """True when ``d1 == c * d2`` for a constant c != 0 (c > 0 if ``positive``).

    Used for equations (``lhs - rhs`` up to a non-zero factor) and inequalities.
    """
    d1, d2 = as_sympy(d1), as_sympy(d2)
    try:
        if d1 == 0 or d2 == 0:
            return d1 == 0 and d2 == 0
        syms = sorted(d1.free_symbols | d2.free_symbols, key=str)
        if not syms:
            return False
        ratios = []
        for pt in _rng_points(len(syms)):
            subs = dict(zip(syms, pt))
            v1, v2 = _evalf(d1, subs), _evalf(d2, subs)
            if not (v1.is_number and v2.is_number) or v1.has(*_NONFINITE) or v2.has(*_NONFINITE):
                continue
            if abs(complex(v2)) < 1e-30:
                if abs(complex(v1)) < 1e-30:
                    continue
                return False
            ratios.append((v1 / v2).evalf(PRECISION))
        if len(ratios) < 3:
            return False
        first = ratios[0]
        if first == 0 or not all(_close(r, first) for r in ratios[1:]):
            return False
        if positive:
            return bool(sympy.re(first) > 0 and abs(complex(sympy.im(first))) < 1e-30)
        return True
    except (Exception, RecursionError):
        return False


def is_proper_fraction(v: object) -> bool:
    """True when ``v`` is a real constant with 0 < |v| < 1."""
    if isinstance(v, Fraction):
        return 0 < abs(v) < 1
    try:
        x = sympy.Abs(as_sympy(v))
        return bool(x.is_number and x.is_real and (x > 0) is sympy.true and (x < 1) is sympy.true)
    except (Exception, RecursionError):
        return False


def rounds_to(value: object, decimal: Fraction, places: int) -> bool:
    """True when the real number ``value`` is within half a unit of ``decimal``'s last place."""
    try:
        v = as_sympy(value)
        if v.free_symbols or v.has(*_NONFINITE):
            return False
        diff = sympy.Abs(v - as_sympy(decimal)).evalf(PRECISION)
        if not diff.is_Number:
            return False
        return bool(diff <= sympy.Rational(1, 2 * 10 ** places) * (1 + sympy.Rational(1, 10 ** 9)))
    except (Exception, RecursionError):
        return False
