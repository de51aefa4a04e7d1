"""Paths as reports show them: a basename, never where the file lay on the machine that made them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def basename(path: str) -> str:
    """The last component of a path as the user gave it (``/`` or ``\\`` separated)."""
    return re.split(r"[\\/]", path.rstrip("/\\"))[-1] or path


def scrub_paths(value: Any, paths: Mapping[str, str]) -> Any:
    """Replace every given path inside strings of ``value`` by its basename (no paths in reports)."""
    if isinstance(value, str):
        for path, name in paths.items():
            if path and path in value:
                value = value.replace(path, name)
        return value
    if isinstance(value, list):
        return [scrub_paths(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: scrub_paths(v, paths) for k, v in value.items()}
    return value
