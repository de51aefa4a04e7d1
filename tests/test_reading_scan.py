"""The streaming CUDA API scan: both engines and any partitioning give the same answer, and the
rows it selects are exactly those a brute-force overlap test selects."""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, strip_not_null
from conftest import H200, assert_same_scan, engine_free, needs_native, selected
from scenarios import RUNTIME

import nsysaudit
from nsysaudit.core.intervals import union_windows
from nsysaudit.read import native, scan
from nsysaudit.read.source import probe, readonly_uri
from nsysaudit.read.trace import load


class Recorder:
    """A progress that keeps the labels it was started with."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, label: str, total: int | None) -> None:
        self.started.append(label)

    def advance(self, amount: int) -> None:
        pass

    def finish(self) -> None:
        pass


def busy_export(seed: int = 7) -> Export:
    """Three threads in two processes; library calls on two of them; some failures."""
    rng = random.Random(seed)
    calls, libs, corr = [], [], 0
    for pid, tid in ((100, 100), (100, 101), (200, 101)):
        t = 1_000
        for i in range(400):
            t += rng.randint(10, 200)
            dur = rng.randint(1, 300)
            corr += 1
            ret = 2 if rng.random() < 0.05 else 0
            api = rng.choice(["cudaMalloc_v3020", "cudaLaunchKernel_v7000", "cuMemAlloc_v2", "cudaFree_v3020"])
            calls.append(
                Call(
                    api,
                    t,
                    t + dur,
                    pid,
                    tid,
                    ret=ret,
                    corr=corr,
                    bytes=rng.randint(1, 1 << 20) if ret == 0 and "lloc" in api else None,
                )
            )
            if (pid, tid) != (200, 101) and i % 25 == 0:
                libs.append(LibCall("cublasCreate_v2", t - 5, t + rng.randint(50, 3000), pid, tid))
            t += dur
    return Export(calls=calls, lib_calls=libs)


def brute_force_selected(path: Path) -> set[tuple[int, int, int, int]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        'SELECT globalTid, start, "end", correlationId, returnValue FROM CUPTI_ACTIVITY_KIND_RUNTIME'
    ).fetchall()
    doms = con.execute('SELECT globalTid, start, "end" FROM NVTX_EVENTS WHERE eventType = 59').fetchall()
    con.close()
    out = set()
    for g, s, e, c, r in rows:
        if r != 0 or any(lg == g and ls <= e and le >= s for lg, ls, le in doms):
            out.add((g, s, e, c))
    return out


def keyset(frame: pl.DataFrame) -> set[tuple[int, int, int, int]]:
    return {(r[0], r[1], r[2], r[3]) for r in frame.select("gtid", "start_ns", "end_ns", "correlation_id").iter_rows()}


@pytest.fixture(autouse=True)
def adbc_for_small_tables(monkeypatch) -> None:
    """The builder's exports are small: the ADBC engine is tested on them by lowering its threshold.
    The polars engines are tested here; the native one where a test asks for it (``scan_with``)."""
    monkeypatch.setattr(scan, "ADBC_MIN_ROWS", 0)
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "0")


def test_a_small_table_is_read_by_the_stdlib_reader_with_the_same_answer(make_export, monkeypatch) -> None:
    path = make_export(busy_export(5))
    fast, _ = selected(path)
    monkeypatch.setattr(scan, "ADBC_MIN_ROWS", 10_000)
    small, _ = selected(path)
    assert (fast.engine, small.engine) == ("adbc", "sqlite3")
    assert small.selected.equals(fast.selected) and small.span.equals(fast.span)
    assert small.problems == fast.problems


def test_selected_rows_equal_brute_force(make_export) -> None:
    path = make_export(busy_export())
    result, _ = selected(path)
    assert result.engine == "adbc"
    assert keyset(result.selected) == brute_force_selected(path)
    assert result.total == 1200
    assert int(result.span["rows"].sum()) == 1200


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_partitioning_does_not_change_the_answer(make_export, workers: int) -> None:
    path = make_export(busy_export(3))
    one, _ = selected(path, workers=1)
    many, _ = selected(path, workers=workers)
    assert many.selected.equals(one.selected)
    assert many.span.equals(one.span)
    assert many.problems == one.problems


def test_sqlite3_fallback_gives_the_same_answer(make_export, monkeypatch) -> None:
    path = make_export(busy_export(5))
    fast, _ = selected(path)
    monkeypatch.setattr(scan, "_adbc_batches", lambda *a, **k: (_ for _ in ()).throw(OSError("no adbc")))
    slow, _ = selected(path)
    assert (fast.engine, slow.engine) == ("adbc", "sqlite3")
    assert slow.selected.equals(fast.selected)
    assert slow.span.equals(fast.span)


def test_without_the_adbc_extra_a_large_table_is_read_by_the_stdlib_reader_at_once(make_export, monkeypatch) -> None:
    """ADBC and pyarrow are the ``adbc`` extra: an install without them reads every table with the
    stdlib reader from the start (not ADBC tried first, then the whole table again), same answer."""
    path = make_export(busy_export(5))
    fast, _ = selected(path)
    assert scan.adbc_installed() and fast.engine == "adbc"  # make venv installs the extra
    for hidden in ("adbc_driver_sqlite", "adbc_driver_sqlite.dbapi", "pyarrow"):
        monkeypatch.setitem(sys.modules, hidden, None)  # import raises ImportError, as when not installed
    monkeypatch.setattr(scan, "_adbc_batches", lambda *a, **k: pytest.fail("ADBC tried without the extra"))
    assert not scan.adbc_installed()
    progress = Recorder()
    slow, _ = selected(path, progress=progress)
    assert slow.engine == "sqlite3" and progress.started == [f"scanning {slow.total:,} CUDA API rows"]
    assert slow.selected.equals(fast.selected) and slow.span.equals(fast.span) and slow.problems == fast.problems


def test_value_of_the_wrong_type_falls_back_and_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "observe-damaged.sqlite"
    shutil.copy(H200 / "observe.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET returnValue = 'oops' WHERE rowid = 5")
    con.commit()
    con.close()
    d = nsysaudit.analyze(path).to_dict()
    assert d["census"]["cuda_api_calls"] == 925
    kinds = {w["kind"]: w["count"] for w in d["warnings"]}
    assert kinds.get("type_mismatch") == 1
    assert kinds.get("null_in_not_null_column") == 1  # the unreadable value is unknown, not 0


def test_union_windows_merges_overlapping_and_nested_calls() -> None:
    libs = pl.DataFrame(
        {"gtid": [1, 1, 1, 1, 2], "start_ns": [10, 12, 30, 31, 10], "end_ns": [20, 25, 40, 35, 11]},
        schema={"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    w = union_windows(libs)
    assert w.rows() == [(1, 10, 25), (1, 30, 40), (2, 10, 11)]


def test_union_windows_equal_a_plain_python_union() -> None:
    rng = random.Random(8)
    for _ in range(200):
        rows = []
        for _ in range(rng.randint(0, 30)):
            start = rng.randint(0, 100)
            rows.append((rng.choice([1, 2, -(5 << 24)]), start, start + rng.randint(0, 25)))
        expected = []
        for gtid in sorted({g for g, _, _ in rows}):
            for start, end in sorted((s, e) for g, s, e in rows if g == gtid):
                if expected and expected[-1][0] == gtid and start <= expected[-1][2]:  # touching merges
                    expected[-1] = (gtid, expected[-1][1], max(expected[-1][2], end))
                else:
                    expected.append((gtid, start, end))
        frame = pl.DataFrame(rows, schema={"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
        assert union_windows(frame).rows() == expected


# --- the native engine (native/scan.c) ---------------------------------------------------------

def hostile_scan_export(make_export) -> Path:
    """busy_export's rows plus every kind of damage the reduction counts, memory events, marked and
    counted calls: NULLs in NOT NULL columns, reversed ranges, a dangling name id, REAL, TEXT and
    BLOB values, a negative globalTid, rows without globalTid."""
    spec = busy_export(11)
    spec.raw_sql = [
        strip_not_null(RUNTIME),
        f"UPDATE {RUNTIME} SET start = NULL WHERE rowid % 97 = 1",
        f'UPDATE {RUNTIME} SET "end" = NULL WHERE rowid % 89 = 2',
        f"UPDATE {RUNTIME} SET returnValue = NULL WHERE rowid % 83 = 3",
        f"UPDATE {RUNTIME} SET globalTid = NULL WHERE rowid % 79 = 4",
        f"UPDATE {RUNTIME} SET nameId = NULL WHERE rowid % 73 = 5",
        f'UPDATE {RUNTIME} SET "end" = start - 7 WHERE rowid % 71 = 6',
        f"UPDATE {RUNTIME} SET nameId = 999999 WHERE rowid % 67 = 7",
        f"UPDATE {RUNTIME} SET returnValue = 0.5 WHERE rowid = 30",
        f"UPDATE {RUNTIME} SET start = 'x' WHERE rowid = 31",
        f"UPDATE {RUNTIME} SET correlationId = x'00ff' WHERE rowid = 32",
        f"UPDATE {RUNTIME} SET globalTid = -globalTid WHERE rowid % 61 = 8",
        f"UPDATE {RUNTIME} SET correlationId = 5 WHERE rowid IN (40, 41, 42)",
    ]
    return make_export(spec)


def scan_with(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, workers: int = 1) -> scan.CudaApiScan:
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "1" if engine == "native" else "0")
    monkeypatch.setattr(scan, "ADBC_MIN_ROWS", 0 if engine == "adbc" else 10**9)
    export = probe(path)
    try:
        trace = load(export)
        table = export.table(RUNTIME)
        assert table is not None
        ids = pl.Series("id", [r[0] for r in export.conn.execute("SELECT id FROM StringIds")], dtype=pl.Int64)
        names = dict(export.conn.execute("SELECT value, id FROM StringIds"))
        marked = pl.Series([names["cudaMalloc_v3020"]], dtype=pl.Int64)
        counted = pl.Series([names["cudaFree_v3020"], names["cuMemAlloc_v2"]], dtype=pl.Int64)
        keys = KEYS
        return scan.scan_cuda_api(
            export.conn, path, table.name, table.columns, trace.library_windows, ids, workers=workers,
            marked_name_ids=marked, alloc_keys=keys, counted_name_ids=counted, wanted_keys=KEYS,
        )  # fmt: skip
    finally:
        export.close()


# The allocation keys of scan_with, and its wanted keys: (200 << 24, 5) shares its correlation id with
# another process's key; 10**9 makes the ids' span too wide for a bitmap (the native scan's
# binary-search path).
KEYS = pl.DataFrame(
    {"gpid": [100 << 24, 100 << 24, 200 << 24, 100 << 24, 200 << 24], "correlation_id": [5, 17, 900, 10**9, 5]},
    schema={"gpid": pl.Int64, "correlation_id": pl.Int64},
)


def brute_force_keyed(path: Path) -> list[tuple[int | None, ...]]:
    """The rows of a key of KEYS (``ROW_SCHEMA``'s columns, every return), in rowid order, a value of
    another type than INTEGER read as NULL (as every engine reads it): plain SQL and Python."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        f'SELECT globalTid, start, "end", returnValue, nameId, correlationId FROM {RUNTIME} ORDER BY rowid'
    ).fetchall()
    con.close()
    want = set(KEYS.iter_rows())
    out = []
    for row in rows:
        v = tuple(x if type(x) is int else None for x in row)
        gtid, corr = v[0], v[5]
        if gtid is not None and corr is not None and (gtid - gtid % (1 << 24), corr) in want:
            out.append(v)
    return out


@needs_native
@pytest.mark.parametrize("workers", [1, 3])
def test_native_engine_equals_the_polars_reduction(make_export, monkeypatch, workers: int) -> None:
    path = make_export(busy_export(9))
    fast = scan_with(path, "native", monkeypatch, workers)
    assert fast.engine == "native"
    for engine in ("sqlite3", "adbc"):
        other = scan_with(path, engine, monkeypatch, workers)
        assert other.engine == engine
        assert_same_scan(fast, other)
    assert keyset(fast.selected) == brute_force_selected(path)
    assert fast.marked.height and fast.counted and fast.alloc_rows.height  # the comparison is not vacuous


@needs_native
@pytest.mark.parametrize("workers", [1, 2])
def test_native_engine_reads_damaged_rows_as_the_tolerant_reader_does(make_export, monkeypatch, workers: int) -> None:
    path = hostile_scan_export(make_export)
    fast = scan_with(path, "native", monkeypatch, workers)
    slow = scan_with(path, "sqlite3", monkeypatch, workers)
    assert (fast.engine, slow.engine) == ("native", "sqlite3")
    assert_same_scan(fast, slow)
    assert fast.type_mismatch_rows == 3
    assert all(fast.problems[k] for k in scan.PROBLEMS), fast.problems
    assert fast.span["gpid"].null_count() == 1 and (fast.span["gpid"] < 0).any()
    con = sqlite3.connect(path)
    tids = [g for (g,) in con.execute(f"SELECT globalTid FROM {RUNTIME} WHERE correlationId = 5")]
    con.close()
    by_sql = {p: sum(1 for g in tids if type(g) is int and g - g % (1 << 24) == p << 24) for p in (100, 200)}
    assert by_sql[100] >= 2 and by_sql[200] >= 1
    got = fast.alloc_rows.filter(pl.col("correlation_id") == 5).sort("gpid")
    assert got["gpid"].to_list() == [100 << 24, 200 << 24] and got["rows"].to_list() == [by_sql[100], by_sql[200]]


@needs_native
@pytest.mark.parametrize(("hostile", "workers"), [(False, 1), (False, 3), (True, 1), (True, 2)])
def test_the_native_scan_hands_back_the_wanted_keys_rows_in_rowid_order(make_export, monkeypatch, hostile: bool,
                                                                       workers: int) -> None:
    """The rows of a wanted (process, correlation id), whatever their return, as plain SQL finds them
    in rowid order (the host stalls' pageable copies: no second pass reads them); the polars engines
    gather none (None: the caller reads them itself)."""
    path = hostile_scan_export(make_export) if hostile else make_export(busy_export(9))
    con = sqlite3.connect(path)
    # a row of process 200 with the correlation id of a key of process 100 only: not wanted
    con.execute(f"UPDATE {RUNTIME} SET correlationId = 17 WHERE rowid = (SELECT max(rowid) FROM {RUNTIME} "
                "WHERE globalTid >> 24 = 200)")
    assert con.total_changes == 1
    if hostile:  # a record on overflow pages after the keys' rows: the page reader gives its run to SQLite
        con.execute(f"UPDATE {RUNTIME} SET correlationId = zeroblob(20000) WHERE rowid = 600")
    con.commit()
    con.close()
    fast = scan_with(path, "native", monkeypatch, workers)
    assert fast.engine == "native" and fast.keyed is not None
    expected = brute_force_keyed(path)
    assert fast.keyed.rows() == expected
    assert len(expected) >= (4 if hostile else 2)  # not vacuous: rowids 40-42 carry correlation id 5 too
    assert scan_with(path, "sqlite3", monkeypatch, workers).keyed is None


@needs_native
@pytest.mark.parametrize(("scrambled", "hostile"), [(False, False), (True, False), (False, True), (True, True)])
def test_a_search_by_correlation_id_in_the_scans_groups_finds_what_reading_every_leaf_finds(
        make_export, monkeypatch, scrambled: bool, hostile: bool) -> None:
    """The scan's groups of leaves and the least and greatest correlation id of their rows
    (``corr_groups``): the host stalls' search by correlation id reads only the groups that can hold
    one of its ids, and finds the same rows in the same order as reading every leaf, for ids in
    rowid order or scrambled, on a table with values of every type and a record on overflow pages
    (its run read by SQLite: a group of unknown bounds)."""
    from collections import Counter

    from nsysaudit.read import gpu_work
    from nsysaudit.read.trace import frame

    path = hostile_scan_export(make_export) if hostile else make_export(busy_export(9))
    con = sqlite3.connect(path)
    # ids growing with the rowid, as nsys writes them (a group's bounds narrow), or scrambled
    order = "(rowid * 7919) % 1201" if scrambled else "rowid"
    con.execute(f"UPDATE {RUNTIME} SET correlationId = {order} WHERE typeof(correlationId) = 'integer'")
    if hostile:
        con.execute(f"UPDATE {RUNTIME} SET correlationId = zeroblob(20000) WHERE rowid = 520")
    con.commit()
    con.close()
    fast = scan_with(path, "native", monkeypatch, 2)
    assert fast.corr_groups is not None and fast.corr_groups.height > 4
    ids_of = [r[0] for r in sqlite3.connect(path).execute(
        f"SELECT correlationId FROM {RUNTIME} WHERE typeof(correlationId) = 'integer'")]
    export = probe(path)
    runtime = export.table(RUNTIME)
    assert runtime is not None
    columns = ("globalTid", "start", "correlationId", "nameId")
    schema = {"gtid": pl.Int64, "start_ns": pl.Int64, "correlation_id": pl.Int64, "name_id": pl.Int64}
    read: list[int] = []
    read_pages = gpu_work.native.read_pages

    def counting(uri: str, plan: Any, run: tuple[int, int], *args: Any, **kwargs: Any) -> Any:
        read.append(run[1] - run[0])
        return read_pages(uri, plan, run, *args, **kwargs)

    monkeypatch.setattr(gpu_work.native, "read_pages", counting)
    rng = random.Random(5)
    # the ids of the rows after the one on overflow pages, in its leaf: a group of unknown bounds holds them
    after = [r[0] for r in sqlite3.connect(path).execute(
        f"SELECT correlationId FROM {RUNTIME} WHERE rowid BETWEEN 521 AND 523 AND typeof(correlationId) = 'integer'")]
    try:
        for n in (1, 3, 40, 400, 0):
            chosen = set(rng.sample(ids_of, n)) if n else set(after)
            ids = pl.Series(sorted(chosen | {10**12}), dtype=pl.Int64)
            read.clear()
            every = gpu_work._by_correlation(export, runtime, columns, schema, ids, frame, Counter())
            leaves = sum(read)
            read.clear()
            grouped = gpu_work._by_correlation(export, runtime, columns, schema, ids, frame, Counter(),
                                               fast.corr_groups)
            assert grouped.equals(every), (n, grouped, every)
            assert every.height >= len(chosen) > 0
            if n == 1 and not scrambled and not hostile:  # not vacuous: one id's group, not every leaf
                assert 0 < sum(read) < leaves
    finally:
        export.close()


@needs_native
def test_native_engine_analysis_is_byte_identical(monkeypatch) -> None:
    """The same JSON, byte for byte, but for the keys that say which engine read it."""
    from nsysaudit.render import analysis_json

    outs, engines = {}, {}
    for engine in ("native", "adbc"):  # adbc_for_small_tables: the polars engine is ADBC's
        monkeypatch.setenv("NSYSAUDIT_NATIVE", "1" if engine == "native" else "0")
        outs[engine], engines[engine] = engine_free(analysis_json(nsysaudit.analyze(H200 / "observe.sqlite")))
    assert outs["native"] == outs["adbc"]
    version = sqlite3.sqlite_version
    assert engines["native"] == {"engine": "native", "sqlite_version": version, "native_unavailable": None}
    assert engines["adbc"] == {
        "engine": "adbc", "sqlite_version": scan.engine_sqlite_version("adbc"),
        "native_unavailable": "turned off (NSYSAUDIT_NATIVE=0)",
    }  # fmt: skip


def test_a_failing_native_scan_falls_back_to_the_polars_engines(make_export, monkeypatch) -> None:
    path = make_export(busy_export(5))
    reference = scan_with(path, "sqlite3", monkeypatch)

    def broken(*a: object, **k: object) -> None:
        raise native.NativeScanError("step: database disk image is malformed")

    monkeypatch.setattr(native, "load", lambda: object())
    monkeypatch.setattr(native, "scan_range", broken)
    monkeypatch.setattr(native, "read_ints", broken)
    monkeypatch.setattr(scan, "ADBC_MIN_ROWS", 10**9)
    export = probe(path)
    try:
        trace = load(export)
        table = export.table(RUNTIME)
        assert table is not None
        got = scan.scan_cuda_api(export.conn, path, table.name, table.columns, trace.library_windows, None)
    finally:
        export.close()
    assert got.engine == "sqlite3"
    assert got.selected.equals(reference.selected) and got.span.equals(reference.span)


def test_an_extension_missing_broken_stale_or_on_another_sqlite_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """The native engine runs only where its extension imports, is of this nsysaudit's interface,
    and runs the SQLite Python's sqlite3 runs; otherwise the reason is said (and the polars engines read)."""
    import importlib.util
    import types

    def missing() -> types.ModuleType:
        raise ModuleNotFoundError("No module named 'nsysaudit.read._native'")

    bogus = tmp_path / "_native.so"
    bogus.write_bytes(b"not a shared object")

    def broken() -> types.ModuleType:
        spec = importlib.util.spec_from_file_location("nsysaudit.read._native", bogus)
        assert spec is not None
        return importlib.util.module_from_spec(spec)

    def fake(abi: int, source_id: str) -> types.ModuleType:
        module = types.ModuleType("nsysaudit.read._native")
        module.ABI = abi  # type: ignore[attr-defined]
        module.sqlite_source_id = lambda: source_id  # type: ignore[attr-defined]
        module.sqlite_version = lambda: "3.31.1"  # type: ignore[attr-defined]
        return module

    con = sqlite3.connect(":memory:")
    (ours,) = con.execute("SELECT sqlite_source_id()").fetchone()
    con.close()
    reasons = {
        name: native.check(importer)
        for name, importer in {
            "missing": missing,
            "broken": broken,
            "stale": lambda: fake(native.ABI - 1, ours),
            "other sqlite": lambda: fake(native.ABI, "2020-01-22 18:38:59 bd3c7"),
            "right": lambda: fake(native.ABI, ours),
        }.items()
    }
    missing = "not built (nsysaudit was installed without a C compiler or SQLite's header)"
    assert reasons["missing"] == (None, missing)
    assert reasons["broken"][0] is None and reasons["broken"][1].startswith("not loadable (")
    stale = f"stale (built from another native/scan.c: interface {native.ABI - 1}, not {native.ABI})"
    assert reasons["stale"] == (None, stale)
    version = sqlite3.sqlite_version
    assert reasons["other sqlite"][0] is None
    assert f"on another SQLite (it links SQLite 3.31.1, Python's sqlite3 runs SQLite {version} of " in str(
        reasons["other sqlite"][1]
    )
    assert reasons["right"][0] is not None and reasons["right"][1] is None
    monkeypatch.setattr(sqlite3, "threadsafety", 0)  # the scan's threads each open a connection
    assert native.check(lambda: fake(native.ABI, ours)) == (
        None, "not usable (Python's SQLite is built single-threaded: SQLITE_THREADSAFE=0)",
    )  # fmt: skip


@needs_native
def test_the_built_extension_runs_pythons_sqlite(monkeypatch) -> None:
    from nsysaudit.read import _native

    monkeypatch.setenv("NSYSAUDIT_NATIVE", "1")
    assert native.load() is _native and native.unavailable() is None
    assert _native.sqlite_version() == sqlite3.sqlite_version and _native.ABI == native.ABI
    nothing = _native.read(readonly_uri(H200 / "observe.sqlite"), "SELECT 1 WHERE 0", 1, False)
    assert nothing == (b"", b"", 0, 0)  # bytes, also where no buffer was ever allocated
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "0")
    assert native.load() is None and native.unavailable() == "turned off (NSYSAUDIT_NATIVE=0)"


@needs_native
def test_numpy_and_array_transfers_give_the_same_scan_and_memory_events(make_export, monkeypatch) -> None:
    """Large arrays cross between C and polars through numpy, small ones through array.array: both
    give the same frames (NULLs included), on a damaged export."""
    path = hostile_scan_export(make_export)
    got = {}
    for way in ("numpy", "array"):
        monkeypatch.setattr(native, "_use_numpy", lambda values, way=way: way == "numpy")
        export = probe(path)
        try:
            events = load(export).memory.events  # type: ignore[union-attr]
        finally:
            export.close()
        got[way] = (scan_with(path, "native", monkeypatch, 2), events)
    assert_same_scan(got["numpy"][0], got["array"][0])
    assert got["numpy"][1].equals(got["array"][1])
    assert got["numpy"][0].selected.null_count().sum_horizontal().item() > 0  # NULLs crossed too
    assert got["numpy"][1].height > 0


@needs_native
def test_frames_from_the_native_buffer_own_their_values(make_export, monkeypatch) -> None:
    """The C buffers are freed once their frames are made: the frames must hold copies, also of a
    single row (numpy calls a one-row column contiguous, so a "contiguous" view of it stayed a view
    of the freed buffer: the failed call's thread and start read back as garbage)."""
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "1")
    monkeypatch.setattr(native, "_use_numpy", lambda values: True)
    path = make_export(
        Export(
            calls=[Call("cudaMalloc_v3020", 5_000, 5_100, 100, 100, ret=2, corr=99)],
            lib_calls=[LibCall("cublasCreate_v2", 4_900, 5_200, 100, 100)],
        )
    )
    for _ in range(20):
        export = probe(path)
        try:
            rows = load(export).cuda_api_rows
        finally:
            export.close()
        reuse = [bytearray(48) for _ in range(2_000)]  # what reuse of the freed buffer does
        assert rows.select("gtid", "start_ns", "end_ns", "correlation_id", "return_code").rows() == [
            ((100 << 24) + 100, 5_000, 5_100, 99, 2)
        ]
        del reuse


@needs_native
@pytest.mark.parametrize("workers", [1, 3])
def test_the_native_scans_own_row_count_is_the_census_where_rowids_have_gaps(make_export, monkeypatch, workers) -> None:
    """Without a progress line the native scan counts the rows it visits instead of running
    count(*) first: the same total, also where deleted rows left the rowid range sparse."""
    spec = busy_export(4)
    spec.raw_sql = [f"DELETE FROM {RUNTIME} WHERE rowid % 3 = 0 OR rowid BETWEEN 100 AND 400"]
    path = make_export(spec)
    con = sqlite3.connect(path)
    (expected,) = con.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()
    (span,) = con.execute(f"SELECT max(rowid) - min(rowid) + 1 FROM {RUNTIME}").fetchone()
    con.close()
    fast = scan_with(path, "native", monkeypatch, workers)
    slow = scan_with(path, "sqlite3", monkeypatch, workers)
    assert fast.engine == "native" and fast.total == slow.total == expected < span


def test_merge_alloc_equals_grouping_the_ranges_rows() -> None:
    """The ranges' per-key counts joined without a group-by give what grouping every range's rows
    gives: rows summed, the nameId of the first range (rowid order) with a row, NULL kept."""
    rng = random.Random(12)
    keys = pl.DataFrame(
        {"gpid": [1 << 24, 1 << 24, 2 << 24, 2 << 24, 3 << 24], "correlation_id": [5, 9, 5, 7, 1]},
        schema={"gpid": pl.Int64, "correlation_id": pl.Int64},
    ).sort("correlation_id", "gpid")
    for _ in range(50):
        ranges, frames = [], []
        for _ in range(rng.randint(1, 4)):
            rows = [rng.choice([0, 0, 1, 3]) for _ in range(keys.height)]
            names = [rng.choice([None, 10, 11]) if r else 0 for r in rows]
            counts = (pl.Series("rows", rows, dtype=pl.Int64), pl.Series("name_id", names, dtype=pl.Int64))
            ranges.append(counts)
            frames.append(keys.with_columns(*counts).filter(pl.col("rows") > 0))
        reference = (
            pl.concat(frames)
            .group_by("gpid", "correlation_id", maintain_order=True)
            .agg(pl.col("rows").sum(), pl.col("name_id").first())
            .sort("gpid", "correlation_id")
        )
        assert native.merge_alloc(keys, [*ranges, None]).sort("gpid", "correlation_id").equals(reference)


@needs_native
@pytest.mark.parametrize("rows", [
    [(1, 10, 100), (2, 20, 200), (3, 30, 300)],  # no NULL at all: no mask is made
    [(1, None, 100), (2, 20, 200), (3, None, 300)],  # NULLs in one column only
    [(None, None, None), (2, "text", 2.5), (3, 30, None)],  # in every column, and values not integers
], ids=["none", "one-column", "every-column"])
def test_the_native_reader_marks_exactly_the_nulls_sqlite_reads(tmp_path: Path, rows: list[tuple[object, ...]]) -> None:
    """``read_ints`` gives each column its NULLs (and the values that are not integers, as NULL),
    whether no value, some columns' or every column's is NULL: what the stdlib reader gives."""
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a, b, c)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    conn.commit()
    conn.close()
    schema = {"a": pl.Int64, "b": pl.Int64, "c": pl.Int64}
    sql = "SELECT a, b, c FROM t ORDER BY rowid"
    for ordered in (True, False):
        got, mismatched = native.read_ints(readonly_uri(path), sql, schema, ordered=ordered)
        want = [tuple(v if type(v) is int else None for v in row) for row in rows]
        assert got.rows() == want, ordered
        assert mismatched == sum(1 for row in rows for v in row if v is not None and type(v) is not int)
