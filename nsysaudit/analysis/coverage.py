"""Whether the trace covers each library call: decided from evidence, never from the last row alone.

A library call is ``complete`` when

- its process has a CUDA API record at or after the call's end (the trace visibly went on), or
- nsys's own diagnostics show the capture went on past the call's end ("Profiling has stopped."
  later) and nsys never warned, for that process or the whole session, that CUDA events may be
  missing or that CUDA tracing was degraded (``coverage_evidence`` says which).

Otherwise it is ``censored``, and ``censored_reason`` says what is known (``censored_reasons``
lists every reason that applies, most telling first):

``capture_ended_inside``
    The capture stopped while the call ran: nsys clamps ranges still open to the capture's stop,
    so the recorded end is the stop, and the call's true end and duration are unknown.
``capture_began_inside``
    The call started before the capture did: what happened inside it before is not in the trace.
``nsys_warned_cuda_events_missing`` / ``cuda_trace_degraded``
    nsys said CUDA events might not all have been collected, or that CUDA tracing ran degraded
    (an unsupported driver), and no CUDA API record after the call shows the trace went on.
``cuda_api_trace_ended_before_call``
    The process's CUDA API records end before the call begins (exports without diagnostics).
``cuda_api_trace_ends_inside``
    The process's CUDA API records end inside the call and no diagnostics confirm the capture
    went on without losing events (exports without DIAGNOSTIC_EVENT, such as nsys 2023.4's).
``no_cuda_api_trace``, ``no_cuda_api_trace_for_process``
    The export, or the call's process, has no CUDA API records at all.
``library_call_has_no_end``, ``library_call_has_no_start``, ``library_call_reversed``, ``library_call_has_no_thread``
    A damaged range: nothing inside it can be checked.
``library_call_outside_capture``
    A damaged range: its start or end lies after the capture stopped (nsys clamps a range still open
    at the stop to the stop), so its times cannot be true; it is never joined.

A process's *first* CUDA API call falling inside a library call is not censoring: libraries
often initialize CUDA themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypedDict, get_args

import polars as pl

from nsysaudit.core.ids import global_pid, pid_bits
from nsysaudit.read.diagnostics import CUDA_GAPS, Capture
from nsysaudit.read.trace import Trace

# Whether the trace covers a library call (``censored``: it does not, and ``censored_reasons`` say why).
CoverageState = Literal["complete", "censored"]

# Reasons a call is censored, most telling first (the order of ``censored_reasons``).
CensoredReason = Literal[
    "no_cuda_api_trace",
    "library_call_has_no_end",
    "library_call_has_no_start",
    "library_call_reversed",
    "library_call_has_no_thread",
    "library_call_outside_capture",
    "no_cuda_api_trace_for_process",
    "capture_ended_inside",
    "capture_began_inside",
    "cuda_trace_degraded",
    "nsys_warned_cuda_events_missing",
    "cuda_api_trace_ended_before_call",
    "cuda_api_trace_ends_inside",
]
REASONS: tuple[CensoredReason, ...] = get_args(CensoredReason)


def cuda_gaps(diagnostics: pl.DataFrame, process_gpids: Iterable[int]) -> pl.DataFrame:
    """``gpid, degraded, events_missing``: which nsys CUDA warnings apply to each process.

    A message with the process's globalPid applies to it; one with no globalPid, or one that is no
    traced process's (nsys's session-level messages), applies to every process.
    """
    gpids = sorted({int(g) for g in process_gpids})
    gaps = diagnostics.filter(pl.col("category").is_in(list(CUDA_GAPS)))
    session = set(gaps.filter(pl.col("gpid").is_null() | ~pl.col("gpid").is_in(gpids))["category"].to_list())
    # The messages grouped by process once: a query per process cost 0.2 s of a 0.47 s analysis of an
    # export of 1,667 processes (public/pipit_saxpy_2022.2.sqlite).
    own: dict[int, set[str]] = {}
    for gpid, name in gaps.filter(pl.col("gpid").is_in(gpids)).select("gpid", "category").iter_rows():
        own.setdefault(gpid, set()).add(name)
    rows = []
    for gpid in gpids:
        mine = own.get(gpid, set()) | session
        rows.append((gpid, "cuda_trace_degraded" in mine, "cuda_events_missing" in mine))
    return pl.DataFrame(
        rows, schema={"gpid": pl.Int64, "degraded": pl.Boolean, "events_missing": pl.Boolean}, orient="row"
    )


def censor(
    library_calls: pl.DataFrame,
    cuda_api_span: pl.DataFrame,
    *,
    has_cuda_api: bool,
    capture: Capture,
    diagnostics: pl.DataFrame,
    process_gpids: Iterable[int] = (),
    recorded: bool = True,
) -> pl.DataFrame:
    """Add ``coverage``, ``censored_reason``, ``censored_reasons``, ``coverage_evidence``,
    ``end_known``, ``cuda_api_first_ns`` and ``cuda_api_last_ns`` to each library call (see the module docstring).

    ``process_gpids``: every process the export knows (PROCESSES, the CUDA API trace): a message
    naming one of them applies to it alone, any other message to the whole session. ``recorded``:
    the rows are ranges nsys recorded, whose times lie inside the capture unless damaged (False for
    moments the analysis reads at, which may lie after the capture stopped).
    """
    out = _with_process_evidence(library_calls, cuda_api_span, diagnostics, process_gpids)
    start, end, last = pl.col("start_ns"), pl.col("end_ns"), pl.col("cuda_api_last_ns")
    stop = pl.lit(capture.stop_ns, dtype=pl.Int64)
    cap_start = pl.lit(capture.start_ns, dtype=pl.Int64)
    # nsys's silence about lost events proves something only when it wrote its diagnostics.
    confirmed = capture.diagnostics and capture.stop_from == "DIAGNOSTIC_EVENT"
    # An end (or start) after the capture stopped: nsys clamps ranges open at the stop to it, so such
    # a time is damage (never "the capture ended inside").
    after_stop = ((end > stop) | (start > stop)).fill_null(False) & pl.lit(recorded)
    damaged = end.is_null() | start.is_null() | (end < start) | pl.col("gtid").is_null() | after_stop
    record_after = last.is_not_null() & (last >= end)
    ended_inside = stop.is_not_null() & (end >= stop)
    capture_went_on = pl.lit(confirmed) & stop.is_not_null() & (stop > end)
    flags = {
        "no_cuda_api_trace": pl.lit(not has_cuda_api),
        "library_call_has_no_end": end.is_null(),
        "library_call_has_no_start": start.is_null(),
        "library_call_reversed": end < start,
        "library_call_has_no_thread": pl.col("gtid").is_null(),
        "library_call_outside_capture": after_stop,
        "no_cuda_api_trace_for_process": last.is_null(),
        "capture_ended_inside": ended_inside & ~after_stop,
        "capture_began_inside": cap_start.is_not_null() & (start < cap_start),
        "cuda_trace_degraded": pl.col("degraded") & ~record_after,
        "nsys_warned_cuda_events_missing": pl.col("events_missing") & ~record_after,
        # Only when nothing else says where the trace stopped: the last record alone.
        "cuda_api_trace_ended_before_call": ~record_after & ~capture_went_on & ~ended_inside & (last < start),
        "cuda_api_trace_ends_inside": ~record_after & ~capture_went_on & ~ended_inside & (last >= start),
    }
    none = pl.lit(None, dtype=pl.String)
    reasons = pl.concat_list(
        [pl.when(flags[name].fill_null(False)).then(pl.lit(name)).otherwise(none) for name in REASONS]
    ).list.drop_nulls()
    if not has_cuda_api:
        reasons = pl.lit(["no_cuda_api_trace"], dtype=pl.List(pl.String))
    evidence = (
        pl.when(pl.col("censored_reasons").list.len() > 0)
        .then(pl.lit(None, dtype=pl.String))
        .when(record_after)
        .then(pl.lit("cuda_api_record_after_end"))
        .otherwise(pl.lit("capture_continued_without_cuda_warning"))
    )
    return (
        out.with_columns(reasons.alias("censored_reasons"))
        .with_columns(
            pl.col("censored_reasons").list.first().alias("censored_reason"),
            pl.when(pl.col("censored_reasons").list.len() > 0)
            .then(pl.lit("censored"))
            .otherwise(pl.lit("complete"))
            .alias("coverage"),
            evidence.alias("coverage_evidence"),
            # The recorded end of a range open at the capture's stop is the stop, not its end.
            (~(ended_inside.fill_null(False)) & ~damaged).alias("end_known"),
        )
        .drop("gpid", "degraded", "events_missing")
        .sort("lib_id")
    )


def _with_process_evidence(
    library_calls: pl.DataFrame, cuda_api_span: pl.DataFrame, diagnostics: pl.DataFrame, process_gpids: Iterable[int]
) -> pl.DataFrame:
    """Each call with its process (``gpid``), the process's first and last CUDA API record and the
    nsys CUDA warnings that apply to it (``degraded``, ``events_missing``)."""
    spans = cuda_api_span.select(
        "gpid", pl.col("first_ns").alias("cuda_api_first_ns"), pl.col("last_ns").alias("cuda_api_last_ns")
    )
    gpids = library_calls.select(global_pid(pl.col("gtid")).alias("gpid"))["gpid"].drop_nulls().to_list()
    gaps = cuda_gaps(diagnostics, {*gpids, *cuda_api_span["gpid"].drop_nulls().to_list(), *process_gpids})
    return (
        library_calls.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
        .join(spans, on="gpid", how="left")
        .join(gaps, on="gpid", how="left")
        .with_columns(pl.col("degraded").fill_null(False), pl.col("events_missing").fill_null(False))
    )


class SourceCoverage(TypedDict):
    source: str
    pid: int | None
    global_pid: int | None
    first_ns: int | None
    last_ns: int | None
    rows: int


def by_source(trace: Trace, cuda_api_span: pl.DataFrame) -> list[SourceCoverage]:
    """First/last timestamp and row count per trace source and process."""

    def rows(source: str, frame: pl.DataFrame) -> list[SourceCoverage]:
        out: list[SourceCoverage] = []
        # gpid null: rows without a process; first_ns, last_ns null: no timestamp among them.
        gpid: int | None
        first: int | None
        last: int | None
        for gpid, first, last, count in frame.sort("gpid", nulls_last=True).select(
            "gpid", "first_ns", "last_ns", "rows"
        ).iter_rows():
            out.append({"source": source, "pid": pid_bits(gpid) if gpid is not None else None, "global_pid": gpid,
                        "first_ns": first, "last_ns": last, "rows": int(count)})
        return out

    def span(frame: pl.DataFrame) -> pl.DataFrame:
        return (
            frame.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
            .group_by("gpid")
            .agg(
                pl.col("start_ns").min().alias("first_ns"),
                pl.max_horizontal(pl.col("end_ns").max(), pl.col("start_ns").max()).alias("last_ns"),
                pl.len().cast(pl.Int64).alias("rows"),
            )
        )

    nvtx = trace.nvtx_ranges
    return (
        rows("cuda_api", cuda_api_span)
        + rows("nvtx", span(nvtx))
        + rows("library_calls", span(trace.library_calls))
        + rows("memory_events", trace.memory_span)
    )
