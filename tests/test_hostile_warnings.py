"""Partly broken input: the analysis runs and every problem is a warning. A damaged row (a dangling
name id, NULL in a NOT NULL column, a reversed range, a shared correlation id), a damaged library
range, an unknown NVTX domain, a value of the wrong type, invalid UTF-8, a shadow version of a table:
each is counted and said, the findings it cannot touch stay, and the verdict turns inconclusive
only where the damage could hide a finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builder import strip_not_null
from conftest import run, warning_counts
from scenarios import RUNTIME, SECOND, WORKER, damage, observe_nested_failure, two_workers

# --- a damaged row, a damaged library range ------------------------------------------------------

DAMAGE_WARNING = {
    "dangling_name_id": ("dangling_name_id", 1),
    "null_start": ("null_in_not_null_column", 1),
    "null_end": ("null_in_not_null_column", 1),
    "null_return": ("null_in_not_null_column", 1),
    "null_name_id": ("null_in_not_null_column", 1),
    "null_global_tid": ("null_global_tid", 1),
    "reversed": ("reversed_time_range", 1),
    "duplicate_correlation": ("duplicate_correlation_id", 2),
}


def analyze_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code, out, err = run(capsys, "analyze", "--json", str(path))
    assert code == 0, err
    code_text, text, err_text = run(capsys, "analyze", str(path))  # the terminal report runs too
    assert code_text == 0 and "\nWarnings:\n" in text, err_text
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_two_workers_scenario_is_clean(capsys, make_export) -> None:
    doc = json.loads(run(capsys, "analyze", "--json", str(make_export(two_workers(failure_on_first=False))))[1])
    assert doc["warnings"] == []
    assert [(f["correlation_id"], f["tid"]) for f in doc["findings"]] == [(42, SECOND)]


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damaged_failed_call_is_a_warning_and_unaffected_findings_stay(capsys, make_export, kind: str) -> None:
    """The damaged row is the second worker's failed cudaMalloc; the first worker's finding stays."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = damage(kind, 42)
    doc = analyze_json(capsys, make_export(spec))
    warning, count = DAMAGE_WARNING[kind]
    assert warning_counts(doc)[warning] == count
    first = [f for f in doc["findings"] if f["tid"] == WORKER]
    assert [(f["kind"], f["correlation_id"], f["return_code"]) for f in first] == [("nested_alloc_failure", 22, 2)]
    assert doc["verdict"] == "failure_found"
    assert doc["census"]["cuda_api_calls"] == 9  # every row counts, damaged or not


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damage_that_could_hide_a_finding_makes_the_verdict_inconclusive(capsys, make_export, kind: str) -> None:
    spec = two_workers(failure_on_first=False)
    spec.raw_sql = damage(kind, 42)
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts[DAMAGE_WARNING[kind][0]] == DAMAGE_WARNING[kind][1]
    if kind == "duplicate_correlation":
        # Still decidable by time, name and return: found, but its bytes cannot be attributed.
        [finding] = doc["findings"]
        assert (finding["kind"], finding["correlation_id"], finding["requested_bytes"]) == (
            "nested_alloc_failure", 40, None)
        second = next(lc for lc in doc["library_calls"] if lc["tid"] == SECOND)
        assert [c["bytes"] for c in second["children"]] == [None, None, None]
        assert doc["verdict"] == "failure_found"
        return
    assert doc["findings"] == []
    assert counts["undecided_calls"] == 1
    assert doc["verdict"] == "inconclusive", doc["verdict_reasons"]
    assert "could be a failed allocation inside a library call" in doc["verdict_reasons"][0]


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damage_that_cannot_hide_a_finding_keeps_the_verdict(capsys, make_export, kind: str) -> None:
    """The damaged row is a successful kernel launch: warned about, but it cannot be a failed allocation."""
    spec = two_workers(failure_on_first=False)
    spec.calls = [c for c in spec.calls if c.corr != 42]
    spec.raw_sql = damage(kind, 41)
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts[DAMAGE_WARNING[kind][0]] == DAMAGE_WARNING[kind][1]
    assert "undecided_calls" not in counts
    assert doc["verdict"] == "no_failure", doc["verdict_reasons"]


def test_census_counts_damaged_rows_as_the_warnings_say(capsys, make_export) -> None:
    """NULL returnValue: in cuda_api_calls, not in nonzero_returns (unknown is not a failure).
    NULL start: still a call with a return code, counted in by_return; never joined."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        strip_not_null(RUNTIME),
        f"UPDATE {RUNTIME} SET returnValue = NULL WHERE correlationId = 22",
        f"UPDATE {RUNTIME} SET start = NULL WHERE correlationId = 42",
    ]
    doc = analyze_json(capsys, make_export(spec))
    assert doc["census"]["cuda_api_calls"] == 9
    assert doc["census"]["nonzero_returns"] == 1
    assert [(r["api"], r["return_code"], r["count"]) for r in doc["census"]["by_return"]] == [
        ("cudaMalloc_v3020", 2, 1)
    ]
    messages = " ".join(w["message"] for w in doc["warnings"])
    assert "not in by_return" in messages and "excluded from" in messages
    assert doc["findings"] == [] and doc["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    "sql,warning,reason",
    [
        (["UPDATE NVTX_EVENTS SET start = 44000 WHERE start = 39000"],
         "reversed_library_range", "library_call_reversed"),
        ([strip_not_null("NVTX_EVENTS"), 'UPDATE NVTX_EVENTS SET "end" = NULL WHERE start = 39000'],
         "library_call_without_end", "library_call_has_no_end"),
        ([strip_not_null("NVTX_EVENTS"), "UPDATE NVTX_EVENTS SET start = NULL WHERE start = 39000"],
         "library_call_without_start", "library_call_has_no_start"),
        (["UPDATE NVTX_EVENTS SET textId = 9999 WHERE start = 39000"], "dangling_library_name", None),
    ],
    ids=["reversed", "no-end", "no-start", "dangling-name"],
)
def test_damaged_library_range(capsys, make_export, sql: list[str], warning: str, reason: str | None) -> None:
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = sql
    doc = analyze_json(capsys, make_export(spec))
    assert warning_counts(doc)[warning] == 1
    second = next(lc for lc in doc["library_calls"] if lc["tid"] == SECOND)
    assert second["children"] == [] or reason is None  # a damaged range is never joined
    assert second["censored_reason"] == reason
    assert second["coverage"] == ("censored" if reason else "complete")
    # The first worker's finding is unaffected.
    assert [f["correlation_id"] for f in doc["findings"] if f["tid"] == WORKER] == [22]


def test_unknown_nvtx_domain_could_hide_library_calls(capsys, make_export) -> None:
    spec = two_workers(failure_on_first=False)
    spec.raw_sql = ["UPDATE NVTX_EVENTS SET text = NULL WHERE eventType = 75"]  # the cuBLAS domain loses its name
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts["unknown_nvtx_domain"] == 2
    assert doc["library_calls"] == [] and doc["verdict"] == "inconclusive"


def test_failed_allocation_never_gets_another_calls_bytes(capsys, make_export) -> None:
    """An allocation event carrying a failed call's correlation id belongs to another call."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET correlationId = 22 WHERE correlationId = 21",
    ]
    doc = analyze_json(capsys, make_export(spec))
    first = next(f for f in doc["findings"] if f["correlation_id"] == 22)
    assert first["requested_bytes"] is None
    assert warning_counts(doc)["allocation_event_for_failed_call"] == 1


def test_wrong_typed_values_are_warnings_not_crashes(capsys, make_export) -> None:
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        f"UPDATE {RUNTIME} SET start = 'soon', \"end\" = x'00ff' WHERE correlationId = 41",
        f"UPDATE {RUNTIME} SET returnValue = 2.5 WHERE correlationId = 40",
    ]
    doc = analyze_json(capsys, make_export(spec))
    assert warning_counts(doc)["type_mismatch"] == 2
    assert [f["correlation_id"] for f in doc["findings"] if f["tid"] == WORKER] == [22]


# --- invalid UTF-8 -------------------------------------------------------------------------------


def test_invalid_utf8_text_is_a_warning_not_an_unusable_export(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = ["UPDATE StringIds SET value = CAST(x'627764ff776f726b6572' AS TEXT) WHERE value = 'bwd_worker_0'"]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"][0]["thread_name"] == "bwd\ufffdworker"
    assert warning_counts(doc)["invalid_utf8_text"] >= 1
    assert doc["verdict"] == "failure_found"


def test_invalid_utf8_in_an_integer_column(capsys, make_export) -> None:
    """ADBC hands such a column to polars as a broken string column (polars aborts the process on
    it): the scan refuses that batch and reads the table with the tolerant engine instead."""
    spec = observe_nested_failure()
    spec.raw_sql = [f"UPDATE {RUNTIME} SET start = CAST(x'ff' AS TEXT) WHERE correlationId = 30"]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert warning_counts(doc)["type_mismatch"] == 1
    assert [f["correlation_id"] for f in doc["findings"]] == [22]


# --- a shadow version of a table -----------------------------------------------------------------


@pytest.mark.parametrize(
    "shadows,read",
    [
        (["CUPTI_ACTIVITY_KIND_RUNTIME_V2"], "CUPTI_ACTIVITY_KIND_RUNTIME_V2"),
        (["CUPTI_ACTIVITY_KIND_RUNTIME_V2", "CUPTI_ACTIVITY_KIND_RUNTIME_V10"], "CUPTI_ACTIVITY_KIND_RUNTIME_V10"),
    ],
    ids=["base-and-v2", "three-versions"],
)
def test_a_shadow_version_of_a_table_is_never_read_silently(
    capsys, make_export, shadows: list[str], read: str
) -> None:
    """A copy of the CUDA API table without the failed call, named as a newer version of it."""
    spec = observe_nested_failure()
    spec.raw_sql = [f"CREATE TABLE {t} AS SELECT * FROM {RUNTIME} WHERE returnValue = 0" for t in shadows]
    doc = analyze_json(capsys, make_export(spec))
    assert doc["input"]["tables"]["cuda_api"] == read
    [warning] = [w for w in doc["warnings"] if w["kind"] == "ambiguous_table"]
    names = ", ".join([RUNTIME, *sorted(shadows, key=lambda t: int(t.rsplit("_V", 1)[1]))])
    assert warning == {
        "kind": "ambiguous_table",
        "count": 1 + len(shadows),
        "message": f"the export has {1 + len(shadows)} tables for {RUNTIME} ({names}): read {read}, the highest "
        "version; the others are not read",
    }
    # The shadow holds no failed call, so the analysis of it finds none: that is never no_failure.
    assert doc["findings"] == []
    assert doc["verdict"] == "inconclusive"
    assert any(r.startswith(f"several versions of {RUNTIME} exist") for r in doc["verdict_reasons"])


@pytest.mark.parametrize("digit", ["\uff12", "\u0662", "02"], ids=["fullwidth", "arabic-indic", "leading-zero"])
def test_only_ascii_version_numbers_name_a_table_variant(capsys, make_export, digit: str) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = [f'CREATE TABLE "{RUNTIME}_V{digit}" AS SELECT * FROM {RUNTIME} WHERE returnValue = 0']
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["input"]["tables"]["cuda_api"] == RUNTIME
    assert doc["verdict"] == "failure_found" and doc["warnings"] == []
