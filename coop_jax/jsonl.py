"""JSON and JSON-lines files: one JSON object per line, blank lines ignored.

Every reader of such files in the package goes through :func:`iter_jsonl`, so a bad line is always
reported the same way: a :class:`JsonlError` naming the file and the 1-based line.

Kept results store their JSON-lines files xz-compressed (`keep_file`: `metrics.jsonl` is kept as
`metrics.jsonl.xz`); every reader takes the plain name and reads `X`, or `X.xz` where `X` is
missing (`resolve`), so code and commands name the plain file either way.
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
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
    path = resolve(source)
    with _open_text(path) as fh:
        yield from _rows(fh, path, on_invalid)


XZ = ".xz"


def resolve(path: str | os.PathLike) -> str:
    """`path`, or its compressed form `path.xz` where only that exists."""
    path = os.fspath(path)
    return path + XZ if not os.path.exists(path) and os.path.exists(path + XZ) else path


def exists(path: str | os.PathLike) -> bool:
    """Whether `path` or its compressed form `path.xz` is a file."""
    return os.path.isfile(resolve(path))


def _open_text(path: str) -> IO[str]:
    if path.endswith(XZ):
        return lzma.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def keep_file(src: str | os.PathLike, dest: str | os.PathLike) -> str:
    """Copy `src` to `dest`, a JSON-lines file (`.jsonl`) xz-compressed as `dest.xz` (the same
    bytes for the same rows, so a resumed copy changes nothing; a plain `dest` left from before
    is removed); the path written."""
    dest = os.fspath(dest)
    if not dest.endswith(".jsonl"):
        shutil.copyfile(src, dest)
        return dest
    with open(src, "rb") as fh:
        data = lzma.compress(fh.read(), preset=9 | lzma.PRESET_EXTREME)
    with open(dest + XZ, "wb") as fh:
        fh.write(data)
    if os.path.exists(dest):
        os.remove(dest)
    return dest + XZ


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of ``path`` (or ``path.xz``); a line that is not a JSON object raises JsonlError
    naming the line."""
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
