"""The JSON contract's key tables in Markdown (docs/json.md's generated part), made from the documents'
types (:mod:`nsysaudit.reports.documents`): ``python -m nsysaudit.render.contract docs/json.md``
rewrites it in place (``make contract``)."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Literal, Union, get_args, get_origin, get_type_hints

from nsysaudit.reports.conformance import is_typed_dict, unwrap
from nsysaudit.reports.documents import AnalysisDocument, ComparisonDocument, SealedAnalysisDocument

# The JSON Schema name of a Python scalar type.
JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def type_words(t: object) -> str:
    """A type as the contract writes it: ``integer or null``, ``list of Finding``, ``"a" or "b"``."""
    origin = get_origin(t)
    if t is type(None):
        return "null"
    if t is object:
        return "any"
    if origin is Literal:
        return " or ".join(f'"{a}"' for a in get_args(t))
    if origin in (Union, types.UnionType):
        return " or ".join(type_words(a) for a in get_args(t))
    if origin is list:
        return f"list of {type_words(get_args(t)[0])}"
    if origin in (dict, Mapping):
        k, v = get_args(t)
        return f"map {type_words(k)} to {type_words(v)}"
    if is_typed_dict(t):
        return str(t.__name__)
    if isinstance(t, type):
        if t.__name__ in JSON_TYPES:
            return JSON_TYPES[t.__name__]
        return str(t.__name__)  # a class of its own: its name
    return str(t)


def _mentioned(t: object) -> list[type]:
    if is_typed_dict(t):
        return [t]
    return [m for a in get_args(t) for m in _mentioned(a)]


def contract(*roots: type) -> str:
    """The key tables of ``roots`` and every type they mention, in the order first met (Markdown)."""
    seen: list[type] = []
    todo = list(roots)
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.append(t)
        for hint in get_type_hints(t, include_extras=True).values():
            todo += [m for m in _mentioned(unwrap(hint)[0]) if m not in seen]
    out = []
    for t in seen:
        out += [f"### {t.__name__}", ""]
        doc = (t.__doc__ or "").strip()
        if doc and not doc.startswith(f"{t.__name__}("):
            out += [" ".join(doc.split()), ""]
        out += ["| key | type | always there |", "|---|---|---|"]
        for key, hint in get_type_hints(t, include_extras=True).items():
            inner, required = unwrap(hint)
            out.append(f"| `{key}` | {type_words(inner)} | {'yes' if required else 'no'} |")
        out.append("")
    return "\n".join(out)


CONTRACT_BEGIN = "<!-- generated from nsysaudit/reports/documents.py: python -m nsysaudit.render.contract -->"
CONTRACT_END = "<!-- end of the generated contract -->"


def contract_text() -> str:
    """The generated part of docs/json.md."""
    return contract(AnalysisDocument, SealedAnalysisDocument, ComparisonDocument)


def with_contract(text: str) -> str:
    """``text`` (docs/json.md) with its generated part made again from the types."""
    begin, end = text.index(CONTRACT_BEGIN), text.index(CONTRACT_END)
    return text[:begin] + CONTRACT_BEGIN + "\n" + contract_text().rstrip() + "\n" + text[end:]


if __name__ == "__main__":  # python -m nsysaudit.render.contract [docs/json.md: rewritten in place]
    if len(sys.argv) > 1:
        from pathlib import Path

        target = Path(sys.argv[1])
        target.write_text(with_contract(target.read_text()))
    else:
        sys.stdout.write(contract_text() + "\n")
