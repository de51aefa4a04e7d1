"""The published JSON Schemas: generated from the documents' types and shipped in the package (a
shipped file that the types no longer give fails here), valid 2020-12 schemas, printed by
``nsysaudit schema``; every document names its own in its ``schema`` key, and what nsysaudit writes
validates against them (tests/test_documents.py validates every bundled export's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import jsonschema
import pytest
from conftest import REPO, TORCH, reseal_tags, run, sha
from test_cli_startup import heavy, loaded_after

import nsysaudit
from nsysaudit import schemas
from nsysaudit.render.json import indented
from nsysaudit.reports import conformance, documents
from nsysaudit.seal.layout import manifest_text, payload

SHIPPED = REPO / "nsysaudit" / "schemas"
GOLDEN = REPO / "tests" / "golden" / "json" / "torch-observe.json"


def problems(doc: object, schema: dict[str, object]) -> list[str]:
    """What jsonschema finds wrong with ``doc``: ``path: message``, in path order."""
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(f"{e.json_path}: {e.message[:120]}" for e in validator.iter_errors(doc))


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_each_shipped_schema_is_what_the_types_give(kind: str) -> None:
    assert (SHIPPED / f"{kind}.schema.json").read_text() == schemas.generated_text(kind), (
        f"nsysaudit/schemas/{kind}.schema.json is stale: the documents' types changed; run `make contract` "
        "(python -m nsysaudit.schemas) and review the diff"
    )


def test_every_kind_is_shipped_and_nothing_else() -> None:
    assert sorted(p.name for p in SHIPPED.glob("*.json")) == sorted(f"{k}.schema.json" for k in schemas.KINDS)
    assert schemas.VERSION == documents.SCHEMA_VERSION


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_each_schema_is_a_valid_2020_12_schema_naming_its_kind_and_version(kind: str) -> None:
    for schema in (schemas.schema(kind), schemas.generate(kind, closed=True)):
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"urn:nsysaudit:schema:{kind}:1"


def test_the_schema_key_of_each_document_is_required_and_names_its_schema() -> None:
    for kind in ("analysis", "sealed-analysis", "comparison"):
        schema = schemas.schema(kind)
        assert "schema" in schema["required"]  # type: ignore[operator]
        ref = schema["properties"]["schema"]["$ref"].split("/")[-1]  # type: ignore[index]
        assert schema["$defs"][ref]["properties"] == {"kind": {"const": kind}, "version": {"const": 1}}  # type: ignore[index]


def test_the_schemas_say_what_the_types_say() -> None:
    analysis = schemas.schema("analysis")
    props, defs = analysis["properties"], analysis["$defs"]
    assert props["verdict"] == {"enum": ["failure_found", "inconclusive", "no_failure"]}  # type: ignore[index]
    assert "alignment" not in analysis["required"] and "library_calls" in analysis["required"]  # type: ignore[operator]
    finding = defs["Finding"]  # type: ignore[index]
    assert finding["properties"]["pid"] == {"type": ["integer", "null"]}
    assert finding["properties"]["enclosing"] == {"anyOf": [{"$ref": "#/$defs/Enclosing"}, {"type": "null"}]}
    assert finding["properties"]["devices"] == {"type": "array", "items": {"type": ["integer", "null"]}}
    assert "telemetry" not in finding["required"]  # NotRequired
    assert defs["TimelineLine"]["properties"]["fields"] == {"type": "object", "additionalProperties": {}}  # type: ignore[index]
    row = schemas.schema("batch-input")  # a table's row: every column there, null where the row has none
    assert row["properties"]["verdict"] == {"enum": ["failure_found", "inconclusive", "no_failure", None]}  # type: ignore[index]
    assert set(row["required"]) == set(row["properties"])  # type: ignore[arg-type]


def test_a_document_that_departs_from_its_type_fails_validation() -> None:
    doc = json.loads(GOLDEN.read_text())
    assert problems(doc, schemas.schema("analysis")) == []
    doc["verdict"] = "maybe"
    doc["findings"][0]["pid"] = "683"
    del doc["limits"]["pairs"]
    doc["census"]["extra"] = 1
    open_ = problems(doc, schemas.schema("analysis"))
    assert open_ == [
        "$.findings[0].pid: '683' is not of type 'integer', 'null'",
        "$.limits: 'pairs' is a required property",
        "$.verdict: 'maybe' is not one of ['failure_found', 'inconclusive', 'no_failure']",
    ]
    # The published schema is open to keys a later nsysaudit adds; the closed one (what
    # conformance.problems checks) refuses them.
    assert problems(doc, schemas.generate("analysis", closed=True)) == sorted(
        [*open_, "$.census: Additional properties are not allowed ('extra' was unexpected)"]
    )


class Inner(TypedDict):
    """An inner part."""

    n: int


class Outer(TypedDict):
    one: Literal["x"]
    maybe: Literal["a", "b"] | None
    number: int | float | None
    parts: list[Inner]
    by_name: dict[str, Inner | None]
    anything: object
    later: NotRequired[bool]


def test_the_generator_walks_every_form_of_type() -> None:
    s = conformance.json_schema(Outer, id="urn:test", closed=True)
    assert s["required"] == ["one", "maybe", "number", "parts", "by_name", "anything"]
    assert s["properties"] == {
        "one": {"const": "x"},
        "maybe": {"enum": ["a", "b", None]},
        "number": {"type": ["integer", "number", "null"]},
        "parts": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
        "by_name": {"type": "object", "additionalProperties": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]}},
        "anything": {},
        "later": {"type": "boolean"},
    }
    assert s["$defs"] == {"Inner": {"description": "An inner part.", "type": "object", "properties": {
        "n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}}
    with pytest.raises(TypeError, match="no JSON Schema for the type"):
        conformance.json_schema(type("Odd", (dict,), {"__annotations__": {"x": complex}, "__required_keys__": {"x"}}),
                              id="urn:odd")


# --- the command ------------------------------------------------------------------------------------


def test_schema_prints_the_shipped_file_and_lists_the_kinds(capsys) -> None:
    code, out, err = run(capsys, "schema", "comparison")
    assert (code, err) == (0, "") and out == (SHIPPED / "comparison.schema.json").read_text()
    code, out, err = run(capsys, "schema")
    listed = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and listed == list(schemas.KINDS) == list(nsysaudit.SCHEMA_KINDS)
    assert "nsysaudit analyze --json" in out
    code, out, err = run(capsys, "schema", "nope")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "'nope' is not one of 'analysis'" in err


def test_printing_a_schema_loads_nothing_heavy() -> None:
    code = (
        "from nsysaudit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['schema', 'analysis']) == 0\n"
    )
    modules = loaded_after(code)
    assert heavy(modules) == []


def test_the_library_refuses_an_unknown_kind_in_one_line() -> None:
    with pytest.raises(nsysaudit.BadOption, match=r"no schema 'nope' \(one of analysis, sealed-analysis"):
        schemas.schema("nope")


# --- what nsysaudit writes validates, and --json has one form -------------------------------------------


def test_analyze_and_compare_json_are_one_compact_line_naming_their_schema(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "analyze", TORCH / "observe.sqlite", "--json")
    assert code == 0 and out.count("\n") == 1 and out.endswith("}\n") and ', "' not in out[:200]
    analysis = json.loads(out)
    assert analysis["schema"] == {"kind": "analysis", "version": 1}
    assert problems(analysis, schemas.generate("analysis", closed=True)) == []
    code, out, err = run(capsys, "compare", TORCH / "observe.sqlite", TORCH / "release.sqlite", "--out",
                         tmp_path / "cmp", "--json")
    assert code == 0 and out.count("\n") == 1 and err.startswith("seal: sha256:")
    comparison = json.loads(out)
    assert comparison == json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert comparison["schema"] == {"kind": "comparison", "version": 1}
    assert problems(comparison, schemas.schema("comparison")) == []
    assert problems(comparison, schemas.generate("comparison", closed=True)) == []


def test_batch_rows_validate_as_table_rows(tmp_path: Path) -> None:
    (tmp_path / "inputs").mkdir()  # never beside the evidence: the output is not in an input's folder
    broken = tmp_path / "inputs" / "broken.sqlite"
    broken.write_bytes(b"not an export")
    result = nsysaudit.run_batch([TORCH, broken], out=tmp_path / "audit", jobs=1)
    for kind, name in (("batch-input", "inputs"), ("batch-finding", "findings")):
        import polars as pl

        frame = pl.read_parquet(tmp_path / "audit" / f"{name}.parquet")
        rows = [json.loads(line) for line in frame.write_ndjson().splitlines()]
        assert rows and len(rows) == getattr(result, name).height
        closed = schemas.generate(kind, closed=True)
        assert [p for row in rows for p in problems(row, closed)] == [], kind
    statuses = {r["status"] for r in result.inputs.to_dicts()}
    assert statuses == {"analyzed", "error"}


# --- a folder sealed before the schema key -----------------------------------------------------------


def sealed_before_the_schema_key(tmp_path: Path) -> Path:
    """A sealed analysis as nsysaudit sealed it before report.json named its schema (format
    nsysaudit.analysis/1, no ``schema`` key), its manifests and seal consistent."""
    out = tmp_path / "arm"
    nsysaudit.seal_analysis(TORCH / "observe.sqlite", out)
    report = json.loads((out / "report.json").read_text())
    del report["schema"]
    report["format"] = "nsysaudit.analysis/1"
    (out / "report.json").write_bytes(indented(report))
    meta = json.loads((out / "metadata.json").read_text())
    meta["report"]["format"] = "nsysaudit.analysis/1"
    (out / "metadata.json").write_bytes(indented(meta))
    (out / "manifest-sha256.txt").write_bytes(manifest_text({n: sha(out / n) for n in payload("analyze")}))
    reseal_tags(out)
    return out


def test_a_folder_sealed_before_the_schema_key_verifies_and_its_rerun_is_refused_in_one_line(
    capsys, tmp_path: Path
) -> None:
    old = sealed_before_the_schema_key(tmp_path)
    code, out, err = run(capsys, "verify", old, "--seal", sha(old / "tagmanifest-sha256.txt"))
    assert (code, err) == (0, ""), err  # its seal still verifies
    code, out, err = run(capsys, "verify", old, "--inputs", TORCH / "observe.sqlite")
    assert (code, out) == (1, "")
    assert err == (
        f"nsysaudit: error: {old}: its report.json is nsysaudit.analysis/1 (made before report.json named its "
        "schema); this nsysaudit writes nsysaudit.analysis/2, so re-running it cannot give the same bytes: verify "
        "without --inputs checks its seal, and the command recorded in metadata.json makes it again\n"
    )
