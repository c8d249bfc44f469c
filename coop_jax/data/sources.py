"""Readers for the official JSON-lines benchmark files (no TensorFlow) and ``load_split``.

Each reader returns ``(records, stats)``: the kept records and a :class:`SkipStats` that counts
rows skipped as malformed (not JSON, not an object, missing field, wrong type, empty field, no
extractable reference). Blank lines are not rows. Record ids use the 0-based line number, so they
stay stable when malformed rows are skipped, unless the row carries its own ``id`` (as the files
``coop-rephrase`` writes do). An optional ``rephrased`` string (Co-rewarding-I's second view of the
question) is read back; a missing or blank one is None.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any, Callable, Mapping

from absl.app import UsageError

from coop_jax.data import hub
from coop_jax.data.synthetic import SPLITS as SYNTHETIC_SPLITS
from coop_jax.data.synthetic import SyntheticConfig, make_dataset
from coop_jax.jsonl import JsonlError, iter_jsonl
from coop_jax.registry import Registry

Record = dict[str, Any]
logger = logging.getLogger(__name__)

# Default synthetic split sizes when load_split gets num_examples=None.
SYNTHETIC_SPLIT_SIZES = {"train": 4096, "test": 256}
_CALC_RE = re.compile(r"<<[^<>]*>>")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclasses.dataclass
class SkipStats:
    """Row counts of one file: ``rows`` non-blank lines, ``kept``, and skipped rows by reason."""

    path: str = ""
    rows: int = 0
    kept: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: list[str] = dataclasses.field(default_factory=list)  # first few "line N: reason"

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def skip(self, line_no: int, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples) < 5:
            self.examples.append(f"line {line_no + 1}: {reason}")


class _Skip(Exception):
    """A malformed row; the message is the skip reason."""


def strip_calculator_annotations(text: str) -> str:
    """Drop GSM8K calculator annotations: ``16-3-4 = <<16-3-4=9>>9`` -> ``16-3-4 = 9``."""
    return _CALC_RE.sub("", text)


def normalize_number(text: str) -> str:
    """Strip and remove thousands separators: ``" 1,450,000 "`` -> ``"1450000"``."""
    return _THOUSANDS_RE.sub("", text.strip())


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces matched), else None.

    ``\\boxed 5`` (no braces) yields ``"5"``. Unbalanced braces yield None.
    """
    starts = [m.start() for m in re.finditer(r"\\(?:boxed|fbox)(?![A-Za-z])", text)]
    if not starts:
        return None
    i = starts[-1] + (6 if text.startswith("\\boxed", starts[-1]) else 5)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] != "{":
        m = re.match(r"[^\s$]+", text[i:])
        return m.group(0).rstrip(".") if m else None
    depth, begin = 0, i + 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:j]
    return None


def _field(row: dict, key: str, *, required: bool = True) -> str | None:
    if key not in row or row[key] is None:
        if required:
            raise _Skip(f"missing field '{key}'")
        return None
    value = row[key]
    if not isinstance(value, str):
        raise _Skip(f"field '{key}' is {type(value).__name__}, not str")
    if not value.strip():
        if required:
            raise _Skip(f"empty field '{key}'")
        return None
    return value


def _row_id(row: dict, default: str, *keys: str) -> str:
    """The first non-empty string among ``row[keys]``, else ``default``."""
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return default


def _gsm8k_row(row: dict, line_no: int, id_prefix: str, keep_calculator: bool) -> Record:
    question = _field(row, "question")
    answer = _field(row, "answer")
    if "####" not in answer:
        raise _Skip("no '####' in 'answer'")
    reference = normalize_number(answer.rsplit("####", 1)[1])
    if not reference:
        raise _Skip("empty reference after '####'")
    solution = answer if keep_calculator else strip_calculator_annotations(answer)
    rephrased = _field(row, "rephrased", required=False)
    return {"id": _row_id(row, f"{id_prefix}-{line_no}", "id"), "question": question.strip(),
            "reference": reference, "solution": solution.strip(),
            "rephrased": rephrased.strip() if rephrased is not None else None}


def _math_row(row: dict, line_no: int, id_prefix: str) -> Record:
    question = _field(row, "problem")
    solution = _field(row, "solution", required=False)
    answer = _field(row, "answer", required=False)
    reference = answer.strip() if answer is not None else (
        last_boxed(solution) if solution is not None else None)
    if reference is None or not reference.strip():
        raise _Skip("no 'answer' and no \\boxed{} in 'solution'")
    rephrased = _field(row, "rephrased", required=False)
    return {"id": _row_id(row, f"{id_prefix}-{line_no}", "unique_id", "id"),
            "question": question.strip(), "reference": reference.strip(),
            "solution": solution.strip() if solution is not None else None,
            "rephrased": rephrased.strip() if rephrased is not None else None}


def _read_jsonl(path: str, parse: Callable[[dict, int], Record], *,
                with_rows: bool = False) -> tuple[list, SkipStats]:
    """Parsed records (or, ``with_rows``, ``(raw row, record)`` pairs) and the skip counts."""
    stats = SkipStats(path=str(path))
    records: list = []

    def skip_line(err: JsonlError) -> None:
        stats.rows += 1
        stats.skip(err.line_no - 1, err.reason)

    for line_no, row in iter_jsonl(path, on_invalid=skip_line):
        stats.rows += 1
        try:  # ids and SkipStats count lines from 0
            record = parse(row, line_no - 1)
            records.append((row, record) if with_rows else record)
        except _Skip as e:
            stats.skip(line_no - 1, str(e))
    stats.kept = len(records)
    if stats.num_skipped:
        logger.warning("%s: skipped %d of %d rows (%s); e.g. %s", path, stats.num_skipped,
                       stats.rows, stats.skipped, stats.examples)
    return records, stats


def _default_prefix(name: str, path: str) -> str:
    return f"{name}-{os.path.splitext(os.path.basename(path))[0]}"


def load_gsm8k_jsonl(path: str | os.PathLike, *, id_prefix: str | None = None,
                     keep_calculator: bool = False,
                     with_rows: bool = False) -> tuple[list, SkipStats]:
    """GSM8K rows ``{"question", "answer", "id"?, "rephrased"?}``; reference = text after the last
    ``####``.

    The solution is the full ``answer`` with ``<<...>>`` calculator annotations removed unless
    ``keep_calculator``. Ids are the row's ``id``, else ``gsm8k-<file stem>-<line>`` (or
    ``<id_prefix>-<line>``). ``with_rows`` returns ``(raw row, record)`` pairs instead of records.
    """
    path = os.fspath(path)
    prefix = id_prefix or _default_prefix("gsm8k", path)
    return _read_jsonl(path, lambda row, i: _gsm8k_row(row, i, prefix, keep_calculator),
                       with_rows=with_rows)


def load_math_jsonl(path: str | os.PathLike, *, id_prefix: str | None = None,
                    with_rows: bool = False) -> tuple[list, SkipStats]:
    """MATH rows ``{"problem", "solution", "answer"?, "unique_id"?, "id"?, "rephrased"?}``.

    Reference = ``answer`` if present, else the last ``\\boxed{}`` of ``solution``. The id is
    ``unique_id`` when present (PRM800K files), else ``id``, else ``math-<file stem>-<line>``.
    ``with_rows`` returns ``(raw row, record)`` pairs instead of records.
    """
    path = os.fspath(path)
    prefix = id_prefix or _default_prefix("math", path)
    return _read_jsonl(path, lambda row, i: _math_row(row, i, prefix), with_rows=with_rows)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A `data.dataset` option: its splits, the reader of a split's JSONL file (None: the
    generated synthetic task) and its Hub copy, read when no data_dir is given."""
    splits: tuple[str, ...]
    reader: Callable[..., tuple[list, SkipStats]] | None = None
    hub: hub.HubSource | None = None


DATASETS: Registry[Dataset] = Registry("data.dataset")
DATASETS.register("synthetic", Dataset(tuple(SYNTHETIC_SPLITS)),
                  doc="generated arithmetic problems (coop_jax.data.synthetic)")
DATASETS.register("gsm8k", Dataset(("train", "test"), load_gsm8k_jsonl, hub.GSM8K),
                  doc="GSM8K JSONL (question, answer with '#### <number>')")
DATASETS.register("math500", Dataset(("test",), load_math_jsonl, hub.MATH500), doc="MATH500 JSONL")
DATASETS.register("math", Dataset(("train", "test"), load_math_jsonl, hub.MATH), doc="MATH JSONL")
FILE_SPLITS = {name: d.splits for name, d in DATASETS.items() if d.reader is not None}


def resolve_split_file(dataset: str, split: str, data_dir: str | os.PathLike) -> str:
    """``<data_dir>/<split>.jsonl``, else ``<data_dir>/<dataset>/<split>.jsonl``."""
    candidates = [os.path.join(data_dir, f"{split}.jsonl"),
                  os.path.join(data_dir, dataset, f"{split}.jsonl")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"no {dataset} '{split}' file; tried {candidates}")


def needs_data_dir(dataset: str) -> bool:
    """Whether a dataset can only be read from a data_dir (a file dataset with no Hub copy)."""
    d = DATASETS[dataset]
    return d.reader is not None and d.hub is None


def _split_reader(dataset: str, split: str, data_dir: str | os.PathLike | None
                  ) -> tuple[Callable[..., tuple[list, SkipStats]], str]:
    """The reader and the file of a file dataset's split: from data_dir, else the Hub copy."""
    d = DATASETS[dataset]
    if split not in d.splits:
        raise ValueError(f"split for {dataset!r} must be one of {d.splits}, got {split!r}")
    if data_dir is not None:
        return d.reader, resolve_split_file(dataset, split, data_dir)
    if d.hub is None:
        raise ValueError(f"data_dir is required for dataset {dataset!r} (a folder holding "
                         f"{[s + '.jsonl' for s in d.splits]})")
    return d.reader, hub.split_file(dataset, d.hub, split)


def read_split_rows(dataset: str, split: str, data_dir: str | os.PathLike
                    ) -> tuple[str, list[tuple[dict, Record]], SkipStats]:
    """``(path, [(raw JSON row, record)], stats)`` of a file dataset's split: the raw rows keep
    every field of the file (for tools that write an augmented copy); malformed rows are skipped."""
    if dataset not in FILE_SPLITS:
        raise ValueError(f"dataset must be one of {list(FILE_SPLITS)}, got {dataset!r}")
    reader, path = _split_reader(dataset, split, data_dir)
    pairs, stats = reader(path, id_prefix=f"{dataset}-{split}", with_rows=True)
    return path, pairs, stats


def check_rephrased(records: list[Record], dataset: str, field: str = "rephrased",
                    data_dir: str | os.PathLike | None = None) -> None:
    """Co-rewarding-I's second view: every record needs a non-empty ``field`` string; else a
    ValueError naming the dataset, the field and how to write one (``coop-rephrase``)."""
    missing = [r.get("id") for r in records
               if not (isinstance(r.get(field), str) and r[field].strip())]
    if missing:
        where = f" in {os.fspath(data_dir)!r}" if data_dir else ""
        raise ValueError(
            f"reward.type='corewarding_1' needs a non-empty {field!r} field (the rephrased "
            f"question) on every training record, but {len(missing)} of {len(records)} records of "
            f"dataset {dataset!r}{where} have none (e.g. {missing[:3]}); write a copy with one "
            f"using coop-rephrase and point data.data_dir at it")


def load_split(dataset: str, split: str, *, data_dir: str | os.PathLike | None = None,
               num_examples: int | None = None, seed: int = 0,
               synthetic: SyntheticConfig | None = None) -> list[Record]:
    """Records of one split.

    ``synthetic`` generates ``num_examples`` problems (default ``SYNTHETIC_SPLIT_SIZES[split]``)
    from ``seed``; its train and test splits never share a question. The file datasets read
    ``<data_dir>/<split>.jsonl`` (or ``<data_dir>/<dataset>/<split>.jsonl``), or with no
    data_dir their pinned Hub copy (``coop_jax.data.hub``, fetched once), keep the first
    ``num_examples`` rows (all if fewer), and ignore ``seed``.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; allowed: {list(DATASETS)}")
    if num_examples is not None and (isinstance(num_examples, bool) or
                                     not isinstance(num_examples, int) or num_examples <= 0):
        raise ValueError(f"num_examples must be a positive int or None, got {num_examples!r}")
    if dataset == "synthetic":
        if split not in SYNTHETIC_SPLITS:
            raise ValueError(f"split for 'synthetic' must be one of {SYNTHETIC_SPLITS}, "
                             f"got {split!r}")
        n = SYNTHETIC_SPLIT_SIZES[split] if num_examples is None else num_examples
        return make_dataset(n, seed, synthetic or SyntheticConfig(), split=split)
    if synthetic is not None:
        raise ValueError(f"synthetic config given for dataset {dataset!r}; it only applies to "
                         "'synthetic'")
    reader, path = _split_reader(dataset, split, data_dir)
    records, stats = reader(path, id_prefix=f"{dataset}-{split}")
    if not records:
        raise ValueError(f"{path}: no valid rows ({stats.rows} rows, skipped {stats.skipped})")
    return records if num_examples is None else records[:num_examples]


def check_data_files(field: str, dataset: str | None, data_dir: str | None,
                     splits: Mapping[str, str]) -> None:
    """UsageError when `data_dir` is given but has no file of a split (`splits`: the field that
    names it -> split) of the file dataset `dataset` (None: not known yet; only the folder is
    checked). No data_dir, the synthetic task and unknown names pass: whether a dataset needs a
    folder is for the config's validation and the loader to say."""
    if not data_dir or (dataset is not None and dataset not in FILE_SPLITS):
        return
    if not os.path.isdir(data_dir):
        raise UsageError(f"{field}={data_dir!r}: no such folder")
    for split_field, split in splits.items() if dataset else ():
        allowed = FILE_SPLITS[dataset]
        if split not in allowed:
            raise UsageError(f"{split_field}={split!r}: {dataset} has the splits {list(allowed)}")
        try:
            resolve_split_file(dataset, split, data_dir)
        except FileNotFoundError:
            raise UsageError(f"{field}={data_dir!r} has no {dataset} {split!r} split (neither "
                             f"{split}.jsonl nor {dataset}/{split}.jsonl)") from None
