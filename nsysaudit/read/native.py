"""The native CUDA API scan and integer reader: the extension module ``nsysaudit.read._native``,
built from ``native/scan.c`` by the package build (``pip install``, or ``make native`` in a
checkout; its types in ``_native.pyi``).

The same reduction as :func:`nsysaudit.read.scan._reduce`, computed in C in one pass: from the
table's own b-tree pages where the scan can read them (:func:`plan`, then ``pages`` of
:func:`scan_range`: each leaf read once, and checked as SQLite's ``PRAGMA quick_check`` checks it),
else inside SQLite's C API (an aggregate function SQLite calls for each row); no value is decoded
into Arrow or Python except the rows kept. :func:`check_table` checks a table the scan does not
read the same way (:mod:`nsysaudit.read.damage` decides what the checks mean). :func:`read_ints`
reads a table of integer columns (the
memory events) without a Python object per value. Each call runs without the GIL, so rowid
ranges run in parallel threads.

The module links the SQLite library Python's own ``sqlite3`` module links, and is used only where
both run the same SQLite (the same ``sqlite3_sourceid()``): the SQLite that decides damage
(:mod:`nsysaudit.read.damage`) is then the one that reads the rows. Where it was not built (no C
compiler or no SQLite header when nsysaudit was installed), cannot be loaded, or runs another
SQLite, :func:`load` returns None, :func:`unavailable` says why (every report says it too), and
the scan uses its polars engines; ``NSYSAUDIT_NATIVE=0`` turns it off. tests/test_reading_scan.py checks
that all give the same answer.
"""

from __future__ import annotations

import array
import functools
import importlib
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

import polars as pl

from nsysaudit.core.shapes import Schema
from nsysaudit.words import native_unavailable

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from nsysaudit.read._native import Plan as Plan
    from nsysaudit.read._native import ScanResult

NCOL = 6
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# The interface of native/scan.c this module calls (its NSA_ABI): a build from another scan.c is not used.
ABI = 8


def check(importer: Callable[[], ModuleType]) -> tuple[ModuleType | None, str | None]:
    """The extension ``importer`` imports, if nsysaudit may use it: (the module, None), or (None, why
    not: a few words, then the detail in parentheses)."""
    try:
        module = importer()
    except ModuleNotFoundError:
        return None, native_unavailable("not_built")
    except ImportError as exc:
        return None, native_unavailable("not_loadable", detail=str(exc))
    if getattr(module, "ABI", None) != ABI:
        return None, native_unavailable("stale", detail=f"{getattr(module, 'ABI', None)}", abi=ABI)
    if sqlite3.threadsafety == 0:  # the scan's threads each open a connection of their own
        return None, native_unavailable("single_threaded")
    with closing(sqlite3.connect(":memory:")) as probe:
        (theirs,) = probe.execute("SELECT sqlite_source_id()").fetchone()
    if module.sqlite_source_id() != theirs:
        return None, native_unavailable("other_sqlite", detail=module.sqlite_version(),
                                        python_sqlite=f"{sqlite3.sqlite_version} of {theirs.split()[0]}")
    return module, None


@functools.cache
def _built() -> tuple[ModuleType | None, str | None]:
    """The extension, checked once per process."""
    return check(lambda: importlib.import_module("nsysaudit.read._native"))


def load() -> ModuleType | None:
    """The extension, or None (see :func:`unavailable`; ``NSYSAUDIT_NATIVE=0`` turns it off)."""
    if os.environ.get("NSYSAUDIT_NATIVE", "1") == "0":
        return None
    return _built()[0]


def unavailable() -> str | None:
    """Why the native engine cannot be used in this process, or None where it can."""
    if os.environ.get("NSYSAUDIT_NATIVE", "1") == "0":
        return "turned off (NSYSAUDIT_NATIVE=0)"
    return installed()


def installed() -> str | None:
    """Why this install cannot run the native engine (``NSYSAUDIT_NATIVE`` aside), or None where it can."""
    return _built()[1]


def _require() -> None:
    if load() is None:
        raise NativeScanError(f"the native engine is {unavailable()}")


class NativeScanError(RuntimeError):
    """The native scan could not read the range (the caller falls back to the polars engines)."""


# Arrays cross between C and polars through numpy (zero-copy views, one copy per column, ~20x
# faster than a Python int per value) once numpy is loaded, or from this many values on: about
# where a Python int per value costs what numpy's import does (0.1-0.16 s here). A small or
# mid-sized export never pays that import.
NUMPY_MIN_VALUES = 1 << 21


COPY_BLOCK_ROWS = 8_192  # rows of the grid copied into the columns at a time (15 columns: ~1 MB)


def _use_numpy(values: int) -> bool:
    return values >= NUMPY_MIN_VALUES or "numpy" in sys.modules


def _int_columns(values: bytes, n: int, ncol: int, names: list[str], nulls: Sequence[pl.Series | None]) -> pl.DataFrame:
    """``n`` rows of ``ncol`` int64 values (row-major, in ``values``) as a frame of ``names``; a
    value is NULL where its column's ``nulls`` series is true (None: no NULL in that column)."""
    if _use_numpy(n * ncol):
        import numpy as np

        grid = np.frombuffer(values, dtype=np.int64).reshape(n, ncol)
        # Each column copied out of the grid (a strided view of ``values``) into memory of its own,
        # which polars then holds; a block of rows at a time, all its columns, while it is in the
        # cache (a whole column at a time walks the 100 MB grid once per column: twice the CPU).
        own = [np.empty(n, dtype=np.int64) for _ in range(ncol)]
        for start in range(0, n, COPY_BLOCK_ROWS):
            block = grid[start:start + COPY_BLOCK_ROWS]
            for c in range(ncol):
                own[c][start:start + COPY_BLOCK_ROWS] = block[:, c]
        columns = [pl.Series(name, own[c], dtype=pl.Int64) for c, name in enumerate(names)]
    else:
        flat = array.array("q")
        flat.frombytes(values)
        columns = [pl.Series(name, flat[c::ncol], dtype=pl.Int64) for c, name in enumerate(names)]
    frame = pl.DataFrame(columns)
    masked = [(name, z) for name, z in zip(names, nulls, strict=True) if z is not None and z.any()]
    if not masked:
        return frame
    return frame.with_columns(
        pl.when(z).then(None).otherwise(pl.col(name)).alias(name) for name, z in masked
    )


def _bytes(values: bytes) -> pl.Series:
    """The uint8 values of ``values``."""
    if _use_numpy(len(values)):
        import numpy as np

        return pl.Series(np.frombuffer(values, dtype=np.uint8).copy(), dtype=pl.UInt8)
    return pl.Series(array.array("B", values), dtype=pl.UInt8)


def _without_null(nulls: bytes) -> bool:
    """Whether the reader's NULL marks mark nothing (every byte 0): then no column has a NULL, and no
    mask need be made (a pass over the marks per column; most reads have no NULL)."""
    return nulls.count(0) == len(nulls)


def _value_nulls(nulls: bytes, ncol: int) -> list[pl.Series | None]:
    """Each column's NULL mask from the marks of :func:`read` and :func:`read_pages` (a byte per
    value, 1: NULL, row-major); None for a column none of whose values is marked."""
    if _without_null(nulls):
        return [None] * ncol
    z = _bytes(nulls)
    return [z.gather_every(ncol, offset=c) == 1 if 1 in nulls[c::ncol] else None for c in range(ncol)]


def _rows(kept: tuple[bytes, bytes, int], names: list[str]) -> pl.DataFrame:
    values, nulls, n = kept
    if n == 0:
        return pl.DataFrame(schema=dict.fromkeys(names, pl.Int64))
    if _without_null(nulls):  # a byte of bits per row
        return _int_columns(values, n, NCOL, names, [None] * NCOL)
    bits = _bytes(nulls)
    return _int_columns(values, n, NCOL, names, [(bits & (1 << c)) != 0 for c in range(NCOL)])


def read_ints(uri: str, sql: str, schema: Schema, *, ordered: bool = False) -> tuple[pl.DataFrame, int]:
    """The rows of ``sql`` (every column an integer) as a frame of ``schema``, and how many values
    were not integers (read as NULL, as :func:`nsysaudit.read.trace.frame` reads them).

    ``ordered``: ``sql`` has an ORDER BY that must hold, so its rows are stepped out one by one.
    Otherwise they are gathered by an aggregate over it (``nsa_collect``, about twice as fast), in
    the order SQLite visits them, which for a query without ORDER BY is the order stepping gives."""
    _require()
    from nsysaudit.read import _native  # typed by _native.pyi; load() has imported and checked it

    names = list(schema)
    if not ordered:
        columns = ", ".join(f"c{i}" for i in range(len(names)))
        sql = f"WITH q({columns}) AS ({sql}) SELECT nsa_collect({columns}) FROM q"
    try:
        values, nulls, n, mismatched = _native.read(uri, sql, len(names), not ordered)
    except (_native.Error, MemoryError) as exc:
        raise NativeScanError(str(exc) or "out of memory") from None
    if n == 0:
        return pl.DataFrame(schema=schema), 0
    return _int_columns(values, n, len(names), names, _value_nulls(nulls, len(names))), mismatched


@dataclass(frozen=True)
class Stalls:
    """What :func:`read_pages` adds up itself of the rows it keeps (the host stalls' reduction,
    :func:`nsysaudit.read.gpu_work._reduce`'s numbers), rather than return them: ``stalls`` (``call_id,
    gpid, a, b``: each inside one of :class:`Keep`'s windows of its process, those windows being their
    union) and ``top`` (``gpid, w_start, w_end``: the attributed calls' windows, per process disjoint;
    a row overlapping one is returned, to be paired with them); ``stream``: the stream's position in
    the layout read."""

    stalls: pl.DataFrame
    top: pl.DataFrame
    stream: int


@dataclass(frozen=True)
class Keep:
    """Which rows :func:`read_pages` keeps: those overlapping one of ``windows`` (``gpid, w_start,
    w_end``: per process disjoint) of their process, and every row it cannot leave out for sure (a
    NULL start or end, one outside the capture's ``start`` .. ``stop``, None: not recorded). The
    columns of ``gpid``, ``start`` and ``end``: positions in the layout read. With ``stalls``, the rows
    it can add up are added up instead (:class:`Stalls`, :attr:`PagesRead.sums`)."""

    windows: pl.DataFrame
    start: int | None
    stop: int | None
    columns: tuple[int, int, int]
    stalls: Stalls | None = None

    @functools.cached_property
    def arrays(self) -> tuple[tuple[Buffer, Buffer, Buffer], tuple[Buffer, ...] | None]:
        """The windows as int64 buffers sorted by (gpid, w_end), and the reduction's (None: no
        reduction), made once for every run read with this Keep."""
        ordered = self.windows.sort("gpid", "w_end")
        w = (_i64(ordered["gpid"]), _i64(ordered["w_start"]), _i64(ordered["w_end"]))
        return w, None if self.stalls is None else _reduction(ordered, self.stalls)


def _reduction(windows: pl.DataFrame, spec: Stalls) -> tuple[Buffer, ...] | None:
    """``span_off, call, a, b, reach, t_gpid, t_start, t_end`` of read_pages' reduction: the stalls by
    window (``windows`` sorted by (gpid, w_end)) then start, each window's offset into them, the
    running maximum of their ends per window; None where a stall lies in no window (no reduction)."""
    indexed = windows.with_row_index("_w").with_columns(pl.col("_w").cast(pl.Int64))
    stalls = spec.stalls.select("call_id", "gpid", "a", "b").sort("a").join_asof(
        indexed.sort("w_start"), left_on="a", right_on="w_start", by="gpid", strategy="backward",
        check_sortedness=False)
    if stalls.filter(pl.col("_w").is_null() | (pl.col("b") > pl.col("w_end"))).height:
        return None
    stalls = stalls.sort("_w", "a", "call_id").with_columns(pl.col("b").cum_max().over("_w").alias("_reach"))
    counts = stalls.group_by("_w").len().join(indexed.select("_w"), on="_w", how="right").sort("_w")
    offsets = pl.concat([pl.Series([0], dtype=pl.Int64), counts["len"].fill_null(0).cast(pl.Int64).cum_sum()])
    top = spec.top.sort("gpid", "w_end")
    return (_i64(offsets), _i64(stalls["call_id"]), _i64(stalls["a"]), _i64(stalls["b"]), _i64(stalls["_reach"]),
            _i64(top["gpid"]), _i64(top["w_start"]), _i64(top["w_end"]))


@dataclass(frozen=True)
class PagesRead:
    """What :func:`read_pages` read of a run: ``rows`` (None where they are SQLite's to read:
    ``handover`` says why), the values not integers (read as NULL) among every row visited, the rows
    visited, and ``check``: "" where every leaf of the run is sound as ``PRAGMA quick_check`` checks
    it, else why the check is unsure (the run checked whoever reads its rows)."""

    rows: pl.DataFrame | None
    mismatched: int
    visited: int
    handover: str
    check: str
    sums: pl.DataFrame | None = None  # with Keep.stalls: SUMS_SCHEMA of the rows added up, not in ``rows``
    pieces: pl.DataFrame | None = None  # and their union per process (PIECES_SCHEMA, disjoint, sorted)


SUMS_SCHEMA: Schema = {"call_id": pl.Int64, "stream_id": pl.Int64, "rows": pl.Int64, "busy_ns": pl.Int64}
PIECES_SCHEMA: Schema = {"gpid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}


def read_pages(
    uri: str, plan: Plan, run: tuple[int, int], classes: bytes, layout: Sequence[int], schema: Schema,
    keep: Keep | None = None, keys: tuple[pl.Series, int] | None = None,
) -> PagesRead:
    """Leaves [first, last) (``run``) of ``plan``'s table read by the page reader as the columns of
    ``schema`` (``layout``: each one's field in the records, -1 NULL, -2 the rowid), checked as they
    are read (:class:`PagesRead`); with ``keep``, only the rows it keeps (:class:`Keep`); with
    ``keys`` (ids, a column's position), only the rows whose column holds one of the ids. Where the
    rows are SQLite's to read instead (a doubt of the check, a record on overflow pages, ...), the
    caller reads the run's rowids through SQLite."""
    _require()
    from nsysaudit.read import _native

    names = list(schema)
    w: tuple[Buffer | None, Buffer | None, Buffer | None] = (None, None, None)
    bounds, columns = (0, False, 0, False), (0, 0, 0)
    reduction: tuple[object, ...] | None = None
    if keep is not None:
        w, arrays = keep.arrays
        bounds = (keep.start or 0, keep.start is not None, keep.stop or 0, keep.stop is not None)
        columns = keep.columns
        if arrays is not None and keep.stalls is not None:
            reduction = (*arrays, keep.stalls.stream)
    try:
        ids = _i64(keys[0].drop_nulls().unique().sort()) if keys is not None else None
        values, nulls, n, mismatched, visited, handover, check, sums, pieces = _native.read_pages(
            uri, plan, *run, classes, tuple(layout), *w, bounds, columns, ids, keys[1] if keys is not None else 0,
            reduction)
    except (_native.Error, MemoryError) as exc:
        raise NativeScanError(str(exc) or "out of memory") from None
    if handover:
        return PagesRead(None, 0, visited, handover, check)
    added = (None if sums is None else _table(sums, SUMS_SCHEMA),
             None if pieces is None else _table(pieces, PIECES_SCHEMA))
    if n == 0:
        return PagesRead(pl.DataFrame(schema=schema), mismatched, visited, "", check, *added)
    frame = _int_columns(values, n, len(names), names, _value_nulls(nulls, len(names)))
    return PagesRead(frame, mismatched, visited, "", check, *added)


def _table(values: bytes, schema: Schema) -> pl.DataFrame:
    """Rows of int64 values (row-major, no NULL) as a frame of ``schema``."""
    n = len(values) // (8 * len(schema))
    if n == 0:
        return pl.DataFrame(schema=schema)
    return _int_columns(values, n, len(schema), list(schema), [None] * len(schema))


def _i64(values: pl.Series) -> Buffer:
    """The values as an int64 buffer (a view of numpy's array for many, else array.array's)."""
    if values.null_count():  # the callers drop them; a NULL must never become a number
        raise NativeScanError("a NULL among the scan's inputs")
    if _use_numpy(values.len()):
        import numpy as np

        # .data: the array's memory as a memoryview (which keeps the array alive), the buffer the
        # scan reads either way; numpy's own stubs give ndarray the buffer protocol from Python 3.12 on.
        return np.ascontiguousarray(values.to_numpy(), dtype=np.int64).data
    return array.array("q", values.to_list())


@dataclass(frozen=True)
class Inputs:
    """What every rowid range's scan reads, converted once (shared by the threads, read-only)."""

    windows: tuple[Buffer, Buffer, Buffer]  # int64 buffers (see _i64)
    strings: Buffer
    check_strings: bool
    marked: Buffer
    counted: Buffer
    keys: pl.DataFrame
    key_arrays: tuple[Buffer, Buffer]
    wanted: tuple[Buffer, Buffer] | None = None  # the wanted keys' (gpid, correlation id), as key_arrays


def prepare(
    windows: pl.DataFrame,
    string_ids: pl.Series | None,
    marked_ids: pl.Series | None,
    counted_ids: pl.Series | None,
    alloc_keys: pl.DataFrame | None,
    wanted_keys: pl.DataFrame | None = None,
) -> Inputs:
    """What the scan of every range reads (:func:`scan_range`), converted once. ``wanted_keys``:
    ``gpid, correlation_id`` of the rows to hand back whatever their return (``keyed``)."""
    w = windows.sort("gtid", "w_start")

    def ids(series: pl.Series | None) -> pl.Series:
        return series.drop_nulls().unique().sort() if series is not None else pl.Series([], dtype=pl.Int64)

    keys = _keys(alloc_keys)
    want = _keys(wanted_keys) if wanted_keys is not None else None
    return Inputs(
        (_i64(w["gtid"]), _i64(w["w_start"]), _i64(w["w_end"])),
        _i64(ids(string_ids)), string_ids is not None,
        _i64(ids(marked_ids)), _i64(ids(counted_ids)),
        keys, (_i64(keys["gpid"]), _i64(keys["correlation_id"])),
        None if want is None else (_i64(want["gpid"]), _i64(want["correlation_id"])),
    )  # fmt: skip


def _keys(given: pl.DataFrame | None) -> pl.DataFrame:
    """``gpid, correlation_id`` of ``given`` without NULLs, sorted by (correlation id, gpid): the scan
    finds a row's key by its correlation id; each key once (a sorted frame's repeats are adjacent:
    cheaper than a hash-based unique)."""
    if given is None:
        return pl.DataFrame(schema={"gpid": pl.Int64, "correlation_id": pl.Int64})
    ordered = given.select("gpid", "correlation_id").drop_nulls().sort("correlation_id", "gpid")
    repeat = (pl.col("gpid") == pl.col("gpid").shift(1)) & (
        pl.col("correlation_id") == pl.col("correlation_id").shift(1)
    )
    return ordered.filter(~repeat.fill_null(False))


def merge_alloc(keys: pl.DataFrame, ranges: list[tuple[pl.Series, pl.Series] | None]) -> pl.DataFrame:
    """``gpid, correlation_id, rows, name_id`` of the keys some row carries: the rows of every range
    summed, the nameId of the first such row (the first range, in rowid order, that has one; NULL
    where that row's nameId is NULL), in ``keys`` order (the scan's merge sorts them). Vectorized
    over the keys: no group-by over the ranges' 10^5-10^6 keys."""
    counted = [r for r in ranges if r is not None]
    if not counted or not keys.height:
        return pl.DataFrame(schema=dict.fromkeys(("gpid", "correlation_id", "rows", "name_id"), pl.Int64))
    rows, name = counted[0]
    seen = rows > 0
    for more_rows, more_name in counted[1:]:
        take = ~seen & (more_rows > 0)
        name = more_name.zip_with(take, name)
        rows = rows + more_rows
        seen = seen | take
    return keys.with_columns(rows.alias("rows"), name.alias("name_id")).filter(pl.col("rows") > 0)


def plan(uri: str, table: str) -> Plan:
    """``table``'s b-tree as native/scan.c plans its reading: the interior pages checked (``why``:
    "" when they and the file's header are sound, else why the check is unsure), the leaves in key
    order, in ``runs(n)`` of ``(first, last, lo, hi)`` (leaves [first, last) hold rowids lo..hi).
    Each run is read once, by one :func:`scan_range` (the plan marks the pages it reaches)."""
    _require()
    from nsysaudit.read import _native

    try:
        return _native.plan(uri, table)
    except (_native.Error, MemoryError) as exc:
        raise NativeScanError(str(exc) or "out of memory") from None


def check_tables(uri: str, tables: Sequence[tuple[str, bytes]]) -> list[str]:
    """Each table checked as SQLite's ``PRAGMA quick_check(table)`` checks it, without reading its
    rows, on one connection (with its columns' classes: :func:`nsysaudit.read.damage.column_classes`):
    "" where it is sound (quick_check would say nothing), else why the check is unsure (then
    quick_check must say)."""
    _require()
    from nsysaudit.read import _native

    try:
        return _native.check(uri, tables)
    except (_native.Error, MemoryError) as exc:
        raise NativeScanError(str(exc) or "out of memory") from None


def check_table(uri: str, table: str, classes: bytes) -> str:
    """:func:`check_tables` of one table."""
    return check_tables(uri, [(table, classes)])[0]


@dataclass(frozen=True)
class Pages:
    """What :func:`scan_range` needs to read a run of the table's leaves itself: the table's plan, the
    run (leaves [first, last)), each column's class (what the check lets it hold) and where each of
    the scan's six columns lies in the records (None: the rows are SQLite's to read, the leaves are
    still checked)."""

    plan: Plan
    first: int
    last: int
    classes: bytes
    layout: Sequence[int] | None


class RangeScan(TypedDict):
    """What :func:`scan_range` found in one rowid range."""

    selected: pl.DataFrame
    marked: pl.DataFrame
    keyed: pl.DataFrame | None  # the rows of a wanted key (Inputs.wanted), in rowid order; None: none wanted
    span: pl.DataFrame
    problems: list[int]
    counted: int
    mismatch_rows: int
    rows: int
    page_rows: int
    handovers: int
    handover: str
    check: str
    alloc: tuple[pl.Series, pl.Series] | None
    corr_groups: pl.DataFrame | None  # see scan_range


def scan_range(
    uri: str,
    sql: str,
    lo: int,
    hi: int,
    inputs: Inputs,
    names: list[str],
    pages: Pages | None = None,
) -> RangeScan:
    """Reduce one rowid range: ``selected``, ``marked``, ``keyed`` (frames of ``names``), ``span``
    (``gpid, first_ns, last_ns, rows``), ``problems`` (7 counts), ``counted``, ``mismatch_rows``,
    ``rows``, ``alloc`` (per allocation key, in ``inputs.keys`` order: the rows carrying it and the
    nameId of the first, as two series; None without keys; :func:`merge_alloc` joins the ranges).

    ``pages``: a run of the table's leaves (lo..hi its rowids): the scan reads and checks them itself
    and SQLite reads only what it hands over. ``page_rows``: the rows read that way; ``handovers``: 1
    when SQLite read the range (no ``pages``, or the page reader gave it back: ``handover`` says
    why), else 0; ``check``: with ``pages``, "" when the run's leaves are sound, else why not;
    ``corr_groups``: with ``pages``, the run's groups of leaves and the least and greatest
    correlation id of their rows (:func:`_corr_groups`), else None."""
    _require()
    from nsysaudit.read import _native

    x = inputs
    p = pages
    try:
        out = _native.scan(
            uri, sql, lo, hi, *x.windows, x.strings, x.check_strings, x.marked, x.counted, *x.key_arrays,
            None if p is None else p.plan, 0 if p is None else p.first, 0 if p is None else p.last,
            b"" if p is None else p.classes, None if p is None or p.layout is None else tuple(p.layout),
            *(x.wanted or ()),
        )  # fmt: skip
    except (_native.Error, MemoryError) as exc:
        raise NativeScanError(str(exc) or "out of memory") from None
    span = pl.DataFrame(
        out["spans"], schema=dict.fromkeys(("gpid", "first_ns", "last_ns", "rows"), pl.Int64), orient="row"
    )
    n_keys = x.keys.height
    alloc: tuple[pl.Series, pl.Series] | None = None
    if n_keys:
        first_null = _bytes(out["key_first_null"]) == 1
        alloc = (
            _int_columns(out["key_rows"], n_keys, 1, ["rows"], [None])["rows"],
            _int_columns(out["key_first_name"], n_keys, 1, ["name_id"], [first_null])["name_id"],
        )
    return {
        "selected": _rows(out["selected"], names),
        "marked": _rows(out["marked"], names),
        "keyed": _rows(out["keyed"], names) if x.wanted is not None else None,
        "span": span,
        "problems": list(out["problems"]),
        "counted": out["counted"],
        "mismatch_rows": out["mismatch_rows"],
        "rows": out["rows"],
        "page_rows": out["page_rows"],
        "handovers": out["handovers"],
        "handover": out["handover"],
        "check": out["check"],
        "alloc": alloc,
        "corr_groups": None if p is None else _corr_groups(out, p),
    }


GROUP_SCHEMA: Schema = {"first": pl.Int64, "last": pl.Int64, "lo": pl.Int64, "hi": pl.Int64}


def _corr_groups(out: ScanResult, pages: Pages) -> pl.DataFrame:
    """``first, last, lo, hi``: the run's leaves [first, last) in groups of the scan's CORR_GROUP, each
    with a row that carries a correlation id, and the least and greatest of those; where SQLite read
    the run instead of the page reader, one group of the whole run, its bounds unknown (every id)."""
    from nsysaudit.read import _native

    n = len(out["corr_seen"])
    if n == 0:
        return pl.DataFrame([(pages.first, pages.last, INT64_MIN, INT64_MAX)], schema=GROUP_SCHEMA, orient="row")
    size = _native.CORR_GROUP
    first = pl.int_range(0, n, dtype=pl.Int64, eager=True) * size + pages.first
    groups = pl.DataFrame({
        "first": first,
        "last": first.clip(upper_bound=pages.last - size) + size,
        "lo": _int_columns(out["corr_lo"], n, 1, ["lo"], [None])["lo"],
        "hi": _int_columns(out["corr_hi"], n, 1, ["hi"], [None])["hi"],
        "seen": _bytes(out["corr_seen"]),
    })
    return groups.filter(pl.col("seen") == 1).select(list(GROUP_SCHEMA))
