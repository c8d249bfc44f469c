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
from fractions import Fraction

from coop_jax.verify import symbolic
from coop_jax.verify.normalize import MAX_ANSWER_CHARS, brace_depth_ok
from coop_jax.verify.relations import is_label, parse_relation
from coop_jax.verify.values import (BaseNum, Choice, Matrix, Opaque, Relation, Scalar, Seq, Text,
                                    Union, Value)


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
    "thousands": re.compile(r"^[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$"),
    "frac": re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$"),
    "slash": re.compile(r"^([+-]?\d+)/([+-]?\d+)$"),
    "mixed": re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$"),
    "mixed_slash": re.compile(r"^([+-]?)(\d+) (\d+)/(\d+)$"),
    "repeat": re.compile(r"^([+-]?)(\d*)\.(\d*)\\overline\{(\d+)\}$"),
    "sci": re.compile(rf"^([+-]?{_DEC})(?:\\times|\\cdot|\*)10\^\{{?([+-]?\d{{1,4}})\}}?$"),
    "e": re.compile(rf"^([+-]?{_DEC})[eE]([+-]?\d{{1,4}})$"),
}
# "3,75" may be 3.75: one comma, no space, and not exactly three digits after it (those are
# thousands, "12,500") unless the integer part is 0 ("0,125" cannot be a thousands group).
_DECIMAL_COMMA = re.compile(r"^([+-]?)(\d+),(\d+)$")
_SEMI = re.compile(";")
_RATIO = re.compile(":")
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


def _decimal_comma(s: str) -> Scalar | None:
    """The decimal-comma reading of ``s`` (see ``_DECIMAL_COMMA``), or None."""
    m = _DECIMAL_COMMA.match(s)
    if m is None or (len(m.group(3)) == 3 and m.group(2) != "0"):
        return None
    dot = f"{m.group(1)}{m.group(2)}.{m.group(3)}"
    return Scalar(Fraction(dot), dot, False, _decimal_shape(dot))


def _labelled_tuple(items: tuple) -> Seq | None:
    """``p=5, q=2`` -> the tuple ``(5, 2)`` labelled ``(p, q)``; ``p=5, q=2, p=7, q=2`` -> a
    list of two such tuples. None unless every item assigns a plain symbol and the labels repeat
    one block of at least two different symbols."""
    if len(items) < 2 or not all(isinstance(v, Relation) and v.assign and isinstance(v.lhs, Scalar)
                                 and _SYMBOL_RE.match(v.lhs.src.replace(" ", "")) for v in items):
        return None
    labels = tuple(v.lhs.src.replace(" ", "") for v in items)
    k = len(set(labels))
    if k < 2 or len(labels) % k or labels != labels[:k] * (len(labels) // k):
        return None  # "x=-2, x=1" is a list of values of x
    tuples = tuple(Seq(tuple(v.rhs for v in items[i:i + k]), "tuple", "(", ")", labels[:k])
                   for i in range(0, len(items), k))
    return tuples[0] if len(tuples) == 1 else Seq(tuples, "bare")


def _matrix_expr(s: str) -> Matrix | None:
    """An unevaluated sum/product of matrices (``2\\begin{pmatrix}..\\end{pmatrix} + ...``)."""
    rows = symbolic.to_matrix(s)
    if rows is None:
        return None
    return Matrix(tuple(tuple(Scalar(e, str(e)) for e in row) for row in rows))


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
        hours, minutes = int(m.group(1)), int(m.group(2))
        ratio = Fraction(hours, minutes) if minutes and not suffix else None  # "7:32" may be a ratio
        return Text(f"{hours}:{m.group(2)}{suffix}", ratio)
    num = _parse_number(s)
    if num is not None:
        return Scalar(num, s, percent, _decimal_shape(s))
    parts, _ = split_top(s, _SEMI)  # "-3; -1; 4", "p=5,q=2; p=7,q=2"
    if len(parts) > 1:
        if len(parts) > 64 or any(not p for p in parts):
            return Opaque(s)
        return Seq(tuple(parse_value(p) for p in parts), "bare")
    parts, _ = split_top(s, re.compile(","))
    if len(parts) > 1:
        if len(parts) > 64 or any(not p for p in parts):
            return Opaque(s)
        items = _flat_items(parts)
        return _labelled_tuple(items) or Seq(items, "bare", alt=_decimal_comma(s))
    parts, _ = split_top(s, _CUP_RE)
    if len(parts) > 1:
        return Union(tuple(parse_value(p) for p in parts))
    parts, _ = split_top(s, _IN_RE)
    if len(parts) == 2 and (_SYMBOL_RE.match(parts[0]) or is_label(parts[0])):
        return parse_value(parts[1])
    parts, seps = split_top(s, _REL_RE)
    if len(parts) > 1:
        return parse_relation(parts, seps, parse_value)
    if s.startswith(r"\{") and s.endswith(r"\}"):
        inner = s[2:-2].strip()
        items, _ = split_top(inner, re.compile(","))
        return Seq(_flat_items([p for p in items if p]), "set")
    m = _MATRIX_RE.match(s)
    if m and r"\begin" not in m.group(2):
        return _parse_matrix(m.group(2), m.group(1))
    if _wrapped(s):
        inner = s[1:-1].strip()
        items, _ = split_top(inner, _SEMI)  # "[1; 4]", "[1,5; 4]": ";" between decimal commas
        if len(items) == 1:
            items, _ = split_top(inner, re.compile(","))
        if len(items) > 1:
            return Seq(tuple(parse_value(p) for p in items), "tuple", s[0], s[-1])
        if s[0] == "(" or inner.startswith(r"\begin"):
            return parse_value(inner, percent)
    parts, _ = split_top(s, _RATIO)
    if 2 < len(parts) <= 64 and all(parts):  # "1:2:3" is an ordered ratio, not (1/2)/3
        return Seq(tuple(parse_value(p) for p in parts), "tuple", ":", ":")
    pm = _expand_pm(s)
    if pm is not None:
        return Seq(tuple(parse_value(p) for p in pm), "bare")
    base = _parse_base(s)
    if base is not None:
        return base
    if r"\begin{" in s:
        return _matrix_expr(s) or Opaque(s)
    expr = symbolic.to_sympy(s)
    if expr is None:
        return Opaque(s)
    return Scalar(expr, s, percent)
