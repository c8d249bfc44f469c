"""Final-answer extraction from free model text or a reference solution.

Order of preference: the last group of ``\\boxed{}``/``\\fbox{}`` (nested braces; adjacent
boxes such as ``\\boxed{3}, \\boxed{4}`` or ``\\[\\boxed{3}\\] or \\[\\boxed{4}\\]`` are joined so
hedging is not rewarded, and so is a box holding such a group), then the
last ``#### x`` line (GSM8K), then the last "final answer / the answer is" phrase (a
sentence after it is reduced to its value: "The largest $n$ is 34" -> ``34``), then the
last ``A: x`` line, then the whole text when it is short and looks like a bare answer, and
last a complete concluding sentence ("Therefore, the probability is 2/3."). An answer phrase or
an ``Answer`` heading may be followed by a math block on the next lines. Text after a
chat-template token (``<|im_start|>`` ...) is ignored, and after ``</think>`` the answer
is looked for first. A broken last box (its ``{`` never closes) means no answer, and so does
a span that is not a whole answer (unbalanced braces, a dangling operator). All scans are
linear in the text length, so megabyte inputs are cheap. :mod:`coop_jax.verify.strict` holds
the strict modes.
"""

from __future__ import annotations

import re
from functools import lru_cache

from coop_jax.verify.normalize import match_brace, matching_braces
from coop_jax.verify.strict import (EXTRACTION_MODES, check_mode, strict_boxed, strict_hash,
                                   strict_numeric)

__all__ = ["EXTRACTION_MODES", "all_boxed", "extract_answer", "final_boxes", "find_boxed",
           "reference_answer"]

MAX_EXTRACTED_CHARS = 4096
_BARE_MAX_CHARS = 80

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
# What may stand between the boxes of one answer group: spacing, math delimiters, "and"/"or".
_BOX_GAP_RE = re.compile(
    r"^(?:\s|\$|,|;|\\(?:q?quad|enspace)(?![a-zA-Z])|\\[,;:! ]|\\[\[\]()]"
    r"|\\(?:text|textrm|mathrm|mbox|textnormal)\s*\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b|&|\\\\)*$")
# "x_1 = \\boxed{2}": a plain symbol assigned just before a box (after "$", ",", a word ...).
_BOX_LABEL_RE = re.compile(
    r"(?:^|[$,;:(\n]|\\[(\[]|\\q?quad|\\text\{[^{}]*\}|(?<![\\A-Za-z])[A-Za-z]{2,})\s*"
    r"([A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?)\s*=\s*$")
_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_PHRASE_RE = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)[*\s]*(?:is|are|:|=|\bwould be\b|\bwill be\b)[*\s]*"
    r"(?:[:=][*\s]*)?",
    re.IGNORECASE)
# "Answer" alone on its line (a heading), or followed on its line by math: "Answer \\[ 9 \\]".
_ANSWER_HEAD_RE = re.compile(
    r"(?im)^[ \t#*_]*(?:final[ \t]+)?answer[ \t*_:.]*(?:$|(?=\$|\\\[|\\\())")
_DISPLAY_OPEN_RE = re.compile(r"^(?:\$\$|\\\[|\\\()\s*$")
# A math block at the start of a string: display math may span lines, inline math may not.
_DISPLAY_BLOCK_RE = re.compile(
    r"^(?:\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\(([^\n]+?)\\\)|\$(?!\$)([^$\n]+?)\$)", re.S)
_DANGLING_RE = re.compile(
    r"(?:[-+*/^_=<>{]|\\(?:pm|mp|leq?|geq?|neq?|lt|gt|cdot|times|div|[dt]?frac|sqrt|left|right|in"
    r"|cup|cap|to|approx|sum|int|prod|binom))\s*$")
_A_LINE_RE = re.compile(r"(?m)^[ \t]*A[ \t]*:[ \t]*(\S[^\n]*)$")
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\s(?:I hope|which|because|since|so that)\b|\s+\((?![A-Ea-e]\))")
_CLOSING_DOLLAR = re.compile(r"(?<!\\)\$")
# Lookarounds, so that "the total is 18" finds both "total" and "is" (the last one counts).
_COPULA_RE = re.compile(r"(?<=\s)(?:is|are|was|were|equals|=|becomes|comes to|totals?)(?=\s)",
                        re.IGNORECASE)
_MATH_SPAN_RE = re.compile(
    r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_NUMBER_RE = re.compile(r"(?<![\w.])-?\$?\d[\d,]*(?:\.\d+)?(?:/\d+)?%?(?![\w])")
_HOPE_RE = re.compile(r"\s*I hope (?:it|this) is correct\.?\s*$", re.IGNORECASE)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\\$])|(?<=\$)\s+(?=[A-Z])|\n+")
_SOLUTION_WORDS_RE = re.compile(r"\b(?:is|are) (?:the|our|my) (?:solution|answer|result)", re.IGNORECASE)
_SHORT_TEXT = 200
_CUE_RE = re.compile(
    r"\b(?:therefore|thus|hence|consequently|in total|altogether|in conclusion|overall|in all|"
    r"the answer|the result|final)\b|^\W*so\b", re.IGNORECASE)
_SETUP_RE = re.compile(
    r"\b(?:need|let|let's|find|suppose|assume|if|consider|try|check|must|should)\b|\?",
    re.IGNORECASE)
_CHAT_TOKEN_RE = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|end|user|assistant)\|>|</s>")
_TWO_WORDS = re.compile(r"(?<![\\a-zA-Z])[A-Za-z]{2,}\s+[A-Za-z]{2,}(?![a-zA-Z])")


@lru_cache(maxsize=8)  # the same text is scanned by several extraction steps
def _boxes(text: str) -> tuple[tuple[tuple[int, int, str], ...], bool]:
    """Outermost ``\\boxed``/``\\fbox`` groups as (start, end, content), and whether the last
    box command is broken (its ``{`` never closes, as in a truncated or garbled answer)."""
    hits = []
    for m in _BOX_RE.finditer(text):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        hits.append((m.start(), j))
    if not hits:
        return (), False
    opens = {j for _, j in hits if j < len(text) and text[j] == "{"}
    closes = matching_braces(text, opens) if opens else {}
    boxes: list[tuple[int, int, str]] = []
    last_end = -1
    broken = False
    for start, j in hits:
        if start < last_end:
            continue  # nested inside the previous box
        broken = False
        if j in closes:
            boxes.append((start, closes[j] + 1, text[j + 1:closes[j]]))
            last_end = closes[j] + 1
        elif j < len(text) and text[j] != "{":
            m = re.match(r"[^\s$]+", text[j:j + 200])
            if m:
                boxes.append((start, j + m.end(), m.group(0)))
                last_end = j + m.end()
        else:
            broken = True
    return tuple(boxes), broken


def _box_label(text: str, start: int) -> str | None:
    """The symbol assigned right before the box at ``start`` (``x_1 = \\boxed{2}``), or None."""
    lo = max(0, start - 60)
    m = _BOX_LABEL_RE.search(("\0" if lo else "") + text[lo:start])
    return m.group(1) if m else None


def all_boxed(text: str, labels: bool = False) -> list[str]:
    """Content of every outermost box, in order (``\\boxed{\\boxed{5}}`` counts once as ``5``).
    With ``labels``, a box that a plain symbol is assigned to gets it back: ``x_1=\\boxed{2}``
    -> ``x_1=2``."""
    out = []
    for start, _, content in _boxes(text)[0]:
        content = _unwrap_box(content.strip())
        label = _box_label(text, start) if labels and "=" not in content else None
        out.append(f"{label}={content}" if label else content)
    return out


def final_boxes(text: str, labels: bool = False) -> list[str]:
    """:func:`all_boxed` of the part of a completion the answer is taken from (after
    ``</think>`` when that part has a box, before any chat-template token)."""
    text = _main_part(text)
    _, sep, after_think = text.rpartition("</think>")
    boxes = all_boxed(after_think, labels) if sep else []
    return boxes or all_boxed(text, labels)


def find_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed``/``\\fbox`` group, or None when there is none."""
    boxes, _ = _boxes(text)
    if not boxes:
        return None
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        gap = text[prev[1]:group[0][0]]
        if len(gap) > 40 or not _BOX_GAP_RE.match(gap):
            break
        group.insert(0, prev)
    return ", ".join(_unwrap_box(content.strip()) for _, _, content in group)


def _box_group(content: str) -> str | None:
    """A box holding a group of boxes and nothing else (``\\boxed{\\boxed{x=2}\\quad\\text{and}
    \\quad\\boxed{y=5}}``): the joined group, ``x=2, y=5``; else None."""
    boxes, broken = _boxes(content)
    if len(boxes) < 2 or broken:
        return None
    gaps = [content[:boxes[0][0]], content[boxes[-1][1]:]]
    gaps += [content[a[1]:b[0]] for a, b in zip(boxes, boxes[1:])]
    if any(len(g) > 40 or not _BOX_GAP_RE.match(g) for g in gaps):
        return None
    return ", ".join(_unwrap_box(c.strip(), group=False) for _, _, c in boxes)


def _unwrap_box(content: str, levels: int = 4, group: bool = True) -> str:
    """``\\boxed{\\boxed{5}}`` -> ``5`` (a few levels; deeper nesting is left as is); with
    ``group``, a box of boxes is their joined group (:func:`_box_group`)."""
    for _ in range(levels):
        m = _BOX_RE.match(content)
        if not m:
            return content
        j = m.end()
        while j < len(content) and content[j] in " \t":
            j += 1
        if j >= len(content) or content[j] != "{":
            return content
        close = match_brace(content, j)
        if close != len(content) - 1:
            return (_box_group(content) if group else None) or content
        content = content[j + 1:close].strip()
    return content


def _clip_phrase(rest: str) -> str:
    """Cut the text after "the answer is" down to the answer itself."""
    rest = rest.strip().lstrip("*").strip()
    if rest.startswith("$"):
        k = 2 if rest.startswith("$$") else 1
        m = _CLOSING_DOLLAR.search(rest, k)
        return rest[k:m.start()] if m else rest[k:]
    if rest.startswith(r"\(") or rest.startswith(r"\["):
        end = rest.find(r"\)" if rest[1] == "(" else r"\]", 2)
        return rest[2:end] if end > 0 else rest[2:]
    m = _SENTENCE_END.search(rest)
    if m and m.start() > 0:
        rest = rest[:m.start()]
    rest = rest.strip().rstrip("*").strip()
    return rest[:-1] if rest.endswith("!") and not rest.endswith("!!") else rest  # "is 42!"


def _looks_bare(text: str) -> bool:
    """A short one-line string that is not a sentence (``18``, ``x=5``, ``\\$18.00``)."""
    if not text or len(text) > _BARE_MAX_CHARS or "\n" in text or _BOX_RE.search(text):
        return False
    plain = re.sub(r"\\text\{[^{}]*\}|\\[a-zA-Z]+", " ", text)
    return _TWO_WORDS.search(plain) is None


def _after_marker(rest: str) -> str:
    """The answer text after "the answer is"/an "Answer" heading: the rest of its line, or a
    math block that starts on a later line or spans lines (``Answer:\\n\\[\\n 12\\n\\]``)."""
    rest = rest[:2000]
    line = rest.split("\n", 1)[0]
    stripped = rest.strip()
    if not line.strip() or _DISPLAY_OPEN_RE.match(line.strip()):
        m = _DISPLAY_BLOCK_RE.match(stripped)
        if m:
            return next(g for g in m.groups() if g is not None)
        if not line.strip():
            return stripped.split("\n", 1)[0]  # "The final answer is:\n\n 18"
    return line


def _extract_marked(text: str) -> str | None:
    boxed = find_boxed(text)
    if boxed is not None:
        return boxed
    hashes = _HASH_RE.findall(text)
    if hashes and hashes[-1].strip():
        payload = hashes[-1].strip()
        if len(payload) < 200 and _PHRASE_RE.search(payload):  # "#### The answer is 18"
            return _extract_marked(payload) or payload
        return payload
    last = None
    for last in _PHRASE_RE.finditer(text):
        pass
    head = None
    for head in _ANSWER_HEAD_RE.finditer(text):
        pass
    if head is not None and (last is None or head.start() > last.start()):
        rest = text[head.end():].strip()[:2000]
        block = _DISPLAY_BLOCK_RE.match(rest)
        if block:  # "**Answer**\n$$ 12 $$", "Answer \\( 9 \\)"
            return next(g for g in block.groups() if g is not None)
        line = rest.split("\n", 1)[0].strip()
        if line and line[0] not in "$\\" and _looks_bare(line):
            return line  # "### Answer\n\n12"
    if last is not None:
        clipped = _clip_phrase(_after_marker(text[last.end():]))
        if clipped:
            # "Final Answer: The largest $n$ is 34." -> "34"
            return clipped if _looks_bare(clipped) else (_statement_value(clipped) or clipped)
    a_lines = _A_LINE_RE.findall(text)
    if a_lines:
        return _clip_phrase(a_lines[-1])
    return None


def _statement_value(sentence: str) -> str | None:
    """The value a one-sentence conclusion states, or None when it is not clear.

    ``The largest $n$ is 34`` -> ``34``; ``the pair that solves it is $(7, 6)$`` ->
    ``(7, 6)``; ``Jane started growing Sphere 3 hours ago`` -> ``3`` (its only number).
    """
    s = sentence.strip().rstrip(".!").strip()
    if _looks_bare(s):
        return s
    last = None
    for last in _COPULA_RE.finditer(s):
        pass
    if last is not None:
        tail = _clip_phrase(s[last.end():])
        if tail and _looks_bare(tail):
            return tail
    spans = [m for m in _MATH_SPAN_RE.finditer(s)]
    if spans and (len(s) - spans[-1].end() <= 2  # the sentence ends on a formula
                  or len(spans) == 1 and _SOLUTION_WORDS_RE.search(s)):  # "$x>5$ is the solution"
        inner = next(g for g in spans[-1].groups() if g is not None).strip().rstrip(".,")
        if inner:
            return inner
    if spans or "\\" in s or "{" in s or "}" in s:
        return None  # a lone number is taken only from a sentence of plain words
    numbers = _NUMBER_RE.findall(s)
    return numbers[0] if len(numbers) == 1 else None


def _last_statement(text: str) -> str | None:
    """Answer stated by a concluding last sentence ("Therefore, ... is 2/3.") or None.

    Used only when nothing marks the answer. The sentence must be complete (end with a
    full stop), start or contain a conclusion cue, and not set up further work.
    """
    tail = _HOPE_RE.sub("", text[-800:]).rstrip()
    if not tail.endswith((".", "!", "$", "]", ")")):
        return None  # cut off mid-sentence (truncated generation)
    sentences = [x for x in _SENTENCE_SPLIT_RE.split(tail) if x.strip()]
    if not sentences:
        return None
    last = sentences[-1].strip()
    short = len(tail.strip()) <= _SHORT_TEXT and len(sentences) == 1
    if not short and (not _CUE_RE.search(last) or _SETUP_RE.search(last)):
        return None
    return _statement_value(last)


def _main_part(text: str) -> str:
    """Drop a chat-template tail (``<|im_start|>user ...``) that some models run on into."""
    m = _CHAT_TOKEN_RE.search(text, 1)
    return text[:m.start()] if m else text


def _is_whole(ans: str) -> bool:
    """False for a fragment: unbalanced ``{}`` or a dangling operator/command at the end."""
    depth = 0
    i = 0
    while i < len(ans):
        ch = ans[i]
        if ch == "\\":
            i += 2
            continue
        depth += 1 if ch == "{" else -1 if ch == "}" else 0
        if depth < 0:
            return False
        i += 1
    return depth == 0 and _DANGLING_RE.search(ans) is None


def _finish(ans: str | None, whole: bool = False) -> str | None:
    if ans is None:
        return None
    ans = ans.strip()
    if not ans or (whole and not _is_whole(ans[:MAX_EXTRACTED_CHARS])):
        return None
    return ans[:MAX_EXTRACTED_CHARS]


def _lenient(text: str) -> str | None:
    text = _main_part(text)
    head, sep, after_think = text.rpartition("</think>")
    final = after_think if sep else text
    if _boxes(final)[1]:
        return None  # the final box is broken: its fragments are not an answer
    ans = _extract_marked(after_think) if sep else None
    if ans is None:
        if sep and _boxes(text)[1]:
            return None
        ans = _extract_marked(text)
    if ans is None:
        stripped = text.strip()
        ans = stripped if _looks_bare(stripped) else _last_statement(final)
    return _finish(ans, whole=True)


def extract_answer(text: str, mode: str = "lenient") -> str | None:
    """Final answer in a model completion, or None when none is stated.

    ``mode`` is one of :data:`EXTRACTION_MODES`: ``"lenient"`` (the rules in the module
    docstring), ``"strict_boxed"`` (the last ``\\boxed{}`` content, verbatim) or
    ``"strict_hash"`` (the last ``#### <number>``, commas and ``$`` removed) or
    ``"strict_numeric"`` (an integer literal after the last ``####`` / in the last box).

    >>> extract_answer("so the total is $\\\\boxed{\\\\frac{1}{2}}$.")
    '\\\\frac{1}{2}'
    >>> extract_answer("She pays 3 * 6 = 18 dollars.\\n#### 18")
    '18'
    """
    check_mode(mode)
    if not isinstance(text, str):
        return None
    if mode == "strict_boxed":
        return strict_boxed(text)
    if mode == "strict_hash":
        return strict_hash(text)
    if mode == "strict_numeric":
        return strict_numeric(text)
    return _lenient(text)


def reference_answer(reference: str) -> str | None:
    """Final answer of a reference: a marked answer in a full solution, else the whole string."""
    if not isinstance(reference, str):
        return None
    ans = _extract_marked(reference)
    if ans is None:
        ans = reference
    return _finish(ans)
