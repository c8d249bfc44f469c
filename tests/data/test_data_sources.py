"""JSON-lines readers and load_split on the benchmark files (the full copy when present, else the
tests/fixtures)."""
import json
import re

import pytest

from coop_jax.data import SyntheticConfig, last_boxed, load_gsm8k_jsonl, load_math_jsonl, load_split
from coop_jax.data.sources import (check_rephrased, normalize_number, read_split_rows,
                                   strip_calculator_annotations)

NUMBER = re.compile(r"-?\d+(\.\d+)?")


@pytest.fixture(scope="module")
def gsm8k_test(shared_data):
    return load_gsm8k_jsonl(shared_data / "gsm8k" / "test.jsonl")


@pytest.fixture(scope="module")
def math500(shared_data):
    return load_math_jsonl(shared_data / "math500" / "test.jsonl")


def test_gsm8k_test_file(gsm8k_test, data_rows):
    records, stats = gsm8k_test
    n = data_rows["gsm8k/test"]
    assert len(records) == n and stats.rows == n and stats.num_skipped == 0
    assert all(NUMBER.fullmatch(r["reference"]) for r in records)
    assert len({r["id"] for r in records}) == n
    first = records[0]
    assert first["id"] == "gsm8k-test-0" and first["reference"] == "18"
    assert first["question"].startswith("Janet")
    assert "<<" not in first["solution"] and first["solution"].endswith("#### 18")
    assert first["rephrased"] is None
    # Thousands separators are removed from references ("1,450,000" in the raw file).
    assert any(r["reference"] == "1450000" for r in records)


def test_math500_file(math500, shared_data, data_rows):
    records, stats = math500
    assert len(records) == data_rows["math500/test"] and stats.num_skipped == 0
    assert all(r["reference"].strip() for r in records)
    raw = [json.loads(line) for line in (shared_data / "math500" / "test.jsonl").open()]
    assert [r["reference"] for r in records] == [row["answer"] for row in raw]
    # The boxed fallback agrees with the answer field on every row of this file.
    assert all(last_boxed(r["solution"]) == r["reference"] for r in records)


def test_malformed_rows_skipped_and_counted(tmp_path):
    good = {"question": "Q?", "answer": "work\n#### 1,000"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"answer": "#### 3"}),
        json.dumps({"question": 5, "answer": "#### 3"}),
        json.dumps({"question": "  ", "answer": "#### 3"}),
        json.dumps({"question": "Q", "answer": "no marker"}),
        json.dumps({"question": "Q", "answer": "x ####  "}),
        "",
        json.dumps({"question": "Q2", "answer": "a <<1+1=2>>2\n#### 2"}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records, stats = load_gsm8k_jsonl(path)
    assert [r["reference"] for r in records] == ["1000", "2"]
    assert [r["id"] for r in records] == ["gsm8k-bad-0", "gsm8k-bad-9"]
    assert records[1]["solution"] == "a 2\n#### 2"
    assert load_gsm8k_jsonl(path, keep_calculator=True)[0][1]["solution"] == "a <<1+1=2>>2\n#### 2"
    assert stats.rows == 9 and stats.kept == 2 and stats.num_skipped == 7
    assert stats.skipped == {
        "not JSON": 1, "not a JSON object": 1, "missing field 'question'": 1,
        "field 'question' is int, not str": 1, "empty field 'question'": 1,
        "no '####' in 'answer'": 1, "empty reference after '####'": 1,
    }
    assert stats.examples[0] == "line 2: not JSON"


def test_math_reader_fallbacks(tmp_path):
    rows = [
        {"problem": "P1", "solution": "so $\\boxed{\\frac{1}{2}}$.", "unique_id": "test/x/1.json"},
        {"problem": "P2", "solution": "no box"},
        {"problem": "P3", "answer": "7"},
        {"problem": "P4", "solution": 3},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    records, stats = load_math_jsonl(path)
    assert [(r["id"], r["reference"], r["solution"]) for r in records] == [
        ("test/x/1.json", "\\frac{1}{2}", "so $\\boxed{\\frac{1}{2}}$."),
        ("math-m-2", "7", None),
    ]
    assert stats.num_skipped == 2


@pytest.mark.parametrize("text, expected", [
    ("a \\boxed{1} b \\boxed{2}", "2"),
    ("\\boxed{\\frac{a}{b}+{c}}", "\\frac{a}{b}+{c}"),
    ("\\fbox{x}", "x"),
    ("so \\boxed 5.", "5"),
    ("\\boxed{unbalanced", None),
    ("nothing here", None),
    ("\\boxedfoo{1}", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_small_helpers():
    assert normalize_number(" 1,450,000 ") == "1450000"
    assert normalize_number("1,5") == "1,5"
    assert strip_calculator_annotations("3*4 = <<3*4=12>>12") == "3*4 = 12"


def test_load_split(shared_data, data_rows):
    recs = load_split("gsm8k", "test", data_dir=shared_data / "gsm8k", num_examples=10)
    assert len(recs) == 10 and recs[0]["id"] == "gsm8k-test-0"
    # data_dir may also be the parent folder holding <dataset>/<split>.jsonl.
    assert load_split("gsm8k", "test", data_dir=shared_data, num_examples=10) == recs
    n = data_rows["math500/test"]
    assert len(load_split("math500", "test", data_dir=shared_data / "math500")) == n
    assert len(load_split("math500", "test", data_dir=shared_data, num_examples=n + 100)) == n


def test_load_split_synthetic():
    train = load_split("synthetic", "train", data_dir=None)
    test = load_split("synthetic", "test", data_dir=None, num_examples=64, seed=1)
    assert len(train) == 4096 and len(test) == 64
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    easy = load_split("synthetic", "test", num_examples=8, synthetic=SyntheticConfig(max_operand=3))
    assert all(max(map(int, re.findall(r"\d+", r["question"]))) <= 3 for r in easy)


def test_load_split_errors(shared_data, tmp_path):
    with pytest.raises(ValueError, match="allowed.*synthetic.*gsm8k.*math500.*math"):
        load_split("svamp", "test", data_dir=shared_data)
    with pytest.raises(ValueError, match="split"):
        load_split("math500", "train", data_dir=shared_data)
    with pytest.raises(ValueError, match="data_dir is required"):
        load_split("gsm8k", "test", data_dir=None)
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        load_split("gsm8k", "test", data_dir=tmp_path)
    with pytest.raises(ValueError, match="num_examples"):
        load_split("gsm8k", "test", data_dir=shared_data, num_examples=0)
    with pytest.raises(ValueError, match="synthetic"):
        load_split("gsm8k", "test", data_dir=shared_data, synthetic=SyntheticConfig())
    (tmp_path / "test.jsonl").write_text("{bad\n")
    with pytest.raises(ValueError, match="no valid rows"):
        load_split("gsm8k", "test", data_dir=tmp_path)


def test_rephrased_and_id_fields_are_read_back(tmp_path):
    rows = [
        {"question": "Q0", "answer": "#### 1", "id": "mine-7", "rephrased": "  R0 "},
        {"question": "Q1", "answer": "#### 2", "rephrased": "   "},
        {"question": "Q2", "answer": "#### 3", "rephrased": 5},
        {"question": "Q3", "answer": "#### 4", "id": ""},
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records, stats = load_gsm8k_jsonl(path)
    assert [(r["id"], r["rephrased"]) for r in records] == [
        ("mine-7", "R0"), ("gsm8k-train-1", None), ("gsm8k-train-3", None)]
    assert stats.skipped == {"field 'rephrased' is int, not str": 1}
    math_rows = [{"problem": "P", "answer": "1", "id": "m-0", "rephrased": "P'"},
                 {"problem": "P", "answer": "1", "id": "m-1", "unique_id": "u/1.json"}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in math_rows))
    records, _ = load_math_jsonl(tmp_path / "m.jsonl")
    assert [(r["id"], r["rephrased"]) for r in records] == [("m-0", "P'"), ("u/1.json", None)]


def test_read_split_rows_pairs_raw_rows_with_records(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        json.dumps({"question": "Q", "answer": "w\n#### 3", "extra": [1]}) + "\n{bad\n")
    path, pairs, stats = read_split_rows("gsm8k", "train", tmp_path)
    assert path == str(tmp_path / "train.jsonl") and stats.num_skipped == 1
    assert pairs == [({"question": "Q", "answer": "w\n#### 3", "extra": [1]},
                      {"id": "gsm8k-train-0", "question": "Q", "reference": "3",
                       "solution": "w\n#### 3", "rephrased": None})]
    with pytest.raises(ValueError, match="dataset must be one of"):
        read_split_rows("synthetic", "train", tmp_path)
    with pytest.raises(ValueError, match="split for 'math500'"):
        read_split_rows("math500", "train", tmp_path)


def test_check_rephrased_names_the_dataset_and_the_field(shared_data):
    records = load_split("gsm8k", "train", data_dir=shared_data / "gsm8k", num_examples=4)
    with pytest.raises(ValueError, match=r"'rephrased'.*4 of 4 records of dataset 'gsm8k' in "
                                         r"'.*gsm8k'.*coop-rephrase"):
        check_rephrased(records, "gsm8k", "rephrased", shared_data / "gsm8k")
    ok = [dict(r, rephrased=f"view {i}") for i, r in enumerate(records)]
    check_rephrased(ok, "gsm8k")
    with pytest.raises(ValueError, match=r"1 of 4 records of dataset 'gsm8k' have none "
                                         r"\(e.g. \['gsm8k-train-2'\]\)"):
        check_rephrased(ok[:2] + [dict(ok[2], rephrased=" ")] + ok[3:], "gsm8k")
    with pytest.raises(ValueError, match="'other_field'"):
        check_rephrased(ok, "gsm8k", "other_field")
