"""The RM's one loader (`rm.load.load_reward_model`) as both trainers call it: coop-train's RM
(drawn with the keys it is given, adapters under `reward_model.lora`), and the RM coop-train-rm
starts from (`rm.train.loop.starting_rm`): a random architecture drawn with `rm_train.seed`, or
an HF folder (`rm_train.init_hf`)."""
import ast
import shutil

import jax
import numpy as np
import pytest
from absl.app import UsageError
from conftest import REPO, save_tiny_hf_causal_lm

from coop_jax import config as config_lib
from coop_jax import hf, parallel
from coop_jax.hf.build import add_adapters, lora_config, model_config
from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer, prepare_tokenizer
from coop_jax.rm import load
from coop_jax.rm.load import RMSource, load_reward_model
from coop_jax.rm.train.loop import starting_rm

ARCH = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
            num_kv_heads=1)


@pytest.fixture
def mesh():
    return parallel.make_mesh((8, 1, 1))


@pytest.fixture
def warnings(caplog, monkeypatch):
    """The UNTRAINED REWARD MODEL warnings logged while a test runs."""
    monkeypatch.setattr(load.log, "propagate", True)  # a coop-train run in this process stops it
    caplog.set_level("WARNING", logger="coop_jax")
    return lambda: [r.message for r in caplog.records if "UNTRAINED" in r.message]


def _same(a, b):
    a, b = jax.device_get(a), jax.device_get(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(x, y)


def _rm_train(**kw):
    opts = config_lib.rm_train_section()
    opts.update(kw)
    return opts


def test_coop_trains_random_rm_is_drawn_with_its_keys_and_gets_its_adapters(mesh, warnings):
    c = config_lib.load_config_file(str(REPO / "configs" / "tiny_test.py"))
    c.reward_model.lora.rank = 2
    tokenizer = prepare_tokenizer(load_tokenizer(None))
    key, lora_key = jax.random.key(7), jax.random.key(8)
    rm = load_reward_model(RMSource.from_config(c), tokenizer, mesh, key, lora_key)
    cfg = model_config(c.reward_model, num_labels=1)
    want_cfg, want = add_adapters(cfg, parallel.sharded_init(cfg, key, mesh),
                                  lora_config(c.reward_model), mesh, lora_key)
    assert rm.config == want_cfg and rm.tokenizer is tokenizer and rm.hf_config is None
    _same(rm.params, want)
    assert len(warnings()) == 1  # it scores at chance
    assert load_reward_model(RMSource.from_config(c), tokenizer, mesh, key).config.lora is None


def test_coop_train_rm_starts_from_a_random_rm_drawn_with_its_seed(mesh, warnings):
    section = config_lib.model_section(**ARCH)
    rm = starting_rm(section, mesh, _rm_train(seed=3))
    cfg = model_config(section, num_labels=1)
    assert rm.config == cfg and rm.tokenizer_path == "" and rm.hf_config is None
    _same(rm.params, parallel.sharded_init(cfg, jax.random.key(3), mesh))
    assert len(rm.tokenizer) == len(load_tokenizer(None))
    assert warnings() == []  # coop-train-rm is about to train it


def test_coop_train_rm_starts_from_its_init_hf(mesh, warnings, tmp_path):
    folder = save_tiny_hf_causal_lm(tmp_path / "lm")
    section = config_lib.model_section(**ARCH)
    rm = starting_rm(section, mesh, _rm_train(init_hf=folder))
    want = hf.load(folder, num_labels=1)  # a causal LM: its new score head
    assert rm.tokenizer_path == folder and rm.hf_config == want.hf_config
    assert rm.tokenizer.pad_token_id is not None and rm.config.num_labels == 1
    _same(rm.params, want.params)
    assert warnings() == []
    # reward_model.hf_path is the same start; coop-train warns of the new head
    section.hf_path = folder
    _same(starting_rm(section, mesh, _rm_train()).params, want.params)
    c = config_lib.load_config_file(str(REPO / "configs" / "tiny_test.py"))
    c.reward_model.hf_path = folder
    coop_train = load_reward_model(RMSource.from_config(c), None, mesh, jax.random.key(0))
    _same(coop_train.params, want.params)
    assert coop_train.tokenizer_path == folder and len(warnings()) == 1


def test_a_folder_without_tokenizer_files_names_the_field(mesh, tmp_path):
    folder = save_tiny_hf_causal_lm(tmp_path / "lm")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{folder}/{name}", bare / name)
    section = config_lib.model_section(**ARCH)
    with pytest.raises(UsageError, match="has no tokenizer files; set "
                                         "config.reward_model.tokenizer"):
        starting_rm(section, mesh, _rm_train(init_hf=str(bare)))
    section.tokenizer = CHAR_TOKENIZER_DIR
    assert starting_rm(section, mesh, _rm_train(init_hf=str(bare))).tokenizer_path == \
        CHAR_TOKENIZER_DIR


def test_the_rm_has_one_loader():
    """coop-train-rm loads its RM through rm.load, as coop-train does: no other loader of the
    `reward_model` section in the RM's package."""
    package = REPO / "coop_jax"
    defined = [p.relative_to(REPO).as_posix() for p in package.rglob("*.py")
               for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef) and node.name in ("load_rm",
                                                                       "load_reward_model")]
    assert defined == ["coop_jax/rm/load.py"]
    rm_modules = [p for p in (package / "rm").rglob("*.py") if p.name != "load.py"]
    build_users = [p.relative_to(REPO).as_posix() for p in rm_modules
                   if "coop_jax.hf.build" in p.read_text(encoding="utf-8")]
    assert build_users == []
    assert "load_reward_model(" in (package / "rm" / "train" / "loop.py").read_text()
