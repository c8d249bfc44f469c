"""The old import paths of the modules regrouped by role stay, for one release, as the new modules
themselves (one module object) with a DeprecationWarning; `python -m <old path>` still runs."""
import importlib
import subprocess
import sys
import warnings

import pytest

import coop_jax


@pytest.mark.parametrize("old", sorted(coop_jax.MOVED))
def test_an_old_path_is_the_new_module_with_a_deprecation_warning(old):
    new = importlib.import_module(coop_jax.MOVED[old])
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert any(issubclass(w.category, DeprecationWarning) and coop_jax.MOVED[old] in str(w.message)
               for w in caught)
    if old != "coop_jax.experiments":  # its modules moved to several packages
        assert module is new


def test_from_imports_and_submodules_of_old_packages():
    from coop_jax.experiments import reward_hacking  # noqa: F401
    from coop_jax.rm_train import label_balance, loop
    from coop_jax.projects.reward_hacking import driver
    from coop_jax.rm.train import loop as new_loop
    from coop_jax.rm.train.triples import label_balance as new_label_balance
    assert reward_hacking is driver and loop is new_loop and label_balance is new_label_balance
    assert coop_jax.moved_to("coop_jax.rm_train.cli") == "coop_jax.rm.train.cli"
    assert coop_jax.moved_to("coop_jax.trainer.loop") is None


def test_python_dash_m_with_an_old_path_runs_the_new_module():
    out = subprocess.run([sys.executable, "-m", "coop_jax.train", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("coop-train:"), out.stderr[-2000:]
