"""benchmarks/make_export.py: synthetic nsys 2023.4.4 exports, checked with plain SQL."""

from __future__ import annotations

import importlib.util
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks" / "make_export.py"
ROWS, SEED, FAILURES = 20_000, 1, 5

RUNTIME_MALLOC = """
    SELECT r.* FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
    WHERE s.value = 'cudaMalloc_v3020'
"""
# cuBLAS ranges: push/pop ranges in the domain that the same process created as 'cuBLAS'
CUBLAS_RANGES = """
    SELECT n.start, n.end, n.globalTid, s.value AS name
    FROM NVTX_EVENTS n
    JOIN StringIds s ON s.id = n.textId
    JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.text = 'cuBLAS' AND d.domainId = n.domainId
         AND (d.globalTid >> 24) = (n.globalTid >> 24)
    WHERE n.eventType = 59
"""
NESTED = f"""
    SELECT DISTINCT m.correlationId FROM ({RUNTIME_MALLOC}) m JOIN ({CUBLAS_RANGES}) c
      ON c.globalTid = m.globalTid AND c.start <= m.start AND m.end <= c.end
    WHERE c.name = 'cublasCreate_v2' AND m.returnValue <> 0
    ORDER BY 1
"""


def _run(out: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--rows", str(ROWS), "--seed", str(SEED), *args],
        capture_output=True, text=True, check=True)
    return proc.stderr


def _reported(stderr: str, key: str) -> list[int]:
    m = re.search(rf"{key}=\[([\d, ]*)\]", stderr)
    assert m, stderr
    return [int(x) for x in m.group(1).split(",") if x.strip()]


@pytest.fixture(scope="module")
def observe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("observe") / "observe.sqlite"
    return out, _run(out)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("release") / "release.sqlite"
    return out, _run(out, "--variant", "release")


def _q(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_export", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_export"] = mod  # dataclasses resolve their module
    spec.loader.exec_module(mod)
    return mod


def test_valid_sqlite_with_verbatim_ddl(observe: tuple[Path, str]) -> None:
    path, _ = observe
    assert _q(path, "PRAGMA integrity_check") == [("ok",)]
    assert _q(path, "PRAGMA page_size") == [(4096,)]
    assert _q(path, "PRAGMA freelist_count") == [(0,)]
    ddl = _module().load_ddl()
    tables = dict(_q(path, "SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert set(tables) == {"StringIds", "META_DATA_EXPORT", "META_DATA_CAPTURE",
                           "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", "PROCESSES", "ThreadNames",
                           "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS",
                           "NVTX_EVENTS"}
    for name, sql in tables.items():
        assert sql + ";" == ddl[name]
    assert _q(path, "SELECT count(*) FROM sqlite_master WHERE type = 'index'") == [(0,)]
    meta = dict(_q(path, "SELECT name, value FROM META_DATA_EXPORT"))
    assert meta["EXPORT_PRODUCT_VERSION"] == "2023.4.4.54"
    assert (meta["EXPORT_SCHEMA_VERSION"], meta["EXPORT_SCHEMA_VERSION_MAJOR"],
            meta["EXPORT_SCHEMA_VERSION_MINOR"], meta["EXPORT_SCHEMA_VERSION_MICRO"]) == (
        "3.7.2", "3", "7", "2")
    assert _q(path, "SELECT count(*), min(utcEpochNs) > 0 FROM TARGET_INFO_SESSION_START_TIME"
              ) == [(1, 1)]


def test_rows_ids_and_layout(observe: tuple[Path, str]) -> None:
    path, _ = observe
    assert _q(path, """SELECT count(*), count(DISTINCT correlationId), count(DISTINCT globalTid),
                              sum(callchainId IS NULL), sum(s.id IS NULL)
                       FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId
                    """) == [(ROWS, ROWS, 32, ROWS, 0)]
    # correlationIds increase with the rowid and the start time
    assert _q(path, """SELECT count(*) FROM (
                         SELECT start, correlationId c,
                                lag(start) OVER (ORDER BY rowid) ps,
                                lag(correlationId) OVER (ORDER BY rowid) pc
                         FROM CUPTI_ACTIVITY_KIND_RUNTIME)
                       WHERE c <= pc OR start < ps""") == [(0,)]
    # globalTid = (vm << 48) | (pid << 24) | tid, processes listed with globalPid
    assert _q(path, """SELECT count(*) FROM (SELECT DISTINCT globalTid FROM
                         CUPTI_ACTIVITY_KIND_RUNTIME) r LEFT JOIN PROCESSES p
                         ON p.globalPid = (r.globalTid >> 24) << 24
                       WHERE p.pid IS NULL OR (r.globalTid >> 48) <> 1
                          OR ((r.globalTid >> 24) & 16777215) <> p.pid""") == [(0,)]
    # driver calls have eventClass 1, runtime calls 0
    assert _q(path, """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                       JOIN StringIds s ON s.id = r.nameId
                       WHERE r.eventClass <> (s.value NOT LIKE 'cuda%')""") == [(0,)]


def test_calls_on_a_thread_do_not_overlap(observe: tuple[Path, str]) -> None:
    path, _ = observe
    assert _q(path, """SELECT count(*) FROM (
                         SELECT start, end,
                                lag(end) OVER (PARTITION BY globalTid ORDER BY start) pe
                         FROM CUPTI_ACTIVITY_KIND_RUNTIME)
                       WHERE start <= pe OR end <= start""") == [(0,)]


def test_cublas_ranges_enclose_one_to_five_calls(observe: tuple[Path, str]) -> None:
    path, _ = observe
    counts = _q(path, f"""SELECT count(r.rowid) FROM ({CUBLAS_RANGES}) c
                          LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = c.globalTid
                               AND r.start >= c.start AND r.end <= c.end
                          GROUP BY c.start, c.globalTid""")
    assert 0.8 * ROWS / 100 <= len(counts) <= 1.2 * ROWS / 100
    assert {n for (n,) in counts} <= {1, 2, 3, 4, 5}
    # no call straddles a range edge
    assert _q(path, f"""SELECT count(*) FROM ({CUBLAS_RANGES}) c
                        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = c.globalTid
                         AND r.start < c.end AND r.end > c.start
                         AND NOT (r.start >= c.start AND r.end <= c.end)""") == [(0,)]
    # one cuBLAS domain per process
    assert _q(path, """SELECT count(*), count(DISTINCT globalTid >> 24) FROM NVTX_EVENTS
                       WHERE eventType = 75 AND text = 'cuBLAS'""") == [(4, 4)]


def test_nested_failures_inside_cublas_create(observe: tuple[Path, str]) -> None:
    path, stderr = observe
    nested = [c for (c,) in _q(path, NESTED)]
    assert len(nested) == FAILURES
    assert nested == _reported(stderr, "nested_corr")
    assert set(_q(path, f"SELECT returnValue FROM ({RUNTIME_MALLOC}) WHERE correlationId IN "
                        f"({','.join(map(str, nested))})")) == {(2,)}
    # failures outside any cuBLAS range exist too (and other non-zero codes)
    outside = _q(path, f"""SELECT count(*) FROM ({RUNTIME_MALLOC}) m WHERE m.returnValue = 2
                           AND NOT EXISTS (SELECT 1 FROM ({CUBLAS_RANGES}) c
                             WHERE c.globalTid = m.globalTid AND c.start <= m.start
                               AND m.end <= c.end)""")[0][0]
    assert outside >= 3
    codes = {c for (c,) in _q(path, "SELECT DISTINCT returnValue FROM "
                                    "CUPTI_ACTIVITY_KIND_RUNTIME")}
    assert {0, 1, 2, 600} <= codes


def test_memory_events_only_for_successful_mallocs(observe: tuple[Path, str]) -> None:
    """Allocation events; the deallocations (successful cudaFree) are checked in test_bench_memory.py."""
    path, _ = observe
    assert _q(path, """SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS m
                       JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
                       WHERE r.returnValue <> 0""") == [(0,)]
    ok = _q(path, f"SELECT count(*) FROM ({RUNTIME_MALLOC}) WHERE returnValue = 0")[0][0]
    assert ok > 0
    assert _q(path, f"""SELECT count(*), count(DISTINCT m.correlationId),
                               sum(m.start BETWEEN r.start AND r.end), sum(m.bytes > 0),
                               sum(m.globalPid = (r.globalTid >> 24) << 24)
                        FROM CUDA_GPU_MEMORY_USAGE_EVENTS m JOIN ({RUNTIME_MALLOC}) r
                        USING (correlationId) WHERE m.memoryOperationType = 0""") == [(ok, ok, ok, ok, ok)]
    assert _q(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 0"
              ) == [(ok,)]
    assert _q(path, f"""SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS m JOIN ({RUNTIME_MALLOC}) r
                        USING (correlationId) WHERE m.memoryOperationType <> 0""") == [(0,)]


def test_deterministic_bytes(observe: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = observe
    again = tmp_path / "again.sqlite"
    _run(again)
    assert again.read_bytes() == path.read_bytes()
    other = tmp_path / "other.sqlite"
    subprocess.run([sys.executable, str(SCRIPT), str(other), "--rows", str(ROWS), "--seed", "2"],
                   capture_output=True, check=True)
    assert other.read_bytes() != path.read_bytes()


def test_release_variant(observe: tuple[Path, str], release: tuple[Path, str]) -> None:
    obs, _ = observe
    rel, stderr = release
    assert _q(rel, "PRAGMA integrity_check") == [("ok",)]
    assert _q(rel, NESTED) == []
    assert "nested_failures=0" in stderr
    sites = _reported(stderr, "release_ok_corr")
    assert sites == [c for (c,) in _q(obs, NESTED)]
    # same calls and ranges; only those mallocs differ: they succeed and have memory events
    con = sqlite3.connect(f"file:{rel}?mode=ro", uri=True)
    con.execute(f"ATTACH 'file:{obs}?mode=ro' AS o")
    diff = con.execute("""SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                          JOIN o.CUPTI_ACTIVITY_KIND_RUNTIME x ON x.rowid = r.rowid
                          WHERE (r.start, r.end, r.globalTid, r.correlationId, r.nameId,
                                 r.returnValue) IS NOT
                                (x.start, x.end, x.globalTid, x.correlationId, x.nameId,
                                 x.returnValue)
                          ORDER BY 1""").fetchall()
    assert [c for (c,) in diff] == sites
    assert con.execute("""SELECT count(*) FROM NVTX_EVENTS n JOIN o.NVTX_EVENTS x
                          ON x.rowid = n.rowid WHERE (n.start, n.end, n.textId, n.globalTid)
                          IS NOT (x.start, x.end, x.textId, x.globalTid)""").fetchone() == (0,)
    assert con.execute(f"""SELECT count(*), sum(r.returnValue = 0), sum(m.bytes > 0)
                           FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                           JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m USING (correlationId)
                           WHERE r.correlationId IN ({",".join(map(str, sites))})
                        """).fetchone() == (FAILURES, FAILURES, FAILURES)
    con.close()


def test_table_writer_round_trip(tmp_path: Path) -> None:
    """The raw B-tree writer against SQLite itself: odd values, several pages and levels."""
    mod = _module()
    path = tmp_path / "rt.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER, "
                "f INTEGER, g INTEGER, h INTEGER)")
    con.commit()
    root = con.execute("SELECT rootpage FROM sqlite_master").fetchone()[0]
    first = con.execute("PRAGMA page_count").fetchone()[0] + 1
    con.close()
    rng = np.random.default_rng(7)
    n = 60_000  # more than 409 leaves: a three-level tree
    edge = np.array([0, 1, 2, -1, 127, 128, -128, -129, 32767, 32768, -32768, 2**23 - 1, 2**23,
                     -(2**23), 2**31 - 1, 2**31, -(2**31), 2**47 - 1, 2**47, -(2**47),
                     2**63 - 1, -(2**63)], np.int64)
    cols = [rng.choice(edge, n), rng.integers(-(2**62), 2**62, n), np.arange(n) * 1_000_003,
            rng.integers(0, 2, n), np.full(n, 2**48 + 12345), rng.integers(0, 300, n),
            np.where(rng.random(n) < 0.01, 600, 0)]
    writer = mod.TableWriter(path, root, first)
    for a in range(0, n, 7_000):
        sl = slice(a, a + 7_000)
        rowid = np.arange(a + 1, min(a + 7_000, n) + 1)
        cells, lens = mod.encode_cells([c[sl] for c in cols] + [None], rowid)
        writer.add(cells, lens, rowid)
    writer.finish()
    assert _q(path, "PRAGMA integrity_check") == [("ok",)]
    rows = _q(path, "SELECT rowid, a, b, c, d, e, f, g, h FROM t ORDER BY rowid")
    assert len(rows) == n
    got = np.array([r[:8] for r in rows], np.int64)
    assert (got[:, 0] == np.arange(1, n + 1)).all()
    for k, c in enumerate(cols):
        assert (got[:, k + 1] == c).all(), k
    assert {r[8] for r in rows} == {None}
    # SQLite can keep writing to the file afterwards
    con = sqlite3.connect(path)
    con.execute("INSERT INTO t (a) VALUES (42)")
    con.execute("CREATE TABLE u (x)")
    con.execute("INSERT INTO u VALUES ('after')")
    con.commit()
    con.close()
    assert _q(path, "PRAGMA integrity_check") == [("ok",)]
    assert _q(path, "SELECT count(*), max(rowid) FROM t") == [(n + 1, n + 1)]
