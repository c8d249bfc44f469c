"""TFDS builders prepared from the benchmark JSON-lines files (the full copy when present, else
tests/fixtures; one module: TensorFlow loads once)."""
import pytest
import tensorflow_datasets as tfds

from coop_jax.data import SyntheticConfig, load_gsm8k_jsonl, load_math_jsonl, make_dataset
from coop_jax.data.tfds_builders import (
    FEATURE_KEYS,
    GSM8K_URLS,
    MATH_URLS,
    CoopGsm8k,
    CoopMath,
    CoopSynthetic,
    SyntheticBuilderConfig,
    example_to_record,
)

GSM8K_MAX = 24  # within the shipped fixtures (tests/fixtures) and the full files


def records_of(builder, split):
    return {r["id"]: r for r in map(example_to_record,
                                    tfds.as_numpy(builder.as_dataset(split=split)))}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def gsm8k_builder(data_dir, shared_data):
    builder = CoopGsm8k(data_dir=data_dir, source_dir=shared_data / "gsm8k",
                        max_examples=GSM8K_MAX)
    builder.download_and_prepare()
    return builder


@pytest.fixture(scope="module")
def math500_builder(data_dir, shared_data):
    builder = CoopMath(data_dir=data_dir, config="math500", source_dir=shared_data / "math500")
    builder.download_and_prepare()
    return builder


def test_gsm8k_builder(gsm8k_builder, shared_data):
    splits = gsm8k_builder.info.splits
    assert splits["train"].num_examples == GSM8K_MAX and splits["test"].num_examples == GSM8K_MAX
    assert set(gsm8k_builder.info.features.keys()) == set(FEATURE_KEYS)
    got = records_of(gsm8k_builder, "test")
    expected, _ = load_gsm8k_jsonl(shared_data / "gsm8k" / "test.jsonl", id_prefix="gsm8k-test")
    assert got == {r["id"]: r for r in expected[:GSM8K_MAX]}
    assert got["gsm8k-test-0"]["reference"] == "18"


def test_tfds_load_reuses_prepared_data(gsm8k_builder, data_dir, shared_data):
    ds = tfds.load("coop_gsm8k", split="test", data_dir=data_dir,
                   builder_kwargs={"source_dir": str(shared_data / "gsm8k"),
                                   "max_examples": GSM8K_MAX})
    assert int(ds.cardinality()) == GSM8K_MAX
    example = next(iter(tfds.as_numpy(ds)))
    assert set(example) == set(FEATURE_KEYS)
    assert example["rephrased"] == b""


def test_math500_builder(math500_builder, shared_data, data_rows):
    assert list(math500_builder.info.splits) == ["test"]
    got = records_of(math500_builder, "test")
    assert len(got) == data_rows["math500/test"]
    expected, _ = load_math_jsonl(shared_data / "math500" / "test.jsonl", id_prefix="math500-test")
    assert got == {r["id"]: r for r in expected}


def test_math_full_needs_train_file(data_dir, shared_data):
    builder = CoopMath(data_dir=data_dir, config="full", source_dir=shared_data / "math500")
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        builder.download_and_prepare()


def test_synthetic_builder(data_dir):
    builder = tfds.builder("coop_synthetic/easy", data_dir=data_dir, max_examples=32)
    builder.download_and_prepare()
    cfg = builder.builder_config
    assert cfg.synthetic == SyntheticConfig(num_operands_max=2, max_operand=9)
    for split in ("train", "test"):
        got = records_of(builder, split)
        assert got == {r["id"]: r for r in make_dataset(32, cfg.seed, cfg.synthetic, split=split)}
    custom = CoopSynthetic(
        data_dir=data_dir,
        config=SyntheticBuilderConfig(name="tiny_boxed", seed=9, train_size=8, test_size=4,
                                      synthetic=SyntheticConfig(answer_format="boxed")))
    custom.download_and_prepare()
    assert custom.info.splits["train"].num_examples == 8
    assert all(r["solution"].endswith("}") for r in records_of(custom, "test").values())


def test_official_urls_present():
    assert GSM8K_URLS["test"].endswith("grade_school_math/data/test.jsonl")
    assert MATH_URLS["test"] == (
        "https://raw.githubusercontent.com/openai/prm800k/main/prm800k/math_splits/test.jsonl")


def test_max_examples_validated(data_dir):
    with pytest.raises(ValueError, match="max_examples"):
        CoopGsm8k(data_dir=data_dir, max_examples=0)


def test_builder_kwargs_survive_pickle(data_dir):
    import pickle

    builder = CoopGsm8k(data_dir=data_dir, source_dir="/some/dir", max_examples=3)
    clone = pickle.loads(pickle.dumps(builder))
    assert (clone._source_dir, clone._max_examples) == ("/some/dir", 3)


class FakeDownloadManager:
    """Stands in for tfds' DownloadManager: no network, records what would be downloaded."""

    def __init__(self, manual_dir=None, files=None):
        self._manual, self._files, self.requested = manual_dir, files, None

    @property
    def manual_dir(self):
        if self._manual is None:
            raise AssertionError("Manual directory not enabled.")
        return self._manual

    def download(self, urls):
        self.requested = dict(urls)
        return {split: self._files[split] for split in urls}


def test_source_resolution_order(data_dir, shared_data):
    gsm = shared_data / "gsm8k"
    files = {s: gsm / f"{s}.jsonl" for s in ("train", "test")}
    builder = CoopGsm8k(data_dir=data_dir)
    dl = FakeDownloadManager(files=files)
    assert set(builder._split_generators(dl)) == {"train", "test"}
    assert dl.requested == GSM8K_URLS  # neither source_dir nor manual dir: download
    manual = FakeDownloadManager(manual_dir=gsm, files=files)
    builder._split_generators(manual)
    assert manual.requested is None  # the manual dir wins over a download
    math = CoopMath(data_dir=data_dir, config="math500")
    dl = FakeDownloadManager(files={"test": shared_data / "math500" / "test.jsonl"})
    math._split_generators(dl)
    assert dl.requested == {"test": MATH_URLS["test"]}
