"""The papers' own answer matching, as extraction modes of the rule verifier.

* ``strict_boxed`` (Co-rewarding's votes and labels): the content of the last ``\\boxed{...}``,
  braces counted as in verl's ``last_boxed_only_string``; no box, no answer. Answers are then
  compared as exact strings (surrounding whitespace removed).
* ``strict_hash`` (Cooper's GSM8K reward, verl's ``gsm8k.py`` ``method="strict"``): the last
  ``#### <number>`` (digits, ``-``, ``.``, ``,``) with commas removed, compared as an exact
  string.
* ``lenient``: coop_jax's multi-pattern extraction and equivalence policy (the default).
"""

from __future__ import annotations

import re

EXTRACTION_MODES = ("lenient", "strict_boxed", "strict_hash")

_STRICT_HASH_RE = re.compile(r"#### (-?[0-9.,]+)")
_BOXED = "\\boxed"


def check_mode(mode: str) -> None:
    """Raise ValueError naming the field when ``mode`` is not an extraction mode."""
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {mode!r}")


def strict_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\boxed x``), else None."""
    idx = text.rfind(_BOXED)
    if idx < 0:
        return None
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


def strict_reference(reference: str, mode: str) -> str:
    """The reference's answer under a strict mode: its own marked answer when it has one
    (a full solution), else the whole string (commas removed for ``strict_hash``, as the
    reference implementations preprocess GSM8K labels)."""
    if mode == "strict_boxed":
        found = strict_boxed(reference)
        return reference.strip() if found is None else found
    found = strict_hash(reference)
    return reference.strip().replace(",", "") if found is None else found
