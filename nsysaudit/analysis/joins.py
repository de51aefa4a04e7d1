"""The joins: pure functions, frames in, frames out.

A CUDA API call is *nested* in a library call when both are on the same thread (the same full
``globalTid``: VM, PID and TID bits) and ``lib.start <= call.start and call.end <= lib.end``.
A call on the same thread that overlaps the library call without lying wholly inside it
*straddles* its edge: it is reported separately, never as nested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl

from nsysaudit.core.defaults import DEFAULT_MAX_PAIRS as DEFAULT_MAX_PAIRS
from nsysaudit.core.ids import decode_pid, decode_tid, global_pid
from nsysaudit.core.intervals import PAIRS_MAX, closed_library_calls
from nsysaudit.core.order import sort_stable

__all__ = ["DEFAULT_MAX_PAIRS", "PAIR_ORDER", "PAIR_SCHEMA", "Nesting", "attach_bytes", "closed_libs", "count_pairs",
           "held_by", "join_column", "more_pairs_than", "nest", "nest_bounded", "with_ids"]

PAIR_SCHEMA = {
    "lib_id": pl.Int64,
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "correlation_id": pl.Int64,
    "api": pl.String,
    "return_code": pl.Int64,
    "relation": pl.String,
}
# The pairs' order: by library call, then its calls by start, correlation id, end and return code
# (rows alike in all of these, a row repeated, keep the order they were found in, whichever way).
PAIR_ORDER = ["lib_id", "start_ns", "correlation_id", "end_ns", "return_code"]


def nest(libs: pl.DataFrame, calls: pl.DataFrame, *, way: Literal["pairs", "joins"] | None = None) -> pl.DataFrame:
    """Every (library call, CUDA API call) pair on the same thread whose intervals overlap.

    ``libs``: the joinable library calls as :func:`closed_libs` gives them.
    ``relation`` is ``"nested"`` when the call lies wholly inside the library call and
    ``"straddling"`` when it crosses one of its edges. The work grows with the number of pairs
    found, not with the product of the two tables, nor with the number of threads: the threads
    whose calls run one after another are answered all at once (:func:`_overlapping_in_sequence`),
    the others by an inequality join each (:func:`_overlapping_by_join`); up to
    :data:`~nsysaudit.core.intervals.PAIRS_MAX` (library call, call) pairs, every pair of a thread is
    tested in one query instead (``way``: "pairs" or "joins", whatever their number).
    """
    parts: list[pl.DataFrame] = []
    if libs.height and calls.height:
        ordered = sort_stable(calls, ["gtid", "start_ns", "end_ns"])
        if (way or ("pairs" if libs.height * calls.height <= PAIRS_MAX else "joins")) == "pairs":
            # A few: every pair of a thread tested, in one query (each library call's in the calls' order).
            parts.append(
                libs.lazy().select("lib_id", "gtid", "lib_start", "lib_end")
                .join(ordered.lazy(), on="gtid", maintain_order="left_right")
                .filter((pl.col("start_ns") <= pl.col("lib_end")) & (pl.col("end_ns") >= pl.col("lib_start")))
                .collect()
            )
        else:
            # A thread where some call encloses a later one (a runtime call around its driver call):
            # sorted by start, its ends decrease somewhere.
            enclosing = ordered.filter(pl.col("end_ns").diff().over("gtid") < 0)["gtid"].unique().implode()
            parts.append(
                _overlapping_in_sequence(
                    ordered.filter(~pl.col("gtid").is_in(enclosing)), libs.filter(~pl.col("gtid").is_in(enclosing))
                )
            )
            parts.append(
                _overlapping_by_join(
                    ordered.filter(pl.col("gtid").is_in(enclosing)), libs.filter(pl.col("gtid").is_in(enclosing))
                )
            )
    parts = [p for p in parts if p.height]
    if not parts:
        return pl.DataFrame(schema=PAIR_SCHEMA)
    pairs = pl.concat(parts, how="diagonal_relaxed")
    inside = (pl.col("start_ns") >= pl.col("lib_start")) & (pl.col("end_ns") <= pl.col("lib_end"))
    return sort_stable(
        pairs.with_columns(pl.when(inside).then(pl.lit("nested")).otherwise(pl.lit("straddling")).alias("relation"))
        .select(list(PAIR_SCHEMA)),
        PAIR_ORDER, nulls_last=True,
    )


def _overlapping_in_sequence(calls: pl.DataFrame, libs: pl.DataFrame) -> pl.DataFrame:
    """The (call, library call) overlaps on threads whose calls run one after another: sorted by
    ``(gtid, start)`` (as given), their ends never decrease within a thread. Then the calls a library
    call overlaps (start <= lib_end, end >= lib_start) are one run of that order: its first is the
    first call of the thread ending at or after the library call's start, its last the last one
    starting at or before its end, each found by an as-of join by thread (a binary search), and the
    pairs are gathered, never searched for. All threads at once: 100,000 threads cost one join,
    not 100,000."""
    if calls.height == 0 or libs.height == 0:
        return pl.DataFrame()
    ordered = calls.with_row_index("_call").with_columns(pl.col("_call").cast(pl.Int64))
    keys = ordered.select("gtid", "start_ns", "end_ns", "_call")
    past = (
        libs.select("lib_id", "gtid", "lib_end")
        .sort("lib_end")
        .join_asof(sort_stable(keys.select("gtid", "start_ns", "_call"), ["start_ns", "_call"]), left_on="lib_end",
                   right_on="start_ns", by="gtid", strategy="backward", check_sortedness=False)
        .select("lib_id", (pl.col("_call") + 1).alias("_past"))
    )
    first = (
        libs.select("lib_id", "gtid", "lib_start")
        .sort("lib_start")
        .join_asof(sort_stable(keys.select("gtid", "end_ns", "_call"), ["end_ns", "_call"]), left_on="lib_start",
                   right_on="end_ns", by="gtid", strategy="forward", check_sortedness=False)
        .select("lib_id", pl.col("_call").alias("_first"))
    )
    runs = (
        libs.join(first, on="lib_id", how="left")
        .join(past, on="lib_id", how="left")
        .filter(pl.col("_first").is_not_null() & pl.col("_past").is_not_null() & (pl.col("_first") < pl.col("_past")))
        .with_columns(pl.int_ranges("_first", "_past").alias("_call"))
        .drop("_first", "_past")
        .explode("_call")
    )
    return pl.concat([ordered.drop("_call")[runs["_call"]], runs.drop("_call", "gtid")], how="horizontal")


def _overlapping_by_join(calls: pl.DataFrame, libs: pl.DataFrame) -> pl.DataFrame:
    """The (call, library call) overlaps on threads where a call encloses another: an inequality
    join per thread (its work grows with the pairs it finds)."""
    parts: list[pl.DataFrame] = []
    if calls.height and libs.height:
        calls_by_thread = calls.partition_by("gtid", as_dict=True)
        for (gtid,), thread_libs in libs.partition_by("gtid", as_dict=True).items():
            thread_calls = calls_by_thread.get((gtid,))
            if thread_calls is not None:
                parts.append(
                    thread_calls.join_where(
                        thread_libs.drop("gtid"),
                        pl.col("start_ns") <= pl.col("lib_end"),
                        pl.col("end_ns") >= pl.col("lib_start"),
                    )
                )
    return pl.concat(parts) if parts else pl.DataFrame()



@dataclass(frozen=True)
class Nesting:
    """The pairs of :func:`nest_bounded` and what a pair limit left out.

    ``total_pairs``: how many (library call, CUDA API call) pairs overlap in all. ``complete``:
    every one of them is in ``pairs``. Otherwise only pairs of calls that failed or whose return is
    unknown are listed (they decide findings and verdict), for the library calls in ``lib_id``
    order that fit the limit; ``unexamined`` lists the library calls holding such calls that did
    not fit: a nested failure in them is not ruled out.
    """

    pairs: pl.DataFrame
    total_pairs: int
    max_pairs: int | None
    complete: bool
    unexamined: list[int]


def closed_libs(library_calls: pl.DataFrame) -> pl.DataFrame:
    """``lib_id, gtid, lib_start, lib_end`` of the library calls the joins can use: the joins' input,
    made once per analysis."""
    return closed_library_calls(library_calls).select(
        "lib_id", "gtid", pl.col("start_ns").alias("lib_start"), pl.col("end_ns").alias("lib_end")
    )


PairsWay = Literal["pairs", "as-of"]


def count_pairs(libs: pl.DataFrame, calls: pl.DataFrame, *, way: PairsWay | None = None) -> pl.DataFrame:
    """``lib_id, pairs``: how many calls of its thread overlap each of ``libs`` (:func:`closed_libs`),
    in ``lib_id`` order.

    Counted without forming the pairs (``way`` "as-of"), in O((n + k) log n) over all threads at
    once: the calls of the thread starting at or before the library call's end, minus those ending
    before its start (a call ending before the start also starts before the end), each count read by
    an as-of join by thread from the calls ranked per thread; or, where there are at most
    :data:`~nsysaudit.core.intervals.PAIRS_MAX` pairs of a library call and a call (``way`` "pairs",
    the default there), over the pairs in one query. ``calls`` must have ``start_ns <= end_ns`` and
    no nulls. A library call on a thread without calls has no row.
    """
    if not (libs.height and calls.height):
        return pl.DataFrame(schema={"lib_id": pl.Int64, "pairs": pl.Int64})
    if (way or ("pairs" if libs.height * calls.height <= PAIRS_MAX else "as-of")) == "pairs":
        return _count_overlapping_pairs(libs, calls)
    libs = libs.filter(pl.col("gtid").is_in(calls["gtid"].unique().implode()))

    def ranked(column: str) -> pl.DataFrame:  # per thread: how many calls have ``column`` <= this one's
        ranks = sort_stable(calls.select("gtid", column), ["gtid", column]).with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("gtid").alias("_n")
        )
        return sort_stable(ranks, [column, "_n"])

    begun = libs.sort("lib_end").join_asof(
        ranked("start_ns"), left_on="lib_end", right_on="start_ns", by="gtid", strategy="backward",
        check_sortedness=False,
    ).select("lib_id", pl.col("_n").fill_null(0).alias("begun"))
    over = libs.sort("lib_start").join_asof(
        ranked("end_ns"), left_on="lib_start", right_on="end_ns", by="gtid", strategy="backward",
        allow_exact_matches=False, check_sortedness=False,
    ).select("lib_id", pl.col("_n").fill_null(0).alias("over"))
    return (
        begun.join(over, on="lib_id")
        .select("lib_id", (pl.col("begun") - pl.col("over")).cast(pl.Int64).alias("pairs"))
        .sort("lib_id")
    )


def _count_overlapping_pairs(libs: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """:func:`count_pairs` by its definition: the (library call, call) pairs of a thread that
    overlap, counted per library call (0 where none does, on a thread with calls), in one query."""
    threads = calls.lazy().select("gtid").unique()
    overlapping = (
        libs.lazy().select("lib_id", "gtid", "lib_start", "lib_end")
        .join(calls.lazy().select("gtid", "start_ns", "end_ns"), on="gtid")
        .filter((pl.col("start_ns") <= pl.col("lib_end")) & (pl.col("end_ns") >= pl.col("lib_start")))
        .group_by("lib_id").agg(pl.len().cast(pl.Int64).alias("pairs"))
    )
    return (
        libs.lazy().join(threads, on="gtid", how="semi").select("lib_id")
        .join(overlapping, on="lib_id", how="left")
        .select("lib_id", pl.col("pairs").fill_null(0))
        .sort("lib_id", maintain_order=True)
        .collect()
    )


def more_pairs_than(limit: int, ranges: pl.DataFrame, points: pl.DataFrame, start: str, end: str) -> bool:
    """Whether more than ``limit`` (range, row) pairs of a thread overlap (:func:`count_pairs`):
    ``ranges`` (``range_id, gtid, start_ns, end_ns``) and the rows of ``points`` (``gtid`` and the
    columns ``start``, ``end``). Counted only where ranges x rows could pass the limit: there are no
    more pairs than that."""
    if ranges.height * points.height <= limit:
        return False
    libs = ranges.select(pl.col("range_id").alias("lib_id"), "gtid", pl.col("start_ns").alias("lib_start"),
                         pl.col("end_ns").alias("lib_end"))
    calls = points.select("gtid", pl.col(start).alias("start_ns"), pl.col(end).alias("end_ns"))
    return int(count_pairs(libs, calls)["pairs"].sum() or 0) > limit


def held_by(
    points: pl.DataFrame, ranges: pl.DataFrame, start: str, end: str, *,
    way: Literal["pairs", "per-thread"] | None = None,
) -> pl.DataFrame:
    """Every (row of ``points``, range of ``ranges``) of one thread (``gtid``) where the range holds the
    row wholly: ``r_start <= start`` and ``r_end >= end`` (``start``, ``end``: columns of ``points``).
    The columns of both but ``gtid``, in no given order (the callers sort). Over the pairs in one query
    where there are at most :data:`~nsysaudit.core.intervals.PAIRS_MAX` of them (``way`` "pairs"), else
    an inequality join per thread (``way`` "per-thread": its work grows with the pairs it finds). Whether
    there are too many pairs to form is the caller's to ask first (:func:`count_pairs`)."""
    columns = [c for c in points.columns if c != "gtid"] + [c for c in ranges.columns if c != "gtid"]
    holds = (pl.col("r_start") <= pl.col(start)) & (pl.col("r_end") >= pl.col(end))
    if (way or ("pairs" if points.height * ranges.height <= PAIRS_MAX else "per-thread")) == "pairs":
        return points.lazy().join(ranges.lazy(), on="gtid").filter(holds).select(columns).collect()
    parts = []
    by_thread = ranges.partition_by("gtid", as_dict=True, include_key=False)
    for (gtid,), rows in points.partition_by("gtid", as_dict=True, include_key=False).items():
        mine = by_thread.get((gtid,))
        if mine is not None:
            joined = rows.join_where(mine, pl.col("r_start") <= pl.col(start), pl.col("r_end") >= pl.col(end))
            if joined.height:
                parts.append(joined.select(columns))
    if not parts:
        schema = {**points.schema, **ranges.schema}
        return pl.DataFrame(schema={c: schema[c] for c in columns})
    return pl.concat(parts)


def nest_bounded(libs: pl.DataFrame, calls: pl.DataFrame, max_pairs: int | None) -> Nesting:
    """:func:`nest` of ``libs`` (:func:`closed_libs`), forming at most ``max_pairs`` pairs (None: no limit).

    Deeply overlapping library calls make the pairs grow as their product (k nested ranges over
    the same m calls give k*m pairs), so the count comes first. Over the limit, successful calls
    are not listed as children; failed (or unknown-return) calls still are, library call by
    library call while they fit.
    """
    counts = count_pairs(libs, calls)
    total = int(counts["pairs"].sum() or 0)
    if max_pairs is None or total <= max_pairs:
        return Nesting(nest(libs, calls), total, max_pairs, True, [])
    failing = calls.filter(pl.col("return_code").is_null() | (pl.col("return_code") != 0))
    failing_counts = count_pairs(libs, failing).filter(pl.col("pairs") > 0)
    fits = failing_counts.with_columns(pl.col("pairs").cum_sum().alias("running")).with_columns(
        (pl.col("running") <= max_pairs).alias("fits")
    )
    examined = fits.filter(pl.col("fits"))["lib_id"]
    unexamined = [int(i) for i in fits.filter(~pl.col("fits"))["lib_id"].to_list()]
    pairs = nest(libs.filter(pl.col("lib_id").is_in(examined.implode())), failing)
    return Nesting(pairs, total, max_pairs, False, unexamined)


def attach_bytes(pairs: pl.DataFrame, allocations: pl.DataFrame) -> pl.DataFrame:
    """Add ``bytes``: the allocation event's bytes for the call's (globalPid, correlationId).

    Correlation ids are unique per process, not per export, so the join includes the process.
    A call without an allocation event (every failed allocation) gets ``None``: unknown. The pairs
    keep their order (``allocations`` has one row per key, so no pair is repeated).
    """
    keyed = pairs.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
    return join_column(keyed, allocations, ["gpid", "correlation_id"], "bytes").drop("gpid")


def join_column(frame: pl.DataFrame, other: pl.DataFrame, on: list[str], column: str) -> pl.DataFrame:
    """``frame`` left-joined by ``on`` with ``other``'s ``column``, in ``frame``'s order. Where each row
    meets at most one row of ``other`` (the usual case), only the keys are joined and the column is
    added: a join of the whole frame gathers every column of it once more (140 MB for the ledger's
    series at 755k events); else (the join repeats rows) the whole frame is joined."""
    right = other.select(*on, column)
    joined = frame.select(on).join(right, on=on, how="left", maintain_order="left")
    if joined.height == frame.height:
        return frame.with_columns(joined[column])
    return frame.join(right, on=on, how="left", maintain_order="left")


def with_ids(frame: pl.DataFrame, thread_names: pl.DataFrame) -> pl.DataFrame:
    """Add ``pid``, ``tid`` (decoded from ``gtid``) and ``thread_name`` (None when unknown)."""
    names = thread_names.filter(pl.col("gtid").is_not_null()).group_by("gtid", maintain_order=True).last()
    return frame.with_columns(decode_pid(pl.col("gtid")).alias("pid"), decode_tid(pl.col("gtid")).alias("tid")).join(
        names, on="gtid", how="left"
    )
