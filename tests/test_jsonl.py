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


def test_a_kept_jsonl_file_is_compressed_and_read_by_its_plain_name(tmp_path):
    """`keep_file` writes `X.jsonl.xz` (the same bytes for the same rows, a plain copy left from
    before removed); every reader given `X.jsonl` reads it; other files are copied as they
    are."""
    import lzma

    from coop_jax.jsonl import exists, keep_file, resolve
    src = tmp_path / "metrics.jsonl"
    src.write_text("".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n"
                           for i in range(200)))
    dest = tmp_path / "kept"
    dest.mkdir()
    (dest / "metrics.jsonl").write_text('{"old": 1}\n')
    written = keep_file(src, dest / "metrics.jsonl")
    assert written == str(dest / "metrics.jsonl.xz") and sorted(
        p.name for p in dest.iterdir()) == ["metrics.jsonl.xz"]
    first = (dest / "metrics.jsonl.xz").read_bytes()
    assert len(first) < src.stat().st_size / 4
    assert lzma.decompress(first) == src.read_bytes()
    assert keep_file(src, dest / "metrics.jsonl") and (dest / "metrics.jsonl.xz").read_bytes() \
        == first
    assert read_jsonl(dest / "metrics.jsonl") == read_jsonl(src)
    assert exists(dest / "metrics.jsonl") and not exists(dest / "other.jsonl")
    assert resolve(src) == str(src)
    (dest / "metrics.jsonl.xz").write_bytes(lzma.compress(b'{"a": 1}\n[2]\n'))
    with pytest.raises(JsonlError, match=r"metrics.jsonl.xz: line 2: not a JSON object"):
        read_jsonl(dest / "metrics.jsonl")
    (tmp_path / "curves.png").write_bytes(b"png")
    assert keep_file(tmp_path / "curves.png", dest / "curves.png") == str(dest / "curves.png")
