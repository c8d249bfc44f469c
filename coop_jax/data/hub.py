"""The benchmark files from the Hugging Face Hub, for a file dataset with no ``data.data_dir``.

A split is fetched once, at a pinned revision, with ``huggingface_hub.snapshot_download`` (only
the files of that split), converted to the JSON lines the readers of ``coop_jax.data.sources``
read (parquet rows become one JSON object a line; JSONL files are copied) and kept as
``$COOP_JAX_CACHE/datasets/<dataset>/<revision>/<split>.jsonl`` (default ``~/.cache/coop_jax``).
Later uses read that file and never call the Hub.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import tempfile
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class HubSource:
    """A dataset repository on the Hub at one revision, and each split's files in it (a glob)."""
    repo_id: str
    revision: str
    files: dict[str, str]

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}"


# Commit shas, so that a re-upload upstream cannot change a benchmark under a finished run.
GSM8K = HubSource("openai/gsm8k", "e53f048856ff4f594e959d75785d2c2d37b678ee",
                  {"train": "main/train-*.parquet", "test": "main/test-*.parquet"})
MATH500 = HubSource("HuggingFaceH4/MATH-500", "ff5b20257d8185524591543f8ff5993951537bb8",
                    {"test": "test.jsonl"})
# hendrycks/competition_math and lighteval/MATH are no longer served; this copy keeps MATH's
# 7500/5000 train/test split and its problem/solution/level/type fields.
MATH = HubSource("DigitalLearningGmbH/MATH-lighteval", "0530c78699ea5e8eb5530600900e1f328b48acad",
                 {"train": "data/train-*.parquet", "test": "data/test-*.parquet"})


def cache_root() -> str:
    """``$COOP_JAX_CACHE/datasets``; without COOP_JAX_CACHE, ``coop_jax/datasets`` under
    ``$XDG_CACHE_HOME`` or ``~/.cache`` (the root of coop_jax.hf.sources' GGUF cache too)."""
    root = os.environ.get("COOP_JAX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "coop_jax")
    return os.path.join(root, "datasets")


def cached_file(dataset: str, source: HubSource, split: str) -> str:
    """Where the converted JSONL of ``dataset``'s ``split`` is kept."""
    return os.path.join(cache_root(), dataset, source.revision, f"{split}.jsonl")


def split_file(dataset: str, source: HubSource, split: str) -> str:
    """The local JSONL file of a split, fetched from the Hub and converted on first use."""
    out = cached_file(dataset, source, split)
    if not os.path.isfile(out):
        _write_jsonl(_download(dataset, source, split), out)
    return out


def _download(dataset: str, source: HubSource, split: str) -> list[str]:
    from huggingface_hub import snapshot_download

    pattern = source.files[split]
    try:
        folder = snapshot_download(source.repo_id, repo_type="dataset", revision=source.revision,
                                   allow_patterns=[pattern])
    except Exception as e:  # offline, blocked, unknown revision: one line naming the fix
        cause = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(
            f"cannot fetch dataset {dataset!r} split {split!r} from the Hugging Face Hub "
            f"({source}; {type(e).__name__}: {cause}); without the Hub, data.data_dir is required "
            f"(coop-eval: --data_dir): a folder holding {split}.jsonl") from e
    files = sorted(glob.glob(os.path.join(folder, pattern)))
    if not files:
        raise ValueError(f"the Hub dataset {source} has no file matching {pattern!r}")
    return files


def _lines(path: str) -> Iterator[str]:
    """JSON lines of a parquet file's rows; a JSONL file's lines as they are (the readers skip
    and count malformed rows)."""
    if not path.endswith(".parquet"):
        with open(path, encoding="utf-8") as f:
            yield from (line if line.endswith("\n") else line + "\n" for line in f)
        return
    import pyarrow.parquet  # a dependency of tensorflow-datasets

    for row in pyarrow.parquet.read_table(path).to_pylist():
        yield json.dumps(row, ensure_ascii=False, default=str) + "\n"


def _write_jsonl(files: list[str], out: str) -> None:
    """The rows of ``files``, in order, as JSON lines; written atomically (a concurrent process
    may be converting the same split)."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".converting-", suffix=".jsonl", dir=os.path.dirname(out))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for path in files:
                f.writelines(_lines(path))
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
