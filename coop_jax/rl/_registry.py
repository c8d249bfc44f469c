"""Name lookup shared by the rl registries (one clear error for every config string)."""
from __future__ import annotations

from typing import Mapping, TypeVar

T = TypeVar("T")


def lookup(registry: Mapping[str, T], name: str, field: str) -> T:
    """Return ``registry[name]`` or raise ValueError naming ``field`` and the allowed names."""
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"{field}={name!r} is not one of {sorted(registry)}")
    return registry[name]
