"""coop_jax.jsonl: the one JSON / JSON-lines reader."""
import io
import json

import pytest

from coop_jax.jsonl import JsonlError, iter_jsonl, read_json, read_jsonl


def test_rows_with_line_numbers_and_errors_naming_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n[3]\n{"a": \n')
    with pytest.raises(JsonlError, match=r"rows.jsonl: line 4: not a JSON object \(got list\)"):
        read_jsonl(path)
    skipped = []
    assert list(iter_jsonl(path, on_invalid=skipped.append)) == [(1, {"a": 1}), (3, {"a": 2})]
    assert [(e.line_no, e.reason) for e in skipped] == [(4, "not a JSON object"), (5, "not JSON")]
    assert list(iter_jsonl(io.StringIO('{"b": 0}\n'))) == [(1, {"b": 0})]


def test_read_json_wants_one_object(tmp_path):
    good, bad, lst = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "list.json"
    good.write_text(json.dumps({"x": 1}))
    bad.write_text("{")
    lst.write_text("[1]")
    assert read_json(good) == {"x": 1}
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        read_json(bad)
    with pytest.raises(ValueError, match="list.json must hold a JSON object, got list"):
        read_json(lst)
