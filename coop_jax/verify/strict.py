"""The papers' own answer matching, as extraction modes of the rule verifier.

* ``strict_boxed`` (Co-rewarding's votes and labels): the content of the last ``\\boxed{...}``,
  braces counted as in verl's ``last_boxed_only_string``; no box, no answer. Answers are then
  compared as exact strings (surrounding whitespace removed).
* ``strict_hash`` (Cooper's GSM8K reward, verl's ``gsm8k.py`` ``method="strict"``): the last
  ``#### <number>`` (digits, ``-``, ``.``, ``,``) with commas removed, compared as an exact
  string.
* ``strict_numeric`` (the synthetic task's gold in the reward-hacking experiment): the content
  after every answer marker, ``#### x`` (to the end of its line) or ``\\boxed{x}``, must be the
  same integer literal (``-?[0-9]+``); it is compared as an integer. An unevaluated expression
  (``#### 7+2-3``), a bare number without a marker or a hedge (``#### 6 or 7``, ``#### 5 #### 6``)
  is no answer: the lenient rules accept a restated question ``7+2-3`` because
  it equals 6, which makes that gold label hackable.
* ``lenient``: coop_jax's multi-pattern extraction and equivalence policy (the default).
"""

from __future__ import annotations

import re

EXTRACTION_MODES = ("lenient", "strict_boxed", "strict_hash", "strict_numeric")

_STRICT_HASH_RE = re.compile(r"#### (-?[0-9.,]+)")
_BOXED = "\\boxed"
_HASH = "####"
_INTEGER_RE = re.compile(r"-?[0-9]{1,64}")  # bounded: int() of huge literals is refused


def check_mode(mode: str) -> None:
    """Raise ValueError naming the field when ``mode`` is not an extraction mode."""
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {mode!r}")


def strict_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\boxed x``), else None."""
    idx = text.rfind(_BOXED)
    return None if idx < 0 else _box_content(text, idx)


def _box_content(text: str, idx: int) -> str | None:
    """Content of the ``\\boxed`` at ``idx``, else None."""
    j = idx + len(_BOXED)
    if text.startswith(" ", j):  # "\boxed 5$"
        content = text[j + 1:].split("$", 1)[0].strip()
        return content or None
    if not text.startswith("{", j):
        return None
    depth = 0
    for k in range(j, len(text)):
        ch = text[k]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k].strip()
    return None  # never closed


def strict_hash(text: str) -> str | None:
    """The number after the last ``#### `` with commas removed, else None."""
    found = _STRICT_HASH_RE.findall(text)
    return found[-1].replace(",", "") if found else None


def _marked(text: str) -> list[str]:
    """Every marked answer in order: each ``####``'s line up to the next ``####``, each box's
    content ("" for a broken box)."""
    found = [(m.start(), text[m.end():].split("\n", 1)[0].split(_HASH, 1)[0])
             for m in re.finditer(_HASH, text)]
    found += [(m.start(), _box_content(text, m.start()) or "")
              for m in re.finditer(re.escape(_BOXED), text)]
    return [content.strip() for _, content in sorted(found)]


def strict_numeric(text: str) -> str | None:
    """The integer that every answer marker (``####``, ``\\boxed{}``) states, canonical
    (``06`` -> ``6``); None without a marker, when one holds anything but an integer literal, or
    when they differ (a hedge: ``#### 5 #### 6``; a repeated ``#### 6 #### 6`` is one answer)."""
    answers = _marked(text)
    if not answers or not all(_INTEGER_RE.fullmatch(a) for a in answers):
        return None
    values = {int(a) for a in answers}
    return str(values.pop()) if len(values) == 1 else None


def strict_reference(reference: str, mode: str) -> str:
    """The reference's answer under a strict mode: its own marked answer when it has one
    (a full solution), else the whole string (commas removed for ``strict_hash``, as the
    reference implementations preprocess GSM8K labels)."""
    if mode == "strict_boxed":
        found = strict_boxed(reference)
        return reference.strip() if found is None else found
    if mode == "strict_numeric":
        found = strict_numeric(reference)
        bare = reference.strip()
        return found or (str(int(bare)) if _INTEGER_RE.fullmatch(bare) else bare)
    found = strict_hash(reference)
    return reference.strip().replace(",", "") if found is None else found
