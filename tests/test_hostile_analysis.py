"""Silent wrong answers: each crafted export is either analyzed right, warned about or refused, never
a wrong number without a word and never a traceback."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, MemoryEvent, strip_not_null
from conftest import H200_2025
from scenarios import PID, WORKER, MiB, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.cli import main


def analyze_json(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> dict[str, Any]:
    code = main(["analyze", "--json", str(path), *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    doc: dict[str, Any] = json.loads(out)
    return doc


def kinds(doc: dict[str, Any]) -> list[str]:
    return [w["kind"] for w in doc["warnings"]]


# --- a user column named rowid, shared correlation ids, unknown sizes, int64 ranges --------


@pytest.mark.parametrize(
    "script",
    [
        # NULL user "rowid" on the failed row: a scan by that column's range would skip it.
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN rowid INTEGER;"
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = 7; UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = NULL "
        "WHERE returnValue = 2",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN rowid TEXT;"
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = 'x'",
        # Every name of the integer key declared: no rowid reachable, the table is read whole.
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN rowid INTEGER;"
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN _rowid_ INTEGER;"
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN oid INTEGER",
    ],
    ids=["null-user-rowid", "text-user-rowid", "every-rowid-name-declared"],
)
def test_a_user_rowid_column_hides_no_row(capsys, make_export, script: str) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = [script]
    d = analyze_json(capsys, make_export(spec))
    assert d["census"]["cuda_api_calls"] == len(spec.calls)
    assert [(f["kind"], f["correlation_id"]) for f in d["findings"]] == [("nested_alloc_failure", 22)]


def test_a_without_rowid_runtime_table_is_read_whole(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = [
        """CREATE TABLE r2 (start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL,
           globalTid INTEGER, correlationId INTEGER NOT NULL, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
           callchainId INTEGER, PRIMARY KEY (correlationId, globalTid)) WITHOUT ROWID;
           INSERT INTO r2 SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME; DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;
           ALTER TABLE r2 RENAME TO CUPTI_ACTIVITY_KIND_RUNTIME;"""
    ]
    d = analyze_json(capsys, make_export(spec))
    assert d["census"]["cuda_api_calls"] == len(spec.calls)
    assert [f["correlation_id"] for f in d["findings"]] == [22]


def test_a_correlation_id_shared_with_an_unread_row_makes_the_bytes_unknown(capsys, make_export) -> None:
    spec = release_three_allocations()
    # A successful cudaFree far outside any library call (a row the analysis does not read) carries
    # correlation id 21, the id of the second nested cudaMalloc: the event may be either call's.
    spec.calls.append(Call("cudaFree_v3020", 40_000, 40_100, PID, PID, corr=21))
    d = analyze_json(capsys, make_export(spec))
    assert "allocation_correlation_shared" in kinds(d)
    [lib] = d["library_calls"]
    assert {c["correlation_id"]: c["bytes"] for c in lib["children"]} == {20: 4 * MiB, 21: None, 22: 8 * MiB}
    assert lib["allocated_bytes"] is None and lib["allocations_size_unknown"] == 1
    assert lib["allocated_bytes_traced"] == 12 * MiB


@pytest.mark.parametrize(
    ("change", "warning"),
    [
        ({"omit_tables": {"CUDA_GPU_MEMORY_USAGE_EVENTS"}}, "no_memory_events"),
        ({"raw_sql": ["ALTER TABLE CUDA_GPU_MEMORY_USAGE_EVENTS DROP COLUMN correlationId"]}, "no_memory_events"),
        ({"raw_sql": [strip_not_null("CUDA_GPU_MEMORY_USAGE_EVENTS"),
                      "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET bytes = NULL WHERE correlationId = 21"]},
         "allocation_size_unknown"),
        ({"raw_sql": ["UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET bytes = 'big' WHERE correlationId = 21"]},
         "allocation_size_unknown"),
    ],
    ids=["no-memory-table", "no-correlation-column", "null-bytes", "text-bytes"],
)
def test_unknown_sizes_make_allocated_bytes_unknown_never_zero_or_partial(
    capsys, make_export, change: dict[str, Any], warning: str
) -> None:
    spec = release_three_allocations()
    for key, value in change.items():
        setattr(spec, key, value)
    d = analyze_json(capsys, make_export(spec))
    [lib] = d["library_calls"]
    assert lib["coverage"] == "complete"
    assert lib["allocated_bytes"] is None
    assert warning in kinds(d)


def test_a_censored_call_has_unknown_allocated_bytes_and_the_traced_sum_beside_it(capsys, make_export) -> None:
    spec = release_three_allocations()
    spec.calls = [c for c in spec.calls if c.start < 13_000]  # the trace stops inside cublasCreate_v2
    [lib] = analyze_json(capsys, make_export(spec))["library_calls"]
    assert lib["coverage"] == "censored"
    assert (lib["allocated_bytes"], lib["allocated_bytes_traced"]) == (None, 14 * MiB)


def test_a_range_spanning_the_int64_range_has_no_wrapped_duration(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.lib_calls.append(LibCall("cublasLtCreate", 0, 10, PID, WORKER))
    spec.raw_sql = ['UPDATE NVTX_EVENTS SET start = -9223372036854775808, "end" = 9223372036854775807 '
                    'WHERE start = 0 AND "end" = 10']
    d = analyze_json(capsys, make_export(spec))
    wide = next(lc for lc in d["library_calls"] if lc["api"] == "cublasLtCreate")
    assert wide["duration_ns"] is None
    assert "duration_overflow" in kinds(d)
    [f] = d["findings"]
    # The innermost enclosing call is the 4 us cublasCreate_v2, not the range of 2^64 ns.
    assert f["enclosing"]["api"] == "cublasCreate_v2"
    assert [e["api"] for e in f["enclosing_chain"]] == ["cublasCreate_v2", "cublasLtCreate"]


# --- failed rows whose end is before their start, against many library calls ------------------


def test_reversed_failed_rows_are_decided_without_forming_pairs(capsys, make_export) -> None:
    n = 400
    calls = [Call("cudaMalloc_v3020", 100_000 + 10 * i, 100_000 + 10 * i, PID, WORKER, ret=2, corr=i + 1)
             for i in range(n)]
    libs = [LibCall("cublasCreate_v2", 100 * i, 100 * i + 2_000_000, PID, WORKER) for i in range(n)]
    spec = Export(calls=calls, lib_calls=libs, raw_sql=['UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 5'])
    d = analyze_json(capsys, make_export(spec), "--max-pairs", "10")
    [undecided] = [w for w in d["warnings"] if w["kind"] == "undecided_calls"]
    assert undecided["count"] == n and "time_unknown" in undecided["message"]
    assert d["verdict"] == "inconclusive"


# --- wrong-typed values are NULL with a warning, never converted, never a traceback -----------


@pytest.mark.parametrize(
    ("table", "script", "check"),
    [
        ("CUBLAS_EVENTS", "UPDATE CUBLAS_EVENTS SET start = 'x'", "library_call_without_start"),
        ("ThreadNames", "UPDATE ThreadNames SET globalTid = 'x'", None),
        ("TARGET_INFO_SESSION_START_TIME", "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'x'", None),
        ("NVTX_EVENTS", "UPDATE NVTX_EVENTS SET start = 9000.5 WHERE domainId = 1 AND eventType = 59",
         "library_call_without_start"),
        ("PROCESSES", "UPDATE PROCESSES SET pid = 18446744073709551616", None),
    ],
)
def test_a_value_of_the_wrong_type_is_null_and_warned(capsys, make_export, table: str, script: str, check) -> None:
    spec = observe_nested_failure()
    if table == "CUBLAS_EVENTS":
        spec.lib_calls = [LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER, source="table")]
    spec.raw_sql = [script]
    d = analyze_json(capsys, make_export(spec))
    [w] = [w for w in d["warnings"] if w["kind"] == "type_mismatch"]
    assert w["message"].startswith(f"{table}:") and "never converted" in w["message"]
    if check is not None:
        assert check in kinds(d)
        assert d["verdict"] == "inconclusive"  # the damaged library call is censored, not "fixed"
    if table == "TARGET_INFO_SESSION_START_TIME":
        assert d["input"]["session_start_utc_ns"] is None


def test_compare_with_a_library_call_without_start_is_sealed(tmp_path: Path, make_export) -> None:
    spec = observe_nested_failure()
    spec.lib_calls.append(LibCall("cublasLtCreate", 9_500, 12_900, PID, WORKER))
    spec.raw_sql = [strip_not_null("NVTX_EVENTS"), "UPDATE NVTX_EVENTS SET start = NULL WHERE start = 9500"]
    observe = make_export(spec, "observe.sqlite")
    release = make_export(release_three_allocations(), "release.sqlite")
    sealed = nsysaudit.seal_compare(observe, release, tmp_path / "cmp")
    arm = sealed.document["arms"]["observe"]
    assert [lc["start_ns"] for lc in arm["library_calls"]][-1] is None  # sorted last, not compared
    assert any(c["reason"] == "library_call_has_no_start" for c in arm["coverage"]["censored"])


def test_duplicate_correlations_equal_a_count_of_every_key() -> None:
    """Correlation ids shared in a process: exactly the (process, id) keys several rows carry."""
    import random
    from collections import Counter

    from nsysaudit.analysis.integrity import duplicate_correlations

    rng = random.Random(3)
    n = 5_000
    gtids = [rng.choice([None, (1 << 24) | 7, (1 << 24) | 8, (2 << 24) | 7, -(3 << 24)]) for _ in range(n)]
    corrs = [rng.choice([None, *range(3_000)]) for _ in range(n)]
    rows = pl.DataFrame({"gtid": gtids, "correlation_id": corrs}, schema={"gtid": pl.Int64, "correlation_id": pl.Int64})
    keys = Counter((g - g % (1 << 24), c) for g, c in zip(gtids, corrs, strict=True) if g is not None and c is not None)
    expected = sorted((g, c, k) for (g, c), k in keys.items() if k > 1)
    got = duplicate_correlations(rows)
    assert got.rows() == expected
    assert len(expected) > 100 and max(k for _, _, k in expected) >= 3  # not vacuous: pairs and longer runs


# --- the same table in another case, views, column names in another case, versions, ids ----

TORCH_OBSERVE = H200_2025 / "torch" / "observe.sqlite"
FAILED_CORRELATION = 2433  # the cudaMalloc that fails inside cublasCreate_v2 (README)


def mutated(tmp_path: Path, script: str, source: Path = TORCH_OBSERVE) -> Path:
    """A copy of a real export changed by ``script`` (the copy only: the fixture stays as it is)."""
    target = tmp_path / f"mutated-{source.name}"
    shutil.copyfile(source, target)
    target.chmod(0o644)
    con = sqlite3.connect(target)
    con.executescript(script)
    con.commit()
    con.close()
    return target


def error_line(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code = main(["analyze", "--json", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("shadow", "read"),
    [
        # the copy nsys "wrote last" lacks the failed call; the original keeps it
        ("cupti_activity_kind_runtime_v3", "cupti_activity_kind_runtime_v3"),
        ("Cupti_Activity_Kind_Runtime_V2", "Cupti_Activity_Kind_Runtime_V2"),
    ],
)
def test_a_case_variant_versioned_table_is_one_name_to_sqlite_and_ambiguous(
    capsys, tmp_path: Path, shadow: str, read: str
) -> None:
    path = mutated(
        tmp_path,
        f"CREATE TABLE {shadow} AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
        f"DELETE FROM {shadow} WHERE correlationId = {FAILED_CORRELATION};",
    )
    d = analyze_json(capsys, path)
    assert d["input"]["tables"]["cuda_api"] == read
    [w] = [w for w in d["warnings"] if w["kind"] == "ambiguous_table"]
    assert w["message"].startswith(
        f"the export has 2 tables for CUPTI_ACTIVITY_KIND_RUNTIME (CUPTI_ACTIVITY_KIND_RUNTIME, {shadow}): read {read}"
    )
    assert d["findings"] == [] and d["verdict"] == "inconclusive"
    assert any("several versions of CUPTI_ACTIVITY_KIND_RUNTIME" in r for r in d["verdict_reasons"])


def test_a_table_in_another_case_is_the_table(capsys, tmp_path: Path) -> None:
    path = mutated(tmp_path, "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME TO t;"
                             "ALTER TABLE t RENAME TO cupti_activity_kind_runtime")
    d = analyze_json(capsys, path)
    assert d["input"]["tables"]["cuda_api"] == "cupti_activity_kind_runtime"
    assert "ambiguous_table" not in kinds(d)
    assert [(f["kind"], f["correlation_id"]) for f in d["findings"]] == [("nested_alloc_failure", FAILED_CORRELATION)]


@pytest.mark.parametrize(
    "script",
    [
        # the failed call selected away by a view in the table's place
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME TO r;"
        "CREATE VIEW CUPTI_ACTIVITY_KIND_RUNTIME AS SELECT * FROM r WHERE returnValue = 0",
        # ... or beside it as a higher version
        "CREATE VIEW CUPTI_ACTIVITY_KIND_RUNTIME_V2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE returnValue = 0",
    ],
    ids=["in-its-place", "as-a-higher-version"],
)
def test_a_view_in_place_of_a_cuda_table_is_refused_not_read_as_no_table(capsys, tmp_path: Path, script: str) -> None:
    path = mutated(tmp_path, script)
    err = error_line(capsys, path)
    view = "CUPTI_ACTIVITY_KIND_RUNTIME_V2" if "_V2" in script else "CUPTI_ACTIVITY_KIND_RUNTIME"
    assert err.startswith(f"nsysaudit: error: {path}: {view} is a view, not a table: nsys writes its tables as tables")


def test_a_view_of_strings_or_metadata_is_refused(capsys, tmp_path: Path) -> None:
    for table in ("StringIds", "META_DATA_EXPORT"):
        path = mutated(tmp_path, f"ALTER TABLE {table} RENAME TO t; CREATE VIEW {table} AS SELECT * FROM t")
        assert f"{table} is a view, not a table" in error_line(capsys, path)


def test_upper_case_column_names_are_the_columns_sqlite_reads(capsys, make_export) -> None:
    spec = observe_nested_failure()
    columns = ("start", "end", "globalTid", "nameId", "returnValue", "correlationId")
    spec.raw_sql = [
        "".join(f'ALTER TABLE {t} RENAME COLUMN "{c}" TO "{c.upper()}";' for t in ("CUPTI_ACTIVITY_KIND_RUNTIME",)
                for c in columns)
        + 'ALTER TABLE NVTX_EVENTS RENAME COLUMN "end" TO "END"; ALTER TABLE StringIds RENAME COLUMN value TO VALUE;'
    ]
    d = analyze_json(capsys, make_export(spec))
    plain = analyze_json(capsys, make_export(observe_nested_failure()))
    assert d["census"] == plain["census"] and d["verdict"] == "failure_found"
    assert d["findings"] == plain["findings"]
    assert [c["bytes"] for c in d["library_calls"][0]["children"]] == [4 * MiB, 2 * MiB, None]


@pytest.mark.parametrize(
    ("version", "major", "expected"),
    [
        ("99.0.0", "3", ["inconsistent_schema_version", "unknown_schema_major"]),
        ("x.y.z", "3", ["unknown_schema_version"]),
        ("3.20.3", "x", ["unknown_schema_version"]),
        ("3.20.3", "3", []),
    ],
)
def test_a_schema_version_nsysaudit_does_not_know_is_warned(
    capsys, tmp_path: Path, version: str, major: str, expected: list[str]
) -> None:
    path = mutated(
        tmp_path,
        f"UPDATE META_DATA_EXPORT SET value = '{version}' WHERE name = 'EXPORT_SCHEMA_VERSION';"
        f"UPDATE META_DATA_EXPORT SET value = '{major}' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR';",
    )
    d = analyze_json(capsys, path)
    assert [k for k in kinds(d) if "schema" in k] == expected
    assert d["input"]["schema_version"] == version and d["verdict"] == "failure_found"


def test_a_string_id_held_by_two_rows_is_refused_not_counted_twice(capsys, tmp_path: Path) -> None:
    # StringIds rebuilt without its PRIMARY KEY, the failing API's id given a second name: every
    # join by id would count each failed cudaMalloc under both names (56 failures from 28 rows).
    path = mutated(
        tmp_path,
        "CREATE TABLE s (id INTEGER NOT NULL, value TEXT NOT NULL); INSERT INTO s SELECT * FROM StringIds;"
        "INSERT INTO s SELECT id, 'cudaFree_v3020' FROM StringIds WHERE value = 'cudaMalloc_v3020';"
        "DROP TABLE StringIds; ALTER TABLE s RENAME TO StringIds;",
    )
    err = error_line(capsys, path)
    assert err == (f"nsysaudit: error: {path}: StringIds: 1 id(s) held by more than one row (2 rows): each names two "
                   "strings at once, so no call's name can be trusted (nsys writes every id once); not a usable "
                   "export\n")


def test_string_ids_without_a_primary_key_but_unique_are_read(capsys, tmp_path: Path) -> None:
    path = mutated(
        tmp_path,
        "CREATE TABLE s (id INTEGER NOT NULL, value TEXT NOT NULL); INSERT INTO s SELECT * FROM StringIds;"
        "DROP TABLE StringIds; ALTER TABLE s RENAME TO StringIds;",
    )
    d = analyze_json(capsys, path)
    assert d["census"]["failed_calls"] == 28 and d["verdict"] == "failure_found"


# --- a damaged timestamp is never evidence of absence --------------------------------

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.mark.pure_skip
@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize(
    ("column", "value", "said"),
    [("start", INT64_MIN, "before the capture began (0 ns)"),
     # The end half (issue 34): 2^63-1, long after the capture stopped (nsys's "Profiling has stopped."),
     # straddled cublasCreate_v2 and gave no_failure with no warning.
     ("end", INT64_MAX, "after it stopped (5,617,749,898 ns)")],
    ids=["start", "end"],
)
def test_a_damaged_time_on_the_failed_call_is_inconclusive_not_no_failure(
    capsys, monkeypatch, tmp_path: Path, native: str, column: str, value: int, said: str
) -> None:
    monkeypatch.setenv("NSYSAUDIT_NATIVE", native)
    path = mutated(
        tmp_path,
        f'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "{column}" = {value} WHERE correlationId = {FAILED_CORRELATION}',
    )
    d = analyze_json(capsys, path)
    assert d["verdict"] == "inconclusive" and d["findings"] == []
    assert all(c["correlation_id"] != FAILED_CORRELATION for lc in d["library_calls"] for c in lc["children"])
    assert all(c["correlation_id"] != FAILED_CORRELATION for lc in d["library_calls"] for c in lc["straddling"])
    [damaged] = [w for w in d["warnings"] if w["kind"] == "damaged_time_range"]
    assert damaged["count"] == 1 and said in damaged["message"]
    [undecided] = [w for w in d["warnings"] if w["kind"] == "undecided_calls"]
    assert undecided["count"] == 1 and "[time_damaged]" in undecided["message"]
    assert d["verdict_reasons"][0].startswith("1 CUDA API row(s) could be a failed allocation inside a library call")
    assert d["census"]["failed_calls"] == 28  # still counted
    [outside] = [w for w in d["warnings"] if w["kind"] == "time_outside_capture"]
    assert outside["count"] == 1 and outside["message"].startswith("CUPTI_ACTIVITY_KIND_RUNTIME")
    # The process's first and last CUDA API records are read from the rows inside the capture: a
    # damaged time is never evidence that the trace went on.
    [span] = [s for s in d["coverage"]["by_source"] if s["source"] == "cuda_api"]
    assert (span["first_ns"], span["last_ns"], span["rows"]) == (
        4_338_805_031, 4_900_049_660 if column == "end" else 4_900_347_005, 1_229)


@pytest.mark.parametrize(
    ("start", "end", "analysis_duration"),
    [
        (-1, 12_400, 50_000),  # starts before the capture (ANALYSIS_DETAILS: it starts at 0)
        (INT64_MIN, 12_400, None),  # capture start unknown: end - start overflows int64
        (-5, -2, 50_000),  # wholly before the capture: its end says nothing either
    ],
    ids=["start-before-capture", "duration-overflows", "wholly-before-capture"],
)
def test_a_damaged_failed_allocation_is_undecided(
    capsys, make_export, start: int, end: int, analysis_duration: int | None
) -> None:
    spec = observe_nested_failure()
    spec.analysis_duration = analysis_duration
    spec.raw_sql = [f'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {start}, "end" = {end} WHERE correlationId = 22']
    d = analyze_json(capsys, make_export(spec))
    assert d["verdict"] == "inconclusive" and d["findings"] == []
    assert [c["correlation_id"] for c in d["library_calls"][0]["children"]] == [20, 21]
    assert "damaged_time_range" in kinds(d)
    [undecided] = [w for w in d["warnings"] if w["kind"] == "undecided_calls"]
    assert "[time_damaged]" in undecided["message"]


def test_a_start_at_the_capture_start_is_not_damaged(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.analysis_duration = 50_000
    spec.lib_calls[0].start = 0
    spec.raw_sql = ['UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 0 WHERE correlationId = 22']
    d = analyze_json(capsys, make_export(spec))
    assert [f["correlation_id"] for f in d["findings"]] == [22] and "damaged_time_range" not in kinds(d)


# --- any timestamp outside the capture's own bounds is damage, whichever column holds it ------------


def test_a_damaged_end_is_no_evidence_that_the_trace_went_on(capsys, make_export) -> None:
    # cublasCreate_v2's last CUDA API record (corr 22) ends inside it; a damaged end on the process's
    # last call (past the capture's stop) made every library call look covered.
    spec = observe_nested_failure()
    spec.calls = [c for c in spec.calls if c.corr != 30]
    spec.calls.append(Call("cudaFree_v3020", 12_500, 12_600, PID, WORKER, corr=30))
    spec.analysis_duration = 50_000
    spec.raw_sql = [f'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = {INT64_MAX} WHERE correlationId = 10']
    d = analyze_json(capsys, make_export(spec))
    [lc] = d["library_calls"]
    assert lc["coverage"] == "censored" and lc["censored_reason"] == "cuda_api_trace_ends_inside"
    [outside] = [w for w in d["warnings"] if w["kind"] == "time_outside_capture"]
    assert outside["count"] == 1 and "0 .. 50,000 ns" in outside["message"]


def test_a_library_call_ending_after_the_capture_stopped_is_damaged_and_never_joined(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.analysis_duration = 50_000
    spec.lib_calls[0].end = 60_000  # nsys clamps a range open at the stop to the stop: never past it
    d = analyze_json(capsys, make_export(spec))
    [lc] = d["library_calls"]
    assert lc["censored_reasons"][0] == "library_call_outside_capture" and lc["coverage"] == "censored"
    assert "capture_ended_inside" not in lc["censored_reasons"]
    assert lc["children"] == [] and d["findings"] == [] and d["verdict"] == "inconclusive"
    assert "time_outside_capture" in kinds(d)
    # At the stop exactly, it is the capture that ended inside it, as before.
    spec.lib_calls[0].end = 50_000
    d = analyze_json(capsys, make_export(spec, "at-stop.sqlite"))
    assert d["library_calls"][0]["censored_reasons"][0] == "capture_ended_inside" and d["findings"]
    assert "time_outside_capture" not in kinds(d)


def test_a_memory_event_outside_the_capture_has_an_unknown_start(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.analysis_duration = 50_000
    spec.gpus = [(0, "NVIDIA H200", 1 << 30)]
    d = analyze_json(capsys, make_export(spec, "plain.sqlite"))
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    assert point["devices"][0]["device_resident_live_bytes"] == 262 * MiB
    # The 256 MiB allocation (corr 10) dated after the stop: its time is unknown, so it is held at no moment
    # (an allocation of unknown time never lowers the bound), and a warning says so.
    spec.raw_sql = ["UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET start = 60000 WHERE correlationId = 10"]
    d = analyze_json(capsys, make_export(spec))
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    assert point["devices"][0]["device_resident_live_bytes"] == 6 * MiB
    [outside] = [w for w in d["warnings"] if w["kind"] == "time_outside_capture"]
    assert outside["count"] == 1 and outside["message"].startswith("CUDA_GPU_MEMORY_USAGE_EVENTS")
    [span] = [s for s in d["coverage"]["by_source"] if s["source"] == "memory_events"]
    assert span["last_ns"] == 11_001  # corr 21's event (1 ns into its call), not the damaged start


def test_without_recorded_bounds_nothing_is_checked_against_them(capsys, make_export) -> None:
    spec = observe_nested_failure()  # no ANALYSIS_DETAILS row, no diagnostics: no bound recorded
    spec.lib_calls[0].end = 60_000
    spec.raw_sql = ["UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET start = 70000 WHERE correlationId = 10"]
    d = analyze_json(capsys, make_export(spec))
    assert d["coverage"]["capture"]["stop_ns"] is None and d["coverage"]["capture"]["stop_from"] is None
    assert "time_outside_capture" not in kinds(d) and "damaged_time_range" not in kinds(d)
    assert [f["correlation_id"] for f in d["findings"]] == [22]


def test_analysis_details_rows_that_disagree_leave_the_stop_unknown(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.analysis_duration = 50_000
    spec.raw_sql = ["INSERT INTO ANALYSIS_DETAILS SELECT globalVid, 40000, startTime, stopTime FROM ANALYSIS_DETAILS"]
    d = analyze_json(capsys, make_export(spec))
    assert d["coverage"]["capture"]["stop_ns"] is None
    [conflict] = [w for w in d["warnings"] if w["kind"] == "conflicting_rows"]
    assert conflict["message"].startswith("ANALYSIS_DETAILS: 2 rows that disagree")


# --- rows the rules assume unique: a conflict is a warning and an unknown, never a pick -----------------

from test_devices import RANK1, WORKER1, per_rank  # noqa: E402  (the two-GPU job's per-rank report)


def unique_base() -> Export:
    """Rank 1's own report (its RANK recorded, two devices, its cublasCreate_v2 failing on device 1),
    with the capture's bounds: every table a rule reads one row of has a row to duplicate."""
    spec = per_rank(1)
    spec.analysis_duration = 50_000
    spec.capture_meta = {"PROCESS_0:COMMAND": "python3"}
    return spec


def duplicate(table: str, where: str, column: str, value: str) -> str:
    """SQL adding a copy of ``table``'s first row matching ``where`` with ``column`` set to ``value``."""
    return (f"CREATE TEMP TABLE dup AS SELECT * FROM {table} WHERE {where} LIMIT 1; "
            f'UPDATE dup SET "{column}" = {value}; INSERT INTO {table} SELECT * FROM dup;')


def finding(d: dict[str, Any]) -> dict[str, Any]:
    [f] = d["findings"]
    return f


def device1(d: dict[str, Any]) -> dict[str, Any]:
    return next(x for x in d["devices"] if x["device_id"] == 1)


def bound_at_failure(d: dict[str, Any]) -> int | None:
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    [dev] = point["devices"]
    return dev["free_at_most_bytes"]


def rank1(d: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in d["processes"] if p["pid"] == RANK1)


# table -> (rows to copy, the column changed, what is unknown after, its value before)
UNIQUE_ROWS: dict[str, tuple[str, str, Any]] = {
    "TARGET_INFO_GPU": ("id = 1", "totalMemory", lambda d: (device1(d)["total_bytes"], bound_at_failure(d))),
    "PROCESSES": (f"pid = {RANK1}", "name", lambda d: rank1(d)["name"]),
    "ThreadNames": (f"globalTid % 16777216 = {WORKER1}", "nameId", lambda d: finding(d)["thread_name"]),
    "META_DATA_CAPTURE": ("value LIKE 'RANK=%'", "value", lambda d: rank1(d)["rank"]),
    "ANALYSIS_DETAILS": ("1", "duration", lambda d: d["coverage"]["capture"]["stop_ns"]),
    "TARGET_INFO_SESSION_START_TIME": ("1", "utcEpochNs", lambda d: d["input"]["session_start_utc_ns"]),
    "META_DATA_EXPORT": ("name = 'EXPORT_PRODUCT_VERSION'", "value", lambda d: d["input"]["nsys_version"]),
    "TARGET_INFO_CUDA_DEVICE": ("gpuId = 1", "cudaId",
                                lambda d: [e["cuda_device"] for e in rank1(d)["device_evidence"]]),
}
KNOWN = {  # what the base export says, each value read from one row
    "TARGET_INFO_GPU": (85_899_345_920, 85_899_345_920 - (79 * (1 << 30) + 512 * (1 << 20)) - 132_096 - 223_090),
    "PROCESSES": "python3", "ThreadNames": "pt_autograd_0", "META_DATA_CAPTURE": 1, "ANALYSIS_DETAILS": 50_000,
    "TARGET_INFO_SESSION_START_TIME": 1_796_064_718_689_501_058, "META_DATA_EXPORT": "2023.4.4.54",
    "TARGET_INFO_CUDA_DEVICE": [0],
}
UNKNOWN = {"TARGET_INFO_GPU": (None, None), "TARGET_INFO_CUDA_DEVICE": [None]}
CHANGED = {  # a value another row could hold, per changed column
    "totalMemory": "1234", "name": "'sleep'", "nameId": "(SELECT min(id) FROM StringIds)", "value": "value || '0'",
    "duration": "40000", "utcEpochNs": "utcEpochNs + 1", "cudaId": "cudaId + 5",
}


def unique_case(table: str, value: str | None) -> Export:
    """The base export with a row of ``table`` copied, ``value`` in its changed column (None: as it was)."""
    where, column, _ = UNIQUE_ROWS[table]
    spec = unique_base()
    spec.raw_sql = [duplicate(table, where, column, value if value is not None else f'"{column}"')]
    if table == "META_DATA_CAPTURE":  # its rows are (name, value): the copy of RANK="1" says RANK="10"
        spec.raw_sql = [duplicate(table, where, column, "'RANK=\"10\"'" if value is not None else "value")]
    return spec


@pytest.mark.parametrize("table", sorted(UNIQUE_ROWS))
def test_rows_that_disagree_where_nsys_writes_one_are_a_warning_and_unknown(
    capsys, make_export, table: str
) -> None:
    """The second row is never silently the answer (nor the first): the value is unknown, and a
    conflicting_rows warning names the table. A copy that agrees changes nothing."""
    _, column, read = UNIQUE_ROWS[table]
    d = analyze_json(capsys, make_export(unique_case(table, None), "same.sqlite"))
    assert read(d) == KNOWN[table] and "conflicting_rows" not in kinds(d), table
    d = analyze_json(capsys, make_export(unique_case(table, CHANGED[column])))
    assert read(d) == UNKNOWN.get(table), table
    said = [w for w in d["warnings"] if w["kind"] in ("conflicting_rows", "several_thread_names")]
    assert said and said[0]["message"].startswith(table), [w["message"] for w in d["warnings"]]
    assert finding(d)["kind"] == "nested_alloc_failure"  # the rest of the answer stands


def test_a_second_allocation_at_a_live_address_is_no_sum_and_no_bound(capsys, make_export) -> None:
    """An allocation event at an address already live in its process and device was summed (the
    torch capture's bound fell from 697,798,798 to 429,363,342 B without a word)."""
    spec = unique_base()
    d = analyze_json(capsys, make_export(spec, "plain.sqlite"))
    assert bound_at_failure(d) == KNOWN["TARGET_INFO_GPU"][1]
    spec.raw_sql = [duplicate("CUDA_GPU_MEMORY_USAGE_EVENTS", "correlationId = 10", "bytes", "bytes")]
    d = analyze_json(capsys, make_export(spec))
    assert bound_at_failure(d) is None
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    assert "already live" in point["devices"][0]["bound_unknown"]
    [said] = [w for w in d["warnings"] if w["kind"] == "conflicting_rows"]
    assert said["message"].startswith("CUDA_GPU_MEMORY_USAGE_EVENTS: allocation events at an address already live")
    # Freed twice, the address holds nothing again: after the second free the bound is claimed again.
    spec.raw_sql += [
        duplicate("CUDA_GPU_MEMORY_USAGE_EVENTS", "correlationId = 10", "memoryOperationType", "1")
        + "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET start = 14001 WHERE memoryOperationType = 1;",
        duplicate("CUDA_GPU_MEMORY_USAGE_EVENTS", "memoryOperationType = 1", "start", "14002"),
    ]
    ledger = nsysaudit.analyze(make_export(spec, "freed.sqlite")).analysis.ledger
    assert ledger is not None
    gpid = RANK1 << 24
    assert [ledger.at(t, gpid)[0]["free_at_most_bytes"] is None for t in (1_500, 12_000, 14_001, 14_002)] == [
        True, True, True, False]


def test_a_pool_with_more_in_use_than_its_size_says_so(capsys, make_export) -> None:
    """Pool utilization above the pool's size was shown without a word ("1.4 TiB of it in use")."""
    spec = unique_base()
    pool = 0x3020_0000
    spec.calls.append(Call("cudaMallocAsync_v11020", 4_900, 5_100, RANK1, RANK1, corr=50))
    spec.memory_events.append(  # the pool's size after it 2 MiB, and 1.4 TiB of it in use
        MemoryEvent(5_000, RANK1, 1 << 20, corr=50, mem_kind=2, address=pool + 64, device=1, pool_address=pool,
                    pool_threshold=-1, pool_size=2 << 20, pool_utilized=int((1 << 40) * 1.4)))
    d = analyze_json(capsys, make_export(spec))
    [said] = [w for w in d["warnings"] if w["kind"] == "conflicting_rows"]
    assert "more in use (1,539,316,278,886 B) than its size (2,097,152 B)" in said["message"]
    assert bound_at_failure(d) is None
    held = d["answer"]["findings"][0]["held"]
    assert "its use unknown: the events say 1.4 TiB, more than the pool" in held and "of it in use" not in held


def test_two_launched_commands_of_one_process_give_it_neither(capsys, make_export) -> None:
    spec = unique_base()
    spec.capture_meta = {"PROCESS_0:COMMAND": "python3", "PROCESS_1:COMMAND": "python3",
                         "PROCESS_1:ENVIRONMENT_VARIABLE": 'RANK="5"'}
    d = analyze_json(capsys, make_export(spec))
    assert [ln["global_pid"] for ln in d["launches"]] == [None, None]
    assert "which one it is, is unknown" in d["launches"][1]["process_rule"]
    assert rank1(d)["rank"] is None and rank1(d)["launched"] is None
    [said] = [w for w in d["warnings"] if w["kind"] == "conflicting_rows"]
    assert said["message"].startswith("META_DATA_CAPTURE: several launched commands")


@pytest.mark.parametrize(
    ("rows", "rank"),
    [(['RANK="7\n"'], None), (['RANK="1"', 'RANK="1"'], 1), (['RANK="1"', 'RANK="x"'], None),
     (['RANK="٣"'], None)],
    ids=["newline", "agreeing-copies", "a-value-beside-a-non-number", "non-ascii-digit"],
)
def test_a_rank_is_what_every_row_states_exactly(capsys, make_export, rows: list[str], rank: int | None) -> None:
    """RANK="7\\n" was rank 7 (a $ that matches before a newline); of two RANK rows the last won."""
    spec = unique_base()
    spec.environment = [e for e in spec.environment if not e.startswith("RANK=")] + rows
    d = analyze_json(capsys, make_export(spec))
    assert rank1(d)["rank"] == rank


def test_an_enum_that_says_two_things_is_refused(capsys, make_export) -> None:
    spec = unique_base()
    # nsys declares the id a primary key; a name given a second id is what a crafted copy can hold.
    spec.raw_sql = ["INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (99, 'NvtxPushPopRange', 'NvtxPushPopRange')"]
    code = main(["analyze", "--json", str(make_export(spec))])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "ENUM_NSYS_EVENT_TYPE: 'NvtxPushPopRange' is given several ids" in err


# The changed value of a copied row, by column: an SQL expression of an offset k (k = 0: the copy agrees).
def _changed(column: str, k: int) -> str:
    if column in ("name", "value"):
        return f"{column} || '{'#' * k}'" if k else column
    if column == "nameId":  # another string's id, or its own
        return f"(SELECT id FROM StringIds WHERE id != nameId ORDER BY id LIMIT 1 OFFSET {k - 1})" if k else column
    return f'"{column}" + {k}'


@pytest.mark.slow
def test_random_duplicated_rows_are_never_a_silent_pick(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Property: a random row of every table a rule reads one row of per key, copied with a random
    change (or none), gives the same answer when the copy agrees, and otherwise a warning naming the
    table and the value unknown (no bound); a second allocation event at a live address, whatever
    its size and start while the first is live, leaves the bound at the failure unknown."""
    from builder import build_export
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    folder = tmp_path_factory.mktemp("unique")
    count = iter(range(1_000_000))

    def analyzed(spec: Export) -> dict[str, Any]:
        return nsysaudit.analyze(build_export(spec, folder / f"{next(count)}.sqlite")).to_dict()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from([*sorted(UNIQUE_ROWS), "CUDA_GPU_MEMORY_USAGE_EVENTS"]), st.integers(0, 3),
           st.integers(0, 5_000), st.integers(-(1 << 20), 1 << 30))
    def check(table: str, k: int, shift: int, grow: int) -> None:
        spec = unique_base()
        if table == "CUDA_GPU_MEMORY_USAGE_EVENTS":  # corr 10's 79.5 GiB live from 1,001 ns on
            last = f"(SELECT max(rowid) FROM {table})"
            spec.raw_sql = [duplicate(table, "correlationId = 10", "bytes", f"bytes + {grow}")
                            + f"UPDATE {table} SET start = start + {shift} WHERE rowid = {last};"]
            d = analyzed(spec)
            assert bound_at_failure(d) is None and "conflicting_rows" in kinds(d)
            return
        where, column, read = UNIQUE_ROWS[table]
        value = _changed(column, k)
        if table == "META_DATA_CAPTURE":
            value = f"'RANK=\"{1 + k * 10}\"'"
        spec.raw_sql = [duplicate(table, where, column, value)]
        d = analyzed(spec)
        said = [w for w in d["warnings"] if w["kind"] in ("conflicting_rows", "several_thread_names")]
        if k == 0:
            assert read(d) == KNOWN[table] and not said
        else:
            assert read(d) == UNKNOWN.get(table) and said[0]["message"].startswith(table)
        assert d["findings"][0]["correlation_id"] == 22

    check()


@pytest.mark.parametrize("record_inside", [True, False], ids=["finding-when-sound", "no-finding-when-sound"])
def test_a_failed_wait_outside_the_capture_is_no_finding_and_undecided(
    capsys, make_export, record_inside: bool
) -> None:
    """A failed wait "after" a capture region is decided by its times: a damaged one decides nothing,
    either way (it was a captured_event_wait_failure, or no_failure)."""
    from test_evidence_rules import capture_scenario

    spec = capture_scenario(record_inside=record_inside)
    spec.analysis_duration = 20_000
    d = analyze_json(capsys, make_export(spec, "plain.sqlite"))
    assert d["verdict"] == ("failure_found" if record_inside else "no_failure")
    spec.raw_sql = [f'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = {INT64_MAX} WHERE correlationId = 77']
    d = analyze_json(capsys, make_export(spec))
    assert d["findings"] == [] and d["verdict"] == "inconclusive"
    assert "captured_event_wait_failure cannot be ruled out" in d["verdict_reasons"][0]
    assert {"damaged_time_range", "time_outside_capture", "undecided_calls"} <= set(kinds(d))
