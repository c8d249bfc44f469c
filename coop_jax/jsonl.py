"""JSON-lines files: one JSON object per line, blank lines ignored."""
from __future__ import annotations

import json


def read_jsonl(path: str) -> list[dict]:
    """Rows of `path`; a line that is not a JSON object raises ValueError naming the line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {line_no} is not JSON ({e})") from e
            if not isinstance(row, dict):
                raise ValueError(f"{path}: line {line_no} is not a JSON object")
            rows.append(row)
    return rows
