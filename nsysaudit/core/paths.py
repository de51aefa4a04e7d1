"""Paths as reports show them: a basename, never where the file lay on the machine that made them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar, cast

from nsysaudit.core.errors import UnusableInput

T = TypeVar("T")

# What separates a path's components here: ``/``, and on Windows ``\`` too. On POSIX a backslash
# is part of a name (``run\1.sqlite``), not a separator.
_SEPARATORS = "".join(dict.fromkeys(["/", os.sep, os.altsep or "/"]))


def basename(path: str) -> str:
    r"""The last component of a path as the user gave it (``/`` separated; on Windows ``\`` too).

    >>> basename("runs/job-1/observe.sqlite"), basename("runs/")
    ('observe.sqlite', 'runs')
    >>> basename("in/run\\1.sqlite") if os.sep == "/" else "run\\1.sqlite"
    'run\\1.sqlite'
    """
    return os.path.basename(path.rstrip(_SEPARATORS)) or path


def scrub_paths(value: T, paths: Mapping[str, str]) -> T:
    """Replace every given path inside strings of ``value`` by its basename (no paths in reports).
    ``value`` keeps its shape (a string becomes a string, a list or map the same list or map of
    scrubbed values), so it keeps its type."""
    return cast(T, _scrubbed(value, paths))


def _scrubbed(value: object, paths: Mapping[str, str]) -> object:
    if isinstance(value, str):
        for path, name in paths.items():
            if path and path in value:
                value = value.replace(path, name)
        return value
    if isinstance(value, list):
        return [_scrubbed(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, paths) for k, v in value.items()}
    return value


def refuse_undecodable_name(path: str | os.PathLike[str]) -> None:
    """A path whose bytes are not UTF-8 (a POSIX name may be any bytes; Python holds the others as
    lone surrogates) is unusable input: a report names its inputs exactly, and neither JSON nor a
    sealed folder's files can hold those bytes."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UnusableInput(
            path,
            "its path is not valid UTF-8, so no report can name it exactly; give it a UTF-8 name "
            "(a link under one is enough)",
        ) from None


def storable(text: str) -> str:
    r"""``text`` as a table can store it: the bytes of a name that are not UTF-8 written as ``\xff``.

    >>> storable("bad\udcff.sqlite")
    'bad\\xff.sqlite'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text
