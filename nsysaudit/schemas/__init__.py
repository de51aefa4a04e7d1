"""The published JSON Schemas (2020-12) of what nsysaudit writes as JSON, one per kind of document:

- ``analysis``: ``nsysaudit analyze --json`` (:class:`~nsysaudit.reports.documents.AnalysisDocument`);
- ``sealed-analysis``: the ``report.json`` of ``analyze --out`` (``SealedAnalysisDocument``);
- ``comparison``: ``compare --json`` and its ``report.json`` (``ComparisonDocument``);
- ``batch-input``, ``batch-finding``: one row of ``batch``'s inputs and findings tables
  (:class:`~nsysaudit.batch.output.InputRow`, ``FindingRow``), every column there, null where a row
  has no value.

Each document names its schema in its ``schema`` key (``{"kind": "analysis", "version": 1}``). The
files are generated from the documents' types (:func:`nsysaudit.reports.conformance.json_schema`) by
``python -m nsysaudit.schemas`` (``make contract``) and shipped here as ``<kind>.schema.json``;
tests/test_schemas.py fails when one differs from what the types give. They are open (a key they do
not declare is allowed): the contract only adds keys, so a consumer's schema still validates the
documents of a later nsysaudit of the same version.

>>> import nsysaudit.schemas as s
>>> s.schema("analysis")["$id"], s.schema("analysis")["properties"]["schema"]
('urn:nsysaudit:schema:analysis:1', {'$ref': '#/$defs/AnalysisSchemaName'})
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from nsysaudit.core.errors import BadOption

if TYPE_CHECKING:
    from collections.abc import Mapping

SchemaKind = Literal["analysis", "sealed-analysis", "comparison", "batch-input", "batch-finding"]
KINDS: tuple[SchemaKind, ...] = get_args(SchemaKind)
# Each kind and what its schema validates, in the user's words (``nsysaudit schema`` lists them).
SCHEMA_KINDS: Mapping[SchemaKind, str] = {
    "analysis": "nsysaudit analyze --json",
    "sealed-analysis": "report.json of nsysaudit analyze --out DIR",
    "comparison": "nsysaudit compare --json, and its report.json",
    "batch-input": "a row of nsysaudit batch's inputs table",
    "batch-finding": "a row of nsysaudit batch's findings table",
}
VERSION = 1  # documents.SCHEMA_VERSION (not imported: printing a schema reads only its file)


def schema_id(kind: SchemaKind) -> str:
    """The schema's ``$id``: ``urn:nsysaudit:schema:<kind>:<version>``."""
    return f"urn:nsysaudit:schema:{kind}:{VERSION}"


def file_name(kind: SchemaKind) -> str:
    return f"{kind}.schema.json"


def _known(kind: str) -> SchemaKind:
    for known in KINDS:
        if kind == known:
            return known
    raise BadOption(f"no schema {kind!r} (one of {', '.join(KINDS)})")


def schema_text(kind: str) -> str:
    """The shipped JSON Schema of ``kind``, as its file holds it (2-space indented, one final newline)."""
    return (resources.files(__name__) / file_name(_known(kind))).read_text(encoding="utf-8")


def schema(kind: str) -> dict[str, object]:
    """The shipped JSON Schema of ``kind`` (``analysis``, ``sealed-analysis``, ``comparison``,
    ``batch-input``, ``batch-finding``), parsed."""
    parsed: dict[str, object] = json.loads(schema_text(kind))
    return parsed


def generate(kind: str, *, closed: bool = False) -> dict[str, object]:
    """The JSON Schema of ``kind`` made from the types now (``closed``: no undeclared key allowed, as
    tests/test_documents.py checks the documents)."""
    from nsysaudit.batch.output import FindingRow, InputRow
    from nsysaudit.reports import conformance, documents

    known = _known(kind)
    roots: dict[SchemaKind, tuple[type, bool]] = {  # the root type, and whether it is a table's row
        "analysis": (documents.AnalysisDocument, False),
        "sealed-analysis": (documents.SealedAnalysisDocument, False),
        "comparison": (documents.ComparisonDocument, False),
        "batch-input": (InputRow, True),
        "batch-finding": (FindingRow, True),
    }
    root, row = roots[known]
    return conformance.json_schema(root, id=schema_id(known), closed=closed, table_row=row)


def generated_text(kind: str) -> str:
    """:func:`generate` of ``kind`` as its file holds it."""
    return json.dumps(generate(kind), indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: str | Path | None = None) -> list[Path]:
    """Write every kind's schema file into ``folder`` (default: this package's folder); their paths."""
    where = Path(folder) if folder is not None else Path(__file__).parent
    written = []
    for kind in KINDS:
        path = where / file_name(kind)
        path.write_text(generated_text(kind), encoding="utf-8")
        written.append(path)
    return written
