"""Attributes of a package imported on first use (PEP 562), so that importing the package, or a
command that needs one part of it, does not pay for the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``homes`` maps each public name to the module
    that defines it; a name is imported once, then kept in the package's ``namespace``."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value  # once: later lookups do not come here
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return getattr_, dir_
