"""Timestamps outside the capture: damage, whichever column holds them.

nsys records nothing before its capture began or after it stopped (it clamps a range still open at
the stop to the stop), so a timestamp outside the capture's own bounds (:class:`Capture`: nsys's
"Profiling has started/stopped." diagnostics, else ``ANALYSIS_DETAILS``) cannot be true. Such a value
is never read as evidence: not of coverage (a process's last CUDA API record), not of when memory
was held, not of nesting. Where the export records no bound, nothing is checked against it (none is
invented): ``coverage.capture`` shows the bounds read and where they came from.

Here, after the read: each process's first and last CUDA API record is read from the rows inside
the capture (one extra query over the table, only when the scan's span reaches outside it); a
memory or pool event's start outside the capture is unknown (NULL: a deallocation then counts at
every moment, an allocation at none, so the ledger's bound stays an upper bound); NVTX ranges
outside it are counted. CUDA API rows are judged by :func:`nsysaudit.analysis.integrity.damaged_times`,
library calls by :func:`nsysaudit.analysis.coverage.censor` (``library_call_outside_capture``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace

import polars as pl

from nsysaudit.core.errors import ReportWarning, UnusableInput
from nsysaudit.core.ids import global_pid
from nsysaudit.core.reasons import Reason
from nsysaudit.read.diagnostics import Capture
from nsysaudit.read.memory import MemoryEvidence, memory_span
from nsysaudit.read.source import ExportFile, Table, quote
from nsysaudit.words import START_UNKNOWN_RULE, outside_capture, warned

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class Bounded:
    """What :func:`within_capture` gives: the CUDA API span from the rows inside the capture, the
    memory evidence with starts outside it unknown, and the warnings saying what lay outside."""

    cuda_api_span: pl.DataFrame
    memory: MemoryEvidence
    warnings: list[ReportWarning]


def within_capture(
    export: ExportFile,
    capture: Capture,
    runtime: Table | None,
    span: pl.DataFrame,
    memory: MemoryEvidence,
    nvtx_ranges: pl.DataFrame,
    nvtx_table: str | None,
) -> Bounded:
    """Read what lies outside ``capture`` as damage (see the module docstring)."""
    if not capture.bounded:
        return Bounded(span, memory, [])
    said: list[ReportWarning] = []
    where = outside_capture(capture.bounds_words, _sources(capture))
    if runtime is not None and span.height:
        span, outside = _cuda_api_span(export, capture, runtime, span)
        if outside:
            said.append(warned(
                Reason.of("cuda_api_rows_outside_capture", name=runtime.name, where=where),
                outside, kind="time_outside_capture",
            ))
    memory, memory_said = _memory(capture, memory, where)
    said += memory_said
    if nvtx_table is not None and nvtx_ranges.height:
        n = nvtx_ranges.filter(capture.outside(pl.col("start_ns")) | capture.outside(pl.col("end_ns"))).height
        if n:
            said.append(warned(
                Reason.of("nvtx_ranges_outside_capture", nvtx_table=nvtx_table, where=where),
                n, kind="time_outside_capture",
            ))
    return Bounded(span, memory, said)


def _sources(capture: Capture) -> str:
    froms = [f for f in dict.fromkeys((capture.start_from, capture.stop_from)) if f is not None]
    return " and ".join(froms)


def _cuda_api_span(
    export: ExportFile, capture: Capture, runtime: Table, span: pl.DataFrame
) -> tuple[pl.DataFrame, int]:
    """The span with each process's first and last record read from the values inside the capture,
    and how many rows hold a value outside it. The scan's span holds the extremes of every row, so it
    says whether any value lies outside; only then is the table read again (one GROUP BY)."""
    reaches = span.filter(capture.outside(pl.col("first_ns")) | capture.outside(pl.col("last_ns")))
    if not reaches.height:
        return span, 0
    lo = capture.start_ns if capture.start_ns is not None else INT64_MIN
    hi = capture.stop_ns if capture.stop_ns is not None else INT64_MAX
    # Values of another type are unknown to the scan (NULL): the same here, neither inside nor outside.
    start_in = "(typeof(start) = 'integer' AND start BETWEEN :lo AND :hi)"
    end_in = "(typeof(\"end\") = 'integer' AND \"end\" BETWEEN :lo AND :hi)"
    start_out = "(typeof(start) = 'integer' AND start NOT BETWEEN :lo AND :hi)"
    end_out = "(typeof(\"end\") = 'integer' AND \"end\" NOT BETWEEN :lo AND :hi)"
    sql = (
        f"SELECT CASE WHEN typeof(globalTid) = 'integer' THEN globalTid END AS g, "
        f"min(CASE WHEN {start_in} THEN start END), max(CASE WHEN {end_in} THEN \"end\" END), "
        f"max(CASE WHEN {start_in} THEN start END), sum({start_out} OR {end_out}) "
        f"FROM {quote(runtime.name)} GROUP BY g"
    )
    try:
        rows = export.conn.execute(sql, {"lo": lo, "hi": hi}).fetchall()
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(export.path, f"SQLite failed while reading {runtime.name}: {exc}") from None
    schema = {"gtid": pl.Int64, "first_ns": pl.Int64, "last_end": pl.Int64, "last_start": pl.Int64, "outside": pl.Int64}
    per_thread = pl.DataFrame(rows, schema=schema, orient="row")
    inside = per_thread.group_by(global_pid(pl.col("gtid")).alias("gpid")).agg(
        pl.col("first_ns").min(),
        pl.max_horizontal(pl.col("last_end").max(), pl.col("last_start").max()).alias("last_ns"),
    )
    bounded = span.drop("first_ns", "last_ns").join(inside, on="gpid", how="left", nulls_equal=True)
    return bounded.select(span.columns), int(per_thread["outside"].sum() or 0)


def _memory(capture: Capture, memory: MemoryEvidence, where: str) -> tuple[MemoryEvidence, list[ReportWarning]]:
    """``memory`` with the starts of usage and pool events outside the capture unknown (NULL)."""
    said: list[ReportWarning] = []
    outside = capture.outside(pl.col("start_ns"))
    events, pools = memory.events, memory.pool_events
    n_events = events.filter(outside).height
    n_pools = pools.filter(outside).height
    unknown = pl.when(outside).then(None).otherwise(pl.col("start_ns")).alias("start_ns")
    rule = START_UNKNOWN_RULE
    if n_events:
        # Unknown starts sort first, as the read orders a NULL start (the ledger's event order).
        events = events.with_columns(unknown).sort("start_ns", nulls_last=False, maintain_order=True)
        said.append(warned(
            Reason.of("memory_events_outside_capture", table=memory.table, where=where, rule=rule),
            n_events, kind="time_outside_capture",
        ))
    if n_pools:
        pools = pools.with_columns(unknown).sort("start_ns", nulls_last=False, maintain_order=True)
        said.append(warned(
            Reason.of("pool_events_outside_capture", pool_table=memory.pool_table, where=where, rule=rule),
            n_pools, kind="time_outside_capture",
        ))
    if not said:
        return memory, said
    return replace(memory, events=events, pool_events=pools, span=memory_span(events)), said
