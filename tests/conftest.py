"""Shared pytest setup: 8 simulated CPU devices, set before jax is imported anywhere."""
import os

# Most of the suite's CPU time is XLA:CPU compiling (its programs are tiny; each runs a few
# times), so the tests compile for compile speed: LLVM at -O0 and the loop emitters instead of
# the fusion emitters. A 1-layer Cooper step compiles in 2.0 s instead of 6.6 s, an eager op in
# 25 ms instead of 53 ms, and 6 of test_train_step's Cooper tests take 62 s instead of 165 s.
# The HLO passes are the same, and fast-math is off either way. The real-model training runs
# drop XLA_FLAGS and compile as users do. COOP_JAX_TEST_FAST_COMPILE=0 compiles the tests as
# users do too.
FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
                if os.environ.get("COOP_JAX_TEST_FAST_COMPILE", "1") == "1" else "")
os.environ["XLA_FLAGS"] = (
    f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE} --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import atexit  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# One persistent XLA compilation cache for the whole run: both xdist workers and every child
# process they start (CLI runs, multi-process jobs) load what another already compiled. The
# controller makes it before the workers start, so they inherit it, and removes it at exit; a
# test that wants its own passes its own JAX_COMPILATION_CACHE_DIR. COOP_JAX_TEST_XLA_CACHE=0
# turns it off.
if ("JAX_COMPILATION_CACHE_DIR" not in os.environ
        and os.environ.get("COOP_JAX_TEST_XLA_CACHE", "1") != "0"):
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="coop_jax_xla_cache_")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent  # the repository root; the tests' folders mirror coop_jax/'s packages
FIXTURE_DATA = TESTS / "fixtures"  # a few dozen rows per benchmark, shipped with the repository
# The complete benchmark files, when this machine has them (the development machines' copy).
SHARED_DATA = TESTS.parents[1] / "shared" / "data"
FULL_ROWS = {"gsm8k/train": 7473, "gsm8k/test": 1319, "math500/test": 500}


def _full_data_dir() -> pathlib.Path | None:
    env = os.environ.get("COOP_JAX_DATA_DIR")
    if env:
        if not pathlib.Path(env).is_dir():
            raise pytest.UsageError(f"COOP_JAX_DATA_DIR={env!r} is not a folder")
        return pathlib.Path(env)
    return SHARED_DATA if (SHARED_DATA / "gsm8k" / "test.jsonl").is_file() else None


FULL_DATA = _full_data_dir()


def _rows(path: pathlib.Path) -> int:
    with path.open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


@pytest.fixture(autouse=True)
def _coop_jax_logger_restored():
    """A CLI main run in-process (`console.log_with_times`) gives the "coop_jax" logger a console
    handler and stops its propagation; undone after each test, so that a later test's caplog on the
    same worker still sees coop_jax's lines."""
    import logging

    logger = logging.getLogger("coop_jax")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """The benchmark folder (gsm8k/, math500/): the full copy when present, else the fixtures."""
    return FULL_DATA or FIXTURE_DATA


@pytest.fixture(scope="session")
def data_rows(shared_data) -> dict[str, int]:
    """Rows of each benchmark file in `shared_data` ("gsm8k/test": 1319 on the full copy)."""
    if FULL_DATA is not None:
        return dict(FULL_ROWS)
    return {name: _rows(FIXTURE_DATA / f"{name}.jsonl") for name in FULL_ROWS}


def pytest_report_header(config):
    if FULL_DATA is not None:
        return f"benchmark data: full copy at {FULL_DATA}"
    return ("benchmark data: tests/fixtures only; the full-data checks did NOT run "
            "(set COOP_JAX_DATA_DIR or put the data in ../shared/data)")


# Tests that start jobs of several local processes (coordinator ports, gloo rendezvous): one
# worker runs them one at a time, so two jobs never race for a port or starve each other's
# rendezvous on 2 cores (a 2-process launch test once timed out at 120 s in a full run, where
# alone it takes seconds).
MULTIPROCESS_MODULES = ("test_multihost", "test_launch_local")
# The longest worker-bound groups, sent to the workers first (xdist hands out groups in collection
# order, and tree order put them last): longest first, so that no long group starts near the end
# of the run while the other worker runs out of tests. Its effect on the suite's time is not
# measured on its own.
FIRST_GROUPS = ("multiprocess", "test_real_model")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Keep the tests that share a module-scoped fixture on one xdist worker: under plain
    `--dist load` each worker would build the fixture again (a converted real model, a trained
    RM, a training run)."""
    for item in items:
        if item.module.__name__ in MULTIPROCESS_MODULES:
            item.add_marker(pytest.mark.xdist_group("multiprocess"))
            continue
        fixture_defs = getattr(item, "_fixtureinfo", None)
        if fixture_defs is None:
            continue
        scopes = {d.scope for defs in fixture_defs.name2fixturedefs.values() for d in defs}
        if "module" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=_dispatch_rank)  # stable: the order within a group stays


def _dispatch_rank(item) -> int:
    marks = [m.args[0] for m in item.iter_markers("xdist_group") if m.args]
    group = marks[0].rsplit(".", 1)[-1] if marks else ""
    return FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(pytest_report_header(None))


def tiny_model_config(**overrides):
    """The tiny decoder the unit tests share (1 layer, hidden 32, the char tokenizer's vocabulary);
    `overrides` replace fields."""
    from coop_jax.models import ModelConfig
    fields = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                  num_kv_heads=1)
    return ModelConfig(**(fields | overrides))


def sharp_params(cfg):
    """N(0, 0.2) weights (norm weights 1), ten times the model's init: sharp attention, so
    positions and cache contents matter, and logits ~ N(0, 1) with clear greedy margins (the
    sampler tests' model)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from coop_jax import models
    rng = np.random.default_rng(0)
    init = lambda path, x: (np.ones(x.shape, np.float32) if path[-1].key == "weight" else
                            rng.normal(0.0, 0.2, x.shape).astype(np.float32))
    p = jax.tree_util.tree_map_with_path(init, nn.meta.unbox(models.abstract_params(cfg)))
    return jax.tree_util.tree_map(jnp.asarray, p)


def left_padded_prompts(lengths, width: int, vocab_size: int, pad: int):
    """Left-padded prompts [len(lengths), width] of the given lengths, tokens in [2, vocab)."""
    import numpy as np
    rng = np.random.default_rng(0)
    mask = np.zeros((len(lengths), width), bool)
    for row, length in enumerate(lengths):
        mask[row, width - length:] = True
    tokens = np.where(mask, rng.integers(2, vocab_size, mask.shape), pad).astype(np.int32)
    return tokens, mask


def check_rollout_structure(r, eos_ids, pad: int) -> None:
    """A sampler's `Rollouts`: lengths / mask / truncated / padding agree with the tokens, and
    log-probs (and entropies) are 0 after the stop token."""
    import numpy as np
    rows, n = r.tokens.shape
    assert r.mask.shape == r.logprobs.shape == (rows, n)
    assert r.lengths.shape == r.truncated.shape == (rows,)
    is_eos = np.isin(r.tokens, eos_ids)
    for row in range(rows):
        stops = np.flatnonzero(is_eos[row])
        length = stops[0] + 1 if stops.size else n
        assert r.lengths[row] == length, row
        assert r.truncated[row] == (stops.size == 0), row
        np.testing.assert_array_equal(r.mask[row], np.arange(n) < length)  # the stop included
        assert (r.tokens[row, length:] == pad).all(), row
        assert (r.logprobs[row, length:] == 0).all(), row
        assert r.entropy is None or (r.entropy[row, length:] == 0).all(), row


def repo_module(relative_path: str, name: str):
    """A repository file that is not in a package (configs/, benchmarks/), loaded as a module."""
    import importlib.util
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repo_config(name: str, *args):
    """`get_config(*args)` of the repository's configs/NAME.py, loaded from its file as the CLI's
    --config flag does."""
    return repo_module(f"configs/{name}.py", f"{name}_config").get_config(*args)


def save_tiny_hf_causal_lm(path: pathlib.Path, max_position_embeddings: int = 512) -> str:
    """A random 1-layer transformers Qwen2ForCausalLM with the char tokenizer's files, saved in
    `path` (an HF folder `hf.load` and the rewriters read)."""
    import shutil

    import torch
    import transformers

    from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1,
                                   max_position_embeddings=max_position_embeddings,
                                   pad_token_id=0, eos_token_id=1, tie_word_embeddings=True)
    transformers.Qwen2ForCausalLM(cfg).eval().save_pretrained(path)
    for name in os.listdir(CHAR_TOKENIZER_DIR):
        shutil.copy(os.path.join(CHAR_TOKENIZER_DIR, name), pathlib.Path(path) / name)
    return str(path)


def save_tiny_policy(workdir: pathlib.Path, step: int, config) -> None:
    """A coop-train-style checkpoint of a random tiny policy with `config` in its metadata."""
    import json
    import types

    import jax

    from coop_jax import models
    from coop_jax.checkpoint import Checkpointer, model_config_to_dict

    cfg = tiny_model_config()
    state = types.SimpleNamespace(
        policy=types.SimpleNamespace(params=models.init_params(cfg, jax.random.key(0)),
                                     opt_state=None), ref_params=None, rm=None)
    meta = {"step": step, "policy_model_config": model_config_to_dict(cfg), "tokenizer": "",
            "config": json.loads(json.dumps(config.to_dict()))}
    ckpt = Checkpointer(str(workdir / "checkpoints"))
    ckpt.save(step, state, meta)
    ckpt.close()
