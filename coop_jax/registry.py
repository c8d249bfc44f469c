"""`Registry`: the one way coop_jax names its options (rewards, negatives, advantages, losses,
KL estimators, schedules, kernels, datasets, templates, model families, ...).

A registry maps a config string to an entry and says which config field chooses it, so an
unknown name fails in one line that names the field and the allowed names. Each entry keeps a
one-line description, which validation messages and `--print_config` show.

    ADVANTAGES = Registry("rl.advantage")

    @ADVANTAGES.register("grpo")
    def grpo(rewards): ...

    ADVANTAGES.lookup(config.rl.advantage)(rewards)

It is a read-only Mapping (`name in REG`, `REG[name]`, `tuple(REG)`), filled only by `register`.
This module imports nothing from coop_jax: every layer may use it.
"""
from __future__ import annotations

import dataclasses
import inspect
import weakref
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

T = TypeVar("T")

_MISSING = object()
# config field -> the first live registry that chooses it (`chosen_by`)
_BY_FIELD: "weakref.WeakValueDictionary[str, Registry]" = weakref.WeakValueDictionary()


def first_doc_line(entry: Any) -> str:
    """The first line of a function's or class's docstring ("" for other entries)."""
    doc = inspect.getdoc(entry) if inspect.isroutine(entry) or inspect.isclass(entry) else None
    return doc.strip().splitlines()[0] if doc else ""


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter an entry declares it needs: the config field it is read from (dotted, e.g.
    "reward.hybrid_rm_weight"), optionally converted (e.g. a choice string to a flag)."""
    field: str
    convert: Callable[[Any], Any] | None = None

    def __post_init__(self):
        _DECLARED_FIELDS.add(self.field)

    def read(self, config) -> Any:
        value = config
        for part in self.field.split("."):
            value = value[part] if isinstance(value, Mapping) else getattr(value, part)
        return self.convert(value) if self.convert is not None else value


# the config fields that parameters declare (`Param.field`): a plugin's own fields, which the
# typed config keeps beside the schema's (`config.typed`)
_DECLARED_FIELDS: set[str] = set()


def declared_fields() -> frozenset[str]:
    """Every config field a `Param` names (dotted), the schema's and plugins' own."""
    return frozenset(_DECLARED_FIELDS)


@dataclasses.dataclass(frozen=True)
class Options(Mapping[str, Any]):
    """An entry's parameter values: a hashable, read-only mapping (a static part of a compiled
    step's configuration)."""
    items_: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, **values) -> "Options":
        return cls(tuple(sorted(values.items())))

    def __getitem__(self, name: str) -> Any:
        for key, value in self.items_:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)


def read_options(params: Mapping[str, Param], config) -> Options:
    """The values in `config` of declared parameters (parameter -> its `Param`)."""
    return Options.of(**{key: p.read(config) for key, p in params.items()})


def chosen_by(field: str) -> "Registry | None":
    """The registry whose names the config field `field` (dotted) takes, among those imported."""
    return _BY_FIELD.get(field)


class Registry(Mapping[str, T], Generic[T]):
    """Named entries chosen by the config field `field` (e.g. "rl.advantage")."""

    def __init__(self, field: str, entries: Mapping[str, T] | None = None):
        self.field = field
        self._entries: dict[str, T] = {}
        self._docs: dict[str, str] = {}
        self._params: dict[str, dict[str, Param]] = {}
        _BY_FIELD.setdefault(field, self)
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    # -- filling
    def register(self, name: str, entry: Any = _MISSING, *, doc: str | None = None,
                 params: Mapping[str, Param] | None = None):
        """Register `entry` as `name`; without `entry`, a decorator that registers the function
        (or class) it decorates and returns it unchanged. Names are registered once. `params`:
        the parameters the entry needs, each read from its config field (`options`)."""
        if entry is _MISSING:
            def decorate(fn):
                self.register(name, fn, doc=doc, params=params)
                return fn
            return decorate
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.field}: a registry name must be a non-empty string, "
                             f"got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.field}: {name!r} is already registered")
        self._entries[name] = entry
        self._docs[name] = doc if doc is not None else first_doc_line(entry)
        self._params[name] = dict(params or {})
        return entry

    def unregister(self, name: str) -> None:
        """Remove `name` (for tests that register a temporary entry)."""
        for table in (self._entries, self._docs, self._params):
            table.pop(name)

    # -- reading
    def lookup(self, name: str, field: str | None = None) -> T:
        """The entry of `name`, or ValueError naming the field and the allowed names."""
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"{field or self.field}={name!r} is not one of {sorted(self)}")
        return self._entries[name]

    def check(self, name: str, field: str | None = None) -> None:
        """Raise (as `lookup`) unless `name` is registered; the config validators' message."""
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"config.{field or self.field} must be one of {sorted(self)}, "
                             f"got {name!r}")

    def params(self, name: str) -> dict[str, Param]:
        """The parameters `name` declared (parameter -> its config field)."""
        self.lookup(name)
        return dict(self._params[name])

    def options(self, name: str, config) -> Options:
        """The values of `name`'s declared parameters in `config`."""
        return read_options(self.params(name), config)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def describe(self) -> dict[str, str]:
        """name -> its one-line description (the entry's docstring unless given)."""
        return dict(self._docs)

    def where(self, predicate: Callable[[T], bool]) -> tuple[str, ...]:
        """The names whose entries satisfy `predicate`, in registration order."""
        return tuple(n for n, e in self._entries.items() if predicate(e))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field!r}, {list(self._entries)})"
