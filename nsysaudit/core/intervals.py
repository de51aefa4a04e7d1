"""Library-call intervals on a thread: which can be joined, and their union as disjoint windows.

Pure functions of frames with ``gtid, start_ns, end_ns`` columns (the library calls), shared by the
streaming scan (which keeps the CUDA calls overlapping a window), the joins and the reviews.
"""

from __future__ import annotations

import polars as pl

from nsysaudit.core.order import sort_stable

WINDOW_SCHEMA = {"gtid": pl.Int64, "w_start": pl.Int64, "w_end": pl.Int64}

# Up to this many pairs (one side's rows times the other's, whatever their threads), overlaps are
# counted or summed over the pairs themselves, in one polars query: the as-of joins that never form
# them are some 10-40 queries, each 0.1-0.3 ms however few the rows (most exports' few blocking
# calls and NVTX ranges).
PAIRS_MAX = 1 << 16


def closed_library_calls(library_calls: pl.DataFrame, stop_ns: int | None = None) -> pl.DataFrame:
    """The library calls the joins can use: on a known thread, with a start and an end, end >= start,
    and (where the capture's stop ``stop_ns`` is known) an end at or before it.

    The others (no end, no start, reversed, no thread, an end after the capture stopped: nsys clamps
    ranges still open to the stop, so such an end is damage) contain nothing that can be checked;
    they are censored (see :mod:`nsysaudit.analysis.coverage`), never joined.
    """
    closed = pl.col("gtid").is_not_null() & pl.col("end_ns").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns"))
    if stop_ns is not None:
        closed = closed & (pl.col("end_ns") <= stop_ns)
    return library_calls.filter(closed)


def union_windows(closed: pl.DataFrame) -> pl.DataFrame:
    """Per thread, the union of the intervals of ``closed`` (see :func:`closed_library_calls`) as
    disjoint sorted windows.

    Columns ``gtid, w_start, w_end``. A CUDA API call overlaps some library call of its thread
    iff it overlaps one of these windows; disjointness makes that an as-of lookup.
    """
    closed = closed.select("gtid", "start_ns", "end_ns")
    if closed.height == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    ordered = sort_stable(closed, ["gtid", "start_ns"])
    # A call starts a new window where its thread begins or it starts after every earlier call of
    # its thread has ended; the windows are then runs of rows, already in (gtid, w_start) order.
    reach = pl.col("end_ns").cum_max().over("gtid")
    same_thread = pl.col("gtid") == pl.col("gtid").shift(1)
    starts_new = ~(same_thread & (pl.col("start_ns") <= reach.shift(1))).fill_null(False)
    return (
        ordered.with_columns(starts_new.cum_sum().alias("window"))
        .group_by("window", maintain_order=True)
        .agg(pl.col("gtid").first(), pl.col("start_ns").min().alias("w_start"), pl.col("end_ns").max().alias("w_end"))
        .select("gtid", "w_start", "w_end")
    )


def overlaps(calls: pl.DataFrame, windows: pl.DataFrame) -> pl.Series:
    """Per row of ``calls``: does it overlap one of the ``windows`` of its thread? (O(n log n))."""
    if windows.height == 0 or calls.height == 0:
        return pl.Series("overlaps", [False] * calls.height, dtype=pl.Boolean)
    keyed = calls.select("gtid", "start_ns", "end_ns").with_row_index("_row")
    timed = keyed.filter(
        pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    )
    hit = (
        timed.sort("end_ns")
        .join_asof(
            windows, left_on="end_ns", right_on="w_start", by="gtid", strategy="backward", check_sortedness=False
        )
        .filter(pl.col("w_end") >= pl.col("start_ns"))["_row"]
    )
    return keyed.select(pl.col("_row").is_in(hit.implode()).alias("overlaps"))["overlaps"]
