"""String-level normalisation of an extracted final answer.

Turns the many spellings of one answer (``\\$18.00``, ``3,50 \u20ac``, ``18 dollars``,
``\\dfrac13``, ``90^\\circ``, ``10,\\!080``, ``5\\text{ cm}^2``) into one LaTeX-ish string that
:mod:`coop_jax.verify.parse` can read. Everything here is plain ``str``/``re`` work
with linear-time patterns; nothing is evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection

MAX_ANSWER_CHARS = 512  # longer "answers" are compared only as identical strings
MAX_BRACE_DEPTH = 10  # ANTLR parse time grows steeply with nesting

_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": r"\times ", "\u00b7": r"\cdot ",
    "\u22c5": r"\cdot ", "\u00f7": r"\div ", "\u03c0": r"\pi ", "\u221a": r"\sqrt",
    "\u221e": r"\infty ", "\u2264": r"\le ", "\u2265": r"\ge ", "\u2260": r"\ne ",
    "\u00b0": r"^\circ", "\u222a": r"\cup ", "\uff0c": ",", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\uff1a": ":", "\u00bd": r"\frac{1}{2}", "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}", "\u00b2": "^2", "\u00b3": "^3",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))

_TEXT_CMDS = re.compile(
    r"\\(?:textbf|textit|textrm|textnormal|textsf|texttt|mbox|mathrm|mathbf|mathit|"
    r"mathsf|mathtt|hbox|operatorname\*?)\s*\{")
_SIZING = re.compile(r"\\(?:big|Big|bigg|Bigg)[lrm]?(?![a-zA-Z])")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)\s*(?:\.|(?=[^a-zA-Z]))|\\(?:left|right)(?=\\)")
_SPACING = re.compile(
    r"(?<!\\)\\[,;:!>]|\\(?:quad|qquad|displaystyle|textstyle|scriptstyle|limits|nolimits|"
    r"medspace|thinspace|thickspace|negthinspace|enspace)(?![a-zA-Z])")
_DEGREES = re.compile(
    r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\^\s*\{\s*\\degree\s*\}|\\degree|\\circ(?![a-zA-Z])"
    r"|\\text\{\s*\\textdegree\s*\}|\\textdegree")
# "45\\%", "45 percent", "45 per cent", "45 pct", "45 percentage" (points).
_PERCENT = re.compile(r"\\%|%|\\text\{\s*(?:per\s?cent(?:age)?s?|pct)\s*\}"
                      r"|\s*\b(?:per\s?cent(?:age)?s?|pct)\b(?:\s+points?\b)?", re.IGNORECASE)
_VERT = re.compile(r"\\[lr]?vert(?![a-zA-Z])")
_THOUSANDS_TEX = re.compile(r"\{,\}|,\\!\s*|,\\,(?=\d{3})")

UNITS = (
    "dollars?", "usd", "cents?", "euros?", "eur", "pounds?", "gbp", "yuan", "rupees?", "rs",
    "degrees?", "deg", "radians?", "rad", "units?", "sq units?", "square units?", "cubic units?",
    "mm", "cm", "km", "m", "meters?", "metres?", "kilometers?", "centimeters?", "millimeters?",
    "inch(?:es)?", "in", "ft", "feet", "foot", "yards?", "yd", "miles?", "mi",
    "square (?:inch(?:es)?|feet|foot|meters?|metres?|yards?|miles?|units?|cm|m|km|ft|in)",
    "sq (?:inch(?:es)?|feet|ft|meters?|m|cm|in|yards?|units?)",
    "cubic (?:inch(?:es)?|feet|ft|meters?|m|cm|in|yards?|units?)",
    "seconds?", "secs?", "s", "minutes?", "mins?", "hours?", "hrs?", "h", "days?", "weeks?",
    "months?", "years?", "yrs?", "decades?", "centuries",
    "grams?", "g", "kg", "kilograms?", "mg", "lbs?", "ounces?", "oz", "tons?",
    "liters?", "litres?", "l", "ml", "gallons?", "gal", "quarts?", "pints?", "cups?",
    "mph", "km/h", "kmh", "m/s", "ft/s", "mpg", "people", "persons?", "students?", "points?",
    "times", "ways", "items?", "pieces?", "percent", "sides?", "edges?", "vertices",
    "calories", "watts?", "volts?", "ohms?", "bits?", "bytes?", "pages?", "marbles?",
    "apples?", "books?", "cookies?", "eggs?", "boxes?", "bags?", "packs?", "bottles?", "cards?",
    "per [a-z]+", "each", "apiece",
)
# One- or two-letter units could be a variable ("2h", "3in"), so they need a space before them.
_SPACED_UNITS = ("s", "h", "m", "g", "l", "in", "mi", "rs", "rad")
_UNIT_WORDS = re.compile(
    r"(?:(?<=[\d}])\s*(?:" + "|".join(u for u in UNITS if u not in _SPACED_UNITS) + r")"
    r"|(?<=[\d}])\s+(?:" + "|".join(_SPACED_UNITS) + r"))"
    r"(?:\s*\^\s*\{?[23]\}?)?\s*\.?\s*$",
    re.IGNORECASE)
# Trailing \text{...} made of words only (a unit such as "\text{ cm}^2").
_TEXT_UNIT = re.compile(r"\s*\\text\{\s*[A-Za-z][A-Za-z .'/-]*\}(?:\s*\^\s*\{?[23]\}?)?\s*$")
_AND_OR = re.compile(r"\s*,?\s*\\text\{\s*,?\s*(?:and|or|,)\s*\}\s*|\s*,?\s+(?:and|or)\s+")
_ELLIPSIS = re.compile(r"(?:\.\.\.|\\[lc]?dots|\u2026)\s*[.,;]?\s*$")
_PLAIN_SQRT = re.compile(r"(?<![\\a-zA-Z])sqrt\s*\(([^()]{1,64})\)")
_PLAIN_PI = re.compile(r"(?<![\\a-zA-Z])pi(?![a-zA-Z])")
_REALS = re.compile(r"\\mathbb\s*\{?\s*R\s*\}?|\\R(?![a-zA-Z])|(?i:all real numbers)")
# Currency signs other than ``$`` (dropped like it, before or after the number: ``3,50 €``).
_CURRENCY = re.compile(
    "[\u20ac\u00a3\u00a5\u20b9]" r"|\\(?:euro|texteuro|EUR|pounds|textsterling|yen|textyen)(?![a-zA-Z])")
_LEADING_ASSIGN_WORDS = re.compile(r"^(?:answer|final answer|ans)\s*[:=]\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Normalized:
    """A cleaned answer string plus flags for the decorations that were removed."""

    text: str
    percent: bool = False
    was_text: bool = False


def brace_depth_ok(s: str, limit: int = MAX_BRACE_DEPTH) -> bool:
    """True when brackets of any kind never nest deeper than ``limit``."""
    depth = 0
    for ch in s:
        if ch in "{([":
            depth += 1
            if depth > limit:
                return False
        elif ch in "})]":
            depth -= 1
    return True


# A backslash escapes the next character (``\\{`` is no group), so it is one token with it.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)


def matching_braces(text: str, opens: Collection[int], start: int = 0) -> dict[int, int]:
    """Map each ``{`` position in ``opens`` to its closing ``}``, or leave it out if it never
    closes: one pass from ``start``, skipping escaped characters, that stops once all are found."""
    out: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN.finditer(text, start):
        ch = m.group()
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            i = stack.pop()
            if i in opens:
                out[i] = m.start()
                if len(out) == len(opens):
                    break
    return out


def match_brace(s: str, i: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``s[i]`` (escaped braces skipped), or -1."""
    return matching_braces(s, (i,), i).get(i, -1)


def _read_arg(s: str, i: int) -> tuple[str, int] | None:
    """Read one TeX macro argument at ``s[i:]``: ``{...}``, ``\\cmd`` or one char."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return None
    if s[i] == "{":
        j = match_brace(s, i)
        if j < 0:
            return None
        return s[i + 1:j], j + 1
    if s[i] == "\\":
        m = re.match(r"\\[a-zA-Z]+", s[i:])
        if m is None:
            return None
        return m.group(0), i + m.end()
    if s[i] in "}^_&":
        return None
    return s[i], i + 1


def fix_macro_args(s: str, macro: str, nargs: int) -> str:
    """Brace the arguments of ``macro``: ``\\frac13`` -> ``\\frac{1}{3}``, ``\\sqrt2`` -> ``\\sqrt{2}``."""
    out: list[str] = []
    i = 0
    pat = re.compile(re.escape(macro) + r"(?![a-zA-Z])")
    while True:
        m = pat.search(s, i)
        if m is None:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:m.end()])
        j = m.end()
        if macro == r"\sqrt":
            k = j
            while k < len(s) and s[k] == " ":
                k += 1
            if k < len(s) and s[k] == "[":
                close = s.find("]", k)
                if close < 0:
                    out.append(s[j:])
                    return "".join(out)
                out.append(s[k:close + 1])
                j = close + 1
        args = []
        for _ in range(nargs):
            got = _read_arg(s, j)
            if got is None:
                break
            args.append(got[0])
            j = got[1]
        if len(args) != nargs:
            out.append(s[m.end():])
            return "".join(out)
        out.append("".join("{" + fix_macro_args(a, macro, nargs) + "}" for a in args))
        i = j


def unwrap_text_groups(s: str) -> str:
    """Replace every ``\\text{X}`` by ``X`` (used once units have been stripped)."""
    while True:
        k = s.find(r"\text{")
        if k < 0:
            return s
        j = match_brace(s, k + 5)
        if j < 0:
            return s.replace(r"\text{", "", 1)
        s = s[:k] + s[k + 6:j] + s[j + 1:]


def _strip_outer_text(s: str) -> tuple[str, bool]:
    """``\\text{Evelyn}`` -> ``("Evelyn", True)``; anything else is returned unchanged."""
    if s.startswith(r"\text{") and match_brace(s, 5) == len(s) - 1:
        return s[6:-1].strip(), True
    return s, False


def _strip_units(s: str) -> str:
    """Drop trailing unit words or ``\\text{unit}`` groups that follow some math."""
    for _ in range(3):
        new = _TEXT_UNIT.sub("", s).strip()
        if new and new != s and not new.endswith(("=", "\\")):
            s = new
            continue
        new = _UNIT_WORDS.sub("", s).strip()
        # a plain-word unit only follows a constant: "x + 2 h" keeps its h
        if new and new != s and not re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", new)):
            s = new
            continue
        break
    return s


def _strip_delimiters(s: str) -> str:
    s = s.strip()
    for lo, hi in ((r"\(", r"\)"), (r"\[", r"\]"), ("$$", "$$")):
        if s.startswith(lo) and s.endswith(hi) and len(s) >= len(lo) + len(hi):
            s = s[len(lo):len(s) - len(hi)].strip()
    s = s.replace(r"\$", " ")
    s = s.replace("$", " ")
    return _CURRENCY.sub(" ", s)


def normalize(answer: str) -> Normalized:
    """Normalise one extracted answer (see module docstring). Never raises."""
    s = answer.strip()
    if len(s) > MAX_ANSWER_CHARS:
        return Normalized(s)
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = _strip_delimiters(s)
    s = s.replace("\n", " ").replace("\t", " ")
    s = _LEADING_ASSIGN_WORDS.sub("", s)
    s = _SIZING.sub("", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _THOUSANDS_TEX.sub(",", s)
    s = re.sub(r"(?<!\\)((?:\\\\)*)\\ ", r"\1 ", s)
    s = _SPACING.sub(" ", s).replace("~", " ")
    s = re.sub(r"\\[dtc]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"\\[dt]binom(?![a-zA-Z])", r"\\binom", s)
    s = re.sub(r"\\(?:leqslant|leq|le)(?![a-zA-Z])", r"\\le ", s)
    s = re.sub(r"\\(?:geqslant|geq|ge)(?![a-zA-Z])", r"\\ge ", s)
    s = re.sub(r"\\(?:neq|ne)(?![a-zA-Z])", r"\\ne ", s)
    s = re.sub(r"\\(?:lt)(?![a-zA-Z])", "<", s)
    s = re.sub(r"\\(?:gt)(?![a-zA-Z])", ">", s)
    s = re.sub(r"\\(?:varnothing)(?![a-zA-Z])", r"\\emptyset", s)
    s = re.sub(r"\\infinity|(?<![\\a-zA-Z])infinity|(?<![\\a-zA-Z])inf(?![a-zA-Z])", r"\\infty", s)
    s = re.sub(r"\\(?:lbrace)(?![a-zA-Z])", r"\\{", s)
    if "vert" in s:
        s = _VERT.sub("|", s)
    s = re.sub(r"\\langle(?![a-zA-Z])", "(", s)
    s = re.sub(r"\\rangle(?![a-zA-Z])", ")", s)
    s = _REALS.sub(r"(-\\infty, \\infty)", s)
    s = re.sub(r"\\(?:rbrace)(?![a-zA-Z])", r"\\}", s)
    s = _TEXT_CMDS.sub(r"\\text{", s)
    s = _PLAIN_SQRT.sub(r"\\sqrt{\1}", s)
    s = _PLAIN_PI.sub(r"\\pi ", s)
    s = re.sub(r"\\(?:approx|simeq|thickapprox)(?![a-zA-Z])|\u2248", r"\\approx ", s)
    s = _DEGREES.sub("", s)
    percent = bool(_PERCENT.search(s))
    if percent:
        s = _PERCENT.sub("", s)
    s = " ".join(s.split())
    s = s.lstrip(" ;:!,")
    s = s.rstrip(" ;:,") if _ELLIPSIS.search(s) else s.rstrip(" .;:,")
    s, was_text = _strip_outer_text(s)
    if len(s) > 1 and s[0] == s[-1] and s[0] in "\"'`":
        s = s[1:-1].strip()
    s = _AND_OR.sub(", ", s)
    s = _strip_units(s)
    s = unwrap_text_groups(s) if r"\text{" in s else s
    for macro, nargs in ((r"\frac", 2), (r"\binom", 2), (r"\sqrt", 1)):
        if macro in s:
            s = fix_macro_args(s, macro, nargs)
    s = " ".join(s.split()).lstrip(" ;:!")
    s = s.rstrip(" ;:") if _ELLIPSIS.search(s) else s.rstrip(" .;:")
    if s.startswith("{") and match_brace(s, 0) == len(s) - 1 and "," in s:
        s = "\\{" + s[1:-1] + "\\}"  # "{-2021, 2021}" written without escapes is a set
    if s.startswith("=") and not s.startswith("=="):
        s = s[1:].strip()
    return Normalized(s, percent, was_text)
