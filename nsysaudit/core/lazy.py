"""Attributes of a package imported on first use (PEP 562), so that importing the package, or a
command that needs one part of it, does not pay for the rest."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from pathlib import Path

# ``from MODULE import NAME as NAME``, one name a line: how a package face lists its public names.
_DECLARED = re.compile(r"^\s*from (nsysaudit[\w.]*) import (\w+) as \2\s*$", re.MULTILINE)


def declared_homes(face: str) -> dict[str, str]:
    """Each name the package face ``face`` (its ``__init__.py``) imports as ``from MODULE import NAME
    as NAME``, with its ``MODULE``: the face's imports, written once for the type checker and
    static tools, are also the list of what it imports at run time."""
    return {name: module for module, name in _DECLARED.findall(Path(face).read_text(encoding="utf-8"))}


def lazy_attributes(
    package: str, homes: Mapping[str, str], namespace: MutableMapping[str, object]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``homes`` maps each public name to the module
    that defines it; a name is imported once, then kept in the package's ``namespace``.

    The package's public names are imported for the type checker under ``TYPE_CHECKING``, so their
    types are those; this ``__getattr__`` types only a name nobody declared (``object``: using one
    is an error the type checker reports)."""

    def getattr_(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(import_module(home), name)
        namespace[name] = value  # once: later lookups do not come here
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return getattr_, dir_
