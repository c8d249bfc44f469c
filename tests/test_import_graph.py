"""The package's import graph: no cycles, and dependencies that point one way.

Layers, lowest first: models / kernels / parallel / hf  <-  sampling  <-  rl, verify, data
<-  rm_input, rm_scoring, stats (shared by both sides)  <-  training (train*, rm_train, cooper,
rewards, config, sft, export) and evaluation (eval)  <-  experiments. The process launchers
(launch) stand apart: they import nothing from the package (no JAX before the children set it up).
Every import counts, also those inside functions.
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "coop_jax"


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
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


# component -> components it must never import
LOWER = {"models", "kernels", "parallel", "sampling", "rl", "verify"}
TRAINING = {"train", "train_step", "train_batch", "rm_train", "rollouts", "cooper", "rewards",
            "sft", "export"}
FORBIDDEN = {
    "models": {"sampling", "rl", "verify", "data", "eval", "experiments"} | TRAINING,
    "kernels": {"sampling", "rl", "verify", "data", "eval", "experiments"} | TRAINING,
    "sampling": {"rl", "verify", "data", "eval", "experiments"} | TRAINING,
    "rl": {"sampling", "verify", "data", "eval", "experiments"} | TRAINING,
    "verify": {"sampling", "rl", "data", "eval", "experiments"} | TRAINING,
    "eval": {"train", "train_step", "rm_train", "cooper", "rewards", "sft", "experiments"},
}
FORBIDDEN["launch"] = {_component(m) for m in MODULES} - {"launch"}
# every data module, the coop-rephrase script included (its chat clients live in sampling.chat)
DATA_LIBRARY = {m for m in MODULES if _component(m) == "data"}


def test_the_graph_was_read():
    assert "coop_jax.train" in GRAPH and "coop_jax.rl.advantages" in GRAPH
    assert "coop_jax.rewards" in GRAPH["coop_jax.train"]


def test_no_import_cycles():
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(GRAPH):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


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


@pytest.mark.parametrize("component", ["eval", "config"])
def test_evaluation_and_the_config_schema_never_reach_training_code(component):
    """Not even transitively: `coop-eval` (and the config schema it reads) runs without
    importing the trainer, the compiled step, Cooper or the reward sources."""
    bad = {(m, d) for m in MODULES if _component(m) == component for d in _reachable(m)
           if _component(d) in TRAINING}
    assert not bad, sorted(bad)


def test_data_library_stays_below_training_and_evaluation():
    upper = TRAINING | {"eval", "experiments"}
    bad = [(m, d) for m in DATA_LIBRARY for d in GRAPH[m] if _component(d) in upper]
    assert not bad, bad


# Training never imports evaluation: generation, RM scoring and statistics live in sampling,
# rm_scoring and stats. coop_jax.train is the one module left (its periodic policy evaluation and
# training curves: evaluate_policy, plot_curves).
EVAL_IMPORTERS_LEFT = {"coop_jax.train"}


def test_only_evaluation_and_experiments_import_evaluation():
    users = {m for m, deps in GRAPH.items() if _component(m) not in ("eval", "experiments")
             for d in deps if _component(d) == "eval"}
    assert users <= EVAL_IMPORTERS_LEFT, f"modules importing coop_jax.eval: {sorted(users)}"


def test_nothing_imports_the_eval_cli():
    users = sorted(m for m, deps in GRAPH.items() if "coop_jax.eval.cli" in deps)
    assert users == [], f"modules importing the evaluation CLI: {users}"
