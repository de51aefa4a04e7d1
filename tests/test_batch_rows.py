"""A batch's rows are typed: :class:`InputRow` and :class:`FindingRow` name exactly the columns of
the two tables, and the rows :func:`audit_one` gives (analyzed, failed, resumed) conform to them."""

from __future__ import annotations

from typing import get_type_hints

from nsysaudit.batch.output import FINDING_ROW_SCHEMA, INPUT_SCHEMA, FindingRow, InputRow
from nsysaudit.batch.run import AuditOptions, audit_one
from nsysaudit.reports.conformance import problems

TORCH = "tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite"


def test_the_row_types_name_the_tables_columns() -> None:
    assert set(get_type_hints(InputRow)) == set(INPUT_SCHEMA)
    assert list(get_type_hints(FindingRow)) == list(FINDING_ROW_SCHEMA)


def test_an_analyzed_input_gives_rows_of_those_types() -> None:
    outcome = audit_one(TORCH, AuditOptions())
    row = outcome["input"]
    assert row["status"] == "analyzed" and set(row) == set(INPUT_SCHEMA)
    assert problems(row, InputRow) == []
    assert outcome["findings"] and [problems(f, FindingRow) for f in outcome["findings"]] == [[]] * len(
        outcome["findings"]
    )


def test_a_failed_and_a_resumed_input_give_rows_of_that_type(tmp_path) -> None:
    failed = audit_one(str(tmp_path / "missing.sqlite"), AuditOptions())
    assert failed["input"]["status"] == "error" and problems(failed["input"], InputRow) == []
    first = audit_one(TORCH, AuditOptions())["input"]["sha256"]
    assert first is not None
    resumed = audit_one(TORCH, AuditOptions(), frozenset({first}))
    assert resumed["input"] == {"path": TORCH, "sha256": first, "status": "resumed"}
    assert problems(resumed["input"], InputRow) == [] and resumed["findings"] == []
