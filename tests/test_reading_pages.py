"""The native scan's page reader (native/scan.c: ``plan_table``, ``read_leaves``): it reads the CUDA
API table's b-tree pages itself, each leaf once, and hands SQLite a whole run of leaves wherever it
is not sure. Whatever the table, the page size, the damage, the answer is the one SQLite's own
reading of every row gives. (Whether a table is damaged is SQLite's quick_check's to say, for every
engine, and the reader's own check stands for it only where it finds the table sound:
tests/test_hostile_damage.py.)"""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import FIXTURES, TORCH, assert_same_scan, needs_native, selected, sweep
from scenarios import RUNTIME

from nsysaudit.core.errors import UnusableInput
from nsysaudit.read import damage, native, scan
from nsysaudit.read.source import quote, readonly_uri

NSYS_COLUMNS = '''start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
    callchainId INTEGER'''

pytestmark = needs_native


def without_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "page_layout", lambda *a, **k: None)


def both_ways(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, Any]:
    """``run()`` with the page reader, then with SQLite reading every row."""
    with_pages = run()
    with monkeypatch.context() as m:
        without_pages(m)
        plain = run()
    return with_pages, plain


BUNDLED = sorted(p for p in FIXTURES.rglob("*.sqlite") if "schema" not in p.parts)


@pytest.mark.parametrize("path", sweep(BUNDLED, keep=TORCH / "observe.sqlite"), ids=lambda p: p.stem)
@pytest.mark.parametrize("workers", [1, 2])
def test_every_bundled_export_reads_the_same_from_its_pages(path: Path, workers: int, monkeypatch) -> None:
    con = sqlite3.connect(readonly_uri(path), uri=True)
    has_table = con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (RUNTIME,)).fetchone()
    con.close()
    if not has_table:
        pytest.skip("no CUDA API table")
    fast, plain = both_ways(monkeypatch, lambda: selected(path, workers=workers)[0])
    assert (fast.engine, plain.engine) == ("native", "native")
    assert_same_scan(fast, plain)
    assert fast.page_rows == fast.total > 0 and plain.page_rows == 0


# -- generated tables -------------------------------------------------------------------------


def integer(rng: random.Random) -> int:
    """An integer of any of SQLite's stored sizes (0 and 1 have types of their own), either sign."""
    bits = rng.choice([0, 1, 7, 8, 15, 16, 23, 24, 31, 32, 47, 48, 62, 63])
    value = rng.randint(0, (1 << bits) - 1) if bits else rng.choice([0, 1])
    return -value - 1 if rng.random() < 0.3 and bits else value


def value(rng: random.Random, column: str) -> Any:
    roll = rng.random()
    if roll < 0.04:
        return None
    if roll < 0.05:
        return rng.choice([0.5, -2.0, "text", b"\x00\xff", "x" * 70])  # of another type: NULL, counted
    if column == "returnValue":
        return rng.choice([0, 0, 0, 2, 700, integer(rng)])
    if column == "globalTid":
        return rng.choice([(100 << 24) + 100, (100 << 24) + 101, (200 << 24) + 101, integer(rng)])
    if column == "nameId":
        return rng.choice([1, 2, 3, integer(rng)])
    if column == "correlationId":
        return rng.choice([5, 17, 900, integer(rng)])
    return integer(rng)


def make_table(
    path: Path,
    rng: random.Random,
    rows: int,
    *,
    page_size: int = 4096,
    columns: str = NSYS_COLUMNS,
    gaps: bool = True,
) -> None:
    """``rows`` random rows in a CUDA API table of ``columns`` (NOT NULL dropped: the damage is the
    point), rowids with gaps and negative ones when ``gaps``."""
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(f"CREATE TABLE {RUNTIME} ({columns.replace(' NOT NULL', '')})")
    names = [r[1] for r in con.execute(f"PRAGMA table_info({RUNTIME})")]
    rowids = rng.sample(range(-(1 << 40), 1 << 40), rows) if gaps else list(range(1, rows + 1))
    quoted = ", ".join(quote(n) for n in names)
    con.executemany(
        f"INSERT INTO {RUNTIME} (rowid, {quoted}) VALUES (?{', ?' * len(names)})",
        [(r, *(value(rng, n) for n in names)) for r in rowids],
    )
    con.commit()
    con.close()


WINDOWS = pl.DataFrame(
    {"gtid": [(100 << 24) + 100, (100 << 24) + 101], "w_start": [-(1 << 62), 0], "w_end": [0, 1 << 62]},
    schema={"gtid": pl.Int64, "w_start": pl.Int64, "w_end": pl.Int64},
)
KEYS = pl.DataFrame(
    {"gpid": [100 << 24, 200 << 24, 100 << 24], "correlation_id": [5, 5, 900]},
    schema={"gpid": pl.Int64, "correlation_id": pl.Int64},
)


def scan_table(path: Path, workers: int) -> scan.CudaApiScan:
    con = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        columns = tuple(r[1] for r in con.execute(f"PRAGMA table_info({RUNTIME})"))
        ids = pl.Series([1, 2], dtype=pl.Int64)
        return scan.scan_cuda_api(
            con, path, RUNTIME, columns, WINDOWS, ids, workers=workers,
            marked_name_ids=pl.Series([3], dtype=pl.Int64), alloc_keys=KEYS,
            counted_name_ids=pl.Series([2], dtype=pl.Int64),
        )  # fmt: skip
    finally:
        con.close()


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
@pytest.mark.parametrize("workers", [1, 3])
def test_generated_tables_read_the_same_from_their_pages(tmp_path: Path, monkeypatch, page_size, workers) -> None:
    path = tmp_path / "t.sqlite"
    make_table(path, random.Random(page_size + workers), 6000, page_size=page_size)
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, workers))
    assert_same_scan(fast, plain)
    assert fast.page_rows == fast.total == 6000
    # not vacuous: every kind of value and every part of the reduction was met
    assert fast.type_mismatch_rows and all(fast.problems[k] for k in scan.PROBLEMS if k != "reversed")
    assert fast.selected.height and fast.marked.height and fast.alloc_rows.height and fast.counted


def test_pages_with_reserved_bytes_at_their_end(tmp_path: Path, monkeypatch) -> None:
    """A file whose pages keep bytes for a VFS's own use (header byte 20): cells end before them."""
    import ctypes
    import ctypes.util

    path = tmp_path / "t.sqlite"
    lib = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
    db = ctypes.c_void_p()
    assert lib.sqlite3_open(str(path).encode(), ctypes.byref(db)) == 0
    reserve = ctypes.c_int(40)
    assert lib.sqlite3_file_control(db, b"main", 38, ctypes.byref(reserve)) == 0  # SQLITE_FCNTL_RESERVE_BYTES
    assert lib.sqlite3_exec(db, b"PRAGMA page_size = 1024; CREATE TABLE first (x)", None, None, None) == 0
    lib.sqlite3_close(db)
    make_table(path, random.Random(12), 5000)
    assert path.read_bytes()[20] == 40 and sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, 2))
    assert_same_scan(fast, plain)
    assert fast.page_rows == fast.total == 5000


def test_columns_in_another_order_and_missing_ones(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.sqlite"
    columns = 'pad TEXT, returnValue INTEGER, other BLOB, "end" INTEGER, globalTid INTEGER, start INTEGER, nameId INT'
    make_table(path, random.Random(3), 3000, columns=columns)
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, 2))
    assert_same_scan(fast, plain)
    assert fast.page_rows == 3000 and fast.alloc_rows.is_empty()  # no correlationId: read as NULL


def test_overflow_pages_and_short_records_are_handed_to_sqlite(tmp_path: Path, monkeypatch) -> None:
    """A record spilling to overflow pages, and records written before ALTER TABLE ADD COLUMN (the
    column's DEFAULT is their value, which only SQLite knows): SQLite reads the ranges holding them."""
    path = tmp_path / "t.sqlite"
    make_table(path, random.Random(4), 4000, columns=NSYS_COLUMNS.replace("correlationId INTEGER,", ""), gaps=False)
    con = sqlite3.connect(path)
    con.execute(f"ALTER TABLE {RUNTIME} ADD COLUMN correlationId INTEGER DEFAULT 5")
    con.execute(f"ALTER TABLE {RUNTIME} ADD COLUMN note TEXT")
    con.execute(f"UPDATE {RUNTIME} SET correlationId = rowid % 1000 WHERE rowid <= 1000")
    con.execute(f"UPDATE {RUNTIME} SET note = ? WHERE rowid IN (10, 3500)", ("y" * 9000,))
    con.commit()
    con.close()
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, 3))  # 12 ranges of ~333 rows
    assert_same_scan(fast, plain)
    assert 0 < fast.page_rows < fast.total  # the pages gave rows 334-1000, SQLite the others
    assert fast.alloc_rows.filter(pl.col("correlation_id") == 5)["rows"].sum() > 1000  # the DEFAULT counted


@pytest.mark.parametrize(
    "columns",
    [
        NSYS_COLUMNS.replace('"end" INTEGER', '"end" REAL'),  # an integral REAL is stored as an integer
        NSYS_COLUMNS.replace("correlationId INTEGER", "correlationId INTEGER PRIMARY KEY"),  # the rowid
        NSYS_COLUMNS + ", twice INTEGER GENERATED ALWAYS AS (start * 2) VIRTUAL",  # not stored
    ],
    ids=["real-affinity", "rowid-alias", "generated"],
)
def test_tables_the_pages_cannot_say_are_read_by_sqlite(tmp_path: Path, monkeypatch, columns: str) -> None:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {RUNTIME} ({columns.replace(' NOT NULL', '')})")
    rng = random.Random(5)
    con.executemany(
        f'INSERT INTO {RUNTIME} (start, "end", globalTid, correlationId, nameId, returnValue) VALUES (?{", ?" * 5})',
        [(i * 10, i * 10 + 5, (100 << 24) + 100, i, rng.choice([1, 2, 3]), rng.choice([0, 2])) for i in range(1, 2000)],
    )
    con.commit()
    con.close()
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, 2))
    assert_same_scan(fast, plain)
    assert fast.page_rows == 0


def test_a_wal_mode_file_is_read_by_sqlite(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.sqlite"
    make_table(path, random.Random(6), 2000)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = WAL")
    con.close()
    assert path.read_bytes()[18:20] == b"\x02\x02"
    fast, plain = both_ways(monkeypatch, lambda: scan_table(path, 1))
    assert_same_scan(fast, plain)
    assert fast.page_rows == 0


# -- damaged pages ----------------------------------------------------------------------------


def range_outcome(path: Path, lo: int, hi: int, run: tuple[int, int] | None = None) -> Any:
    """Rowids lo..hi through the library: SQLite reading them, or with ``run`` (leaves [first, last)
    of a fresh plan of the table, which hold them) the page reader; its result, why the page reader
    gave the run to SQLite ("" where it did not) and what its check found; or the error it gave."""
    uri = readonly_uri(path)
    con = sqlite3.connect(uri, uri=True)
    try:
        columns = tuple(r[1] for r in con.execute(f"PRAGMA table_info({RUNTIME})"))
        present = {c: quote(c) if c in columns else "NULL" for c in scan.COLUMNS}
        layout = scan.page_layout(con, RUNTIME, present)
        classes = damage.column_classes(con, RUNTIME)
    finally:
        con.close()
    assert classes is not None
    inputs = native.prepare(WINDOWS, pl.Series([1, 2], dtype=pl.Int64), pl.Series([3], dtype=pl.Int64),
                            pl.Series([2], dtype=pl.Int64), KEYS)  # fmt: skip
    sql = scan._select_sql(RUNTIME, present, "rowid", wrap="nsa_reduce")
    pages = None if run is None else native.Pages(native.plan(uri, RUNTIME), *run, classes, layout)
    try:
        out = native.scan_range(uri, sql, lo, hi, inputs, list(scan.ROW_SCHEMA), pages)
    except native.NativeScanError as exc:
        return ("error", str(exc)), "", ""
    # what the page reader says beside SQLite's answer: how it read the run (and, its own reading's, the
    # correlation ids' groups of leaves: tests/test_reading_scan.py holds them to reading every leaf)
    out.pop("page_rows"), out.pop("handovers"), out.pop("corr_groups")
    why, check = out.pop("handover"), out.pop("check")
    got = {
        k: (v.to_dicts() if isinstance(v, pl.DataFrame) else [s.to_list() for s in v] if isinstance(v, tuple) else v)
        for k, v in out.items()
    }
    return got, why, check


@pytest.mark.slow
def test_damaged_pages_give_what_sqlite_gives(tmp_path: Path) -> None:
    """Bytes of the table's pages overwritten at random (cell pointers, page headers, child page
    numbers, record headers, values): for every run of the table's leaves, the page reader gives
    SQLite's own answer for the run's rowids, or its error: it reads what it has checked, and
    hands the run to SQLite where a rule every SQLite file keeps is broken. Never another answer,
    and nothing here may crash. And where its check finds the table sound, so does SQLite's
    quick_check.

    SQLite 3.40 reads some damaged pages differently from one run to the next (a malformed error
    one time, rows the next: it reads bytes it did not write); such trials say nothing and are
    left out, and there must be few of them. Where the page reader handed such a run to SQLite,
    its answer must be one SQLite gives."""
    clean = tmp_path / "clean.sqlite"
    make_table(clean, random.Random(8), 3000, page_size=512)
    data = clean.read_bytes()
    con = sqlite3.connect(clean)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (RUNTIME,)).fetchone()
    classes = damage.column_classes(con, RUNTIME)
    con.close()
    assert classes is not None
    rng = random.Random(9)
    damaged = tmp_path / "damaged.sqlite"
    uri = readonly_uri(damaged)
    compared = unstable = handed = unplanned = sound = 0
    for trial in range(150):
        buf = bytearray(data)
        page = rng.choice([root, *range(root, len(data) // 512 + 1)])  # the root often: its header matters most
        for _ in range(rng.choice([1, 1, 2, 8])):
            at = (page - 1) * 512 + rng.choice([rng.randrange(12), rng.randrange(512)])
            buf[at] = rng.randrange(256)
        damaged.write_bytes(bytes(buf))
        if native.check_table(uri, RUNTIME, classes) == "":  # sound: so says quick_check
            sound += 1
            assert damage.check_export(uri, (RUNTIME,), schema=False).damaged is None, (trial, page)
        plan = native.plan(uri, RUNTIME)
        if plan.why:  # an interior page the plan is unsure of: the table is SQLite's to read
            unplanned += 1
            continue
        for n in (1, 3):
            for first, last, lo, hi in plan.runs(n):
                plain = [range_outcome(damaged, lo, hi)[0] for _ in range(3)]
                if plain.count(plain[0]) != 3:
                    unstable += 1
                    continue
                fast, why, _ = range_outcome(damaged, lo, hi, (first, last))
                handed += why != ""
                if fast != plain[0]:  # handed to SQLite, whose answer here may vary: one it gives, then
                    # never when the reader read the pages itself (an error is SQLite's, after a handover)
                    assert why != "" or fast[0] == "error", (trial, page, lo, hi)
                    assert fast in [range_outcome(damaged, lo, hi)[0] for _ in range(8)], (trial, page, lo, hi)
                    unstable += 1
                    continue
                compared += 1
    # not vacuous: damage the reader handed over (and SQLite then read), damage it read past, and
    # damage the plan left to SQLite, compared (the table holds TEXT in INTEGER columns, which the
    # check leaves to quick_check: it is never sound here; tests/test_hostile_damage.py sweeps that)
    assert compared > 200 and handed > 30 and compared - handed > 100 and unplanned > 2, (compared, handed, unplanned)
    assert unstable < 20 and sound == 0, (unstable, sound)


def skipping_table(tmp_path: Path) -> Path:
    """A table whose leaf holds a rowid bumped past the table's last: SQLite, reading a rowid range
    that ends before it, stops there without an error and never reads the rows after it; its
    count(*) counts them."""
    path = tmp_path / "skip.sqlite"
    make_table(path, random.Random(13), 3000, page_size=512, gaps=False)
    con = sqlite3.connect(path)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (RUNTIME,)).fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    for page in range(root + 1, len(data) // 512 + 1):  # a leaf in the middle: its first cell
        at = (page - 1) * 512
        if data[at] != 0x0D:
            continue
        cell = at + int.from_bytes(data[at + 8 : at + 10], "big")
        rowid = cell + (1 if data[cell] < 0x80 else 2)  # past the payload size's varint
        two_bytes = data[rowid] >= 0x80 and data[rowid + 1] < 0x80
        if two_bytes and 1000 < ((data[rowid] & 0x7F) << 7 | data[rowid + 1]) < 2000:
            data[rowid], data[rowid + 1] = 0xFC, 0x00  # 16,128: past max(rowid), the same varint length
            break
    else:
        raise AssertionError("no leaf to damage")
    path.write_bytes(bytes(data))
    return path


def test_rows_sqlite_would_pass_by_are_called_damaged_by_every_engine(tmp_path: Path, monkeypatch) -> None:
    path = skipping_table(tmp_path)
    con = sqlite3.connect(readonly_uri(path), uri=True)
    (counted,) = con.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()
    (by_range,) = con.execute(f"SELECT count(*) FROM {RUNTIME} WHERE rowid BETWEEN 1 AND 3000").fetchone()
    con.close()
    assert counted == 3000 and by_range < 3000  # SQLite reading by rowid says nothing is wrong
    # the page reader hands the range with the bumped rowid to SQLite; in 12 ranges, SQLite's stops
    # there, the next seeks past the rest: whatever reads it, the count(*) says rows were passed by
    said = r"holds 3,000 rows by SQLite's count\(\*\), but reading them by rowid gives 2,"
    with pytest.raises(UnusableInput, match=said):
        scan_table(path, 3)
    with monkeypatch.context() as m:
        without_pages(m)
        with pytest.raises(UnusableInput, match=said):
            scan_table(path, 3)
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "0")  # and the polars engines
    with pytest.raises(UnusableInput, match=said):
        scan_table(path, 3)
    # and SQLite's own check, which decides for an analysis, names the b-tree's broken rule
    found = damage.check_export(readonly_uri(path), (RUNTIME,))
    assert found.damaged is not None and re.search(r"\(SQLite's quick_check: .*Rowid \d+ out of order", found.damaged)


def test_analyze_says_a_damaged_table_in_one_line(tmp_path: Path, capsys) -> None:
    """The real torch capture with one record header of its CUDA API table made larger than its
    record: one line naming the file, the table and what SQLite's quick_check says, exit 2,
    nothing printed, the file untouched."""
    import hashlib

    from nsysaudit.cli import main

    path = tmp_path / "observe.sqlite"
    data = bytearray((FIXTURES / "h200-cuda13-nsys2025.3" / "torch" / "observe.sqlite").read_bytes())
    con = sqlite3.connect(readonly_uri(FIXTURES / "h200-cuda13-nsys2025.3" / "torch" / "observe.sqlite"), uri=True)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (RUNTIME,)).fetchone()
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    at = (root - 1) * page_size
    assert data[at] == 0x05  # interior: its first child is a leaf
    leaf = int.from_bytes(data[at + 12 + 0 : at + 14], "big")
    leaf = int.from_bytes(data[at + leaf : at + leaf + 4], "big")
    at = (leaf - 1) * page_size
    assert data[at] == 0x0D
    cell = at + int.from_bytes(data[at + 8 : at + 10], "big")
    assert data[cell] < 0x7F and data[cell + 1] < 0x80  # one-byte payload size and rowid
    data[cell + 2] = 0x7F  # the record's header size: past the record's end
    path.write_bytes(bytes(data))
    digest = hashlib.sha256(data).hexdigest()
    code = main(["analyze", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err == f"nsysaudit: error: {path}: damaged SQLite file: table {RUNTIME} (SQLite's quick_check: " \
        "database disk image is malformed)\n"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


# --- the GPU tables and the CUDA API rows by correlation id: native.read_pages ---------------------

WORK = ("rowid", "start", "end", "globalPid", "streamId")
WORK_SCHEMA = dict.fromkeys(("rowid", "start_ns", "end_ns", "gpid", "stream_id"), pl.Int64)


def _paged(path: Path, table: str, columns: tuple[str, ...], runs: int) -> tuple[native.Plan, list[Any], bytes,
                                                                                 list[int]]:
    con = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        classes = damage.column_classes(con, table)
        layout = scan.page_layout(con, table, {c: c for c in columns if c != "rowid"},
                                  [c for c in columns if c != "rowid"])
    finally:
        con.close()
    assert classes is not None and layout is not None
    plan = native.plan(readonly_uri(path), table)
    assert plan.why == ""
    return plan, plan.runs(runs), classes, ([-2] if columns[0] == "rowid" else []) + layout


def _read_all(path: Path, table: str, columns: tuple[str, ...], schema: dict[str, Any], runs: int,
              **kw: Any) -> tuple[pl.DataFrame, int, int]:
    plan, parts, classes, layout = _paged(path, table, columns, runs)
    frames, wrong, visited = [], 0, 0
    for first, last, _, _ in parts:
        got = native.read_pages(readonly_uri(path), plan, (first, last), classes, layout, schema, **kw)
        assert got.rows is not None and got.check == "", got
        frames.append(got.rows)
        wrong += got.mismatched
        visited += got.visited
    return pl.concat(frames), wrong, visited


def _tables(path: Path, names: tuple[str, ...]) -> list[str]:
    con = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        return [t for t in names if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]
    finally:
        con.close()


GPU_TABLES = [(p, t) for p in BUNDLED for t in _tables(p, ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"))]


@pytest.mark.parametrize(("path", "table"), GPU_TABLES, ids=lambda x: getattr(x, "stem", x))
def test_the_gpu_tables_read_from_their_pages_as_sqlite_reads_them(path: Path, table: str) -> None:
    sql = f'SELECT rowid, start, "end", globalPid, streamId FROM {quote(table)}'
    expected, wrong = native.read_ints(readonly_uri(path), sql, WORK_SCHEMA)
    for runs in (1, 3):
        got, got_wrong, visited = _read_all(path, table, WORK, WORK_SCHEMA, runs)
        assert got.equals(expected) and (got_wrong, visited) == (wrong, expected.height)


def _work_table(path: Path, rows: list[tuple[Any, ...]]) -> None:
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE W (start INTEGER, "end" INTEGER, deviceId INTEGER, streamId INTEGER, '
                "globalPid INTEGER, correlationId INTEGER, shortName INTEGER)")
    con.executemany("INSERT INTO W VALUES (?, ?, 0, ?, ?, ?, 7)", rows)
    con.commit()
    con.close()


@pytest.mark.parametrize("seed", sweep(range(8), keep=0))
def test_the_rows_kept_are_those_the_stalls_reduction_can_use_and_every_one_it_must_judge(
        tmp_path: Path, seed: int) -> None:
    """With windows and the capture's bounds, the reader leaves out exactly the rows with a known start
    and end inside the bounds that overlap no window of their process (gpu_work._inside's rule, by
    brute force here); NULLs, reversed rows, rows past the bounds and of no process are all judged
    as they are. Rows in no order, and (seeds 4-7) in time order with hundreds of windows a process,
    the processes interleaved: the reader's search from each process's last answer, forward and back."""
    rnd = random.Random(seed)
    path = tmp_path / "w.sqlite"
    maybe = lambda v: None if rnd.random() < 0.05 else v  # noqa: E731
    in_order = seed >= 4
    starts = [rnd.randrange(-50, 10_050) for _ in range(5_000)]
    rows = []
    for i, s in enumerate(sorted(starts) if in_order else starts):
        rows.append((maybe(s), maybe(s + rnd.randrange(-5, 40)), maybe(rnd.randrange(3)), maybe(rnd.randrange(1, 4)),
                     i))
    _work_table(path, rows)
    windows = {}
    for g in (1, 2, 3):
        edges = sorted(rnd.sample(range(0, 10_000), 2 * rnd.randrange(1, 600 if in_order else 30)))
        windows[g] = list(zip(edges[::2], edges[1::2], strict=True))
    frame = pl.DataFrame([(g, a, b) for g, ws in windows.items() for a, b in ws],
                         schema={"gpid": pl.Int64, "w_start": pl.Int64, "w_end": pl.Int64}, orient="row")
    lo, hi = (0, 10_000) if seed % 2 == 0 else (None, 9_000)
    keep = native.Keep(frame, lo, hi, (3, 1, 2))
    got, _, visited = _read_all(path, "W", WORK, WORK_SCHEMA, 2 + seed % 3, keep=keep)
    everything, _ = native.read_ints(readonly_uri(path), 'SELECT rowid, start, "end", globalPid, streamId FROM W',
                                     WORK_SCHEMA)

    def kept(r: dict[str, Any]) -> bool:
        s, e, g = r["start_ns"], r["end_ns"], r["gpid"]
        if s is None or e is None:
            return True
        if (lo is not None and min(s, e) < lo) or (hi is not None and max(s, e) > hi):
            return True
        return g is not None and any(a < e and b > s for a, b in windows.get(g, []))

    expected = everything.filter(pl.Series([kept(r) for r in everything.iter_rows(named=True)], dtype=pl.Boolean))
    assert visited == len(rows) and got.equals(expected)
    assert 0 < got.height < len(rows)


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The connected pieces of closed intervals (touching ones are one), sorted."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


@pytest.mark.parametrize("seed", sweep(range(8), keep=1))
def test_the_rows_added_up_by_the_reader_are_those_the_stalls_reduction_only_adds_up(
        tmp_path: Path, seed: int) -> None:
    """With the stalls (native.Stalls), the reader adds up itself every row _reduce would only add up (known
    start, end, process and stream, inside the bounds, not reversed, inside a window, near no attributed
    call's span) and returns the rest of the rows it keeps: per (stall, stream) the rows overlapping the
    stall and their time inside it, and per run the union of those rows per process, all by brute force
    here (stalls overlapping one another, rows in no order or, seeds 4-7, in time order with the
    processes interleaved; times spread over 2^40 ns)."""
    rnd = random.Random(seed)
    scale, base = 1 << 24, 1 << 50
    path = tmp_path / "w.sqlite"
    maybe = lambda v: None if rnd.random() < 0.03 else v  # noqa: E731
    starts = [rnd.randrange(-50, 10_050) for _ in range(6_000)]
    rows = []
    for i, s in enumerate(sorted(starts) if seed >= 4 else starts):
        e = s + rnd.choice([0, 0, rnd.randrange(-3, 40), rnd.randrange(0, 400)])
        rows.append((maybe(base + s * scale), maybe(base + e * scale), maybe(rnd.randrange(4)),
                     maybe(rnd.randrange(1, 4)), i))
    _work_table(path, rows)
    stalls = []
    for g in (1, 2, 3):
        for _ in range(rnd.randrange(1, 400 if seed >= 4 else 60)):
            a = rnd.randrange(0, 10_000)
            stalls.append((len(stalls) * 7 + 3, g, base + a * scale, base + (a + rnd.randrange(1, 300)) * scale))
    frame = pl.DataFrame(stalls, schema=dict.fromkeys(("call_id", "gpid", "a", "b"), pl.Int64), orient="row")
    windows = {g: _union([(a, b) for _, h, a, b in stalls if h == g]) for g in (1, 2, 3)}
    top = {g: _union([(a, b) for _, h, a, b in stalls if h == g and rnd.random() < 0.1]) for g in (1, 2, 3)}
    spans = pl.DataFrame([(g, a, b) for g, ws in windows.items() for a, b in ws],
                         schema={"gpid": pl.Int64, "w_start": pl.Int64, "w_end": pl.Int64}, orient="row")
    tops = pl.DataFrame([(g, a, b) for g, ws in top.items() for a, b in ws],
                        schema={"gpid": pl.Int64, "w_start": pl.Int64, "w_end": pl.Int64}, orient="row")
    lo, hi = (base, base + 10_000 * scale) if seed % 2 == 0 else (None, base + 9_000 * scale)
    keep = native.Keep(spans, lo, hi, (3, 1, 2), native.Stalls(frame, tops, 4))
    plan, parts, classes, layout = _paged(path, "W", WORK, 2 + seed % 3)

    def overlaps(r: tuple[Any, ...], intervals: list[tuple[int, int]]) -> bool:
        return any(a < r[1] and b > r[0] for a, b in intervals)

    def added(r: tuple[Any, ...]) -> bool:
        s, e, st, g = r[:4]
        return (None not in (s, e, st, g) and (lo is None or min(s, e) >= lo) and (hi is None or max(s, e) <= hi)
                and e >= s and overlaps(r, windows.get(g, [])) and not overlaps(r, top.get(g, [])))

    sums: dict[tuple[int, int], list[int]] = {}
    for first, last, a_id, b_id in parts:
        got = native.read_pages(readonly_uri(path), plan, (first, last), classes, layout, WORK_SCHEMA, keep)
        assert got.rows is not None and got.sums is not None and got.pieces is not None and got.check == ""
        mine = [(*r[:4], rowid) for rowid, r in enumerate(rows, 1) if a_id <= rowid <= b_id]
        summed = [r for r in mine if added(r)]
        assert not set(got.rows["rowid"].to_list()) & {r[4] for r in summed}
        assert got.rows.height + len(summed) == native.read_pages(
            readonly_uri(path), plan, (first, last), classes, layout, WORK_SCHEMA,
            native.Keep(spans, lo, hi, (3, 1, 2))).rows.height  # type: ignore[union-attr]
        expected = [(g, a, b) for g in (1, 2, 3) for a, b in _union([(r[0], r[1]) for r in summed if r[3] == g])]
        assert got.pieces.rows() == expected
        for r in summed:
            for call, g, a, b in stalls:
                if g == r[3] and a < r[1] and b > r[0]:
                    one = sums.setdefault((call, r[2]), [0, 0])
                    one[0] += 1
                    one[1] += min(r[1], b) - max(r[0], a)
        for call, stream, n, busy in got.sums.rows():
            sums[(call, stream)][0] -= n
            sums[(call, stream)][1] -= busy
    assert sums and all(v == [0, 0] for v in sums.values())


def test_the_cuda_api_rows_of_some_correlation_ids_read_from_the_pages_as_sqlite_gives_them() -> None:
    path = TORCH / "observe.sqlite"
    columns = ("globalTid", "start", "correlationId", "nameId")
    schema = dict.fromkeys(("gtid", "start_ns", "correlation_id", "name_id"), pl.Int64)
    con = sqlite3.connect(readonly_uri(path), uri=True)
    corrs = sorted(r[0] for r in con.execute(f"SELECT correlationId FROM {RUNTIME} WHERE rowid % 97 = 3"))
    con.close()
    ids = pl.Series([*corrs, -5, 10**15], dtype=pl.Int64)  # and ids no row carries
    got, wrong, visited = _read_all(path, RUNTIME, columns, schema, 3, keys=(ids, 2))
    expected, _ = native.read_ints(readonly_uri(path), f"SELECT globalTid, start, correlationId, nameId FROM {RUNTIME} "
                                   f"WHERE correlationId IN ({', '.join(map(str, ids.to_list()))})", schema)
    assert got.equals(expected) and got.height == len(set(corrs)) > 10 and wrong == 0 and visited > got.height
