"""The whole config's path from `Trainer.__init__` (tests/test_code_shape.py): each call that passes
it on (`config`, `self.config`, a parameter that received it, or a name bound to a call given it,
such as `c = typed(config)`), resolved through the calling file's imports to its definition in
coop_jax and followed there; a call on `self` is followed too (the object carries the config).
A settings builder's result (`X.from_config(config)`) is not the config.

    python tests/config_flow.py     # the calls (file, line, callee, the callee's file), counts
"""
from __future__ import annotations

import ast
import builtins
import pathlib
from typing import NamedTuple

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "coop_jax"


class Call(NamedTuple):
    file: str      # the caller's file, relative to coop_jax/
    line: int
    callee: str    # as written
    target: str    # the callee's file, "?" when outside coop_jax or not resolved


class _Module:
    """One file's top-level functions, classes' methods and imported names."""

    def __init__(self, path: pathlib.Path, root: pathlib.Path):
        self.path, tree = path, ast.parse(path.read_text())
        self.funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: {f.name: f for f in n.body if isinstance(f, ast.FunctionDef)}
                        for n in tree.body if isinstance(n, ast.ClassDef)}
        package = list(path.relative_to(root).with_suffix("").parts)[:-1]  # its package
        # local name -> ("module", dotted) or ("symbol", dotted module, its name there)
        self.names: dict[str, tuple] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.names[a.asname or a.name.split(".")[0]] = (
                        "module", a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package[:len(package) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    dotted = f"{base}.{a.name}"
                    self.names[a.asname or a.name] = (
                        ("module", dotted) if _module_path(root, dotted).exists()
                        else ("symbol", base, a.name))


def _module_path(root: pathlib.Path, dotted: str) -> pathlib.Path:
    path = root / dotted.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


class ConfigFlow:
    def __init__(self, package: pathlib.Path = PACKAGE):
        self.package, self.root = package, package.parent
        self.modules: dict[pathlib.Path, _Module] = {}
        self.calls: set[Call] = set()
        self.seen: set = set()

    def module(self, dotted_or_path) -> _Module | None:
        path = (dotted_or_path if isinstance(dotted_or_path, pathlib.Path)
                else _module_path(self.root, dotted_or_path))
        if path not in self.modules and path.exists():
            self.modules[path] = _Module(path, self.root)
        return self.modules.get(path)

    def symbol(self, dotted: str, name: str, depth: int = 0):
        """(module, class or None, function) of `name` in module `dotted`, re-exports followed."""
        m = self.module(dotted)
        if m is None or depth > 5:
            return None
        if name in m.funcs:
            return m, None, m.funcs[name]
        if name in m.classes:
            init = m.classes[name].get("__init__")
            return (m, name, init) if init else None
        if m.names.get(name, ("",))[0] == "symbol":
            return self.symbol(*m.names[name][1:], depth + 1)
        return None

    def method(self, m: _Module | None, cls: str, name: str):
        fn = m.classes.get(cls, {}).get(name) if m else None
        return (m, cls, fn) if fn else None

    def resolve(self, m: _Module, call: ast.Call, cls: str | None):
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in m.funcs or f.id in m.classes:
                return self.symbol(self._dotted(m), f.id)
            kind = m.names.get(f.id)
            return self.symbol(*kind[1:]) if kind and kind[0] == "symbol" else None
        if not isinstance(f, ast.Attribute):
            return None
        owner = ast.unparse(f.value)
        if owner in ("self", "cls") and cls:
            return self.method(m, cls, f.attr)
        if owner in m.classes:
            return self.method(m, owner, f.attr)
        head, *rest = owner.split(".")
        kind = m.names.get(head)
        if kind is None:
            return None
        if kind[0] == "symbol":  # an imported class's method
            return self.method(self.module(kind[1]), kind[2], f.attr) if not rest else None
        target = ".".join([kind[1], *rest])
        if self.module(target) is not None:
            return self.symbol(target, f.attr)
        if rest:  # module.Class.method
            return self.method(self.module(".".join([kind[1], *rest[:-1]])), rest[-1], f.attr)
        return None

    def _dotted(self, m: _Module) -> str:
        return ".".join(m.path.relative_to(self.root).with_suffix("").parts).removesuffix(
            ".__init__")

    def walk(self, m: _Module, cls: str | None, fn: ast.FunctionDef, names: set[str]) -> None:
        key = (m.path, cls, fn.name, frozenset(names))
        if key in self.seen:
            return
        self.seen.add(key)
        is_config = lambda a: ast.unparse(a) in names or (cls and ast.unparse(a) == "self.config")
        names = set(names)
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and any(is_config(a) for a in node.value.args)
                    and not ast.unparse(node.value.func).endswith("from_config")):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            positions = [i for i, a in enumerate(node.args) if is_config(a)]
            keywords = [k.arg for k in node.keywords if k.arg and is_config(k.value)]
            target = self.resolve(m, node, cls)
            if not positions and not keywords:
                if cls and ast.unparse(node.func).startswith("self.") and target:
                    self.walk(*target, set())
                continue
            callee = ast.unparse(node.func)
            if target is None and callee in dir(builtins):
                continue
            here = str(m.path.relative_to(self.package))
            self.calls.add(Call(here, node.lineno, callee, "?" if target is None
                                else str(target[0].path.relative_to(self.package))))
            if target is not None:
                params = [a.arg for a in target[2].args.args]
                params = params[1:] if params and params[0] in ("self", "cls") else params
                received = {params[i] for i in positions if i < len(params)} | set(keywords)
                if received:
                    self.walk(*target, received)


def from_trainer_init(package: pathlib.Path = PACKAGE) -> tuple[list[Call], list[str]]:
    """The calls passing the whole config on from `Trainer.__init__`, and the files they touch."""
    flow = ConfigFlow(package)
    loop = flow.module(package / "trainer" / "loop.py")
    flow.walk(loop, "Trainer", loop.classes["Trainer"]["__init__"], {"config"})
    files = {c.file for c in flow.calls} | {c.target for c in flow.calls if c.target != "?"}
    return sorted(flow.calls), sorted(files)


if __name__ == "__main__":
    calls, files = from_trainer_init()
    for c in calls:
        print(f"{c.file}:{c.line} {c.callee} -> {c.target}")
    print(f"{len(calls)} calls in {len(files)} files: {', '.join(files)}")
