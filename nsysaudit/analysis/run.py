"""``analyze_trace()``: every step of the analysis on one loaded trace, in order; an :class:`Analysis` out.

coverage (is each library call covered?) -> joins (CUDA calls nested in library calls) -> integrity
(what damaged rows leave undecided) -> findings -> failed calls -> census -> alignment with the
telemetry -> verdict. Pure: frames and values in, frames and values out; warnings are returned, not
appended to anything shared.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypedDict

import polars as pl

from nsysaudit.analysis import coverage, failures, integrity, joins, nccl, recovery
from nsysaudit.analysis import findings as finding_rows
from nsysaudit.analysis import verdict as verdicts
from nsysaudit.analysis.alignment import Alignment, align
from nsysaudit.analysis.allocator import AllocatorView, allocator_view
from nsysaudit.analysis.coverage import SourceCoverage
from nsysaudit.analysis.devices import TracedProcess, launch_warnings
from nsysaudit.analysis.interest import of_interest
from nsysaudit.analysis.ledger import CoveredPoint, Ledger, LedgerPoint, PointKind, Wanted, build_ledger
from nsysaudit.analysis.ledger import points as ledger_points
from nsysaudit.analysis.stalls import StallsAnalysis, analyze_stalls
from nsysaudit.analysis.verdict import LibraryFailure, LibrarySource, Verdict
from nsysaudit.core.codes import is_allocation_api
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import gpid_of
from nsysaudit.core.intervals import closed_library_calls, union_windows
from nsysaudit.core.reasons import Reason
from nsysaudit.read.devices import DeviceTables
from nsysaudit.read.diagnostics import Capture
from nsysaudit.read.snapshot import Snapshot
from nsysaudit.read.telemetry import DEFAULT_TOLERANCE_NS, TelemetryLog
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, Trace
from nsysaudit.words import analysis_repr, say, telemetry_points_rule, warned


class Limits(TypedDict):
    """The pair limit the analysis ran with (``max_pairs``; null: none), the library-call/CUDA-call
    pairs it found and those it listed."""

    max_pairs: int | None
    pairs: int
    pairs_listed: int


@dataclass(frozen=True)
class Analysis:
    """What the analysis of one loaded trace found. Frames (timestamps in the export's nanoseconds):

    - ``census``: ``api, return_code, classification, count`` per (api, non-zero return code).
    - ``library_calls``: one row per library call with ``lib_id, api, library, source, gtid, pid,
      tid, thread_name, start_ns, end_ns, coverage, censored_reason(s), coverage_evidence, end_known,
      cuda_api_first_ns, cuda_api_last_ns, children_complete``.
    - ``pairs``: ``lib_id, gtid, start_ns, end_ns, correlation_id, api, return_code, relation,
      bytes``: CUDA API calls nested in (or straddling) each library call, in (lib_id, start_ns,
      correlation_id) order.
    - ``findings``: one row per explained failed call (:data:`nsysaudit.analysis.findings.FINDING_SCHEMA`).
    - ``failed_calls``: the failures no finding explains, grouped.
    - ``cuda_api_span``, ``nvtx_ranges``, ``diagnostics``: coverage material; ``cuda_api_rows``: the
      CUDA API rows read (non-zero returns and calls overlapping library calls), classified.
    - ``memory_series``: the device-memory ledger, one row per counted memory event
      (:data:`nsysaudit.analysis.ledger.SERIES_SCHEMA`; empty when no ledger is claimed).
    """

    frames: Mapping[str, pl.DataFrame]
    cuda_api_calls: int
    cuda_api_trace: bool
    verdict: Verdict
    reasons: tuple[Reason, ...]  # the verdict's, as codes and values; their statements: verdict_reasons
    coverage_sources: tuple[SourceCoverage, ...]
    processes: tuple[TracedProcess, ...]
    capture: Mapping[str, list[str]]
    warnings: tuple[ReportWarning, ...]
    limits: Limits
    capture_bounds: Capture
    library_sources: tuple[LibrarySource, ...]
    telemetry_library_failures: tuple[LibraryFailure, ...]
    # Set when telemetry was given: places findings and library calls on the application's clock.
    alignment: Alignment | None = None
    # The device-memory ledger, and its values at each finding, censored call and telemetry line.
    ledger: Ledger | None = None
    memory_points: tuple[CoveredPoint, ...] = ()
    # The GPUs, which process used which, and the launched command (nsysaudit.analysis.devices reads them).
    devices: DeviceTables | None = None
    # The calls that blocked the host and what ran on the device meanwhile (nsysaudit.analysis.stalls).
    stalls: StallsAnalysis | None = None
    # Set when PyTorch memory snapshots were given: the allocator's own view at the same moments.
    allocator: AllocatorView | None = None

    @property
    def verdict_reasons(self) -> tuple[str, ...]:
        """The verdict's reasons, each in the one statement :func:`nsysaudit.words.say` makes of it."""
        return tuple(say(r) for r in self.reasons)

    def __repr__(self) -> str:
        kinds = self.frames["findings"]["kind"].value_counts(sort=True).rows()
        return analysis_repr(self.verdict, [(k, n) for k, n in kinds], self.frames["library_calls"].height,
                             self.cuda_api_calls, len(self.warnings))


def analyze_trace(
    trace: Trace,
    *,
    max_pairs: int | None = joins.DEFAULT_MAX_PAIRS,
    telemetry: TelemetryLog | None = None,
    event_records: pl.DataFrame | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    snapshots: Sequence[Snapshot] = (),
    snapshot_tolerance_ns: int = DEFAULT_TOLERANCE_NS,
) -> Analysis:
    """The joins, coverage, findings and verdict over an already loaded :class:`Trace`.

    ``telemetry`` is aligned with the trace here, before the verdict: a library failure the
    application recorded but no traced call explains makes the verdict inconclusive.
    ``event_records``: the event-record calls inside the capture regions a failed wait follows
    (:func:`nsysaudit.analysis.failures.regions_needing_records`). ``snapshots``: PyTorch memory
    snapshots of the run, joined to the trace (:mod:`nsysaudit.analysis.allocator`; their clock
    checked within ``snapshot_tolerance_ns``) and read at the moments the ledger is read at.
    """
    # The ledger needs only the trace: built on a thread of its own (polars releases the GIL) while
    # the joins below run, and taken where its points are read. An error in it is raised there.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsysaudit-ledger") as pool:
        ledger = pool.submit(build_ledger, trace.memory, trace.capture, trace.alloc_calls, trace.memory_calls)
        analysis = _analyze(trace, ledger, max_pairs, telemetry, event_records, library_domains)
    if not snapshots:
        return analysis
    return _with_allocator(analysis, trace, snapshots, snapshot_tolerance_ns)


def _with_allocator(analysis: Analysis, trace: Trace, snapshots: Sequence[Snapshot], tolerance_ns: int) -> Analysis:
    """The analysis with the snapshots joined (:func:`nsysaudit.analysis.allocator.allocator_view`),
    read at the moments the ledger is read at, whether or not a ledger is claimed."""
    findings, libs = analysis.frames["findings"], analysis.frames["library_calls"]
    pairs = analysis.frames["pairs"]
    failed_ids = pairs.filter((pl.col("relation") == "nested") & (pl.col("return_code") != 0))["lib_id"].unique()
    interest = of_interest(libs, failed_ids.to_list(), findings["lib_id"].drop_nulls().to_list())
    alignment = analysis.alignment
    view = allocator_view(
        snapshots, trace.memory, trace.alloc_calls,
        session_start_utc_ns=trace.session_start_utc_ns, capture=trace.capture_bounds,
        traced_gpids=trace.processes["gpid"].drop_nulls().to_list(), tolerance_ns=tolerance_ns,
        telemetry_checked=alignment.checked if alignment is not None else None,
        wanted=_memory_moments(findings, interest.frame, alignment, trace.processes),
    )
    return replace(analysis, allocator=view, warnings=(*analysis.warnings, *view.warnings))


def _traced_processes(trace: Trace) -> list[TracedProcess]:
    """The traced processes, by globalPid."""
    return [
        {"pid": pid, "global_pid": gpid, "name": name}
        for pid, gpid, name in trace.processes.sort("gpid").select("pid", "gpid", "process_name").iter_rows()
    ]


def _analyze(
    trace: Trace,
    ledger: Future[Ledger],
    max_pairs: int | None,
    telemetry: TelemetryLog | None,
    event_records: pl.DataFrame | None,
    library_domains: Sequence[str],
) -> Analysis:
    names = trace.thread_names
    cuda_api_span = trace.cuda_api_span.filter(pl.col("gpid").is_not_null())
    nested = _nest(trace, max_pairs)
    libs = _covered_library_calls(trace, cuda_api_span).with_columns(
        pl.lit(nested.nesting.complete).alias("children_complete")
    )
    cuda_api_rows = failures.classify_returns(trace.cuda_api_rows)
    findings = _findings(trace, nested.pairs, libs, cuda_api_rows, event_records)
    failed, attribution_warnings = _failed_calls(trace, cuda_api_rows, findings, nested, library_domains, max_pairs)
    sources = verdicts.library_sources(trace, libs, library_domains)
    alignment = _aligned(trace, libs, telemetry)
    # Out-of-memory failures outside library calls that nothing after them shows the process survived.
    unrecovered = joins.with_ids(
        recovery.unrecovered(cuda_api_rows, findings.select(failures.CALL_COLUMNS), trace.last_allocations),
        trace.thread_names,
    )
    telemetry_failures = verdicts.telemetry_library_failures(alignment, libs, findings, trace.capture,
                                                             unrecovered=unrecovered)
    verdict, reasons = verdicts.decide(trace, libs, findings, failed, sources, telemetry_failures, nested.undecided,
                                       unrecovered=unrecovered)
    coverage_sources = coverage.by_source(trace, cuda_api_span)
    memory = replace(ledger.result(), api_ends=_api_ends(coverage_sources))
    processes = _traced_processes(trace)
    said = [
        *trace.warnings,
        *launch_warnings(trace.devices, processes),
        *nested.warnings,
        *_library_call_warnings(trace, libs, nested.pairs),
        *attribution_warnings,
        *_telemetry_warnings(telemetry),
        *memory.warnings,
    ]
    pairs = nested.pairs
    failed_ids = pairs.filter((pl.col("relation") == "nested") & (pl.col("return_code") != 0))["lib_id"].unique()
    interest = of_interest(libs, failed_ids.to_list(), findings["lib_id"].drop_nulls().to_list())
    memory_points = _covered(
        ledger_points(memory, _memory_moments(findings, interest.frame, alignment, trace.processes)),
        trace, cuda_api_span,
    )
    return Analysis(
        frames={
            "census": _census(cuda_api_rows),
            "library_calls": libs,
            "pairs": pairs,
            "findings": findings,
            "failed_calls": failed,
            "cuda_api_span": cuda_api_span,
            "cuda_api_rows": cuda_api_rows,
            "nvtx_ranges": trace.nvtx_ranges,
            "thread_names": names,
            "diagnostics": trace.diagnostics,
            "memory_series": memory.series,
            **_stall_frames(trace),
        },
        cuda_api_calls=trace.cuda_api_total,
        cuda_api_trace=trace.has_cuda_api and trace.cuda_api_total > 0,
        verdict=verdict,
        reasons=tuple(reasons),
        coverage_sources=tuple(coverage_sources),
        processes=tuple(processes),
        capture=trace.capture,
        warnings=tuple(said),
        limits={"max_pairs": max_pairs, "pairs": nested.nesting.total_pairs, "pairs_listed": pairs.height},
        capture_bounds=trace.capture_bounds,
        library_sources=tuple(sources),
        telemetry_library_failures=tuple(telemetry_failures),
        alignment=alignment,
        ledger=memory,
        memory_points=tuple(memory_points),
        devices=trace.devices,
        stalls=_stalls(trace, cuda_api_span, library_domains),
    )


def _stalls(trace: Trace, cuda_api_span: pl.DataFrame, library_domains: Sequence[str]) -> StallsAnalysis:
    """The host stalls (:func:`nsysaudit.analysis.stalls.analyze_stalls`)."""
    return analyze_stalls(trace.gpu_work, trace.nvtx_ranges, trace.library_calls, trace.thread_names, trace.processes,
                          cuda_api_span, library_domains)


def _stall_frames(trace: Trace) -> dict[str, pl.DataFrame]:
    """The blocking calls and the GPU rows behind the longest waits (:mod:`nsysaudit.read.gpu_work`)."""
    return {"stall_calls": trace.gpu_work.calls, "stall_work": trace.gpu_work.attributed}


def _api_ends(coverage_sources: list[SourceCoverage]) -> dict[int, int]:
    """Each process's last CUDA API record (global pid -> ns), for the ledger to name where traced
    bytes exceed a device's total."""
    return {s["global_pid"]: s["last_ns"] for s in coverage_sources
            if s["source"] == "cuda_api" and s["global_pid"] is not None and s["last_ns"] is not None}

def _covered_library_calls(trace: Trace, cuda_api_span: pl.DataFrame) -> pl.DataFrame:
    """The library calls with their coverage (:func:`nsysaudit.analysis.coverage.censor`), pid, tid
    and thread name, in ``lib_id`` order."""
    libs = coverage.censor(
        trace.library_calls,
        cuda_api_span,
        has_cuda_api=trace.has_cuda_api,
        capture=trace.capture_bounds,
        diagnostics=trace.diagnostics,
        process_gpids=trace.processes["gpid"].drop_nulls().to_list(),
    )
    return joins.with_ids(libs, trace.thread_names).sort("lib_id")


@dataclass(frozen=True)
class _Nested:
    """The joins' outcome: the pairs (reviewed), the library calls they used, what a limit or a
    damaged row leaves undecided (verdict reasons), and the warnings saying so."""

    closed: pl.DataFrame
    nesting: joins.Nesting
    pairs: pl.DataFrame
    undecided: list[Reason]
    warnings: list[ReportWarning]


def _nest(trace: Trace, max_pairs: int | None) -> _Nested:
    """The CUDA API calls nested in (or straddling) each library call, with their bytes."""
    calls = integrity.joinable_calls(trace.cuda_api_rows, trace.capture_bounds)
    # The library calls the joins can use, and their union per thread: made once, used by every step.
    closed = closed_library_calls(trace.library_calls, trace.capture_bounds.stop_ns)
    windows = trace.library_windows  # union_windows(closed), made once by the read
    nesting = joins.nest_bounded(joins.closed_libs(closed), calls, max_pairs)
    # The calls of the threads NCCL started for its calls, nested in those calls (analysis.nccl).
    helpers = nccl.helper_pairs(trace.nccl.helper_calls, complete=nesting.complete, capture=trace.capture_bounds)
    nested = nccl.with_helper_pairs(nesting.pairs, helpers)
    pairs = joins.attach_bytes(nested, trace.allocations)  # in nest's order: lib_id, start, correlation
    # Partly broken rows: counted in warnings; what could hide a finding makes the verdict inconclusive.
    pairs, undecided, review_warnings = integrity.review(trace, pairs, windows)
    limit_reasons, limit_warnings = integrity.limit_review(nesting)
    return _Nested(closed, nesting, pairs, undecided + limit_reasons, review_warnings + limit_warnings)


def _library_call_warnings(trace: Trace, libs: pl.DataFrame, pairs: pl.DataFrame) -> list[ReportWarning]:
    """Library calls whose duration does not fit in 64 bits; allocations inside them of unknown size."""
    out = []
    too_long = libs.filter(
        (pl.col("end_ns").cast(pl.Int128) - pl.col("start_ns").cast(pl.Int128)) > (1 << 63) - 1
    ).height
    if too_long:
        out.append(warned(Reason.of("duration_overflow"), too_long))
    if "memory" not in trace.tables_used and pairs.height:
        successful_allocs = sum(
            1
            for api, rc in pairs.select("api", "return_code").iter_rows()
            if rc == 0 and api is not None and is_allocation_api(api)
        )
        if successful_allocs:
            out.append(warned(Reason.of("no_memory_events"), successful_allocs))
    return out


def _findings(
    trace: Trace, pairs: pl.DataFrame, libs: pl.DataFrame, cuda_api_rows: pl.DataFrame,
    event_records: pl.DataFrame | None,
) -> pl.DataFrame:
    """The findings: failures nested in library calls, then failed waits on captured events, by time."""
    nested = finding_rows.nested_findings(pairs, libs, trace.thread_names)
    waits = finding_rows.wait_findings(trace, cuda_api_rows, event_records, trace.thread_names)
    if not waits.height:
        return nested
    return pl.concat([nested, waits], how="diagonal_relaxed").sort(["start_ns", "gtid", "correlation_id"],
                                                                    nulls_last=True)


def _failed_calls(
    trace: Trace, cuda_api_rows: pl.DataFrame, findings: pl.DataFrame, nested: _Nested, library_domains: Sequence[str],
    max_pairs: int | None,
) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """The failed calls no finding explains (``cuda_api_rows``: the trace's, classified), grouped, each
    with its innermost NVTX range outside the library domains (a warning when there were too many
    overlaps to say)."""
    explained = findings.select(failures.CALL_COLUMNS)
    straddling = nested.pairs.filter(pl.col("relation") == "straddling").select(failures.CALL_COLUMNS)
    library = set(library_domains)
    plain_ranges = trace.nvtx_ranges.filter(pl.col("domain").is_null() | ~pl.col("domain").is_in(list(library)))
    unexamined = union_windows(nested.closed.filter(pl.col("lib_id").is_in(nested.nesting.unexamined)))
    failed, attributed = failures.failed_calls(
        cuda_api_rows, explained, straddling, plain_ranges, max_pairs, unexamined
    )
    said = [] if attributed else [warned(Reason.of("nvtx_attribution_skipped", max_pairs=max_pairs), failed.height)]
    return joins.with_ids(failed, trace.thread_names), said


def _census(cuda_api_rows: pl.DataFrame) -> pl.DataFrame:
    """``api, return_code, classification, count`` per non-zero return."""
    return (
        cuda_api_rows.filter(pl.col("return_code") != 0)
        .group_by(["api", "return_code", "classification"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort(["api", "return_code"], nulls_last=True)
    )


def _aligned(trace: Trace, libs: pl.DataFrame, telemetry: TelemetryLog | None) -> Alignment | None:
    """The telemetry's clock aligned with the trace's (None without telemetry), its lines matched to
    the processes the trace knows."""
    if telemetry is None:
        return None
    pids = {int(p) for p in trace.processes["pid"].drop_nulls().to_list()}
    pids |= {int(p) for p in libs["pid"].drop_nulls().to_list()}
    return align(telemetry, trace.nvtx_ranges, trace.session_start_utc_ns, trace_pids=sorted(pids))


def _telemetry_warnings(telemetry: TelemetryLog | None) -> list[ReportWarning]:
    """The telemetry lines --lenient skipped, the first ten of them named."""
    if telemetry is None or not telemetry.bad_lines:
        return []
    detail = "; ".join(f"line {b.line}: {b.problem}" for b in telemetry.bad_lines[:10])
    more = f"; {len(telemetry.bad_lines) - 10} more" if len(telemetry.bad_lines) > 10 else ""
    return [warned(
        Reason.of("telemetry_bad_lines", path=telemetry.path, detail=detail, more=more),
        len(telemetry.bad_lines),
    )]


def _memory_moments(
    findings: pl.DataFrame, interest: pl.DataFrame, alignment: Alignment | None, processes: pl.DataFrame,
) -> Iterator[Wanted]:
    """The moments the ledger is read at: each finding (the first :data:`MAX_FINDING_POINTS`), the
    start of each library call of interest (:mod:`nsysaudit.analysis.interest`: at most 200, censored
    ones among them), the telemetry lines :func:`telemetry_moments` chooses (for their process). Made
    as they are read: without a ledger none is (10^6 censored calls or telemetry lines would be 10^6
    tuples for nothing)."""
    rows = findings.head(MAX_FINDING_POINTS).select("kind", "api", "start_ns", "gtid").iter_rows()
    for i, (kind, api, start, gtid) in enumerate(rows):
        yield "finding", f"{kind}: {api}", start, gpid_of(gtid), "finding", i
    for api, start, gtid, lib_id, state in interest.select("api", "start_ns", "gtid", "lib_id", "coverage").iter_rows():
        point: PointKind = "censored_library_call" if state == "censored" else "library_call"
        yield point, str(api), start, gpid_of(gtid), "lib_id", lib_id
    if alignment is not None:
        gpids = {pid: gpid for pid, gpid in processes.select("pid", "gpid").iter_rows()}
        lines = alignment.lines_of().filter(pl.col("pid").is_in(list(gpids)))
        for line, event, pid, trace_ns in telemetry_moments(lines).iter_rows():
            yield "telemetry", event, trace_ns, gpids[pid], "line", line


MAX_FINDING_POINTS = 200


def _covered(points: list[LedgerPoint], trace: Trace, cuda_api_span: pl.DataFrame) -> list[CoveredPoint]:
    """Each ledger point with ``covered``: whether the trace covers its moment, by the rule that
    decides a library call's coverage (:func:`nsysaudit.analysis.coverage.censor`, the moment as a call
    of no length). Past the evidence (after the capture stopped, after the process's CUDA trace ended
    with nothing to confirm it went on) a free could be missing, and a missing free would make the
    bound too small: there no bound is claimed."""
    if not points:
        return []
    moments = pl.DataFrame(
        {
            "lib_id": list(range(len(points))),
            "gtid": [p["global_pid"] for p in points],
            "start_ns": [p["t_ns"] for p in points],
            "end_ns": [p["t_ns"] for p in points],
        },
        schema={"lib_id": pl.Int64, "gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    judged = coverage.censor(
        moments, cuda_api_span, has_cuda_api=trace.has_cuda_api, capture=trace.capture_bounds,
        diagnostics=trace.diagnostics, process_gpids=trace.processes["gpid"].drop_nulls().to_list(), recorded=False,
    )
    out: list[CoveredPoint] = []
    for read, (state, reasons) in zip(points, judged.select("coverage", "censored_reasons").iter_rows(), strict=True):
        point: CoveredPoint = {**read, "covered": state == "complete"}
        if state != "complete" and point["devices"]:
            point["censored_reasons"] = list(reasons)
            why = say(Reason.of("bound_unknown_uncovered", reasons=list(reasons)))
            point["devices"] = [{**d, "free_at_most_bytes": None, "bound_unknown": why} for d in point["devices"]]
        out.append(point)
    return out


MAX_TELEMETRY_POINTS = 64
PHASE_REPEATS = 4
TELEMETRY_POINTS_RULE = telemetry_points_rule(MAX_TELEMETRY_POINTS, PHASE_REPEATS)


def telemetry_moments(lines: pl.DataFrame) -> pl.DataFrame:
    """The telemetry lines the ledger is read at (:data:`TELEMETRY_POINTS_RULE`), of ``lines`` (a
    frame with an ``event`` column, in file order)."""
    if lines.height <= MAX_TELEMETRY_POINTS:
        return lines
    return lines.filter(pl.len().over("event") <= PHASE_REPEATS).head(MAX_TELEMETRY_POINTS)


