"""One pass over the CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME), however large it is.

Real exports hold tens of millions of API rows. SQLite's GROUP BY sorts every row, so instead
the table is streamed once (by the native engine where it is built, docs/native.md; else as Arrow
record batches from ADBC's SQLite driver, the ``adbc`` extra, read-only URI; else by the stdlib
reader), split by rowid range across worker threads, and each batch is reduced at once with polars:

- per process: first start, last end and row count (coverage);
- the rows that matter: every non-zero or NULL return (census and findings) and every call on a thread
  with library calls that overlaps one of them (the nested-join candidates);
- integrity counts: NULLs in NOT NULL columns, reversed ranges, name ids missing from StringIds.

Memory is bounded by the batch size plus the selected rows, not by the table. When ADBC cannot
read the table (a value whose type contradicts the column, from a damaged or crafted export),
the same reduction runs over the stdlib ``sqlite3`` module, slower but tolerant: such values
become NULL and are counted in the warnings, never silently "fixed".
"""

from __future__ import annotations

import importlib
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from nsysaudit import words
from nsysaudit.core.errors import UnusableInput
from nsysaudit.core.ids import global_pid
from nsysaudit.core.limits import return_freed_memory, threads
from nsysaudit.core.order import sort_stable
from nsysaudit.core.progress import Progress
from nsysaudit.core.shapes import Schema
from nsysaudit.read import native
from nsysaudit.read.damage import affinity, column_classes, indexed
from nsysaudit.read.source import quote, readonly_uri

BATCH_ROWS = 1 << 18
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
PARALLEL_MIN_ROWS = 1 << 20
PARTS_PER_WORKER = 4
# Below this many rows the stdlib reader is used from the start: importing ADBC and pyarrow costs
# more (~0.3 s) than reading a small table with sqlite3. The reduction, and so the result, is the same.
# ADBC and pyarrow are the ``adbc`` extra: without them every table is read by the stdlib reader.
ADBC_MIN_ROWS = 50_000

# The table's columns the scan reads, in the order of ROW_SCHEMA's (and of the native scan's).
COLUMNS = ("globalTid", "start", "end", "returnValue", "nameId", "correlationId")
ROW_SCHEMA: Schema = {
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "return_code": pl.Int64,
    "name_id": pl.Int64,
    "correlation_id": pl.Int64,
}
# A CUDA API row as the rules read it, its name decoded (the calls of interest, the blocking
# candidates, an NCCL helper thread's calls).
CALL_SCHEMA: Schema = {
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "correlation_id": pl.Int64,
    "name_id": pl.Int64,
    "api": pl.String,
    "return_code": pl.Int64,
}
SPAN_SCHEMA: Schema = {"gpid": pl.Int64, "first_ns": pl.Int64, "last_ns": pl.Int64, "rows": pl.Int64}
ALLOC_ROWS_SCHEMA: Schema = {
    "gpid": pl.Int64,
    "correlation_id": pl.Int64,
    "rows": pl.Int64,
    "name_id": pl.Int64,
}
PROBLEMS = ("null_start", "null_end", "null_return", "null_gtid", "null_name_id", "reversed", "dangling_name_id")


@dataclass
class CudaApiScan:
    """What one pass over the CUDA API table found.

    ``span``: per globalPid, ``first_ns, last_ns, rows`` (gpid null for rows without globalTid).
    ``selected``: rows with a non-zero return or overlapping a library window (``ROW_SCHEMA``).
    ``marked``: the successful rows whose name id is one of ``marked_name_ids`` (the stream-capture
    calls: few, and needed whatever their return) (``ROW_SCHEMA``).
    ``alloc_rows``: per (globalPid, correlation id) of ``alloc_keys`` (the allocation events), how many
    rows of the whole table carry it and one of their name ids (``ALLOC_ROWS_SCHEMA``): more than
    one row, and the event's bytes cannot be attributed to one call.
    ``counted``: how many successful rows have a name id of ``counted_name_ids`` (the free calls).
    ``problems``: integrity counts (see ``PROBLEMS``). ``engine``: ``native``, ``adbc`` or ``sqlite3``
    (the SQLite it reads with: :func:`engine_sqlite_version`). ``checked``: what the native reader's
    own check of the table found as it read its pages ("" sound: SQLite's quick_check would say
    nothing; else why it is unsure), None where it did not check it (:mod:`nsysaudit.read.damage`).
    """

    total: int
    span: pl.DataFrame
    selected: pl.DataFrame
    problems: dict[str, int]
    engine: str
    type_mismatch_rows: int = 0
    marked: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ROW_SCHEMA))
    alloc_rows: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ALLOC_ROWS_SCHEMA))
    counted: int = 0
    page_rows: int = 0  # rows the native scan read from the table's pages (not through SQLite's VDBE)
    checked: str | None = None
    # The rows of one of ``wanted_keys`` whatever their return, in rowid order (ROW_SCHEMA); None where
    # the scan did not gather them (no keys, or an engine other than the native one).
    keyed: pl.DataFrame | None = None
    # The table's leaves (its plan's) in groups with the least and greatest correlation id of their
    # rows (native.GROUP_SCHEMA; a group without one is left out: none of its rows carries an id),
    # where the native engine read every range from the pages; else None.
    corr_groups: pl.DataFrame | None = None


@dataclass(frozen=True)
class _Reduced:
    span: pl.DataFrame
    selected: pl.DataFrame
    problems: dict[str, int]
    marked: pl.DataFrame
    alloc_rows: pl.DataFrame
    counted: int
    keyed: pl.DataFrame | None = None  # CudaApiScan.keyed of the range (the native engine only)
    corr_groups: pl.DataFrame | None = None  # CudaApiScan.corr_groups of the range (ditto)


def _reduce(
    batch: pl.DataFrame,
    windows: pl.DataFrame,
    string_ids: pl.Series | None,
    marked_ids: pl.Series | None = None,
    alloc_keys: pl.DataFrame | None = None,
    counted_ids: pl.Series | None = None,
) -> _Reduced:
    """Reduce one batch: its per-process span, selected rows, integrity counts, marked rows and
    the rows carrying an allocation event's correlation id (see :class:`CudaApiScan`)."""
    gpid = global_pid(pl.col("gtid"))
    span = batch.group_by(gpid.alias("gpid")).agg(
        pl.col("start_ns").min().alias("first_ns"),
        pl.max_horizontal(pl.col("end_ns").max(), pl.col("start_ns").max()).alias("last_ns"),
        pl.len().cast(pl.Int64).alias("rows"),
    )
    # A NULL return is unknown, not success: kept with the failures (census ignores it, the
    # integrity review asks whether it could hide a nested failure).
    failed = batch.filter(pl.col("return_code").is_null() | (pl.col("return_code") != 0))
    candidates = pl.DataFrame(schema=ROW_SCHEMA)
    if windows.height:
        on_lib_threads = batch.filter(
            (pl.col("return_code") == 0)
            & pl.col("gtid").is_in(windows["gtid"].unique().implode())
            & pl.col("start_ns").is_not_null()
            & pl.col("end_ns").is_not_null()
        )
        if on_lib_threads.height:
            # The last window starting at or before the call's end overlaps the call iff it
            # ends at or after the call's start (windows of a thread are disjoint).
            candidates = (
                on_lib_threads.sort("end_ns")
                .join_asof(
                    windows,
                    left_on="end_ns",
                    right_on="w_start",
                    by="gtid",
                    strategy="backward",
                    check_sortedness=False,
                )
                .filter(pl.col("w_end") >= pl.col("start_ns"))
                .select(list(ROW_SCHEMA))
            )
    problems = batch.select(
        pl.col("start_ns").is_null().sum().alias("null_start"),
        pl.col("end_ns").is_null().sum().alias("null_end"),
        pl.col("return_code").is_null().sum().alias("null_return"),
        pl.col("gtid").is_null().sum().alias("null_gtid"),
        pl.col("name_id").is_null().sum().alias("null_name_id"),
        (pl.col("end_ns") < pl.col("start_ns")).sum().alias("reversed"),
        (
            pl.col("name_id").is_not_null() & ~pl.col("name_id").is_in(string_ids.implode())
            if string_ids is not None
            else pl.lit(False)
        )
        .sum()
        .alias("dangling_name_id"),
    ).row(0, named=True)
    marked = (
        batch.filter((pl.col("return_code") == 0) & pl.col("name_id").is_in(marked_ids.implode())).select(
            list(ROW_SCHEMA)
        )
        if marked_ids is not None and marked_ids.len()
        else batch.clear().select(list(ROW_SCHEMA))
    )
    selected = pl.concat([failed.select(list(ROW_SCHEMA)), candidates])
    alloc_rows = pl.DataFrame(schema=ALLOC_ROWS_SCHEMA)
    if alloc_keys is not None and alloc_keys.height:
        alloc_rows = (
            batch.select(gpid.alias("gpid"), "correlation_id", "name_id")
            .join(alloc_keys, on=["gpid", "correlation_id"], how="semi")
            .group_by("gpid", "correlation_id")
            .agg(pl.len().cast(pl.Int64).alias("rows"), pl.col("name_id").first())
        )
    counted = (
        batch.filter((pl.col("return_code") == 0) & pl.col("name_id").is_in(counted_ids.implode())).height
        if counted_ids is not None and counted_ids.len()
        else 0
    )
    return _Reduced(span, selected, {k: int(v or 0) for k, v in problems.items()}, marked, alloc_rows, counted)




# SQLite's names for a row's integer key. A declared column of one of these names hides it under
# that name ("rowid TEXT" in a crafted export), so the scan uses the first one no column declares.
ROWID_NAMES = ("rowid", "_rowid_", "oid")


def rowid_name(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> str | None:
    """The name that reaches ``table``'s integer rowid, or None (WITHOUT ROWID, or every name declared)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    if row is not None and isinstance(row[0], str) and re.search(r"\bWITHOUT\s+ROWID\b", row[0], re.IGNORECASE):
        return None
    declared = {c.lower() for c in columns}
    return next((name for name in ROWID_NAMES if name not in declared), None)


def page_layout(
    conn: sqlite3.Connection, table: str, present: dict[str, str], columns: Sequence[str] = COLUMNS
) -> list[int] | None:
    """Where each of ``columns`` (the scan's six) lies in ``table``'s records (-1: a column the table
    lacks, read as NULL), for the native page reader; None where it must leave the pages to SQLite:
    a generated or hidden column (not stored where its position says), a column that is the
    rowid's alias (stored as NULL), or one of REAL affinity (SQLite stores an integral REAL as an
    integer and reads it back as REAL). The C reader checks the file and each page itself."""
    try:
        info = conn.execute("SELECT name, type, pk, hidden FROM pragma_table_xinfo(?)", (table,)).fetchall()
    except sqlite3.DatabaseError:  # an SQLite before 3.26 (no table_xinfo): SQLite reads the rows
        return None
    if not info or any(hidden != 0 for *_, hidden in info):
        return None
    position = {name: (i, declared or "", pk) for i, (name, declared, pk, _) in enumerate(info)}
    layout = []
    for c in columns:
        if present[c] == "NULL":
            layout.append(-1)
            continue
        if c not in position:
            return None
        i, declared, pk = position[c]
        if pk or affinity(declared) == "REAL":
            return None
        layout.append(i)
    return layout


def _select_sql(table: str, columns: dict[str, str], rowid: str | None, wrap: str | None = None) -> str:
    """The SELECT of the six columns for a rowid range; ``wrap``: the six as one function's arguments
    (the native engine's aggregate, ``nsa_reduce``)."""
    cols = ", ".join(columns[c] for c in COLUMNS)
    if wrap is not None:
        cols = f"{wrap}({cols})"
    if rowid is None:  # no usable rowid: one partition, the whole table (the bounds are ignored)
        return f"SELECT {cols} FROM {quote(table)} WHERE ? IS NOT NULL AND ? IS NOT NULL"
    return f"SELECT {cols} FROM {quote(table)} WHERE {rowid} BETWEEN ? AND ?"


def _count_rows(uri: str, table: str) -> int:
    """``count(*)`` of ``table`` on a connection of its own (any thread)."""
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {quote(table)} NOT INDEXED").fetchone()
    return int(n)


def _adbc_batches(uri: str, sql: str, lo: int, hi: int) -> Iterator[pl.DataFrame]:
    import adbc_driver_sqlite.dbapi as adbc

    conn = adbc.connect(uri)
    try:
        cur = conn.cursor()
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(sql, (lo, hi))
        reader = cur.fetch_record_batch()
        for record_batch in reader:
            # A column ADBC typed other than int64 holds values of the wrong type, possibly invalid
            # UTF-8 that polars cannot survive (it aborts the process): the sqlite3 engine reads it.
            wrong = [f.name for f in record_batch.schema if str(f.type) not in ("int64", "null")]
            if wrong:
                raise TypeError(f"ADBC typed {', '.join(wrong)} as non-integer")
            df = pl.from_arrow(record_batch)
            assert isinstance(df, pl.DataFrame)
            yield df.rename(dict(zip(df.columns, ROW_SCHEMA, strict=True))).cast(ROW_SCHEMA)  # type: ignore[arg-type]
        cur.close()
    finally:
        conn.close()


def _sqlite_batches(path: Path, sql: str, lo: int, hi: int, mismatches: list[int]) -> Iterator[pl.DataFrame]:
    conn = sqlite3.connect(readonly_uri(path), uri=True)
    conn.text_factory = bytes  # integer columns only: TEXT there is a mismatch, even if not UTF-8
    try:
        cur = conn.execute(sql, (lo, hi))
        while rows := cur.fetchmany(BATCH_ROWS // 4):
            strict_ok = [r for r in rows if all(v is None or type(v) is int for v in r)]
            if len(strict_ok) != len(rows):
                mismatches.append(len(rows) - len(strict_ok))
                rows = [tuple(v if type(v) is int else None for v in r) for r in rows]
            yield pl.DataFrame(rows, schema=ROW_SCHEMA, orient="row")
    finally:
        conn.close()


def scan_cuda_api(
    conn: sqlite3.Connection,
    path: Path,
    table: str,
    columns: tuple[str, ...],
    windows: pl.DataFrame,
    string_ids: pl.Series | None,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    marked_name_ids: pl.Series | None = None,
    alloc_keys: pl.DataFrame | None = None,
    counted_name_ids: pl.Series | None = None,
    wanted_keys: pl.DataFrame | None = None,
) -> CudaApiScan:
    """Stream the CUDA API table once and reduce it (see the module docstring). ``windows``: the union of
    the closed library calls per thread (``gtid, w_start, w_end``, :func:`nsysaudit.core.intervals.union_windows`).
    ``wanted_keys`` (``gpid, correlation_id``): the native engine also hands back every row of one of
    them (:attr:`CudaApiScan.keyed`), so that no second pass reads them."""
    present = {
        c: quote(c) if c in columns else "NULL"
        for c in COLUMNS
    }
    rowid = rowid_name(conn, table, columns)
    extent = _extent(conn, path, table, rowid, count_first=rowid is None or progress is not None)
    if extent is None:
        return CudaApiScan(
            0, pl.DataFrame(schema=SPAN_SCHEMA), pl.DataFrame(schema=ROW_SCHEMA), dict.fromkeys(PROBLEMS, 0), "sqlite3"
        )
    size = extent.total if extent.total is not None else extent.hi - extent.lo + 1  # at most this many rows
    # Under an address-space limit, no more threads than it leaves room for (nsysaudit/core/limits.py).
    n_workers = workers or (threads(min(os.cpu_count() or 1, 4)) if size >= PARALLEL_MIN_ROWS else 1)
    if rowid is None:
        n_workers = 1
    uri = readonly_uri(path)  # never plain mode=ro: SQLite would read and write side files
    reading = _Reading(
        conn, path, uri, table, present, rowid, _select_sql(table, present, rowid), windows, string_ids,
        marked_name_ids, alloc_keys, counted_name_ids, progress, n_workers, _ranges(extent, n_workers),
        wanted_keys=wanted_keys,
    )
    polars_engine = "adbc" if size >= ADBC_MIN_ROWS else "sqlite3"
    engine = "native" if native.load() is not None else polars_engine
    if engine == "native":
        reading = _planned(reading)
    if progress is not None:
        progress.start(words.scanning(size), int(size))
    counter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsysaudit-count")
    # The native reader's check reaches every page of the table once: its rows are count(*)'s.
    planned = reading.pages is not None and reading.pages.why == ""
    counting = counter.submit(_count_rows, uri, table) if extent.total is None and not planned else None
    try:
        engine, read = _read(reading, engine, polars_engine, size)
        if read.checked == "":
            total = read.visited
        elif counting is not None:
            total = counting.result()
        else:
            total = extent.total if extent.total is not None else _count_rows(uri, table)
    finally:
        counter.shutdown(wait=True)
        if progress is not None:
            progress.finish()
    # SQLite reading by rowid range seeks each range's start by binary search; on a damaged b-tree
    # that seek, or the walk on from it, can pass rows by without an error. Its count(*) walks the
    # b-tree's pages instead: whatever the engine, the two must agree (the same check for every
    # engine; PRAGMA quick_check, nsysaudit.read.damage, says whether the b-tree itself is sound,
    # and where the native reader's own check found it sound, every page was reached once).
    if total != read.visited:
        raise UnusableInput(
            path,
            f"damaged SQLite file: table {table} holds {total:,} rows by SQLite's count(*), "
            f"but reading them by rowid gives {read.visited:,}",
        )
    return _combined(int(total), engine, read)


@dataclass(frozen=True)
class _Plan:
    """The native reader's plan of the table (its interior pages checked: ``why`` "" when sound),
    each column's class for the check, and its runs of leaves (``first, last``, one per part)."""

    plan: native.Plan | None
    why: str
    classes: bytes
    runs: list[tuple[int, int]]


def _planned(reading: _Reading) -> _Reading:
    """``reading`` with the native reader's plan of the table: where its rows are ones the native
    check can check and its plan is sound, its parts are the plan's runs of leaves (their rowid
    ranges, together every rowid once), else as they were, with why the check is unsure. (A table
    with an index is read from its pages too, but its check cannot stand for quick_check's, which
    checks the index's b-tree as well.)"""
    r = reading
    classes = column_classes(r.conn, r.table)
    if classes is None:
        return r
    try:
        plan = native.plan(r.uri, r.table)
    except native.NativeScanError as exc:
        return replace(r, pages=_Plan(None, str(exc), classes, []))
    if plan.why:
        return replace(r, pages=_Plan(None, plan.why, classes, []))
    # a table without a usable rowid name is read by SQLite in one part (its bounds ignored)
    n_parts = len(r.parts) if r.rowid is not None else 1
    runs = plan.runs(n_parts)
    why = "an index: quick_check checks its b-tree" if indexed(r.conn, r.table) else ""
    return replace(
        r,
        parts=[(lo, hi) for *_, lo, hi in runs],
        pages=_Plan(plan, why, classes, [(first, last) for first, last, *_ in runs]),
    )


@dataclass(frozen=True)
class _Extent:
    """The table's rows (None: not counted yet, see :func:`_extent`) and its min and max rowid."""

    total: int | None
    lo: int
    hi: int


def _extent(
    conn: sqlite3.Connection, path: Path, table: str, rowid: str | None, *, count_first: bool
) -> _Extent | None:
    """The rowids to read (None for an empty table); the count too when ``count_first`` (a table
    without rowid, a progress line that shows the count first), else it is counted beside the scan."""

    def count_rows() -> int:
        (n,) = conn.execute(f"SELECT count(*) FROM {quote(table)} NOT INDEXED").fetchone()
        return int(n)

    # Separate statements on purpose: count(*) alone walks only the b-tree pages (SQLite's count
    # optimization) and min/max(rowid) alone are single seeks; combined they cost a full scan.
    # Even alone count(*) reads every page of the table (0.1-0.2 s at 20M rows), so it is run
    # first only for a table without rowid and for the progress line that shows the count first;
    # otherwise beside the scan, on a connection of its own, to check the rows the scan visits.
    # NOT INDEXED: SQLite would count the entries of the table's smallest index instead (an
    # export another tool added indexes to), and the rows the scan reads are the table's.
    total: int | None = count_rows() if count_first else None
    if rowid is None:
        lo, hi = 0, 0
    else:
        (lo,) = conn.execute(f"SELECT min({rowid}) FROM {quote(table)}").fetchone()
        (hi,) = conn.execute(f"SELECT max({rowid}) FROM {quote(table)}").fetchone()
    if lo is None and total is None:
        total = count_rows()  # an empty b-tree: instant (rows here would mean a damaged one)
    if total == 0:
        return None
    if lo is None or hi < lo:
        raise UnusableInput(
            path, f"damaged SQLite file: table {table} holds rows, but SQLite's min and max rowid are {lo} and {hi}"
        )
    return _Extent(total, lo, hi)


def _ranges(extent: _Extent, n_workers: int) -> list[tuple[int, int]]:
    """The rowid ranges the workers read, together every rowid once."""
    lo, hi = extent.lo, extent.hi
    # More ranges than threads: a thread that finishes early takes the next range instead of idling
    # while the other reads a slower stretch (the rows inside library calls are not spread evenly).
    n_parts = n_workers * PARTS_PER_WORKER if n_workers > 1 else 1
    step = (hi - lo) // n_parts + 1
    parts = [(lo + i * step, min(hi, lo + (i + 1) * step - 1)) for i in range(n_parts)]
    # The first and last ranges reach past SQLite's min and max rowid: each is one seek into the
    # b-tree, which on a damaged one can land short of its ends, and the rows beyond would never be
    # read. Over every rowid, every row is visited (and checked, by the page reader) exactly once.
    parts[0] = (INT64_MIN, parts[0][1])
    parts[-1] = (parts[-1][0], INT64_MAX)
    return parts


@dataclass(frozen=True)
class _Reading:
    """What every engine reads, and reduces each batch with (see :func:`_reduce`)."""

    conn: sqlite3.Connection
    path: Path
    uri: str
    table: str
    present: dict[str, str]
    rowid: str | None
    sql: str
    windows: pl.DataFrame
    string_ids: pl.Series | None
    marked_ids: pl.Series | None
    alloc_keys: pl.DataFrame | None
    counted_ids: pl.Series | None
    progress: Progress | None
    workers: int
    parts: list[tuple[int, int]]
    pages: _Plan | None = None  # the native reader's plan (:func:`_planned`)
    wanted_keys: pl.DataFrame | None = None


@dataclass(frozen=True)
class _Read:
    """What an engine read: the reductions (ranges in order, then batches), the rows it visited,
    those with a value of the wrong type, those the native page reader read, and what its check of
    the table found (:attr:`CudaApiScan.checked`)."""

    reduced: list[_Reduced]
    visited: int
    mismatches: int = 0
    page_rows: int = 0
    checked: str | None = None


def _read(reading: _Reading, engine: str, polars_engine: str, size: int) -> tuple[str, _Read]:
    """Read with ``engine``; where it cannot, with the next (native, then ADBC, then the tolerant
    sqlite3 reader, which says why, if it cannot either). The engine that read it, and what it read."""
    progress = reading.progress
    if engine == "native":
        try:
            return "native", _read_native(reading)
        except native.NativeScanError:  # the polars engines read it (and say why they cannot, if so)
            engine = polars_engine
            if progress is not None:
                progress.finish()
                progress.start(words.scanning(size), int(size))
    if engine == "adbc" and not adbc_installed():  # an install without the adbc extra: the stdlib reader
        engine = "sqlite3"
    if engine == "adbc":
        try:
            with ThreadPoolExecutor(max_workers=reading.workers) as pool:
                return "adbc", _joined(list(pool.map(lambda p: _read_polars(reading, p, True), reading.parts)))
        except Exception:  # any ADBC failure (missing driver, a value of the wrong type): the tolerant reader
            if progress is not None:
                progress.finish()
                progress.start(words.scanning(size, tolerant=True), int(size))
    return "sqlite3", _joined([_read_polars(reading, p, False) for p in reading.parts])


def _joined(reads: list[_Read]) -> _Read:
    return _Read([r for read in reads for r in read.reduced], sum(r.visited for r in reads),
                 sum(r.mismatches for r in reads), sum(r.page_rows for r in reads))


def _read_polars(reading: _Reading, part: tuple[int, int], use_adbc: bool) -> _Read:
    """One rowid range in batches (ADBC's, or the stdlib reader's), each reduced with polars."""
    r = reading
    mismatches: list[int] = []
    batches = _adbc_batches(r.uri, r.sql, *part) if use_adbc else _sqlite_batches(r.path, r.sql, *part, mismatches)
    out = []
    visited = 0
    for batch in batches:
        visited += batch.height
        out.append(_reduce(batch, r.windows, r.string_ids, r.marked_ids, r.alloc_keys, r.counted_ids))
        if r.progress is not None:
            r.progress.advance(batch.height)
    return _Read(out, visited, sum(mismatches))


def _read_native(reading: _Reading) -> _Read:
    """Every range with the C engine: its page reader, which checks each run of leaves of the
    table's plan as it reads it (and reduces its rows where the layout allows), else its SQLite
    aggregate."""
    r = reading
    inputs = native.prepare(r.windows, r.string_ids, r.marked_ids, r.counted_ids, r.alloc_keys, r.wanted_keys)
    reduce_sql = _select_sql(r.table, r.present, r.rowid, wrap="nsa_reduce")
    plan = r.pages
    layout = page_layout(r.conn, r.table, r.present) if plan is not None and plan.plan is not None else None

    def one(i: int) -> tuple[_Read, tuple[pl.Series, pl.Series] | None]:
        pages = None
        if plan is not None and plan.plan is not None:
            pages = native.Pages(plan.plan, *plan.runs[i], plan.classes, layout)
        out = native.scan_range(r.uri, reduce_sql, *r.parts[i], inputs, list(ROW_SCHEMA), pages)
        if r.progress is not None:
            r.progress.advance(out["rows"])
        problems = dict(zip(PROBLEMS, out["problems"], strict=True))
        no_alloc = pl.DataFrame(schema=ALLOC_ROWS_SCHEMA)
        reduced = _Reduced(out["span"], out["selected"], problems, out["marked"], no_alloc, out["counted"],
                           out["keyed"], out["corr_groups"])
        checked = out["check"] if pages is not None else None
        return _Read([reduced], out["rows"], out["mismatch_rows"], out["page_rows"], checked), out["alloc"]

    with ThreadPoolExecutor(max_workers=r.workers) as pool:
        done = list(pool.map(one, range(len(r.parts))))
    # The allocation keys' counts of every range, joined once (the first range carries them).
    alloc = native.merge_alloc(inputs.keys, [counts for _, counts in done])
    read = _joined([part for part, _ in done])
    # The table's check: its plan's (unsure of an interior page: no runs), else the first unsure run's.
    checked = None if plan is None else plan.why or next((p.checked for p, _ in done if p.checked), "")
    if read.visited >= PARALLEL_MIN_ROWS:  # what the threads' C buffers held, freed, not kept in RSS
        return_freed_memory()
    return replace(read, checked=checked, reduced=[replace(red, alloc_rows=alloc) if i == 0 else red
                                                   for i, red in enumerate(read.reduced)])


def _combined(total: int, engine: str, read: _Read) -> CudaApiScan:
    """The reductions of every batch or range as one scan's result."""
    reduced = read.reduced
    problems = dict.fromkeys(PROBLEMS, 0)
    for r in reduced:
        for k, v in r.problems.items():
            problems[k] += v
    spans = [r.span for r in reduced]
    span = (
        pl.concat(spans)
        .group_by("gpid")
        .agg(pl.col("first_ns").min(), pl.col("last_ns").max(), pl.col("rows").sum())
        .sort("gpid", nulls_last=True)
        if spans
        else pl.DataFrame(schema=SPAN_SCHEMA)
    )

    def rows_of(frames: list[pl.DataFrame]) -> pl.DataFrame:
        kept = [f for f in frames if f.height]
        if not kept:
            return pl.DataFrame(schema=ROW_SCHEMA)
        return sort_stable(pl.concat(kept), ["gtid", "start_ns", "correlation_id"], nulls_last=True)

    alloc_parts = [r.alloc_rows for r in reduced if r.alloc_rows.height]
    if len(alloc_parts) == 1:  # one part's rows are already one per key (a group-by, or merge_alloc)
        alloc_rows = sort_stable(alloc_parts[0].select(list(ALLOC_ROWS_SCHEMA)), ["gpid", "correlation_id"])
    elif alloc_parts:
        alloc_rows = (
            pl.concat(alloc_parts)
            .group_by("gpid", "correlation_id")
            .agg(pl.col("rows").sum(), pl.col("name_id").first())
            .sort("gpid", "correlation_id")
        )
    else:
        alloc_rows = pl.DataFrame(schema=ALLOC_ROWS_SCHEMA)
    keyed = [r.keyed for r in reduced if r.keyed is not None]
    groups = [r.corr_groups for r in reduced if r.corr_groups is not None]
    return CudaApiScan(
        total, span, rows_of([r.selected for r in reduced]), problems, engine, read.mismatches,
        rows_of([r.marked for r in reduced]), alloc_rows, sum(r.counted for r in reduced), read.page_rows,
        read.checked,
        # in rowid order (the ranges' and batches' order), not sorted: as a second pass would read them
        pl.concat(keyed) if reduced and len(keyed) == len(reduced) else None,
        pl.concat(groups) if reduced and len(groups) == len(reduced) else None,
    )


def adbc_installed() -> bool:
    """Whether ADBC's SQLite driver and pyarrow can be imported: they are the ``adbc`` extra
    (``pip install 'nsysaudit[adbc]'``), not dependencies. Without them a large table is read by the
    stdlib reader from the start (the same reduction, slower), never tried with ADBC first."""
    try:
        importlib.import_module("adbc_driver_sqlite.dbapi")
        importlib.import_module("pyarrow")
    except ImportError:
        return False
    return True


def engine_sqlite_version(engine: str) -> str:
    """The SQLite an engine reads with: ADBC's driver carries its own; the native engine runs the
    one Python's sqlite3 runs (:mod:`nsysaudit.read.native` checks it), as the stdlib reader does."""
    if engine != "adbc":
        return sqlite3.sqlite_version
    import adbc_driver_sqlite.dbapi as adbc

    with closing(adbc.connect()) as conn:
        return str(conn.adbc_get_info()["vendor_version"])
