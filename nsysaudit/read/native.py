"""The native CUDA API scan (``native/scan.c``, built by ``make native``), through ctypes.

The same reduction as :func:`nsysaudit.read.scan._reduce`, computed in C in one pass: from the
table's own b-tree pages where the scan can read them (``pages``, :func:`scan_range`), else
inside SQLite's C API (an aggregate function SQLite calls for each row); no value is decoded into
Arrow or Python except the rows kept. :func:`read_ints` reads a table of integer columns (the memory events)
without a Python object per value. ctypes releases the GIL for
the call, so rowid ranges run in parallel threads. When the library is not built (a plain
``pip install``, a machine without a C compiler) :func:`load` returns None and the scan uses its
polars engines; ``NSYSAUDIT_NATIVE=0`` turns it off. tests/test_scan.py checks both give the same
answer.
"""

from __future__ import annotations

import array
import ctypes
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

LIBRARY = Path(__file__).resolve().parent / "_native_scan.so"
NCOL = 6
I64, U8 = ctypes.c_int64, ctypes.c_uint8
P64, PU8 = ctypes.POINTER(I64), ctypes.POINTER(U8)

_lib: Any = None
_tried = False


def load() -> Any:
    """The loaded library, or None (not built, or turned off by ``NSYSAUDIT_NATIVE=0``)."""
    global _lib, _tried
    if os.environ.get("NSYSAUDIT_NATIVE", "1") == "0":
        return None
    if not _tried:
        _tried = True
        if LIBRARY.is_file():
            try:
                lib = ctypes.CDLL(str(LIBRARY))
                _declare(lib)
            except (OSError, AttributeError):  # not loadable here, or built from another scan.c
                lib = None
            _lib = lib
    return _lib


# Every function of the library: (name, return type, argument types).
VOID = ctypes.c_void_p
SIGNATURES: tuple[tuple[str, Any, list[Any]], ...] = (
    ("nsa_scan", VOID, [
        ctypes.c_char_p, ctypes.c_char_p, I64, I64,
        P64, P64, P64, I64,
        P64, I64, ctypes.c_int,
        P64, I64,
        P64, I64,
        P64, P64, I64,
        ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32),
    ]),
    ("nsa_spans", I64, [VOID, P64, PU8, P64, PU8, P64, PU8, P64]),
    ("nsa_read", VOID, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    ("nsa_free", None, [VOID]),
    ("nsa_table_free", None, [VOID]),
    *(
        (name, restype, [VOID])  # accessors of a result (nsa_*) or a table (nsa_table_*)
        for name, restype in (
            ("nsa_error", ctypes.c_char_p), ("nsa_rows", I64), ("nsa_mismatch_rows", I64), ("nsa_counted", I64),
            ("nsa_problems", P64), ("nsa_selected_n", I64), ("nsa_selected_values", P64),
            ("nsa_selected_nulls", PU8), ("nsa_marked_n", I64), ("nsa_marked_values", P64),
            ("nsa_marked_nulls", PU8), ("nsa_key_rows", P64), ("nsa_key_first_name", P64),
            ("nsa_key_first_null", PU8), ("nsa_span_count", I64),
            ("nsa_page_rows", I64), ("nsa_handovers", I64),
            ("nsa_table_error", ctypes.c_char_p), ("nsa_table_n", I64), ("nsa_table_mismatched", I64),
            ("nsa_table_values", P64), ("nsa_table_nulls", PU8),
        )
    ),
)  # fmt: skip


def _declare(lib: Any) -> None:
    """Give ctypes every function's signature (AttributeError: a library built from another scan.c)."""
    for name, restype, argtypes in SIGNATURES:
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


class NativeScanError(RuntimeError):
    """The native scan could not read the range (the caller falls back to the polars engines)."""


class DamagedPages(NativeScanError):
    """The page reader found the table's b-tree breaking a rule every SQLite file keeps (keys out of
    order, a cell outside its page, ...): rows may be missing from any reading of it, so the caller
    must not read on with another engine."""


# Arrays cross between C and polars through numpy (zero-copy views, one copy per column, ~20x
# faster than a Python int per value) once numpy is loaded, or from this many values on: about
# where a Python int per value costs what numpy's import does (0.1-0.16 s here). A small or
# mid-sized export never pays that import.
NUMPY_MIN_VALUES = 1 << 21


def _use_numpy(values: int) -> bool:
    return values >= NUMPY_MIN_VALUES or "numpy" in sys.modules


def _int_columns(
    values_ptr: Any, n: int, ncol: int, names: list[str], nulls: Sequence[pl.Series | None]
) -> pl.DataFrame:
    """``n`` rows of ``ncol`` int64 values (row-major, at ``values_ptr``) as a frame of ``names``; a
    value is NULL where its column's ``nulls`` series is true (None: no NULL in that column). The
    values are copied: the frame owns its memory, the C buffer may be freed after."""
    if _use_numpy(n * ncol):
        import numpy as np

        grid = np.ctypeslib.as_array(ctypes.cast(values_ptr, P64), shape=(n, ncol))
        # .copy(), never ascontiguousarray: a one-row column counts as contiguous and would stay a
        # view of the C buffer, which is freed after (polars may keep numpy's memory as it is).
        columns = [pl.Series(name, grid[:, c].copy(), dtype=pl.Int64) for c, name in enumerate(names)]
    else:
        flat = array.array("q")
        flat.frombytes(ctypes.string_at(values_ptr, n * ncol * 8))
        columns = [pl.Series(name, flat[c::ncol], dtype=pl.Int64) for c, name in enumerate(names)]
    frame = pl.DataFrame(columns)
    masked = [(name, z) for name, z in zip(names, nulls, strict=True) if z is not None and z.any()]
    if not masked:
        return frame
    return frame.with_columns(
        pl.when(z).then(None).otherwise(pl.col(name)).alias(name) for name, z in masked
    )


def _bytes(pointer: Any, n: int) -> pl.Series:
    """``n`` uint8 values at ``pointer``, copied."""
    if _use_numpy(n):
        import numpy as np

        return pl.Series(np.ctypeslib.as_array(ctypes.cast(pointer, PU8), shape=(n,)).copy(), dtype=pl.UInt8)
    return pl.Series(array.array("B", ctypes.string_at(pointer, n)), dtype=pl.UInt8)


def _rows(values_ptr: Any, nulls_ptr: Any, n: int, names: list[str]) -> pl.DataFrame:
    if n == 0:
        return pl.DataFrame(schema=dict.fromkeys(names, pl.Int64))
    bits = _bytes(nulls_ptr, n)
    return _int_columns(values_ptr, n, NCOL, names, [(bits & (1 << c)) != 0 for c in range(NCOL)])


@contextmanager
def _result(handle: Any, error: Any, free: Any) -> Iterator[Any]:
    """A result of the library (``nsa_scan``, ``nsa_read``): raised as NativeScanError when it could
    not be made or says what failed, freed once read."""
    if not handle:
        raise NativeScanError("out of memory")
    try:
        message = error(handle).decode(errors="replace")
        if message.startswith("damaged: "):
            raise DamagedPages(message.removeprefix("damaged: "))
        if message:
            raise NativeScanError(message)
        yield handle
    finally:
        free(handle)


def read_ints(uri: str, sql: str, schema: dict[str, Any], *, ordered: bool = False) -> tuple[pl.DataFrame, int]:
    """The rows of ``sql`` (every column an integer) as a frame of ``schema``, and how many values
    were not integers (read as NULL, as :func:`nsysaudit.read.trace.frame` reads them).

    ``ordered``: ``sql`` has an ORDER BY that must hold, so its rows are stepped out one by one.
    Otherwise they are gathered by an aggregate over it (``nsa_collect``, about twice as fast), in
    the order SQLite visits them, which for a query without ORDER BY is the order stepping gives."""
    lib = load()
    if lib is None:
        raise NativeScanError("the native scan is not built")
    names = list(schema)
    if not ordered:
        columns = ", ".join(f"c{i}" for i in range(len(names)))
        sql = f"WITH q({columns}) AS ({sql}) SELECT nsa_collect({columns}) FROM q"
    with _result(lib.nsa_read(uri.encode(), sql.encode(), len(names), int(not ordered)), lib.nsa_table_error,
                 lib.nsa_table_free) as handle:
        n = lib.nsa_table_n(handle)
        if n == 0:
            return pl.DataFrame(schema=schema), 0
        ncol = len(names)
        z = _bytes(lib.nsa_table_nulls(handle), n * ncol)
        nulls = [z.gather_every(ncol, offset=c) == 1 for c in range(ncol)]
        return _int_columns(lib.nsa_table_values(handle), n, ncol, names, nulls), int(lib.nsa_table_mismatched(handle))


def _i64(values: pl.Series) -> Any:
    """The values as a writable int64 buffer for a ctypes view (never empty: a view needs one item)."""
    if values.null_count():  # the callers drop them; a NULL must never become a number
        raise NativeScanError("a NULL among the scan's inputs")
    if _use_numpy(values.len()):
        import numpy as np

        return np.array(values.to_numpy(), dtype=np.int64, copy=True)
    return array.array("q", values.to_list() or [0])


@dataclass(frozen=True)
class Inputs:
    """What every rowid range's scan reads, converted once (shared by the threads, read-only)."""

    windows: tuple[Any, Any, Any]  # int64 buffers (see _i64)
    n_windows: int
    strings: Any
    n_strings: int
    check_strings: bool
    marked: Any
    n_marked: int
    counted: Any
    n_counted: int
    keys: pl.DataFrame
    key_arrays: tuple[Any, Any]


def prepare(
    windows: pl.DataFrame,
    string_ids: pl.Series | None,
    marked_ids: pl.Series | None,
    counted_ids: pl.Series | None,
    alloc_keys: pl.DataFrame | None,
) -> Inputs:
    w = windows.sort("gtid", "w_start")

    def ids(series: pl.Series | None) -> pl.Series:
        return series.drop_nulls().unique().sort() if series is not None else pl.Series([], dtype=pl.Int64)

    strings, marked, counted = ids(string_ids), ids(marked_ids), ids(counted_ids)
    keys = pl.DataFrame(schema={"gpid": pl.Int64, "correlation_id": pl.Int64})
    if alloc_keys is not None:
        # Sorted by (correlation id, gpid), the scan finds a row's key by its correlation id; each
        # key once (a sorted frame's repeats are adjacent: cheaper than a hash-based unique).
        ordered = alloc_keys.select("gpid", "correlation_id").drop_nulls().sort("correlation_id", "gpid")
        repeat = (pl.col("gpid") == pl.col("gpid").shift(1)) & (
            pl.col("correlation_id") == pl.col("correlation_id").shift(1)
        )
        keys = ordered.filter(~repeat.fill_null(False))
    return Inputs(
        (_i64(w["gtid"]), _i64(w["w_start"]), _i64(w["w_end"])), w.height,
        _i64(strings), strings.len(), string_ids is not None,
        _i64(marked), marked.len(),
        _i64(counted), counted.len(),
        keys, (_i64(keys["gpid"]), _i64(keys["correlation_id"])),
    )  # fmt: skip


def _view(values: Any) -> Any:
    return (I64 * len(values)).from_buffer(values)


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


def scan_range(
    uri: str,
    sql: str,
    lo: int,
    hi: int,
    inputs: Inputs,
    names: list[str],
    pages: tuple[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Reduce one rowid range: ``selected``, ``marked`` (frames of ``names``), ``span``
    (``gpid, first_ns, last_ns, rows``), ``problems`` (7 counts), ``counted``, ``mismatch_rows``,
    ``rows``, ``alloc`` (per allocation key, in ``inputs.keys`` order: the rows carrying it and the
    nameId of the first, as two series; None without keys; :func:`merge_alloc` joins the ranges).

    ``pages``: the table's name and where each of ``sql``'s six columns lies in its records
    (:func:`nsysaudit.read.scan.page_layout`): the scan reads the table's pages itself and SQLite
    only what it hands over. ``page_rows``: the rows read that way; ``handovers``: 1 when SQLite
    read the range (no ``pages``, or the page reader gave it back), else 0."""
    lib = load()
    if lib is None:
        raise NativeScanError("the native scan is not built")
    x = inputs
    n_keys = x.keys.height
    args = (
        uri.encode(), sql.encode(), lo, hi,
        *(_view(a) for a in x.windows), x.n_windows,
        _view(x.strings), x.n_strings, int(x.check_strings),
        _view(x.marked), x.n_marked,
        _view(x.counted), x.n_counted,
        _view(x.key_arrays[0]), _view(x.key_arrays[1]), n_keys,
        pages[0].encode() if pages else None,
        (ctypes.c_int32 * NCOL)(*pages[1]) if pages else None,
    )  # fmt: skip
    with _result(lib.nsa_scan(*args), lib.nsa_error, lib.nsa_free) as handle:
        n_spans = lib.nsa_span_count(handle)
        cols = [(I64 if i % 2 == 0 or i == 6 else U8) * max(n_spans, 1) for i in range(7)]
        gpid, gpid_null, first, first_null, last, last_null, rows = (c() for c in cols)
        lib.nsa_spans(handle, gpid, gpid_null, first, first_null, last, last_null, rows)
        span = pl.DataFrame(
            {
                "gpid": [None if gpid_null[i] else gpid[i] for i in range(n_spans)],
                "first_ns": [None if first_null[i] else first[i] for i in range(n_spans)],
                "last_ns": [None if last_null[i] else last[i] for i in range(n_spans)],
                "rows": rows[:n_spans],
            },
            schema=dict.fromkeys(("gpid", "first_ns", "last_ns", "rows"), pl.Int64),
        )
        problems = lib.nsa_problems(handle)[:7]
        alloc: tuple[pl.Series, pl.Series] | None = None
        if n_keys:
            first_null = _bytes(lib.nsa_key_first_null(handle), n_keys) == 1
            alloc = (
                _int_columns(lib.nsa_key_rows(handle), n_keys, 1, ["rows"], [None])["rows"],
                _int_columns(lib.nsa_key_first_name(handle), n_keys, 1, ["name_id"], [first_null])["name_id"],
            )
        return {
            "selected": _rows(lib.nsa_selected_values(handle), lib.nsa_selected_nulls(handle),
                              lib.nsa_selected_n(handle), names),
            "marked": _rows(lib.nsa_marked_values(handle), lib.nsa_marked_nulls(handle), lib.nsa_marked_n(handle),
                            names),
            "span": span,
            "problems": problems,
            "counted": int(lib.nsa_counted(handle)),
            "mismatch_rows": int(lib.nsa_mismatch_rows(handle)),
            "rows": int(lib.nsa_rows(handle)),
            "page_rows": int(lib.nsa_page_rows(handle)),
            "handovers": int(lib.nsa_handovers(handle)),
            "alloc": alloc,
        }
