"""Shape rules of the package's code: functions that fit on a screen, and host stages that return
what they make instead of writing it into the trainer."""
import ast

import pytest
from conftest import REPO

PACKAGE = REPO / "coop_jax"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 100


def _functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_function_is_longer_than_a_screen():
    long = [f"{p.relative_to(PACKAGE.parent)}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1})"
            for p in SOURCES for f in _functions(ast.parse(p.read_text()))
            if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


@pytest.mark.parametrize("module", ["trainer/loop.py", "trainer/setup.py", "trainer/rollouts.py",
                                    "rm/load.py"])
def test_free_functions_do_not_assign_to_their_arguments(module):
    """Only methods change an object's attributes (`self.x = ...`); a module-level function that
    writes `arg.x = ...` would be changing a trainer (or another caller's object) behind its
    back."""
    tree = ast.parse((PACKAGE / module).read_text())
    bad = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        args = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                        and t.value.id in args:
                    bad.append(f"{fn.name}: {t.value.id}.{t.attr} =")
    assert not bad, bad


# The modules that read the whole config: the entry points (each command's setup), the shared
# infrastructure that defines and checks it, and the research projects. Every stage below them
# gets typed, frozen settings built once there (`<Settings>.from_config`).
READS_THE_CONFIG = {"config/__init__.py", "console.py", "registry.py", "trainer/loop.py", "trainer/setup.py",
                    "trainer/cli.py",
                    "rm/train/loop.py", "rm/train/cli.py", "eval/cli.py", "data/rephrase.py"}
CONFIG_NAMES = {"config", "c"}


def _below_the_entry_points():
    for p in SOURCES:
        rel = p.relative_to(PACKAGE).as_posix()
        if rel not in READS_THE_CONFIG and not rel.startswith("projects/"):
            yield rel, ast.parse(p.read_text())


def _builds_settings(fn) -> bool:
    """A settings builder (`from_config`) or a check of the config at start (`validate...`)."""
    return fn.name.endswith("from_config") or fn.name.startswith("validate")


def _untyped(annotation) -> bool:
    return annotation is None or ast.unparse(annotation) in {"Any", "ml_collections.ConfigDict",
                                                           "ConfigDict"}


def test_no_function_below_the_entry_points_takes_the_whole_config():
    """A parameter or field named `config` / `c` without a type (or typed as the ConfigDict) is
    the whole config; below the entry points only settings builders and start checks take it."""
    bad = []
    for rel, tree in _below_the_entry_points():
        for fn in _functions(tree):
            args = fn.args.args + fn.args.kwonlyargs
            bad += [f"{rel}:{fn.lineno} {fn.name}({a.arg})" for a in args
                    if a.arg in CONFIG_NAMES and _untyped(a.annotation)
                    and not _builds_settings(fn)]
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            bad += [f"{rel}:{f.lineno} {cls.name}.{f.target.id}" for f in cls.body
                    if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
                    and f.target.id in CONFIG_NAMES and _untyped(f.annotation)]
    assert not bad, bad


def test_settings_are_built_only_by_the_entry_points():
    """`from_config` is called where the config is read (the entry points, the projects), or by
    another builder (a stage's settings holding a sub-stage's)."""
    bad = []
    for rel, tree in _below_the_entry_points():
        for fn in _functions(tree):
            if _builds_settings(fn):
                continue
            bad += [f"{rel}:{node.lineno} in {fn.name}" for node in ast.walk(fn)
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.endswith("from_config")]
    assert not bad, bad


# tests/ at the top: the shared infrastructure's tests (coop_jax/<module>.py) and the checks of
# the whole repository; every other test lives in the folder of the package it tests
WHOLE_REPOSITORY_TESTS = {"test_cli_help.py", "test_code_shape.py", "test_docs.py",
                          "test_import_graph.py", "test_tree_size.py"}
NOT_PACKAGES = {"fixtures", "__pycache__"}  # test data; benchmarks/ mirrors the scripts' folder


def test_the_tests_mirror_the_package_tree():
    tests = REPO / "tests"
    for folder in (p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if rel.parts[0] in NOT_PACKAGES:
            continue
        mirrored = (REPO / rel if rel.parts[0] == "benchmarks" else PACKAGE / rel)
        assert mirrored.is_dir(), f"tests/{rel} mirrors no folder ({mirrored} is missing)"
    for path in tests.glob("test_*.py"):
        module = path.name.removeprefix("test_")
        assert path.name in WHOLE_REPOSITORY_TESTS or (PACKAGE / module).is_file(), (
            f"tests/{path.name} tests no module directly in coop_jax/: move it to the folder "
            "of its package")


# ---------------------------------------------------------------------- the typed config
# reads the RM input settings of checkpoints saved before the rename (`trained_input_format`)
READ_SAVED_CONFIGS = {"rm/input.py"}


def test_renamed_fields_are_named_only_by_the_rename_map():
    """An old field name (`cooper.rm_checkpoint`, `train.eval_every`, ...) lives on only in
    `config.renames`, which moves its value to the new name: the RM's checkpoint is read from the
    `rm` section alone, each evaluator's schedule from `evals`."""
    import re

    from coop_jax.config.renames import RENAMED
    names = {old: re.compile(rf"(?<![\w.]){re.escape(old)}\b") for old in RENAMED}
    bad = [f"{rel}: {old}" for p in SOURCES
           for rel in [p.relative_to(PACKAGE).as_posix()] if rel != "config/renames.py"
           for old, name in names.items()
           if name.search(p.read_text()) and rel not in READ_SAVED_CONFIGS]
    bad += [f"{p.relative_to(PACKAGE)}: rm_checkpoint" for p in SOURCES
            if "rm_checkpoint" in p.read_text()
            and p.relative_to(PACKAGE).as_posix() != "config/renames.py"]
    assert not bad, bad


def test_the_config_is_typed_once_at_the_entry_points():
    """`config.typed(...)` (the ConfigDict's one conversion) is called only where the config is
    read: the command lines, the library entry points the projects call (`loop.train`,
    `rm.train.loop.train_reward_model`) and the start checks."""
    bad = []
    for rel, tree in _below_the_entry_points():
        bad += [f"{rel}:{node.lineno}" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("typed")]
    assert not bad, bad
    trainer = next(n for n in ast.parse((PACKAGE / "trainer/loop.py").read_text()).body
                   if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    init = next(f for f in trainer.body if isinstance(f, ast.FunctionDef)
                and f.name == "__init__")
    assert ast.unparse(init.args.args[1].annotation) == "config_lib.Config"


def test_the_config_passes_through_few_calls_from_the_trainer():
    """From `Trainer.__init__`, the whole config is passed on by at most 25 calls in at most 10
    files (tests/config_flow.py follows it; `python tests/config_flow.py` lists them): the
    trainer's setup builds each stage's typed settings and hands those down."""
    from config_flow import from_trainer_init

    calls, files = from_trainer_init(PACKAGE)
    listing = [f"{c.file}:{c.line} {c.callee} -> {c.target}" for c in calls]
    assert len(calls) <= 25 and len(files) <= 10, (len(calls), files, listing)
    assert {"trainer/loop.py", "trainer/setup.py"} <= set(files)  # the flow is followed at all
    assert any(c.callee.endswith("validate_config") for c in calls)


# the model config's field and what reads it: the fused kernels' one call site (log-probs, and
# the impl the samplers resolve)
NAMES_THE_KERNEL_CHOICE = {"models/config.py", "models/logprobs.py"}


def test_the_kernel_choice_is_set_once_on_the_model_config():
    """`kernels.impl` reaches the samplers and the log-probs as the model config's
    `kernel_impl`, set by the entry points (`ModelConfig.with_kernels`), not as an argument or
    settings field threaded beside the model config."""
    naming = {p.relative_to(PACKAGE).as_posix() for p in SOURCES
              if "kernel_impl" in p.read_text()}
    assert naming <= NAMES_THE_KERNEL_CHOICE and len(NAMES_THE_KERNEL_CHOICE) <= 3, naming
