"""coop_jax: RL of LLM reasoning with a co-optimised reference-based reward model (Cooper),
label-free Co-rewarding and the GRPO family, in JAX. The package map is docs/ARCHITECTURE.md.

The modules that moved when the package was regrouped by role keep their old import paths, and
`python -m <old path>`, for one release: each old name is the new module itself (one module
object, so a monkeypatch through either name reaches both), with a DeprecationWarning.
"""
import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

MOVED = {  # old -> new; a package's submodules follow it
    "coop_jax.train": "coop_jax.trainer.loop",
    "coop_jax.train_step": "coop_jax.trainer.step",
    "coop_jax.train_batch": "coop_jax.trainer.batch",
    "coop_jax.rollouts": "coop_jax.trainer.rollouts",
    "coop_jax.rewards": "coop_jax.trainer.rewards",
    "coop_jax.cooper": "coop_jax.trainer.cooper",
    "coop_jax.sft": "coop_jax.trainer.sft",
    "coop_jax.probes": "coop_jax.trainer.probes",
    "coop_jax.build": "coop_jax.hf.build",
    "coop_jax.export": "coop_jax.checkpoint.export",
    "coop_jax.rm_input": "coop_jax.rm.input",
    "coop_jax.rm_scoring": "coop_jax.rm.scoring",
    "coop_jax.rm_train": "coop_jax.rm.train",
    "coop_jax.experiments.arms": "coop_jax.projects.reward_hacking.arms",
    "coop_jax.experiments.hack_probes": "coop_jax.projects.reward_hacking.hack_probes",
    "coop_jax.experiments.hacked_rollouts": "coop_jax.projects.reward_hacking.hacked_rollouts",
    "coop_jax.experiments.hacking_analysis": "coop_jax.projects.reward_hacking.analysis",
    "coop_jax.experiments.hacking_report": "coop_jax.projects.reward_hacking.report",
    "coop_jax.experiments.plan_inputs": "coop_jax.projects.reward_hacking.plan_inputs",
    "coop_jax.experiments.results_page": "coop_jax.projects.reward_hacking.results_page",
    "coop_jax.experiments.reward_hacking": "coop_jax.projects.reward_hacking.driver",
    "coop_jax.experiments.rm_corpus": "coop_jax.projects.rm_corpus",
    "coop_jax.experiments.run_store": "coop_jax.projects.run_store",
    "coop_jax.experiments.real_model": "coop_jax.projects.real_model.lane",
    "coop_jax.experiments.real_model_report": "coop_jax.projects.real_model.report",
    "coop_jax.experiments.real_verifyrm": "coop_jax.projects.real_model.verifyrm",
    "coop_jax.experiments": "coop_jax.projects",
    "coop_jax.models.tokenizer": "coop_jax.hf.tokenizer",
    "coop_jax.hf.export": "coop_jax.checkpoint.export",
}


def moved_to(name: str) -> str | None:
    """The new name of a module imported by its old name, else None."""
    for old in sorted(MOVED, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old):]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as its new module (`import`, `from ... import`, `python -m`)."""

    def find_spec(self, name, path=None, target=None):
        new = moved_to(name)
        if new is None:
            return None
        target = importlib.util.find_spec(new)
        spec = importlib.util.spec_from_loader(
            name, self, is_package=target.submodule_search_locations is not None)
        spec.origin = target.origin  # `python -m`'s sys.argv[0]
        return spec

    def create_module(self, spec):
        new = moved_to(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        if spec.name == "coop_jax.experiments":  # its modules moved to several packages: an
            module = types.ModuleType(spec.name)  # empty package whose submodules are looked up
            module.__path__ = []
            return module
        return importlib.import_module(new)

    def exec_module(self, module):
        pass  # the new module has run already

    def get_code(self, name):  # `python -m <old name>` runs the new module's code
        new = moved_to(name)
        return importlib.util.find_spec(new).loader.get_code(new)


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
