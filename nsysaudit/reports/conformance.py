"""Whether a document conforms to its type: :func:`problems` checks a value (parsed JSON) against a
type of :mod:`nsysaudit.reports.documents`, and :func:`json_schema` says the same rule as a JSON Schema
(``python -m nsysaudit.schemas`` publishes them)."""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from typing import Annotated, Literal, NotRequired, TypeGuard, Union, get_args, get_origin, get_type_hints


# --- checking a document against its type -------------------------------------------------------
def problems(value: object, t: object, where: str = "$") -> list[str]:
    """Where ``value`` (parsed JSON) departs from the type ``t``: a key the type does not declare, a
    required key missing, a value of another type or outside its vocabulary. Empty when it conforms."""
    origin = get_origin(t)
    if t is object:  # any JSON value
        return []
    if t is type(None):
        return [] if value is None else [f"{where}: {value!r:.60} where null"]
    if origin is Literal:
        return [] if value in get_args(t) else [f"{where}: {value!r:.60} is not one of {get_args(t)}"]
    if origin in (Union, types.UnionType):
        each = [problems(value, a, where) for a in get_args(t)]
        return [] if any(not p for p in each) else min(each, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} where a list"]
        return [p for i, v in enumerate(value) for p in problems(v, get_args(t)[0], f"{where}[{i}]")]
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} where a map"]
        k, v = get_args(t)
        return [p for key, x in value.items()
                for p in problems(key, k, f"{where} key") + problems(x, v, f"{where}.{key}")]
    if is_typed_dict(t):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} where {t.__name__}"]
        hints = get_type_hints(t, include_extras=True)
        out = [f"{where}.{key}: not a key of {t.__name__}" for key in value if key not in hints]
        for key, hint in hints.items():
            inner, required = unwrap(hint)
            if key not in value:
                out += [f"{where}.{key}: missing ({t.__name__})"] if required else []
            else:
                out += problems(value[key], inner, f"{where}.{key}")
        return out
    if t is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [f"{where}: not a number"]
    if t is int:
        whole = isinstance(value, int) and not isinstance(value, bool)
        return [] if whole else [f"{where}: {value!r:.60} not an integer"]
    if isinstance(t, type):
        return [] if isinstance(value, t) else [f"{where}: {type(value).__name__} where {t.__name__}"]
    return [f"{where}: cannot check against {t}"]


def is_typed_dict(t: object) -> TypeGuard[type]:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


@functools.cache
def required_keys(t: type) -> frozenset[str]:
    """The keys of the TypedDict ``t`` always there (not ``NotRequired``). Read from the type hints:
    under ``from __future__ import annotations`` Python 3.11's ``__required_keys__`` counts every key."""
    return frozenset(key for key, hint in get_type_hints(t, include_extras=True).items() if unwrap(hint)[1])


@functools.cache
def required_columns(t: type) -> tuple[str, ...]:
    """:func:`required_keys` of ``t`` in its order: the columns of a frame whose rows are such entries."""
    return tuple(key for key in get_type_hints(t, include_extras=True) if key in required_keys(t))


def unwrap(t: object) -> tuple[object, bool]:
    """``(type, required)`` with ``NotRequired[...]`` taken off."""
    if get_origin(t) is NotRequired:
        return get_args(t)[0], False
    return t, True


# --- the JSON Schema, generated ---------------------------------------------------------------------
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(
    root: type, *, id: str, closed: bool = False, table_row: bool = False
) -> dict[str, object]:
    """The JSON Schema (2020-12) of the TypedDict ``root``: its keys at the top, every TypedDict it
    mentions in ``$defs`` (by class name), each key's type as :func:`problems` checks it (``Literal``: an
    ``enum``; ``X | None``: null allowed; ``list``, ``dict``, ``Mapping``; ``object``: any value),
    ``NotRequired`` keys left out of ``required``.

    ``closed``: no key but the declared ones (what :func:`problems` checks; the published schemas are
    open, so that a consumer's schema still accepts documents of a later nsysaudit, which only adds
    keys). ``table_row``: ``root`` is a row of a table, where every column is there, null for a key the
    row lacks (its ``NotRequired`` keys are required and nullable).

    >>> from nsysaudit.reports.documents import Tool
    >>> s = json_schema(Tool, id="urn:example")
    >>> s["required"], s["properties"]["version"]
    (['name', 'version'], {'type': 'string'})
    """
    writer = _SchemaWriter(closed)
    body = writer.typed_dict(root, table_row=table_row)
    out: dict[str, object] = {"$schema": JSON_SCHEMA_DIALECT, "$id": id, "title": root.__name__, **body}
    if writer.defs:
        out["$defs"] = writer.defs
    return out


class _SchemaWriter:
    """Turns types into JSON Schema, collecting the TypedDicts met into ``defs``."""

    def __init__(self, closed: bool) -> None:
        self.closed = closed
        self.defs: dict[str, dict[str, object]] = {}
        self.named: dict[str, type] = {}

    def typed_dict(self, t: type, *, table_row: bool = False) -> dict[str, object]:
        out: dict[str, object] = {}
        doc = (t.__doc__ or "").strip()
        if doc and not doc.startswith(f"{t.__name__}("):  # a TypedDict without a docstring gets its signature
            out["description"] = " ".join(doc.split())
        properties: dict[str, object] = {}
        required: list[str] = []
        for key, hint in get_type_hints(t, include_extras=True).items():
            inner, is_required = unwrap(hint)
            schema = self.of(inner)
            if table_row and not is_required:  # null where the row has no value (once, if its type says so)
                nullable = get_origin(inner) in (Union, types.UnionType) and type(None) in get_args(inner)
                schema = schema if nullable else _any_of([schema, {"type": "null"}])
                is_required = True
            properties[key] = schema
            if is_required:
                required.append(key)
        out.update({"type": "object", "properties": properties, "required": required})
        if self.closed:
            out["additionalProperties"] = False
        return out

    def of(self, t: object) -> dict[str, object]:
        origin = get_origin(t)
        if t is object:  # any JSON value
            return {}
        if t is type(None):
            return {"type": "null"}
        if origin is Annotated:
            return self.of(get_args(t)[0])
        if origin is Literal:
            values = list(get_args(t))
            return {"const": values[0]} if len(values) == 1 else {"enum": values}
        if origin in (Union, types.UnionType):
            return _any_of([self.of(a) for a in get_args(t)])
        if origin is list:
            return {"type": "array", "items": self.of(get_args(t)[0])}
        if origin in (dict, Mapping):
            k, v = get_args(t)
            out: dict[str, object] = {"type": "object", "additionalProperties": self.of(v)}
            if k is not str:
                out["propertyNames"] = self.of(k)
            return out
        if is_typed_dict(t):
            name = t.__name__
            if self.named.setdefault(name, t) is not t:
                raise TypeError(f"two TypedDicts are named {name}: {self.named[name]!r} and {t!r}")
            if name not in self.defs:
                self.defs[name] = {}  # placed first: a type that mentions itself refers to it
                self.defs[name] = self.typed_dict(t)
            return {"$ref": f"#/$defs/{name}"}
        if t in _JSON_TYPES:
            return {"type": _JSON_TYPES[t]}
        raise TypeError(f"no JSON Schema for the type {t!r}")


def _any_of(parts: list[dict[str, object]]) -> dict[str, object]:
    """One schema for a union: ``{"type": [...]}`` of plain types, an ``enum`` of constants (null
    among them), else ``anyOf``."""
    if all(set(p) == {"type"} for p in parts):
        names = list(dict.fromkeys(n for p in parts for n in _listed(p["type"])))
        return {"type": names[0] if len(names) == 1 else names}
    if all(set(p) in ({"enum"}, {"const"}) or p == {"type": "null"} for p in parts):
        values: list[object] = []
        for p in parts:
            values += [v for v in (_listed(p["enum"]) if "enum" in p else [p.get("const")]) if v not in values]
        return {"enum": values}
    return {"anyOf": parts}


def _listed(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]
