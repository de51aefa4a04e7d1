"""The documents' types are the JSON contract: every document the tool writes conforms to its type
(no undeclared key, no required key missing, every value of its type and vocabulary), docs/json.md's
key tables are generated from the types, and each vocabulary is the one the code uses."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import jsonschema
import pytest

import nsysaudit
from nsysaudit import render, schemas
from nsysaudit.analysis import coverage, findings, ledger
from nsysaudit.render import contract
from nsysaudit.reports import conformance, documents
from nsysaudit.reports.statements import CENSORED_WORDS

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXPORTS = sorted(FIXTURES.rglob("*.sqlite"))
TORCH = FIXTURES / "h200-cuda13-nsys2025.3" / "torch"


@functools.cache
def validators(kind: str) -> tuple[jsonschema.Draft202012Validator, ...]:
    """jsonschema's validators of the published schema of ``kind`` and of its closed form (no
    undeclared key), each schema checked against the metaschema once (0.5 s each time:
    ``jsonschema.validate`` checks it again for every document)."""
    out = []
    for schema in (schemas.schema(kind), schemas.generate(kind, closed=True)):
        jsonschema.Draft202012Validator.check_schema(schema)
        out.append(jsonschema.Draft202012Validator(schema))
    return tuple(out)


def validates(doc: object, kind: str) -> None:
    """``doc`` validates against the published schema of ``kind`` and against its closed form, with
    jsonschema."""
    for validator in validators(kind):
        validator.validate(doc)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_bundled_export_gives_an_analysis_document_of_its_type(path: Path) -> None:
    result = nsysaudit.analyze(path)
    doc = json.loads(json.dumps(result.to_dict()))
    assert conformance.problems(doc, documents.AnalysisDocument) == []
    printed = json.loads(render.analysis_json(result))  # the bytes analyze --json prints
    assert printed == doc and printed["schema"] == {"kind": "analysis", "version": documents.SCHEMA_VERSION}
    validates(printed, "analysis")


@pytest.mark.parametrize("golden", sorted((ROOT / "tests" / "golden" / "json").glob("*.json")), ids=lambda p: p.name)
def test_the_goldens_with_telemetry_conform(golden: Path) -> None:
    doc = json.loads(golden.read_text())
    assert "telemetry" in doc and "alignment" in doc  # the optional sections are checked too
    assert conformance.problems(doc, documents.AnalysisDocument) == []
    validates(doc, "analysis")


def test_sealed_analysis_and_comparison_conform(tmp_path: Path) -> None:
    sealed = nsysaudit.seal_analysis(TORCH / "observe.sqlite", tmp_path / "a",
                                     telemetry=TORCH / "observe.telemetry.jsonl")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report == json.loads(json.dumps(sealed.document))
    assert conformance.problems(report, documents.SealedAnalysisDocument) == []
    validates(report, "sealed-analysis")
    nsysaudit.seal_compare(TORCH / "observe.sqlite", TORCH / "release.sqlite", tmp_path / "c",
                           observe_telemetry=TORCH / "observe.telemetry.jsonl",
                           release_telemetry=TORCH / "release.telemetry.jsonl")
    comparison = json.loads((tmp_path / "c" / "report.json").read_text())
    assert conformance.problems(comparison, documents.ComparisonDocument) == []
    validates(comparison, "comparison")


def test_the_checker_finds_what_departs_from_a_type() -> None:
    doc = json.loads((ROOT / "tests" / "golden" / "json" / "torch-observe.json").read_text())
    doc["verdict"] = "maybe"
    doc["census"]["extra"] = 1
    del doc["limits"]["pairs"]
    doc["findings"][0]["pid"] = "683"
    doc["library_calls"][0]["coverage"] = "partial"
    assert conformance.problems(doc, documents.AnalysisDocument) == [
        "$.census.extra: not a key of Census",
        "$.findings[0].pid: '683' not an integer",
        "$.verdict: 'maybe' is not one of ('failure_found', 'inconclusive', 'no_failure')",
        "$.limits.pairs: missing (Limits)",
        "$.library_calls[0].coverage: 'partial' is not one of ('complete', 'censored')",
    ]


def test_docs_json_md_holds_the_contract_generated_from_the_types() -> None:
    text = (ROOT / "docs" / "json.md").read_text()
    m = re.search(re.escape(contract.CONTRACT_BEGIN) + r"\n(.*)\n" + re.escape(contract.CONTRACT_END), text, re.S)
    assert m, "docs/json.md lacks the generated contract"
    assert m.group(1) == contract.contract_text().rstrip(), (
        "docs/json.md drifted from nsysaudit/reports/documents.py: regenerate it with "
        "python -m nsysaudit.render.contract docs/json.md"
    )


def test_each_vocabulary_is_the_one_the_code_uses() -> None:
    words = documents.vocabularies()
    assert words["CensoredReason"] == coverage.REASONS
    assert set(CENSORED_WORDS) == set(coverage.REASONS)  # every reason has its words
    assert words["FindingKind"] == findings.FINDING_KINDS
    assert words["Mechanism"] == ledger.MECHANISMS
    assert words["Verdict"] == ("failure_found", "inconclusive", "no_failure")
