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


# The inputs table's columns in batch format 4's order, as readers of its Parquet and CSV files see them:
# INPUT_SCHEMA is made from InputRow (whose own order its JSON Schema keeps), so this pins the order.
INPUT_COLUMNS_V4 = [
    "path", "sha256", "kind", "size_bytes", "nsys_version", "schema_version", "exported_with", "verdict",
    "cuda_api_calls", "nonzero_returns", "failed_calls", "library_calls", "censored_library_calls",
    "censored_reasons", "findings", "nested_alloc_failures", "straddling_alloc_failures", "nested_call_failures",
    "captured_event_wait_failures", "library", "warnings", "error", "status", "devices", "devices_used", "rank",
    "rank_source", "ranks", "failing_ranks", "failing_rank_unknown", "failing_devices", "blocking_calls",
    "blocked_ns", "stalls", "stalled_ns", "snapshots", "censored_reasons_list", "library_list",
    "devices_used_list", "ranks_list", "failing_ranks_list", "failing_devices_list",
]


def test_the_inputs_table_keeps_its_column_order() -> None:
    assert list(INPUT_SCHEMA) == INPUT_COLUMNS_V4
    lists = {name for name, dtype in INPUT_SCHEMA.items() if dtype.is_nested()}
    assert lists == {name for name in INPUT_COLUMNS_V4 if name.endswith("_list")}


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
