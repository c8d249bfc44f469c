"""The package's import graph: no cycles, and dependencies that point one way.

Layers, lowest first: kernels  <-  models  <-  parallel  <-  hf  <-  checkpoint  <-  sampling  <-
rl, verify, data
<-  rm (input format, scoring, loading, optimiser, its half of the step, Cooper's pairs), stats
(shared by both sides)  <-  rm.train (VerifyRM training)
<-  trainer (the policy trainer: loop, step, batch, rollouts, rewards, sft, probes) and
eval  <-  projects (research code: nothing in the library imports it). The process launchers
(launch) stand apart: they import nothing from the package (no JAX before the children set it
up). Every import counts, also those inside functions.
"""
import ast
import pathlib

import pytest
from conftest import REPO

PACKAGE = REPO / "coop_jax"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # `from pkg import submodule` depends on the submodule
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _component(module: str) -> str:
    """The top package under coop_jax ("" for coop_jax itself); VerifyRM training is "rm.train",
    apart from the RM's input and scoring that both trainers and the evaluation share."""
    parts = module.split(".")
    if parts[1:3] == ["rm", "train"]:
        return "rm.train"
    return parts[1] if len(parts) > 1 else ""


# component -> components it must never import
TRAINING = {"trainer", "rm.train"}
ABOVE_SAMPLING = {"rl", "verify", "data", "rm", "eval", "projects"} | TRAINING
FORBIDDEN = {
    "models": {"sampling"} | ABOVE_SAMPLING,
    "kernels": {"sampling"} | ABOVE_SAMPLING,
    "sampling": ABOVE_SAMPLING,
    "rl": {"sampling", "verify", "data", "rm", "eval", "projects"} | TRAINING,
    "verify": {"sampling", "rl", "data", "rm", "eval", "projects"} | TRAINING,
    "rm": {"eval", "projects"} | TRAINING,
    "rm.train": {"trainer", "eval", "projects"},
    "trainer": {"projects"},
    "eval": {"projects"} | TRAINING,
}
FORBIDDEN["launch"] = {_component(m) for m in MODULES} - {"launch"}
# every data module, the coop-rephrase script included (its chat clients live in sampling.chat)
DATA_LIBRARY = {m for m in MODULES if _component(m) == "data"}


def test_the_graph_was_read():
    assert "coop_jax.trainer.loop" in GRAPH and "coop_jax.rl.advantages" in GRAPH
    assert "coop_jax.trainer.rewards" in GRAPH["coop_jax.trainer.loop"]


def _cycles(graph: dict) -> list[list[str]]:
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_cycles_between_packages():
    """Packages (and the shared top-level modules) form layers: no two depend on each other,
    even through a third (the tokenizer loader lives in hf, the logical sharding rules in
    coop_jax.sharding_rules, coop-export in checkpoint, the path checks beside what they check)."""
    packages = {}
    for m, deps in GRAPH.items():
        packages.setdefault(_component(m), set()).update(
            _component(d) for d in deps if _component(d) != _component(m))
    cycles = _cycles(packages)
    assert not cycles, "package cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("component", sorted(FORBIDDEN))
def test_dependencies_point_one_way(component):
    bad = [(m, d) for m, deps in GRAPH.items() if _component(m) == component
           for d in deps if _component(d) in FORBIDDEN[component]]
    assert not bad, f"{component} imports a higher layer: {bad}"


def _reachable(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for dep in GRAPH[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


# Cooper's pair building lives beside the RM it trains, but is training code all the same
COOPER = "coop_jax.rm.cooper"


@pytest.mark.parametrize("component", ["eval", "config"])
def test_evaluation_and_the_config_schema_never_reach_training_code(component):
    """Not even transitively: `coop-eval` (and the config schema it reads) runs without
    importing the trainer, the compiled step, Cooper or the reward sources."""
    bad = {(m, d) for m in MODULES if _component(m) == component for d in _reachable(m)
           if _component(d) in TRAINING or d == COOPER}
    assert not bad, sorted(bad)


def test_data_library_stays_below_training_and_evaluation():
    upper = TRAINING | {"eval", "projects"}
    bad = [(m, d) for m in DATA_LIBRARY for d in GRAPH[m] if _component(d) in upper]
    assert not bad, bad


# Training never imports evaluation: generation, RM scoring and statistics live in sampling,
# rm.scoring and stats. Two modules are left: the evaluators a run declares
# (coop_jax.trainer.evaluators: evaluate_policy) and the loop (the strict verifiers, the curves).
EVAL_IMPORTERS_LEFT = {"coop_jax.trainer.loop", "coop_jax.trainer.evaluators"}


def test_only_evaluation_and_experiments_import_evaluation():
    users = {m for m, deps in GRAPH.items() if _component(m) not in ("eval", "projects")
             for d in deps if _component(d) == "eval"}
    assert users <= EVAL_IMPORTERS_LEFT, f"modules importing coop_jax.eval: {sorted(users)}"


def test_nothing_imports_the_eval_cli():
    users = sorted(m for m, deps in GRAPH.items() if "coop_jax.eval.cli" in deps)
    assert users == [], f"modules importing the evaluation CLI: {users}"


# the shared infrastructure: the only modules directly in coop_jax/ (both trainers, the
# evaluation and the projects use each); everything else lives in a package named for its role
SHARED_INFRASTRUCTURE = {"coop_jax", "coop_jax.registry", "coop_jax.console",
                         "coop_jax.jsonl", "coop_jax.stats", "coop_jax.optim",
                         "coop_jax.metrics_writer", "coop_jax.sharding_rules"}


def test_only_shared_infrastructure_sits_at_the_top():
    top = {m for m, p in MODULES.items() if p.parent == PACKAGE}
    assert top == SHARED_INFRASTRUCTURE


def test_the_reward_model_is_one_package():
    """Its input format, scoring, loading, optimiser, training, its half of the compiled step
    and Cooper's pairs; nothing RM-named outside it, and the step's RM functions defined only
    there."""
    assert {"coop_jax.rm.input", "coop_jax.rm.scoring", "coop_jax.rm.load", "coop_jax.rm.step",
            "coop_jax.rm.optim", COOPER, "coop_jax.rm.train.loop"} <= set(MODULES)
    assert not any(m.startswith("coop_jax.trainer.cooper") for m in MODULES)
    outside = {m for m in MODULES if _component(m) not in ("rm", "rm.train", "projects")
               and m.rsplit(".", 1)[-1].startswith("rm")}
    assert outside == set()
    rm_half = {"rm_rewards", "bradley_terry_loss", "resolve_pairs", "PairBatch", "RMInputs",
               "RMUpdate"}
    defined_elsewhere = {(m, node.name) for m, path in MODULES.items() if m != "coop_jax.rm.step"
                         for node in ast.parse(path.read_text(encoding="utf-8")).body
                         if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                         and node.name in rm_half}
    assert defined_elsewhere == set()
