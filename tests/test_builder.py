"""Tests for the nsys-schema fixture builder (tests/builder.py)."""

from __future__ import annotations

import hashlib
import pathlib
import sqlite3

import pytest
from builder import (
    ENUM_ROWS,
    EVENT_CLASS_CUBLAS,
    EVENT_CLASS_CUDA_DRIVER,
    EVENT_CLASS_CUDA_RUNTIME,
    MEM_OPER_ALLOCATION,
    Call,
    Export,
    LibCall,
    Range,
    build_export,
    ddl_statements,
    global_pid,
    global_tid,
)
from hypothesis import given
from hypothesis import strategies as st

REAL = pathlib.Path(__file__).resolve().parent / "fixtures" / "h200-cuda13-nsys2023.4" / "observe.sqlite"
needs_real = pytest.mark.skipif(not REAL.exists(), reason="real H200 export not present")

MIB = 1 << 20
PID, MAIN, WORKER = 611, 611, 642


def observe_like() -> Export:
    """Main thread does cuInit; the worker's cublasCreate_v2 (NVTX form) contains two
    successful cudaMalloc calls and a failed one (ret=2, no memory event)."""
    return Export(
        calls=[
            Call("cuInit", 100, 200, pid=PID, tid=MAIN),
            Call("cudaMalloc_v3020", 1_100, 1_200, pid=PID, tid=WORKER, bytes=256 * MIB),
            Call("cudaMalloc_v3020", 1_300, 1_400, pid=PID, tid=WORKER, bytes=8 * MIB),
            Call("cudaMalloc_v3020", 1_500, 1_600, pid=PID, tid=WORKER, ret=2),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 1_000, 2_000, pid=PID, tid=WORKER)],
        ranges=[Range("backward", 900, 2_100, pid=PID, tid=WORKER)],
        thread_names={(PID, MAIN): "python3"},
        processes={PID: "python3"},
    )


def connect(path: pathlib.Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def count(conn: sqlite3.Connection, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@given(
    pid=st.integers(0, 0xFFFFFF), tid=st.integers(0, 0xFFFFFF), vm=st.integers(0, 0xFFFF)
)
def test_global_ids_decode(pid: int, tid: int, vm: int) -> None:
    g = global_tid(pid, tid, vm)
    assert (g >> 24) & 0xFFFFFF == pid
    assert g & 0xFFFFFF == tid
    assert g >> 48 == vm
    assert global_pid(pid, vm) == g & ~0xFFFFFF


def test_observe_like_scenario(tmp_path: pathlib.Path) -> None:
    path = build_export(observe_like(), tmp_path / "observe_like.sqlite")
    conn = connect(path)
    assert {
        t: count(conn, t)
        for t in (
            "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS", "NVTX_EVENTS",
            "StringIds", "ThreadNames", "PROCESSES", "TARGET_INFO_SESSION_START_TIME",
        )
    } == {
        "CUPTI_ACTIVITY_KIND_RUNTIME": 4,
        "CUDA_GPU_MEMORY_USAGE_EVENTS": 2,
        "NVTX_EVENTS": 3,  # domain create + cublasCreate_v2 range + 'backward'
        "StringIds": 4,  # cuInit, cublasCreate_v2, cudaMalloc_v3020, python3
        "ThreadNames": 1,
        "PROCESSES": 1,
        "TARGET_INFO_SESSION_START_TIME": 1,
    }
    # lazy export: no CUBLAS_EVENTS table, no empty trace tables
    assert "CUBLAS_EVENTS" not in tables(conn)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(conn)

    calls = conn.execute(
        """SELECT r.globalTid, s.value, r.eventClass, r.returnValue, r.correlationId,
                  m.bytes, m.memoryOperationType, m.globalPid, m.start - r.start
           FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
           LEFT JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m ON m.correlationId = r.correlationId
           ORDER BY r.start"""
    ).fetchall()
    decoded = [((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, *rest) for g, *rest in calls]
    assert decoded == [
        (PID, MAIN, "cuInit", EVENT_CLASS_CUDA_DRIVER, 0, 1, None, None, None, None),
        (PID, WORKER, "cudaMalloc_v3020", EVENT_CLASS_CUDA_RUNTIME, 0, 2, 256 * MIB,
         MEM_OPER_ALLOCATION, global_pid(PID), 1),
        (PID, WORKER, "cudaMalloc_v3020", EVENT_CLASS_CUDA_RUNTIME, 0, 3, 8 * MIB,
         MEM_OPER_ALLOCATION, global_pid(PID), 1),
        (PID, WORKER, "cudaMalloc_v3020", EVENT_CLASS_CUDA_RUNTIME, 2, 4, None, None, None,
         None),
    ]

    # The failed and successful mallocs nest inside cublasCreate_v2 on the same thread.
    nested = conn.execute(
        """SELECT count(*), sum(r.returnValue <> 0)
           FROM NVTX_EVENTS n
           JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId
                AND (d.globalTid >> 24) = (n.globalTid >> 24)
           JOIN StringIds s ON s.id = n.textId
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid
                AND r.start >= n.start AND r.end <= n.end
           WHERE n.eventType = 59 AND d.text = 'cuBLAS' AND s.value = 'cublasCreate_v2'"""
    ).fetchone()
    assert nested == (3, 1)

    assert conn.execute(
        "SELECT s.value, t.priority, t.globalTid FROM ThreadNames t JOIN StringIds s "
        "ON s.id = t.nameId"
    ).fetchall() == [("python3", 20, global_tid(PID, MAIN))]
    assert conn.execute("SELECT * FROM PROCESSES").fetchall() == [
        (global_pid(PID), PID, "python3")
    ]
    assert conn.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME").fetchall() == [
        (1_796_064_718_689_501_058, "2026-11-30T18:51:58", "2026-11-30T18:51:58")
    ]
    meta = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT"))
    assert meta["EXPORT_PRODUCT_VERSION"] == "2023.4.4.54"
    assert [meta[f"EXPORT_SCHEMA_VERSION{s}"] for s in ("", "_MAJOR", "_MINOR", "_MICRO")] == [
        "3.7.2", "3", "7", "2"
    ]
    # StringIds ids follow first use in time order.
    assert conn.execute("SELECT id, value FROM StringIds ORDER BY id").fetchall() == [
        (1, "cuInit"), (2, "cublasCreate_v2"), (3, "cudaMalloc_v3020"), (4, "python3")
    ]
    conn.close()


def test_table_source_goes_to_cublas_events(tmp_path: pathlib.Path) -> None:
    spec = Export(
        lib_calls=[
            LibCall("cublasCreate_v2", 10, 50, pid=7, tid=8, source="table"),
            LibCall("cudnnCreate", 60, 70, pid=7, tid=8, library="cuDNN", source="table"),
        ]
    )
    conn = connect(build_export(spec, tmp_path / "t.sqlite"))
    assert conn.execute(
        "SELECT c.start, c.end, c.eventClass, c.globalTid, s.value FROM CUBLAS_EVENTS c "
        "JOIN StringIds s ON s.id = c.nameId"
    ).fetchall() == [(10, 50, EVENT_CLASS_CUBLAS, global_tid(7, 8), "cublasCreate_v2")]
    assert conn.execute(
        "SELECT s.value FROM CUDNN_EVENTS c JOIN StringIds s ON s.id = c.nameId"
    ).fetchall() == [("cudnnCreate",)]
    assert "NVTX_EVENTS" not in tables(conn)
    conn.close()

    with pytest.raises(ValueError, match="needs an end"):
        build_export(
            Export(lib_calls=[LibCall("cublasCreate_v2", 1, None, source="table")]),
            tmp_path / "bad.sqlite",
        )
    assert not (tmp_path / "bad.sqlite").exists()


NVTX_SHAPE_SQL = """
    SELECT eventType, end IS NULL, typeof(rangeId), typeof(category), typeof(color),
           typeof(text), typeof(endGlobalTid), typeof(textId), typeof(domainId),
           typeof(uint64Value), typeof(int64Value), typeof(doubleValue), typeof(uint32Value),
           typeof(int32Value), typeof(floatValue), typeof(jsonTextId), typeof(jsonText)
    FROM NVTX_EVENTS WHERE {where} ORDER BY start
"""


@needs_real
def test_cublas_nvtx_domain_matches_real_export(tmp_path: pathlib.Path) -> None:
    spec = Export(lib_calls=[LibCall("cublasCreate_v2", 1_000, 2_000, pid=PID, tid=WORKER)])
    built = connect(build_export(spec, tmp_path / "n.sqlite"))
    real = connect(REAL)
    domain_where = "eventType = 75 AND text = 'cuBLAS'"
    range_where = (
        f"eventType = 59 AND domainId = (SELECT domainId FROM NVTX_EVENTS WHERE {domain_where})"
    )
    for where in (domain_where, range_where):
        got = built.execute(NVTX_SHAPE_SQL.format(where=where)).fetchall()
        want = real.execute(NVTX_SHAPE_SQL.format(where=where)).fetchall()
        assert got == want and len(got) == 1

    domain = built.execute(f"SELECT domainId, globalTid FROM NVTX_EVENTS WHERE {domain_where}")
    domain_id, creator = domain.fetchone()
    assert creator == global_tid(PID, MAIN)  # created on the main thread, as in the real file
    assert built.execute(
        f"SELECT n.domainId, s.value, n.globalTid FROM NVTX_EVENTS n JOIN StringIds s "
        f"ON s.id = n.textId WHERE {range_where}"
    ).fetchall() == [(domain_id, "cublasCreate_v2", global_tid(PID, WORKER))]
    # the real export has the same join
    assert real.execute(
        f"SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
        f"WHERE {range_where}"
    ).fetchall() == [("cublasCreate_v2",)]

    # Column-for-column identical CREATE statements and embedded enum rows.
    real_sql = dict(real.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    for name, sql in built.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
        assert sql == real_sql[name] == ddl_statements()[name]
    for table, rows in ENUM_ROWS.items():
        ids = ", ".join(str(r[0]) for r in rows)
        query = f"SELECT * FROM {table} WHERE id IN ({ids}) ORDER BY id"
        assert real.execute(query).fetchall() == rows
    built.close()
    real.close()


def test_plain_ranges_registered_and_open(tmp_path: pathlib.Path) -> None:
    spec = Export(
        ranges=[Range("prepass", 5, 9), Range("backward", 10, None, registered=True)]
    )
    conn = connect(build_export(spec, tmp_path / "r.sqlite"))
    assert conn.execute(
        "SELECT n.start, n.end, n.eventType, n.text, s.value, n.domainId FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId ORDER BY n.start"
    ).fetchall() == [(5, 9, 59, "prepass", None, 0), (10, None, 59, None, "backward", 0)]
    conn.close()


def test_omit_tables(tmp_path: pathlib.Path) -> None:
    spec = observe_like()
    spec.omit_tables = {"CUPTI_ACTIVITY_KIND_RUNTIME", "ThreadNames"}
    spec.session_start_utc_ns = None
    conn = connect(build_export(spec, tmp_path / "o.sqlite"))
    names = tables(conn)
    assert not names & {
        "CUPTI_ACTIVITY_KIND_RUNTIME", "ThreadNames", "TARGET_INFO_SESSION_START_TIME"
    }
    assert {"NVTX_EVENTS", "CUDA_GPU_MEMORY_USAGE_EVENTS", "StringIds", "PROCESSES"} <= names
    assert count(conn, "NVTX_EVENTS") == 3
    conn.close()

    with pytest.raises(ValueError, match="unknown tables"):
        build_export(Export(omit_tables={"NO_SUCH_TABLE"}), tmp_path / "x.sqlite")


def test_full_schema_creates_every_table(tmp_path: pathlib.Path) -> None:
    statements = ddl_statements()
    assert len(statements) == 179
    conn = connect(build_export(Export(full_schema=True), tmp_path / "f.sqlite"))
    assert tables(conn) == set(statements)
    assert len(tables(conn)) == 179
    assert count(conn, "CUPTI_ACTIVITY_KIND_RUNTIME") == 0
    assert dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT"))[
        "EXPORT_PARAM_LAZY"
    ] == "false"
    # no explicit indexes/views (the DDL has none); only sqlite's implicit PK autoindexes
    assert conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type <> 'table' AND sql IS NOT NULL"
    ).fetchone() == (0,)
    conn.close()

    spec = Export(full_schema=True, omit_tables={"CUPTI_ACTIVITY_KIND_RUNTIME"})
    conn = connect(build_export(spec, tmp_path / "f2.sqlite"))
    assert tables(conn) == set(statements) - {"CUPTI_ACTIVITY_KIND_RUNTIME"}
    conn.close()


def test_deterministic_bytes(tmp_path: pathlib.Path) -> None:
    digests = [
        hashlib.sha256(build_export(observe_like(), tmp_path / f"{i}.sqlite").read_bytes())
        .hexdigest()
        for i in range(2)
    ]
    assert digests[0] == digests[1]
    full = [
        build_export(Export(full_schema=True), tmp_path / f"full{i}.sqlite").read_bytes()
        for i in range(2)
    ]
    assert full[0] == full[1]


def test_refuses_to_overwrite(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "exists.sqlite"
    path.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        build_export(Export(), path)
    assert path.read_bytes() == b"keep"


def test_domains_are_per_process_and_corr_ids_unique(tmp_path: pathlib.Path) -> None:
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 1, 2, corr=7),
            Call("cudaFree_v3020", 3, 4),
            Call("cudaMalloc_v3020", 5, 6, pid=200, tid=201, vm=1, bytes=MIB),
        ],
        lib_calls=[
            LibCall("cublasCreate_v2", 1, 9, pid=100),
            LibCall("cudnnCreate", 2, 8, pid=100, library="cuDNN"),
            LibCall("cudnnCreate", 2, None, pid=200, tid=201, library="cuDNN", vm=1),
        ],
    )
    conn = connect(build_export(spec, tmp_path / "d.sqlite"))
    assert [r[0] for r in conn.execute(
        "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start"
    )] == [7, 8, 9]
    assert conn.execute(
        "SELECT globalTid >> 24, text, domainId FROM NVTX_EVENTS WHERE eventType = 75 "
        "ORDER BY globalTid, domainId"
    ).fetchall() == [
        (100, "cuBLAS", 1), (100, "cuDNN", 2), ((1 << 24) | 200, "cuDNN", 1)
    ]
    assert conn.execute("SELECT * FROM PROCESSES ORDER BY globalPid").fetchall() == [
        (global_pid(100), 100, "proc"), (global_pid(200, vm=1), 200, "proc")
    ]
    conn.close()
