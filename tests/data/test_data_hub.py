"""gsm8k, math500 and math without data.data_dir: fetched from the Hub at a pinned revision on
first use, cached, then read like local files. The download is stubbed; nothing goes online."""
import json
import os
import re
import shutil

import huggingface_hub
import pytest

from conftest import FIXTURE_DATA

from coop_jax import config as config_lib
from coop_jax.data import hub, sources
from coop_jax.data.sources import load_split

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COOP_JAX_CACHE", str(tmp_path / "cache"))


def _fixture_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_parquet(rows, path):
    import pyarrow

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pyarrow.Table.from_pylist(rows), str(path))


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A stub snapshot_download serving the fixture rows in each repository's layout; it records
    its calls."""
    snap = tmp_path / "snapshot"
    for split in ("train", "test"):  # GSM8K's parquet shards
        rows = _fixture_rows(FIXTURE_DATA / "gsm8k" / f"{split}.jsonl")
        _write_parquet(rows, snap / "main" / f"{split}-00000-of-00001.parquet")
    shutil.copy(FIXTURE_DATA / "math500" / "test.jsonl", snap / "test.jsonl")
    math_rows = [{"problem": r["problem"], "solution": r["solution"], "type": "Algebra"}
                 for r in _fixture_rows(FIXTURE_DATA / "math500" / "test.jsonl")]
    _write_parquet(math_rows[:25], snap / "data" / "train-00000-of-00001.parquet")
    _write_parquet(math_rows[25:], snap / "data" / "test-00000-of-00001.parquet")
    calls = []

    def fake_snapshot_download(repo_id, **kw):
        calls.append((repo_id, kw))
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return calls, math_rows


@pytest.mark.parametrize("dataset,split,local", [
    ("gsm8k", "test", FIXTURE_DATA / "gsm8k"),
    ("gsm8k", "train", FIXTURE_DATA / "gsm8k"),
    ("math500", "test", FIXTURE_DATA / "math500"),
])
def test_first_use_downloads_then_reads_the_cache(fake_hub, dataset, split, local):
    calls, _ = fake_hub
    source = sources.DATASETS[dataset].hub
    records = load_split(dataset, split)
    assert calls == [(source.repo_id, {"repo_type": "dataset", "revision": source.revision,
                                       "allow_patterns": [source.files[split]]})]
    assert records == load_split(dataset, split, data_dir=local)
    assert load_split(dataset, split, num_examples=3) == records[:3]
    assert len(calls) == 1  # the second use read the cached JSONL
    cached = hub.cached_file(dataset, source, split)
    assert cached.endswith(f"/datasets/{dataset}/{source.revision}/{split}.jsonl")


def test_math_parquet_rows_read_like_a_local_file(fake_hub, tmp_path):
    calls, math_rows = fake_hub
    local = tmp_path / "math"
    local.mkdir()
    for split, rows in (("train", math_rows[:25]), ("test", math_rows[25:])):
        (local / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        hub_records = load_split("math", split)
        assert hub_records == load_split("math", split, data_dir=local)
        assert len(hub_records) == len(rows) and all(r["reference"] for r in hub_records)
    assert [kw["allow_patterns"] for _, kw in calls] == [["data/train-*.parquet"],
                                                         ["data/test-*.parquet"]]


def _offline(repo_id, **kw):
    raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache\nand offline")


def test_offline_failure_is_one_line_naming_the_fix(monkeypatch):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _offline)
    with pytest.raises(ValueError) as err:
        load_split("gsm8k", "test")
    message = str(err.value)
    assert "\n" not in message
    assert "data.data_dir" in message and "openai/gsm8k" in message
    assert hub.GSM8K.revision in message and "LocalEntryNotFoundError" in message
    assert not os.path.exists(hub.cached_file("gsm8k", hub.GSM8K, "test"))


def test_real_snapshot_download_offline(tmp_path, monkeypatch):
    """huggingface_hub's own offline error (HF_HUB_OFFLINE, empty Hub cache) becomes the line."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(ValueError, match=r"'math500'.*HuggingFaceH4/MATH-500@[0-9a-f]{40}.*"
                                         r"data\.data_dir is required") as err:
        load_split("math500", "test")
    assert "\n" not in str(err.value)


def test_every_file_dataset_has_a_pinned_hub_copy():
    for name, d in sources.DATASETS.items():
        if d.reader is None:
            continue
        assert d.hub is not None and not sources.needs_data_dir(name)
        assert re.fullmatch(r"[0-9a-f]{40}", d.hub.revision), (name, d.hub.revision)
        assert set(d.hub.files) == set(d.splits)


def test_config_accepts_an_empty_data_dir():
    c = config_lib.base_config()
    c.data.update(dataset="math500", data_dir="", eval_split="test", train_split="test")
    config_lib.validate(c)
