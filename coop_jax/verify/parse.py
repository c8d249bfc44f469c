"""Parse a normalised answer string into a small structured value.

Values are frozen dataclasses: :class:`Scalar` (an exact ``Fraction`` or a guarded sympy
expression), :class:`Text`, :class:`Choice`, :class:`BaseNum`, :class:`Seq` (sets, tuples,
bare comma lists, intervals), :class:`Union`, :class:`Relation`, :class:`Matrix` and
:class:`Opaque` (could not be parsed safely; only an identical string matches it).

Plain numbers never touch sympy. Other scalars go through ``latex2sympy2_extended``'s
ANTLR parser (no ``eval``/``sympify`` of model text); the unevaluated tree is checked by
:func:`coop_jax.verify.symbolic.cost_ok` before anything is evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Union as _U

import sympy

from coop_jax.verify.normalize import MAX_ANSWER_CHARS, brace_depth_ok
from coop_jax.verify import symbolic


@dataclass(frozen=True)
class Scalar:
    value: object  # Fraction or sympy.Expr
    src: str
    percent: bool = False
    decimal: tuple | None = None  # (significant digits, places) of a decimal literal


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class Choice:
    letter: str
    rest: str = ""  # the option's value when written as "(C) 12"


@dataclass(frozen=True)
class BaseNum:
    digits: str
    base: int


@dataclass(frozen=True)
class Seq:
    items: tuple
    kind: str  # "set" | "tuple" | "bare"
    open: str = ""
    close: str = ""


@dataclass(frozen=True)
class Union:
    parts: tuple


@dataclass(frozen=True)
class Relation:
    op: str  # "=", "<", "<=", "!=" ("a > b" is stored as "b < a")
    lhs: object
    rhs: object
    assign: bool = False  # "label = value", where the label names the quantity asked for


@dataclass(frozen=True)
class Matrix:
    rows: tuple


@dataclass(frozen=True)
class Opaque:
    src: str


Value = _U[Scalar, Text, Choice, BaseNum, Seq, Union, Relation, Matrix, Opaque]

_CHOICE_RES = (
    re.compile(r"^\(?([A-Z])\)?()$"),
    re.compile(r"^\(([A-Z])\)\s+([^\s+\-*/^=].*)$"),
    re.compile(r"^([A-Z])[).:]\s+(\S.*)$"),
    re.compile(r"^(?i:option|choice)\s*\(?([A-Z])\)?()$"),
)
_WORDS_RE = re.compile(r"^[A-Za-z][A-Za-z'\-]*[A-Za-z](?:[ '\-][A-Za-z][A-Za-z'\-]*)*$")
_MATH_WORDS = frozenset(
    "sin cos tan cot sec csc log ln exp pi sqrt max min det gcd lcm mod arcsin arccos "
    "arctan sinh cosh tanh infty".split())
_BASE_RE = re.compile(r"^([0-9A-Za-z]+)_\{?\(?(\d{1,2})\)?\}?$")
_DEC = r"(?:\d+(?:\.\d*)?|\.\d+)"
_NUM_RES = {
    "dec": re.compile(rf"^[+-]?{_DEC}$"),
    "thousands": re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$"),
    "frac": re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$"),
    "slash": re.compile(r"^([+-]?\d+)/([+-]?\d+)$"),
    "mixed": re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$"),
    "mixed_slash": re.compile(r"^([+-]?)(\d+) (\d+)/(\d+)$"),
    "repeat": re.compile(r"^([+-]?)(\d*)\.(\d*)\\overline\{(\d+)\}$"),
    "sci": re.compile(rf"^([+-]?{_DEC})(?:\\times|\\cdot|\*)10\^\{{?([+-]?\d{{1,4}})\}}?$"),
    "e": re.compile(rf"^([+-]?{_DEC})[eE]([+-]?\d{{1,4}})$"),
}
_SPACE_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?: \d{3})+(?:\.\d+)?$")
_SPACE_NOT_BETWEEN_DIGITS = re.compile(r"(?<![\d,]) +| +(?![\d,])")
_REL_RE = re.compile(
    r"\\le(?![a-zA-Z])|\\ge(?![a-zA-Z])|\\ne(?![a-zA-Z])|\\approx(?![a-zA-Z])|<=|>=|!=|<|>|=")
_TIME_RE = re.compile(r"^(\d{1,2}):(\d{2})\s*([ap]\.?\s*m\.?)?$", re.IGNORECASE)
_IN_RE = re.compile(r"\\in(?![a-zA-Z])")
_CUP_RE = re.compile(r"\\cup(?![a-zA-Z])|\\text\{\s*or\s*\}|\bor\b|\\vee(?![a-zA-Z])")
_PM_RE = re.compile(r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])|\+-|\+/-")
_MATRIX_RE = re.compile(
    r"^\\begin\{(pmatrix|bmatrix|Bmatrix|matrix|smallmatrix|array)\}(.*)\\end\{\1\}$", re.S)
_SYMBOL_RE = re.compile(r"^(?:[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?|\\[a-zA-Z]+)$")
# Left-hand sides that name the quantity asked for: "x", "a_1", "\\theta", "AB", "f(3)",
# "m\\angle ABC", "P(x)". "<label> = value" then matches "value".
_LABEL_RE = re.compile(
    r"^(?:[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?(?:\([^()=]{1,12}\))?|\\[a-zA-Z]+|[A-Z]{2,3}"
    r"|(?:m\s*)?\\angle\s*[A-Za-z]{1,3}|\\overline\{[A-Z]{2}\})$")
_OPS = {r"\le": "<=", r"\ge": ">=", r"\ne": "!=", r"\approx": "~", "<=": "<=", ">=": ">=",
        "!=": "!=", "<": "<", ">": ">", "=": "="}
_FLIP = {">": "<", ">=": "<="}


def split_top(s: str, sep: re.Pattern) -> tuple[list[str], list[str]]:
    """Split ``s`` at matches of ``sep`` outside brackets; return (parts, separators)."""
    parts, seps = [], []
    depth, start, i, n = 0, 0, 0, len(s)
    while i < n:
        ch = s[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            m = sep.match(s, i)
            if m and m.end() > i:
                parts.append(s[start:i])
                seps.append(m.group(0))
                i = start = m.end()
                continue
        if ch == "\\" and i + 1 < n and s[i + 1] in "{}":
            i += 1  # "\{" counts like "{"
            depth += 1 if s[i] == "{" else -1
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts], seps


def _wrapped(s: str) -> bool:
    """True when the first bracket of ``s`` closes at its last character."""
    if not s or s[0] not in "([" or s[-1] not in ")]":
        return False
    depth = 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


def _parse_number(s: str) -> Fraction | None:
    """Exact value of a plain number spelling, or None."""
    if _SPACE_THOUSANDS.match(s):
        t = s.replace(" ", "")
    else:
        t = _SPACE_NOT_BETWEEN_DIGITS.sub("", s)
    if _NUM_RES["thousands"].match(t):
        t = t.replace(",", "")
    if _NUM_RES["dec"].match(t):
        return Fraction(t)
    m = _NUM_RES["frac"].match(t)
    if m:
        den = int(m.group(3))
        return None if den == 0 else (-1 if m.group(1) == "-" else 1) * Fraction(int(m.group(2)), den)
    m = _NUM_RES["slash"].match(t)
    if m:
        den = int(m.group(2))
        return None if den == 0 else Fraction(int(m.group(1)), den)
    m = _NUM_RES["mixed"].match(t) or _NUM_RES["mixed_slash"].match(s.strip())
    if m:
        den = int(m.group(4))
        if den == 0:
            return None
        val = int(m.group(2)) + Fraction(int(m.group(3)), den)
        return -val if m.group(1) == "-" else val
    m = _NUM_RES["repeat"].match(t)
    if m:
        sign, whole, fixed, rep = m.groups()
        base = Fraction(int(whole or "0")) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
        val = base + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return -val if sign == "-" else val
    for key in ("sci", "e"):
        m = _NUM_RES[key].match(t)
        if m:
            return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))
    return None


def _decimal_shape(s: str) -> tuple[int, int] | None:
    """(significant digits, decimal places) of a plain decimal such as ``4.1231056256``."""
    t = s.replace(",", "").replace(" ", "").lstrip("+-")
    if "." not in t or not _NUM_RES["dec"].match(t):
        return None
    whole, frac = t.split(".")
    digits = (whole + frac).lstrip("0")
    return len(digits), len(frac)


def _parse_choice(s: str) -> Choice | None:
    for rx in _CHOICE_RES:
        m = rx.match(s)
        if m:
            return Choice(m.group(1), m.group(2).strip())
    return None


def _parse_text(s: str, was_text: bool) -> Text | None:
    if not _WORDS_RE.match(s):
        return None
    words = s.lower().split()
    if any(w in _MATH_WORDS for w in words):
        return None
    if was_text or len(s.replace(" ", "")) >= 3 or s.lower() in ("no", "ok"):
        text = " ".join(w for w in words if w not in ("the", "a", "an")) or " ".join(words)
        return Text(text)
    return None


def _parse_base(s: str) -> BaseNum | None:
    m = _BASE_RE.match(s.replace(" ", ""))
    if not m or not any(c.isdigit() for c in m.group(1)):
        return None
    base = int(m.group(2))
    digits = m.group(1).upper()
    if not 2 <= base <= 36:
        return None
    try:
        int(digits, base)
    except ValueError:
        return None
    return BaseNum(digits.lstrip("0") or "0", base)


def _expand_pm(s: str) -> list[str] | None:
    """``a \\pm b`` -> [``a + b``, ``a - b``] (all signs flipped together), else None."""
    hits = list(_PM_RE.finditer(s))
    if not hits or len(hits) > 3:
        return None
    out = []
    for sign in ("+", "-"):
        pieces, last = [], 0
        for m in hits:
            pieces.append(s[last:m.start()])
            is_mp = m.group(0) == r"\mp"
            pieces.append(" " + ("-" if (sign == "+") == is_mp else "+") + " ")
            last = m.end()
        pieces.append(s[last:])
        out.append("".join(pieces).strip())
    return out


def _is_symbol(v: Value) -> bool:
    return isinstance(v, Scalar) and getattr(v.value, "is_Symbol", False)


def _is_constant(v: Value) -> bool:
    if not isinstance(v, Scalar):
        return False
    return isinstance(v.value, Fraction) or not v.value.free_symbols


_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


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


_INF = Scalar(sympy.oo, r"\infty")
_NEG_INF = Scalar(-sympy.oo, r"-\infty")


def _relation_to_interval(ops: list[str], vals: list[Value]) -> Seq | None:
    """``x > 2`` -> ``(2, \\infty)``, ``-2 \\le x < 7`` -> ``[-2, 7)``; else None."""
    if len(vals) == 2:
        (a, b), op = vals, ops[0]
        if op not in ("<", "<=", ">", ">="):
            return None
        if _is_symbol(b) and _is_constant(a):  # "2 < x" is "x > 2"
            a, b = b, a
            op = _MIRROR[op]
        if not (_is_symbol(a) and _is_constant(b)):
            solved = _solve_linear(a, b)  # "-x > -1" is "x < 1"
            if solved is None:
                return None
            a, b, flip = solved
            op = _MIRROR[op] if flip else op
        if op in ("<", "<="):
            return Seq((_NEG_INF, b), "tuple", "(", ")" if op == "<" else "]")
        return Seq((b, _INF), "tuple", "(" if op == ">" else "[", ")")
    if len(vals) == 3 and _is_symbol(vals[1]) and _is_constant(vals[0]) and _is_constant(vals[2]):
        lo, hi, (op1, op2) = vals[0], vals[2], ops
        if op1 in (">", ">=") and op2 in (">", ">="):
            lo, hi, op1, op2 = hi, lo, _FLIP[op2], _FLIP[op1]
        if op1 in ("<", "<=") and op2 in ("<", "<="):
            return Seq((lo, hi), "tuple", "(" if op1 == "<" else "[", ")" if op2 == "<" else "]")
    return None


def _parse_relation(parts: list[str], seps: list[str]) -> Value:
    ops = [_OPS[x] for x in seps]
    if "~" in ops:  # "x \\approx 3.14" is "x = 3.14"; "= 1/3 \\approx 0.33" keeps the exact 1/3
        k = ops.index("~")
        if k == 0 and _LABEL_RE.match(parts[0].replace(" ", "")):
            ops[0] = "="
        else:
            parts, ops = parts[:k + 1], ops[:k]
        if "~" in ops:
            return Opaque(" ".join(parts))
        if len(parts) == 1:
            return parse_value(parts[0])
    vals = [parse_value(p) for p in parts]
    if any(isinstance(v, Opaque) for v in vals) or any(not p for p in parts):
        return Opaque(" ".join(parts))
    if all(o == "=" for o in ops):
        if all(_is_constant(v) for v in vals):  # "12 \times 3 = 36": keep it only if true
            ok = all(symbolic.exprs_equal(v.value, vals[-1].value) for v in vals[:-1])
            return vals[-1] if ok else Opaque(" = ".join(parts))
        label = bool(_LABEL_RE.match(parts[0].replace(" ", "")) or _LABEL_RE.match(parts[0]))
        if len(parts) == 2:
            return Relation("=", vals[0], vals[1], label)
        if label:  # "x = 2 + 3 = 5"
            return Relation("=", vals[0], vals[-1], True)
        return Opaque(" = ".join(parts))
    interval = _relation_to_interval(ops, vals)
    if interval is not None:
        return interval
    if len(parts) == 2:
        op = ops[0]
        lhs, rhs = vals
        if op in _FLIP:
            op, lhs, rhs = _FLIP[op], rhs, lhs
        return Relation(op, lhs, rhs)
    return Opaque(" ".join(parts))


def _parse_matrix(body: str, env: str) -> Value:
    if env == "array":
        body = re.sub(r"^\s*\{[^{}]*\}", "", body)
    rows = [r for r in re.split(r"\\\\", body) if r.strip() and r.strip() != r"\hline"]
    cells = tuple(tuple(parse_value(c.strip()) for c in r.split("&")) for r in rows)
    if not cells or len({len(r) for r in cells}) != 1:
        return Opaque(body)
    return Matrix(cells)


def _flat_items(parts: list[str]) -> tuple:
    """Parse list elements; a ``\\pm`` element contributes both of its values."""
    out: list = []
    for p in parts:
        v = parse_value(p)
        if isinstance(v, Seq) and v.kind == "bare" and _PM_RE.search(p):
            out.extend(v.items)
        else:
            out.append(v)
    return tuple(out)


def parse_value(s: str, percent: bool = False, was_text: bool = False) -> Value:
    """Parse one normalised answer (or sub-answer) string into a :data:`Value`."""
    s = s.strip()
    if not s or len(s) > MAX_ANSWER_CHARS or not brace_depth_ok(s):
        return Opaque(s)
    choice = _parse_choice(s)
    if choice is not None:
        return choice
    text = _parse_text(s, was_text)
    if text is not None:
        return text
    if s in (r"\emptyset", r"\{\}", "{}"):
        return Seq((), "set")
    m = _TIME_RE.match(s)
    if m:  # "12:00", "3:30 pm": a clock time, not a ratio
        suffix = (m.group(3) or "").replace(".", "").replace(" ", "").lower()
        return Text(f"{int(m.group(1))}:{m.group(2)}{suffix}")
    num = _parse_number(s)
    if num is not None:
        return Scalar(num, s, percent, _decimal_shape(s))
    parts, _ = split_top(s, re.compile(","))
    if len(parts) > 1:
        if len(parts) > 64 or any(not p for p in parts):
            return Opaque(s)
        return Seq(_flat_items(parts), "bare")
    parts, _ = split_top(s, _CUP_RE)
    if len(parts) > 1:
        return Union(tuple(parse_value(p) for p in parts))
    parts, _ = split_top(s, _IN_RE)
    if len(parts) == 2 and _SYMBOL_RE.match(parts[0]):
        return parse_value(parts[1])
    parts, seps = split_top(s, _REL_RE)
    if len(parts) > 1:
        return _parse_relation(parts, seps)
    if s.startswith(r"\{") and s.endswith(r"\}"):
        inner = s[2:-2].strip()
        items, _ = split_top(inner, re.compile(","))
        return Seq(_flat_items([p for p in items if p]), "set")
    m = _MATRIX_RE.match(s)
    if m:
        return _parse_matrix(m.group(2), m.group(1))
    if _wrapped(s):
        inner = s[1:-1].strip()
        items, _ = split_top(inner, re.compile(","))
        if len(items) > 1:
            return Seq(tuple(parse_value(p) for p in items), "tuple", s[0], s[-1])
        if s[0] == "(" or inner.startswith(r"\begin"):
            return parse_value(inner, percent)
    pm = _expand_pm(s)
    if pm is not None:
        return Seq(tuple(parse_value(p) for p in pm), "bare")
    base = _parse_base(s)
    if base is not None:
        return base
    expr = symbolic.to_sympy(s)
    if expr is None:
        return Opaque(s)
    return Scalar(expr, s, percent)
