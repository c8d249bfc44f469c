"""The schema's building blocks. A field is declared once, in its section: its type (the
annotation), its default, its one-line doc and its check (`field`). A section is a frozen
dataclass of fields that checks itself when built from a config's values (`Section.build`):
every error is one line naming the field, `config.<section>.<field> must be ...`.

This module imports nothing from coop_jax: every layer may declare a section.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Callable, Iterator, Mapping

# a field's check: what the value must be ("> 0", ...), or None when the value is fine
Check = Callable[[Any], "str | None"]


def field(default: Any, doc: str, *, check: Check | None = None,
          choices: typing.Collection[str] | None = None) -> Any:
    """A section field: its default, one-line doc, and optionally a check or the names it takes
    (a tuple or a `Registry`)."""
    return dataclasses.field(default=default,
                             metadata={"doc": doc, "check": check, "choices": choices})


def section(cls: type, doc: str = "") -> Any:
    """A sub-section field (its fields' defaults are the sub-section's)."""
    return dataclasses.field(default_factory=cls, metadata={"doc": doc, "check": None,
                                                             "choices": None})


# ---------------------------------------------------------------------- checks
def positive(value) -> str | None:
    return None if value > 0 else "> 0"


def non_negative(value) -> str | None:
    return None if value >= 0 else ">= 0"


def at_least(minimum) -> Check:
    return lambda value: None if value >= minimum else f">= {minimum}"


def in_unit_interval(value) -> str | None:
    """(0, 1]: a probability mass kept (top-p)."""
    return None if 0 < value <= 1 else "in (0, 1]"


def fraction(value) -> str | None:
    """[0, 1): a share of something set aside."""
    return None if 0 <= value < 1 else "in [0, 1)"


# ---------------------------------------------------------------------- types
_KINDS = {  # annotation -> (test, what a wrong value must be)
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "tuple": (lambda v: isinstance(v, (tuple, list)), "a tuple"),
    "float | None": (lambda v: v is None or (isinstance(v, (int, float))
                                             and not isinstance(v, bool)), "a number or None"),
}


def _wrong_type(annotation: str, value) -> str | None:
    test, what = _KINDS[annotation]
    return None if test(value) else what


class Section:
    """Base of the schema's frozen dataclasses. Subclasses declare fields with `field` /
    `section` and may override `check(path)` for rules between their fields."""

    def check(self, path: str) -> None:
        """Raise ValueError naming the first field whose value the others rule out."""

    @classmethod
    def build(cls, values: Mapping[str, Any], path: str,
              plugin_fields: typing.AbstractSet[str] = frozenset()) -> "Section":
        """The section of `values` (a ConfigDict section or a dict), every field checked;
        `path` is its dotted place in the config ("rollout", "model.lora"). A name the schema
        does not declare is an error unless it is among `plugin_fields` (dotted paths that a
        registered entry reads, `registry.Param`): kept as it is, an attribute like the others."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        extras = {name: values[name] for name in unknown if _join(path, name) in plugin_fields}
        if len(extras) < len(unknown):
            name = next(n for n in unknown if n not in extras)
            raise ValueError(f"config.{_join(path, name)}: no such field (config.{path} "
                             f"has: {', '.join(names)})")
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in values:
                raise ValueError(f"config.{_join(path, f.name)} is missing (a config must start "
                                 "from coop_jax.config.base_config() and override fields)")
            kwargs[f.name] = _checked(cls, f, values[f.name], _join(path, f.name),
                                      plugin_fields)
        built = cls(**kwargs)
        for name, value in extras.items():  # frozen: set once, here
            object.__setattr__(built, name, value)
        object.__setattr__(built, "_plugin_fields", tuple(extras))
        built.check(path)
        return built

    def to_dict(self) -> dict:
        """The section as plain dicts (what a checkpoint's meta.json keeps), plugin fields too."""
        return {f.name: (v.to_dict() if isinstance(v, Section) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]} | {
            name: getattr(self, name) for name in getattr(self, "_plugin_fields", ())}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _checked(cls: type, f: dataclasses.Field, value: Any, path: str,
             plugin_fields: typing.AbstractSet[str] = frozenset()) -> Any:
    annotation = _annotations(cls)[f.name]
    if isinstance(annotation, type) and issubclass(annotation, Section):
        if not isinstance(value, Mapping) and not hasattr(value, "items"):
            raise ValueError(f"config.{path} must be a section, got {value!r}")
        return annotation.build(value, path, plugin_fields)
    wrong = _wrong_type(annotation, value)
    if wrong:
        raise ValueError(f"config.{path} must be {wrong}, got {value!r}")
    choices, check = f.metadata["choices"], f.metadata["check"]
    if choices is not None and value not in choices:
        raise ValueError(f"config.{path} must be one of {list(choices)}, got {value!r}")
    bound = check(value) if check is not None else None
    if bound:
        raise ValueError(f"config.{path} must be {bound}, got {value!r}")
    return tuple(value) if annotation == "tuple" else value


@functools.cache
def _annotations(cls: type) -> dict[str, Any]:
    """Field name -> its annotation: a Section subclass, or the type's name ("int", ...)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] if _is_section(hints[f.name]) else f.type
            for f in dataclasses.fields(cls)}


def _is_section(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, Section)


def fields_of(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted path, field) of every leaf field of a section class, depth first."""
    for f in dataclasses.fields(cls):
        annotation = _annotations(cls)[f.name]
        if _is_section(annotation):
            if dataclasses.is_dataclass(annotation):  # not `evals`: its names are the config's
                yield from fields_of(annotation, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, f


def defaults(cls: type) -> dict:
    """The section's defaults as plain dicts."""
    return cls().to_dict()
