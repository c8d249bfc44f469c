"""Benchmark scripts run outside the suite (some only in CI with libtpu, some only on a GPU), so a
module move can break them unseen. Every name they take from coop_jax must still exist."""
import ast
import importlib
import importlib.util

import pytest
from conftest import REPO

ROOT = REPO
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def missing_names(source: str) -> list[str]:
    """`module.name` for each coop_jax name the source imports or reads that does not exist."""
    tree = ast.parse(source)
    aliases, missing = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names
                            if a.name.startswith("coop_jax") and a.asname})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("coop_jax"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if _is_module(full):
                    aliases[a.asname or a.name] = full
                elif not hasattr(importlib.import_module(node.module), a.name):
                    missing.append(full)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            if not hasattr(importlib.import_module(aliases[node.value.id]), node.attr):
                missing.append(f"{aliases[node.value.id]}.{node.attr}")
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_names_from_coop_jax_exist(script):
    missing = missing_names(script.read_text())
    assert not missing, f"{script.name} uses names coop_jax no longer has: {missing}"


def test_a_moved_name_is_reported():
    source = ("from coop_jax import config as config_lib, models\n"
              "from coop_jax.trainer.step import jit_step, no_such_step\n"
              "config_lib.model_config(models.abstract_params)\n")
    assert missing_names(source) == ["coop_jax.trainer.step.no_such_step",
                                     "coop_jax.config.model_config"]
