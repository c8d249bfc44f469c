"""Shape rules of the package's code: functions that fit on a screen, and host stages that return
what they make instead of writing it into the trainer."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "coop_jax"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 100


def _functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_function_is_longer_than_a_screen():
    long = [f"{p.relative_to(PACKAGE.parent)}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1})"
            for p in SOURCES for f in _functions(ast.parse(p.read_text()))
            if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


@pytest.mark.parametrize("module", ["trainer/loop.py", "trainer/rollouts.py", "rm/load.py"])
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
