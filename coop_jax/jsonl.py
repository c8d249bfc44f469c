"""JSON and JSON-lines files: one JSON object per line, blank lines ignored.

Every reader of such files in the package goes through :func:`iter_jsonl`, so a bad line is always
reported the same way: a :class:`JsonlError` naming the file and the 1-based line.
"""
from __future__ import annotations

import json
import os
from typing import IO, Callable, Iterator

PathOrFile = str | os.PathLike | IO[str]


class JsonlError(ValueError):
    """A line of a JSON-lines file that is not a usable row.

    ``reason`` is a short, stable category ("not JSON", "not a JSON object", or a caller's own such
    as "missing field 'completion'"); ``detail`` is the parser's message, if any.
    """

    def __init__(self, source: str, line_no: int, reason: str, detail: str = ""):
        self.source, self.line_no, self.reason, self.detail = source, line_no, reason, detail
        super().__init__(f"{source}: line {line_no}: {self.describe()}")

    def describe(self) -> str:
        """The reason (and detail) without the file name and line."""
        return f"{self.reason} ({self.detail})" if self.detail else self.reason


def _rows(fh: IO[str], source: str,
          on_invalid: Callable[[JsonlError], None] | None) -> Iterator[tuple[int, dict]]:
    for line_no, line in enumerate(fh, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            err = JsonlError(source, line_no, "not JSON", f"{e.msg} at column {e.colno}")
        else:
            if isinstance(row, dict):
                yield line_no, row
                continue
            err = JsonlError(source, line_no, "not a JSON object",
                             f"got {type(row).__name__}")
        if on_invalid is None:
            raise err
        on_invalid(err)


def iter_jsonl(source: PathOrFile, *,
               on_invalid: Callable[[JsonlError], None] | None = None
               ) -> Iterator[tuple[int, dict]]:
    """``(line number, row)`` for each non-blank line of ``source`` (a path or an open text file).

    Line numbers start at 1. A line that is not a JSON object raises :class:`JsonlError`, or, when
    ``on_invalid`` is given, is handed to it and skipped.
    """
    if hasattr(source, "read"):
        yield from _rows(source, getattr(source, "name", "<stream>"), on_invalid)
        return
    path = os.fspath(source)
    with open(path, encoding="utf-8") as fh:
        yield from _rows(fh, path, on_invalid)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of ``path``; a line that is not a JSON object raises JsonlError naming the line."""
    return [row for _, row in iter_jsonl(path)]


def read_json(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``; ValueError naming the file if it is not JSON or not an object."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as fh:
        try:
            obj = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(obj).__name__}")
    return obj
