"""Two shapes every layer passes around, named once so that a signature says what it holds instead of
``Any``: :data:`Schema` (a polars schema: column name to data type, as a frame is built with) and
:data:`JSON` (a value of a parsed JSON document: what ``json.loads`` gives, what the canonical writer
takes).

Both are type aliases only: nothing here runs, and polars is imported for the type checker alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import polars as pl

__all__ = ["JSON", "JSONObject", "Schema"]

Schema: TypeAlias = "dict[str, pl.DataType | type[pl.DataType]]"
JSON: TypeAlias = "str | int | float | bool | list[JSON] | dict[str, JSON] | None"
JSONObject: TypeAlias = "dict[str, JSON]"
