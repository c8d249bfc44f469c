"""TFDS builders ``coop_gsm8k``, ``coop_math`` (``math500``, ``full``) and ``coop_synthetic``.

Names carry a ``coop_`` prefix because TFDS already registers a ``gsm8k``. File-based builders
prepare from a local folder of the official JSON-lines files, taken from (first found) the
``source_dir`` builder kwarg, or TFDS's manual dir (``download_config.manual_dir``); otherwise they
download the official files. Reference answers are extracted once, at preparation, with the
readers of :mod:`coop_jax.data.sources`. Every example has string features ``id, question,
reference, solution, rephrased`` ("" where a record has None); :func:`example_to_record` maps a
numpy example back to a record.

    builder = CoopGsm8k(data_dir="/tmp/tfds", source_dir="data/gsm8k")
    builder.download_and_prepare()
    ds = builder.as_dataset(split="test")
    # or: tfds.load("coop_gsm8k", data_dir=..., builder_kwargs={"source_dir": ...})

``max_examples`` (builder kwarg) caps every split, for smoke tests; it is not part of the config,
so use a fresh ``data_dir`` when changing it.
"""
from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import tensorflow_datasets as tfds

from coop_jax.data.sources import load_gsm8k_jsonl, load_math_jsonl
from coop_jax.data.synthetic import SyntheticConfig, make_dataset

Record = dict[str, Any]
FEATURE_KEYS = ("id", "question", "reference", "solution", "rephrased")

GSM8K_URLS = {
    split: "https://raw.githubusercontent.com/openai/grade-school-math/master/"
           f"grade_school_math/data/{split}.jsonl"
    for split in ("train", "test")
}
# PRM800K's MATH split: train = 12,000 MATH problems, test = MATH500.
MATH_URLS = {
    split: "https://raw.githubusercontent.com/openai/prm800k/main/prm800k/"
           f"math_splits/{split}.jsonl"
    for split in ("train", "test")
}
_MANUAL = ("Put the official JSON-lines files ({files}) in the manual dir, or pass "
           "builder_kwargs={{'source_dir': <folder>}}; without either they are downloaded.")


def _features() -> tfds.features.FeaturesDict:
    return tfds.features.FeaturesDict({k: tfds.features.Text() for k in FEATURE_KEYS})


def record_to_example(record: Record) -> dict[str, str]:
    return {k: record.get(k) or "" for k in FEATURE_KEYS}


def example_to_record(example: dict[str, Any]) -> Record:
    """A numpy/bytes TFDS example back to a record ("" -> None for solution/rephrased)."""
    out: Record = {}
    for k in FEATURE_KEYS:
        v = example[k]
        v = v.decode("utf-8") if isinstance(v, bytes) else str(v)
        out[k] = v if (v or k not in ("solution", "rephrased")) else None
    return out


def _check_max_examples(max_examples: int | None) -> int | None:
    if max_examples is not None and (isinstance(max_examples, bool) or
                                     not isinstance(max_examples, int) or max_examples <= 0):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}")
    return max_examples


def _source_files(builder: Any, dl_manager: Any, urls: dict[str, str]) -> dict[str, str]:
    """split -> local path: from source_dir, else the manual dir, else a download."""
    names = {split: f"{split}.jsonl" for split in urls}
    folder = builder._source_dir
    if folder is None:
        try:
            folder = os.fspath(dl_manager.manual_dir)
        except (AssertionError, ValueError):  # no manual dir configured or it is empty
            folder = None
    if folder is None:
        return {k: os.fspath(v) for k, v in dl_manager.download(urls).items()}
    paths = {split: os.path.join(folder, name) for split, name in names.items()}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"{builder.name}/{builder.builder_config.name}: missing {missing}")
    return paths


class _FileBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared constructor and example generation of the file-based builders."""

    def __init__(self, *, source_dir: str | os.PathLike | None = None,
                 max_examples: int | None = None, **kwargs: Any) -> None:
        self._source_dir = os.fspath(source_dir) if source_dir is not None else None
        self._max_examples = _check_max_examples(max_examples)
        super().__init__(**kwargs)
        # Kept through pickling (TFDS re-runs __init__ with this dict on unpickle).
        self._original_state.update(source_dir=self._source_dir, max_examples=max_examples)

    @abc.abstractmethod
    def _read(self, path: str, split: str) -> tuple[list[Record], Any]:
        """(records, SkipStats) of one split file."""

    def _generate_examples(self, path: str, split: str) -> Iterator[tuple[str, dict[str, str]]]:
        records, stats = self._read(path, split)
        if not records:
            raise ValueError(f"{path}: no valid rows ({stats.rows} rows, skipped {stats.skipped})")
        for rec in records[:self._max_examples]:
            yield rec["id"], record_to_example(rec)


class CoopGsm8k(_FileBuilder):
    """GSM8K (openai/grade-school-math), splits train (7,473) and test (1,319)."""

    VERSION = tfds.core.Version("1.0.0")
    MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL.format(files="train.jsonl, test.jsonl")

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=_features(), homepage="https://github.com/openai/grade-school-math")

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        paths = _source_files(self, dl_manager, GSM8K_URLS)
        return {split: self._generate_examples(path, split) for split, path in paths.items()}

    def _read(self, path: str, split: str) -> tuple[list[Record], Any]:
        return load_gsm8k_jsonl(path, id_prefix=f"gsm8k-{split}")


@dataclasses.dataclass(eq=False)
class MathBuilderConfig(tfds.core.BuilderConfig):
    splits: tuple[str, ...] = ("test",)


class CoopMath(_FileBuilder):
    """MATH in PRM800K's split: ``math500`` (test: 500) and ``full`` (train: 12,000 + test: 500)."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [
        MathBuilderConfig(name="math500", splits=("test",),
                          description="MATH500 (PRM800K math_splits/test.jsonl)"),
        MathBuilderConfig(name="full", splits=("train", "test"),
                          description="PRM800K math_splits train.jsonl + test.jsonl"),
    ]
    DEFAULT_CONFIG_NAME = "math500"
    MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL.format(files="test.jsonl, and train.jsonl for 'full'")

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=_features(), homepage="https://github.com/openai/prm800k")

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        urls = {s: MATH_URLS[s] for s in self.builder_config.splits}
        paths = _source_files(self, dl_manager, urls)
        return {split: self._generate_examples(path, split) for split, path in paths.items()}

    def _read(self, path: str, split: str) -> tuple[list[Record], Any]:
        return load_math_jsonl(path, id_prefix=f"{self.builder_config.name}-{split}")


@dataclasses.dataclass(eq=False)
class SyntheticBuilderConfig(tfds.core.BuilderConfig):
    synthetic: SyntheticConfig = dataclasses.field(default_factory=SyntheticConfig)
    seed: int = 0
    train_size: int = 4096
    test_size: int = 256


class CoopSynthetic(tfds.core.GeneratorBasedBuilder):
    """The synthetic arithmetic task (:mod:`coop_jax.data.synthetic`); train/test never overlap."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [
        SyntheticBuilderConfig(name="default", description="2-3 operands in [0, 20], + and -"),
        SyntheticBuilderConfig(name="boxed", synthetic=SyntheticConfig(answer_format="boxed"),
                               description="default, answers as \\boxed{}"),
        SyntheticBuilderConfig(name="easy",
                               synthetic=SyntheticConfig(num_operands_max=2, max_operand=9),
                               description="2 operands in [0, 9], + and -"),
        SyntheticBuilderConfig(name="hard",
                               synthetic=SyntheticConfig(num_operands_max=4, max_operand=50,
                                                         ops="+-*"),
                               description="2-4 operands in [0, 50], +, - and *"),
    ]
    DEFAULT_CONFIG_NAME = "default"

    def __init__(self, *, max_examples: int | None = None, **kwargs: Any) -> None:
        self._max_examples = _check_max_examples(max_examples)
        super().__init__(**kwargs)
        self._original_state.update(max_examples=max_examples)

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(features=_features())

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        cfg = self.builder_config
        sizes = {"train": cfg.train_size, "test": cfg.test_size}
        if self._max_examples is not None:
            sizes = {k: min(v, self._max_examples) for k, v in sizes.items()}
        return {split: self._generate_examples(split, n) for split, n in sizes.items()}

    def _generate_examples(self, split: str, n: int) -> Iterator[tuple[str, dict[str, str]]]:
        cfg = self.builder_config
        for rec in make_dataset(n, cfg.seed, cfg.synthetic, split=split):
            yield rec["id"], record_to_example(rec)


BUILDERS = {"gsm8k": CoopGsm8k, "math": CoopMath, "synthetic": CoopSynthetic}
