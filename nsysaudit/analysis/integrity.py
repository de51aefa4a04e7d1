"""What a partly broken export leaves undecided, said out loud.

The joins decide nesting from a call's thread and times, and a finding from its API name and
return code. A row missing one of those (a NULL in a NOT NULL column, a name id without a
StringIds row, an end before its start) cannot be decided either way. Such rows are never
silently dropped or "fixed": they are counted in a warning, kept out of the joins when their
times cannot be trusted, and when one of them could be a failed allocation inside a library call
the verdict cannot be ``no_failure`` (see :func:`review`).

Everything here works on the frames already read (:class:`~nsysaudit.read.trace.Trace`, the pairs of
:func:`~nsysaudit.analysis.joins.nest`): no extra pass over the export.
"""

from __future__ import annotations

import polars as pl

from nsysaudit.analysis.joins import Nesting
from nsysaudit.core.codes import is_allocation_api, is_stream_wait
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import global_pid
from nsysaudit.core.reasons import Reason
from nsysaudit.read.diagnostics import NO_CAPTURE, Capture
from nsysaudit.read.trace import Trace
from nsysaudit.words import warned

INT64_MAX = (1 << 63) - 1



def damaged_times(capture: Capture) -> pl.Expr:
    """True for rows whose start and end cannot both be true: a start or an end outside the
    capture's bounds (:meth:`~nsysaudit.read.diagnostics.Capture.outside`: before it began or after it
    stopped, where the export records them; nsys records nothing outside), or an end minus start that
    does not fit in 64 bits (a call longer than 292 years; its duration would wrap). Such a row
    straddles, or lies inside, library calls by accident of the damage: it is evidence of nothing,
    and never of absence."""
    start, end = pl.col("start_ns"), pl.col("end_ns")
    damaged = ((end.cast(pl.Int128) - start.cast(pl.Int128)) > INT64_MAX).fill_null(False)
    return damaged | capture.outside(start) | capture.outside(end)


def joinable_calls(cuda_api_rows: pl.DataFrame, capture: Capture = NO_CAPTURE) -> pl.DataFrame:
    """The CUDA API rows whose thread and times can be used for nesting.

    A row without globalTid, start or end, whose end is before its start, or whose times are
    damaged (:func:`damaged_times`) is left out: its nesting is unknown, not "not nested"
    (:func:`review` counts what that could hide).
    """
    return cuda_api_rows.filter(
        pl.col("gtid").is_not_null()
        & pl.col("start_ns").is_not_null()
        & pl.col("end_ns").is_not_null()
        & (pl.col("end_ns") >= pl.col("start_ns"))
        & ~damaged_times(capture)
    )


def _allocation_or_unknown(frame: pl.DataFrame) -> pl.Expr:
    """True for rows whose API is an allocation call or has no known name."""
    names = frame["api"].drop_nulls().unique().to_list()
    alloc = [name for name in names if is_allocation_api(name)]
    return pl.col("api").is_null() | pl.col("api").is_in(alloc)


def _could_fail() -> pl.Expr:
    return pl.col("return_code").is_null() | (pl.col("return_code") != 0)


def _time_unknown(rows: pl.DataFrame, windows: pl.DataFrame, capture: Capture) -> pl.DataFrame:
    """Rows with unusable times that could still lie inside a library call of their thread, with
    their ``reason``: ``time_damaged`` (:func:`damaged_times`) or ``time_unknown``.

    With a known start (end NULL, or end before start) that means the start lies in some library
    call; with only the end known, that some library call ends at or after it; with neither, that
    the thread has a library call at all. Of a damaged row, a time outside the capture is unknown,
    and so is its start when only its duration overflows. Looked up in each thread's union of
    library-call intervals (disjoint windows, an as-of join): no (row, library call) pair is ever
    formed, so 10k reversed rows on a thread with 10k library calls cost O(n log n), not 10^8 pairs.
    """
    damaged = damaged_times(capture)
    bad = rows.filter(
        pl.col("gtid").is_not_null()
        & (pl.col("start_ns").is_null() | pl.col("end_ns").is_null() | (pl.col("end_ns") < pl.col("start_ns"))
           | damaged)
    )
    if bad.height == 0 or windows.height == 0:
        return bad.clear().with_columns(pl.lit(None, dtype=pl.String).alias("reason"))
    start_outside, end_outside = capture.outside(pl.col("start_ns")), capture.outside(pl.col("end_ns"))
    bad = bad.with_row_index("_row").with_columns(
        damaged.alias("_damaged"),
        # A damaged row's start is unknown when it lies outside the capture, or when nothing says
        # which of its two times made its duration overflow.
        pl.when(start_outside | (damaged & ~end_outside)).then(None).otherwise(pl.col("start_ns")).alias("_start"),
        pl.when(end_outside).then(None).otherwise(pl.col("end_ns")).alias("_end"),
    )
    per_thread = windows.group_by("gtid").agg(pl.col("w_end").max().alias("max_end"))
    hit_start = (
        bad.filter(pl.col("_start").is_not_null())
        .select("_row", "gtid", "_start")
        .sort("_start")
        .join_asof(windows, left_on="_start", right_on="w_start", by="gtid", strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("w_end") >= pl.col("_start"))
        .select("_row")
    )
    no_start = bad.filter(pl.col("_start").is_null()).join(per_thread, on="gtid", how="inner")
    hit_end = no_start.filter(pl.col("_end").is_null() | (pl.col("_end") <= pl.col("max_end"))).select("_row")
    rows_hit = pl.concat([hit_start, hit_end]).unique()
    return (
        bad.join(rows_hit, on="_row", how="semi")
        .with_columns(
            pl.when(pl.col("_damaged")).then(pl.lit("time_damaged")).otherwise(pl.lit("time_unknown")).alias("reason")
        )
        .drop("_row", "_damaged", "_start", "_end")
    )


def undecided_calls(
    cuda_api_rows: pl.DataFrame,
    windows: pl.DataFrame,
    pairs: pl.DataFrame,
    nvtx_ranges: pl.DataFrame,
    capture: Capture = NO_CAPTURE,
) -> pl.DataFrame:
    """CUDA API rows that could be a nested allocation failure the joins cannot confirm or refute.

    ``windows``: the union of the joinable library calls per thread (:func:`nsysaudit.core.intervals.union_windows`);
    ``capture``: the capture's bounds, where the export records them (:func:`damaged_times`).

    Columns ``gtid, start_ns, end_ns, correlation_id, api, return_code, reason`` (one row per
    call and reason; ``reason`` is a key of :data:`nsysaudit.words.UNDECIDED_WORDS`).
    """
    cols = ["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"]
    suspects = cuda_api_rows.filter(_could_fail() & _allocation_or_unknown(cuda_api_rows)).select(cols)
    parts: list[pl.DataFrame] = []
    if windows.height:
        parts.append(suspects.filter(pl.col("gtid").is_null()).with_columns(pl.lit("no_thread").alias("reason")))
        parts.append(_time_unknown(suspects, windows, capture))
    nested = pairs.filter(pl.col("relation") == "nested")
    if nested.height:  # each filter before its unique: the same rows (repeats are alike), far fewer hashed
        parts.append(
            nested.filter(pl.col("api").is_null() & (pl.col("return_code") != 0))
            .select(cols)
            .unique(maintain_order=True)
            .with_columns(pl.lit("name_unknown").alias("reason"))
        )
        parts.append(
            nested.filter(pl.col("return_code").is_null() & _allocation_or_unknown(nested))
            .select(cols)
            .unique(maintain_order=True)
            .with_columns(pl.lit("return_unknown").alias("reason"))
        )
    unknown_domain = _unknown_domain_ranges(nvtx_ranges)
    if unknown_domain.height:
        threads = unknown_domain["gtid"].drop_nulls().unique().implode()
        parts.append(
            suspects.filter(pl.col("gtid").is_in(threads)).with_columns(pl.lit("unknown_nvtx_domain").alias("reason"))
        )
    parts = [p for p in parts if p.height]
    if not parts:
        schema = dict(zip(cols, cuda_api_rows.select(cols).dtypes, strict=True))
        return pl.DataFrame(schema={**schema, "reason": pl.String})
    return pl.concat(parts).unique(maintain_order=True)


def _unknown_domain_ranges(nvtx_ranges: pl.DataFrame) -> pl.DataFrame:
    """NVTX ranges in a non-default domain whose name is unknown (no NvtxDomainCreate row, or its
    text id has no StringIds row): they could be library calls nobody can recognise."""
    if "domain" not in nvtx_ranges.columns:
        return nvtx_ranges.clear()
    return nvtx_ranges.filter(
        pl.col("domain_id").is_not_null() & (pl.col("domain_id") != 0) & pl.col("domain").is_null()
    )


def duplicate_correlations(cuda_api_rows: pl.DataFrame) -> pl.DataFrame:
    """``gpid, correlation_id, rows`` for correlation ids shared by several of ``cuda_api_rows`` in one process."""
    return (
        cuda_api_rows.filter(pl.col("gtid").is_not_null() & pl.col("correlation_id").is_not_null())
        .group_by(global_pid(pl.col("gtid")).alias("gpid"), "correlation_id")
        .agg(pl.len().cast(pl.Int64).alias("rows"))
        .filter(pl.col("rows") > 1)
        .sort("gpid", "correlation_id")
    )


def _unsafe_bytes(pairs: pl.DataFrame, duplicates: pl.DataFrame) -> pl.Expr:
    """Bytes that cannot be attributed to the call: its correlation id is shared in its process,
    or the call is a failed allocation (which has no allocation event of its own)."""
    failed_alloc = (pl.col("return_code") != 0) & _allocation_or_unknown(pairs)
    if not duplicates.height:  # no shared id: no key to build for every pair
        return pl.col("bytes").is_not_null() & failed_alloc.fill_null(False)
    dup_keys = duplicates.select(
        (pl.col("gpid").cast(pl.String) + ":" + pl.col("correlation_id").cast(pl.String)).alias("k")
    )["k"]
    key = global_pid(pl.col("gtid")).cast(pl.String) + ":" + pl.col("correlation_id").cast(pl.String)
    return pl.col("bytes").is_not_null() & (key.is_in(dup_keys.implode()) | failed_alloc.fill_null(False))


def review(
    trace: Trace, pairs: pl.DataFrame, windows: pl.DataFrame
) -> tuple[pl.DataFrame, list[Reason], list[ReportWarning]]:
    """Check what the joins used; return ``pairs`` without unattributable bytes, verdict reasons and warnings.

    The reasons are non-empty when some row could hide a nested allocation failure: the verdict is
    then ``inconclusive``, not ``no_failure``.
    """
    pairs, byte_warnings = _attributable_bytes(trace, pairs)
    reasons, undecided_warnings = _undecided(trace, windows, pairs)
    wait_reasons, wait_warnings = _undecided_waits(trace)
    return pairs, reasons + wait_reasons, [*byte_warnings, *_damaged_rows(trace), *undecided_warnings,
                                           *wait_warnings]


def _undecided_waits(trace: Trace) -> tuple[list[Reason], list[ReportWarning]]:
    """Failed stream waits on an event whose times are damaged (:func:`damaged_times`), in a process
    that began a stream capture: whether they follow a capture region is unknown (such rows make no
    capture region and no finding), so a ``captured_event_wait_failure`` cannot be ruled out."""
    rows = trace.cuda_api_rows
    waits = [a for a in rows["api"].drop_nulls().unique().to_list() if is_stream_wait(a)]
    captured = trace.capture_calls.filter(pl.col("gtid").is_not_null()).select(
        global_pid(pl.col("gtid")).alias("gpid")).unique()
    if not waits or not captured.height:
        return [], []
    damaged = rows.filter(
        pl.col("api").is_in(waits) & _could_fail() & damaged_times(trace.capture_bounds) & pl.col("gtid").is_not_null()
    ).with_columns(global_pid(pl.col("gtid")).alias("gpid")).join(captured, on="gpid", how="semi")
    if not damaged.height:
        return [], []
    said = warned(Reason.of("undecided_wait_times"), damaged.height, kind="undecided_calls")
    return [Reason.of("undecided_waits", waits=damaged.height)], [said]


def _attributable_bytes(trace: Trace, pairs: pl.DataFrame) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """``pairs`` with the bytes no single call can be given (a correlation id several rows carry, an
    allocation event of a failed call) made unknown, and the warnings that say so."""
    said: list[ReportWarning] = []
    duplicates = duplicate_correlations(trace.cuda_api_rows)
    if duplicates.height:
        said.append(warned(
            Reason.of("duplicate_correlation_id", height=duplicates.height),
            int(duplicates["rows"].sum()),
        ))
    # An allocation event's correlation id carried by several rows anywhere in the table (the scan
    # counts them all, read or not): the event cannot be attributed to one call.
    shared = trace.shared_alloc_ids.join(duplicates, on=["gpid", "correlation_id"], how="anti")
    if shared.height:
        said.append(warned(Reason.of("allocation_correlation_shared"), shared.height))
        duplicates = pl.concat([duplicates, shared.select(duplicates.columns)])
    unsafe = _unsafe_bytes(pairs, duplicates) if pairs.height else pl.lit(False)
    hidden = pairs.filter(unsafe).height if pairs.height else 0
    if hidden:
        pairs = pairs.with_columns(pl.when(unsafe).then(pl.lit(None, dtype=pl.Int64)).otherwise("bytes").alias("bytes"))
        failed = pairs.filter((pl.col("return_code") != 0) & _allocation_or_unknown(pairs))
        failed_with_event = failed.with_columns(global_pid(pl.col("gtid")).alias("gpid")).join(
            trace.allocations.select("gpid", "correlation_id"), on=["gpid", "correlation_id"], how="semi"
        )
        if failed_with_event.height:
            said.append(warned(
                Reason.of("allocation_event_for_failed_call"),
                failed_with_event.select("gtid", "correlation_id").unique().height,
            ))
    return pairs, said


def _damaged_rows(trace: Trace) -> list[ReportWarning]:
    """Library calls without a start, NVTX ranges in a domain of unknown name, CUDA API rows whose
    times cannot be true."""
    said: list[ReportWarning] = []
    no_start = trace.library_calls.filter(pl.col("start_ns").is_null()).height
    if no_start:
        said.append(warned(Reason.of("library_call_without_start"), no_start))
    unknown_domain = _unknown_domain_ranges(trace.nvtx_ranges)
    if unknown_domain.height:
        said.append(warned(Reason.of("unknown_nvtx_domain"), unknown_domain.height))
    capture = trace.capture_bounds
    damaged = trace.cuda_api_rows.filter(damaged_times(capture)).height
    if damaged:
        said.append(warned(Reason.of("damaged_time_range", start_ns=capture.start_ns, stop_ns=capture.stop_ns,
                                     bounded=capture.bounded), damaged))
    return said


def _undecided(trace: Trace, windows: pl.DataFrame, pairs: pl.DataFrame) -> tuple[list[Reason], list[ReportWarning]]:
    """The rows that could be a failed allocation inside a library call but the export does not say:
    a verdict reason and a warning (none when there is no such row)."""
    undecided = undecided_calls(trace.cuda_api_rows, windows, pairs, trace.nvtx_ranges, trace.capture_bounds)
    if not undecided.height:
        return [], []
    by_reason = undecided.group_by("reason").agg(pl.len().alias("n")).sort("reason")
    calls = undecided.select("gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code").unique().height
    said = warned(Reason.of("undecided_call_rows", by_reason=by_reason.rows()), calls, kind="undecided_calls")
    return [Reason.of("undecided_rows", calls=calls)], [said]


def limit_review(nesting: Nesting) -> tuple[list[Reason], list[ReportWarning]]:
    """A warning when the pair limit was hit; verdict reasons when it could hide a finding."""
    if nesting.complete:
        return [], []
    said = [warned(Reason.of("pair_limit", pairs=nesting.total_pairs, max_pairs=nesting.max_pairs,
                             unexamined=len(nesting.unexamined)), nesting.total_pairs)]
    if not nesting.unexamined:
        return [], said
    return [Reason.of("unexamined_library_calls", calls=len(nesting.unexamined), max_pairs=nesting.max_pairs)], said
