"""``analyze()``: one export in, one :class:`AnalysisResult` out. The CLI is a shell over this."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from nsysaudit import joins
from nsysaudit.analysis import coverage, failures, integrity
from nsysaudit.analysis.alignment import Alignment, align
from nsysaudit.codes import display_name, is_allocation_api, is_out_of_memory, return_name
from nsysaudit.errors import UnusableInput
from nsysaudit.progress import Progress
from nsysaudit.read import nsys
from nsysaudit.read.source import ExportFile, probe, sha256_file
from nsysaudit.read.telemetry import TelemetryLog, TelemetryOptions, load_telemetry
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, Trace, event_records_in, global_pid, load
from nsysaudit.reports.analysis import AnalysisResult, InputInfo, Verdict

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def input_kind(path: Path) -> str:
    """``nsys-rep`` for Nsight Systems reports (by suffix), ``sqlite`` for everything else."""
    return "nsys-rep" if path.name.lower().endswith(REPORT_SUFFIXES) else "sqlite"


def analyze(
    path: str | os.PathLike[str],
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    telemetry: str | os.PathLike[str] | None = None,
    telemetry_options: TelemetryOptions | None = None,
    max_pairs: int | None = joins.DEFAULT_MAX_PAIRS,
    progress: Progress | None = None,
) -> AnalysisResult:
    """Analyze one Nsight Systems export (``.sqlite``) or report (``.nsys-rep``).

    ``progress`` hears about long steps (the nsys export, the CUDA API scan); see
    :mod:`nsysaudit.progress`.

    ``max_pairs`` bounds the (library call, CUDA API call) pairs formed (None: no limit); hitting
    it is a warning, and makes the verdict inconclusive when it could hide a finding.

    Raises :class:`~nsysaudit.errors.UnusableInput` (exit code 2 in the CLI) when the input cannot
    be analyzed at all. Partly broken input is analyzed and its problems listed in ``warnings``.

    ``telemetry``: a JSON Lines file of the application's own receipts (see
    :mod:`nsysaudit.read.telemetry`); its clocks are aligned with the trace (see
    :mod:`nsysaudit.analysis.alignment`) and every finding and library call is placed among its lines.
    Unusable telemetry raises :class:`~nsysaudit.errors.UnusableInput` before the export is read.

    >>> result = analyze("tests/fixtures/h200-cuda13-nsys2023.4/observe.sqlite")  # doctest: +SKIP
    >>> result.verdict  # doctest: +SKIP
    'inconclusive'
    """
    given = Path(path)
    kind = input_kind(given)
    if not given.exists():
        raise UnusableInput(given, "no such file")
    if not given.is_file():
        raise UnusableInput(given, "not a regular file")
    # The input's SHA-256 (a full read of a possibly multi-GB file) runs beside the analysis:
    # hashlib releases the GIL. An .nsys-rep needs it first: it keys the export cache.
    hashing = _BackgroundDigest(given)
    log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
    export_info: dict[str, Any] = {}
    if kind == "nsys-rep":
        if given.stat().st_size == 0:
            raise UnusableInput(given, "empty file (0 bytes), not an Nsight Systems report")
        binary = nsys.find_nsys(nsys_path, given)
        if progress is not None:
            progress.start(f"exporting {given.name} with nsys", None)
        try:
            cached = nsys.export_report(given, hashing.result(), binary)
        finally:
            if progress is not None:
                progress.finish()
        sqlite_path = cached.sqlite
        export_info = {
            "export_sha256": cached.sha256,
            "export_cache_hit": cached.cache_hit,
            "exported_with": cached.exported_with,  # the nsys that made this export, cached or not
        }
    else:
        sqlite_path = given
    export = probe(sqlite_path)
    try:
        trace = load(export, library_domains, progress=progress)
        records = _event_records(export, trace)
        info = InputInfo(
            path=str(path),
            sha256=hashing.result(),
            kind=kind,  # type: ignore[arg-type]
            size_bytes=given.stat().st_size,
            nsys_version=export.nsys_version,
            schema_version=export.schema_version,
            tables=trace.tables_used,
            session_start_utc_ns=trace.session_start_utc_ns,
            **export_info,
        )
        return analyze_trace(
            trace, info, max_pairs=max_pairs, telemetry=log, event_records=records, library_domains=library_domains
        )
    finally:
        export.close()


class _BackgroundDigest:
    """SHA-256 of a file computed in a daemon thread (never delays an error exit)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._digest: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="nsysaudit-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._digest = sha256_file(self._path)
        except OSError as exc:
            self._error = exc

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise UnusableInput(self._path, f"cannot read: {self._error.strerror}") from None
        assert self._digest is not None
        return self._digest


def _event_records(export: ExportFile, trace: Trace) -> pl.DataFrame:
    """Event records inside the capture regions that precede a failed stream wait (read only then)."""
    if trace.runtime_table is None or trace.capture_calls.height == 0:
        return pl.DataFrame(schema=trace.api_rows.schema)
    regions = failures.capture_regions(trace.capture_calls)
    waits = failures.failed_waits(failures.classify_returns(trace.api_rows))
    needed = failures.regions_before_waits(regions, waits)
    if needed.height == 0:
        return pl.DataFrame(schema=trace.api_rows.schema)
    return event_records_in(export, trace.runtime_table, needed)


FAILURE_KINDS = ("nested_alloc_failure", "nested_call_failure", "captured_event_wait_failure")
# Tables whose rows decide findings: an ambiguous one (a shadow copy beside it) is a verdict gap.
EVIDENCE_TABLES = frozenset(
    {"CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUBLAS_EVENTS", "CUDNN_EVENTS", "StringIds"}
)
# Capture settings (META_DATA_CAPTURE CAPTURE_EVENT_TYPE values) that request library API tracing.
LIBRARY_CAPTURE_TYPES = {"cuBLAS": frozenset({"CuBLAS", "cuBLAS"}), "cuDNN": frozenset({"CuDNN", "cuDNN"})}


def analyze_trace(
    trace: Trace,
    info: InputInfo,
    *,
    max_pairs: int | None = joins.DEFAULT_MAX_PAIRS,
    telemetry: TelemetryLog | None = None,
    event_records: pl.DataFrame | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
) -> AnalysisResult:
    """The joins, coverage, findings and verdict over an already loaded :class:`Trace`.

    ``telemetry`` is aligned with the trace here, before the verdict: a library failure the
    application recorded but no traced call explains makes the verdict inconclusive.
    ``event_records``: the event-record calls inside capture regions (see :func:`_event_records`).
    """
    names = trace.thread_names
    api_span = trace.api_span.filter(pl.col("gpid").is_not_null())
    libs = coverage.censor(
        trace.library_calls,
        api_span,
        has_runtime=trace.has_runtime,
        capture=trace.capture_bounds,
        diagnostics=trace.diagnostics,
        process_gpids=trace.processes["gpid"].drop_nulls().to_list(),
    )
    libs = joins.with_ids(libs, names).sort("lib_id")

    calls = integrity.joinable_calls(trace.api_rows)
    nesting = joins.nest_bounded(trace.library_calls, calls, max_pairs)
    pairs = joins.attach_bytes(nesting.pairs, trace.allocations)
    pairs = pairs.sort(["lib_id", "start_ns", "correlation_id"], nulls_last=True)
    # Partly broken rows: counted in warnings; what could hide a finding makes the verdict inconclusive.
    pairs, undecided = integrity.review(trace, pairs)
    undecided += integrity.limit_review(trace, nesting)
    libs = libs.with_columns(pl.lit(nesting.complete).alias("children_complete"))
    too_long = libs.filter(
        (pl.col("end_ns").cast(pl.Int128) - pl.col("start_ns").cast(pl.Int128)) > (1 << 63) - 1
    ).height
    if too_long:
        trace.warn(
            "duration_overflow",
            too_long,
            "library calls whose end minus start does not fit in 64 bits (a range spanning the int64 range): "
            "their duration is unknown (null)",
        )
    if "memory" not in trace.tables_used and pairs.height:
        successful_allocs = sum(
            1
            for api, rc in pairs.select("api", "return_code").iter_rows()
            if rc == 0 and api is not None and is_allocation_api(api)
        )
        if successful_allocs:
            trace.warn(
                "no_memory_events",
                successful_allocs,
                "successful allocation calls inside library calls, but the export has no usable "
                "CUDA_GPU_MEMORY_USAGE_EVENTS (captured without --cuda-memory-usage=true): their sizes are unknown",
            )

    api_rows = failures.classify_returns(trace.api_rows)
    nested = _findings(pairs, libs, names)
    waits = _wait_findings(trace, api_rows, event_records, names)
    findings = pl.concat([nested, waits], how="diagonal_relaxed").sort(
        ["start_ns", "gtid", "correlation_id"], nulls_last=True
    ) if waits.height else nested
    explained = findings.select(failures.CALL_COLUMNS)
    straddling = pairs.filter(pl.col("relation") == "straddling").select(failures.CALL_COLUMNS)
    library = set(library_domains)
    plain_ranges = trace.nvtx_ranges.filter(pl.col("domain").is_null() | ~pl.col("domain").is_in(list(library)))
    unexamined = trace.library_calls.filter(pl.col("lib_id").is_in(nesting.unexamined))
    failed, attributed = failures.failed_calls(
        trace.api_rows, explained, straddling, plain_ranges, max_pairs, unexamined
    )
    if not attributed:
        trace.warn(
            "nvtx_attribution_skipped",
            failed.height,
            f"more (failed call, NVTX range) overlaps than --max-pairs {max_pairs:,}: the innermost NVTX range "
            "of each failed call is unknown (null)",
        )
    failed = joins.with_ids(failed, names)

    census = (
        api_rows.filter(pl.col("return_code") != 0)
        .group_by(["api", "return_code", "classification"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort(["api", "return_code"], nulls_last=True)
    )
    coverage_sources = _coverage_sources(trace, api_span)
    sources = _library_sources(trace, libs, library_domains)
    pids = {int(p) for p in trace.processes["pid"].drop_nulls().to_list()}
    pids |= {int(p) for p in libs["pid"].drop_nulls().to_list()}
    alignment = (
        align(telemetry, trace.nvtx_ranges, info.session_start_utc_ns, trace_pids=sorted(pids))
        if telemetry is not None
        else None
    )
    telemetry_failures = _telemetry_library_failures(alignment, libs, findings, trace.capture)
    if telemetry is not None and telemetry.bad_lines:
        detail = "; ".join(f"line {b.line}: {b.problem}" for b in telemetry.bad_lines[:10])
        more = f"; {len(telemetry.bad_lines) - 10} more" if len(telemetry.bad_lines) > 10 else ""
        trace.warn(
            "telemetry_bad_lines", len(telemetry.bad_lines), f"{telemetry.path}: skipped (--lenient): {detail}{more}"
        )
    verdict, reasons = _verdict(trace, libs, findings, failed, sources, telemetry_failures, undecided)
    processes = [
        {"pid": r["pid"], "global_pid": r["gpid"], "name": r["process_name"]}
        for r in trace.processes.sort("gpid").to_dicts()
    ]
    return AnalysisResult(
        input=info,
        frames={
            "census": census,
            "library_calls": libs,
            "pairs": pairs,
            "findings": findings,
            "failed_calls": failed,
            "api_span": api_span,
            "api_rows": api_rows,
            "nvtx_ranges": trace.nvtx_ranges,
            "thread_names": names,
            "diagnostics": trace.diagnostics,
        },
        cuda_api_calls=trace.api_total,
        cuda_api_trace=trace.has_runtime and trace.api_total > 0,
        verdict=verdict,
        verdict_reasons=reasons,
        coverage_sources=coverage_sources,
        processes=processes,
        capture=trace.capture,
        warnings=trace.warnings,
        extra={"limits": {"max_pairs": max_pairs, "pairs": nesting.total_pairs, "pairs_listed": pairs.height}},
        alignment=alignment,
        capture_bounds=trace.capture_bounds,
        library_sources=sources,
        telemetry_library_failures=telemetry_failures,
    )


_CHAIN = pl.List(pl.Struct({"lib_id": pl.Int64, "api": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}))
_CALL_STRUCT = pl.Struct(
    {"api": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64}
)
STREAM_CAPTURE = pl.Struct(
    {
        "gtid": pl.Int64,
        "begin": _CALL_STRUCT,
        "end": _CALL_STRUCT,
        "event_records": pl.List(_CALL_STRUCT),
        "regions_with_records_before": pl.Int64,
        "ns_from_capture_end": pl.Int64,
    }
)
FINDING_SCHEMA: dict[str, Any] = {
    "kind": pl.String,
    "api": pl.String,
    "return_code": pl.Int64,
    "correlation_id": pl.Int64,
    "gtid": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "thread_name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "bytes": pl.Int64,
    "out_of_memory": pl.Boolean,
    "lib_id": pl.Int64,
    "lib_api": pl.String,
    "lib_library": pl.String,
    "lib_source": pl.String,
    "lib_start_ns": pl.Int64,
    "lib_end_ns": pl.Int64,
    "lib_end_known": pl.Boolean,
    "lib_coverage": pl.String,
    "enclosing_chain": _CHAIN,
    "allocated_before": pl.List(pl.Int64),
    "stream_capture": STREAM_CAPTURE,
}


def _findings(pairs: pl.DataFrame, libs: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """One row per failed call nested in (or, for allocations, straddling) a library call.

    A call nested in several library calls (cublasLtCreate inside cublasCreate_v2) is one finding;
    ``enclosing_chain`` lists every enclosing call, innermost first. Kinds: see
    :func:`nsysaudit.analysis.failures.nested_failures`.
    """
    failed = failures.nested_failures(pairs)
    if failed.height == 0:
        return pl.DataFrame(schema=FINDING_SCHEMA)
    lib_cols = libs.select(
        "lib_id",
        pl.col("api").alias("lib_api"),
        pl.col("library").alias("lib_library"),
        pl.col("source").alias("lib_source"),
        pl.col("start_ns").alias("lib_start_ns"),
        pl.col("end_ns").alias("lib_end_ns"),
        pl.col("end_known").alias("lib_end_known"),
        pl.col("coverage").alias("lib_coverage"),
    )
    # Int128: a range spanning the whole int64 range must sort as the longest, not wrap negative.
    enriched = failed.join(lib_cols, on="lib_id", how="left").with_columns(
        (pl.col("lib_end_ns").cast(pl.Int128) - pl.col("lib_start_ns").cast(pl.Int128)).alias("lib_duration")
    )
    # Nested relations first, then innermost (shortest) enclosing call first.
    enriched = enriched.with_columns((pl.col("relation") != "nested").alias("not_nested")).sort(
        ["gtid", "start_ns", "correlation_id", "not_nested", "lib_duration", "lib_id"], nulls_last=True
    )
    key = ["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"]
    chain = enriched.group_by(key, maintain_order=True).agg(
        pl.struct(
            pl.col("lib_id"),
            pl.col("lib_api").alias("api"),
            pl.col("lib_start_ns").alias("start_ns"),
            pl.col("lib_end_ns").alias("end_ns"),
        )
        .filter(pl.col("relation") == "nested")
        .alias("enclosing_chain")
    )
    first = enriched.group_by(key, maintain_order=True).first()
    out = joins.with_ids(first.join(chain, on=key, how="left", nulls_equal=True), names)
    out = out.with_columns(pl.lit(None, dtype=STREAM_CAPTURE).alias("stream_capture"))
    return _allocated_before(out, pairs).select(list(FINDING_SCHEMA)).sort(
        ["start_ns", "gtid", "correlation_id"], nulls_last=True
    )


def _allocated_before(findings: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Add ``allocated_before``: the bytes of each successful allocation nested in the finding's
    enclosing call that started before the failed call (null where the size is unknown)."""
    allocs = pairs.filter(
        (pl.col("relation") == "nested")
        & (pl.col("return_code") == 0)
        & pl.col("api").map_elements(is_allocation_api, return_dtype=pl.Boolean, skip_nulls=True).fill_null(False)
    ).select("lib_id", pl.col("start_ns").alias("a_start"), pl.col("correlation_id").alias("a_corr"), "bytes")
    keyed = findings.with_row_index("_f")
    before = (
        keyed.select("_f", "lib_id", "start_ns")
        .join(allocs, on="lib_id", how="inner")
        .filter(pl.col("a_start") < pl.col("start_ns"))
        .sort("_f", "a_start", "a_corr")
        .group_by("_f", maintain_order=True)
        .agg(pl.col("bytes").alias("allocated_before"))
    )
    return (
        keyed.join(before, on="_f", how="left")
        .with_columns(pl.col("allocated_before").fill_null(pl.lit([], dtype=pl.List(pl.Int64))))
        .drop("_f")
    )


def _wait_findings(
    trace: Trace, api_rows: pl.DataFrame, event_records: pl.DataFrame | None, names: pl.DataFrame
) -> pl.DataFrame:
    """``captured_event_wait_failure`` findings (see :func:`nsysaudit.analysis.failures.captured_event_waits`)."""
    regions = failures.capture_regions(trace.capture_calls)
    records = failures.records_in_regions(
        event_records if event_records is not None else pl.DataFrame(schema=api_rows.schema), regions
    )
    found = failures.captured_event_waits(failures.failed_waits(api_rows), regions, records)
    if not found:
        return pl.DataFrame(schema=FINDING_SCHEMA)

    def call(prefix: str, region: dict[str, Any]) -> dict[str, Any]:
        return {k: region[f"{prefix}_{k}"] for k in ("api", "start_ns", "end_ns", "correlation_id")}

    rows = []
    for f in found:
        wait, region = f["wait"], f["region"]
        rows.append(
            {
                "kind": "captured_event_wait_failure",
                **{k: wait[k] for k in ("api", "return_code", "correlation_id", "gtid", "start_ns", "end_ns")},
                "out_of_memory": is_out_of_memory(wait["api"], wait["return_code"]),
                "enclosing_chain": [],
                "allocated_before": [],
                "stream_capture": {
                    "gtid": region["gtid"],
                    "begin": call("begin", region),
                    "end": call("end", region),
                    "event_records": [
                        {k: r[k] for k in ("api", "start_ns", "end_ns", "correlation_id")} for r in f["records"]
                    ],
                    "regions_with_records_before": f["regions_before"],
                    "ns_from_capture_end": wait["start_ns"] - region["end_end_ns"],
                },
            }
        )
    named_later = ("pid", "tid", "thread_name")
    frame = pl.DataFrame(rows, schema={k: v for k, v in FINDING_SCHEMA.items() if k not in named_later})
    return joins.with_ids(frame, names).select(list(FINDING_SCHEMA))


def _coverage_sources(trace: Trace, api_span: pl.DataFrame) -> list[dict[str, Any]]:
    """First/last timestamp and row count per trace source and process."""

    def rows(source: str, frame: pl.DataFrame) -> list[dict[str, Any]]:
        return [
            {
                "source": source,
                "pid": (r["gpid"] >> 24) & 0xFFFFFF if r["gpid"] is not None else None,
                "global_pid": r["gpid"],
                "first_ns": r["first_ns"],
                "last_ns": r["last_ns"],
                "rows": r["rows"],
            }
            for r in frame.sort("gpid", nulls_last=True).to_dicts()
        ]

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
        rows("cuda_api", api_span)
        + rows("nvtx", span(nvtx))
        + rows("library_calls", span(trace.library_calls))
        + rows("memory_events", trace.memory_span)
    )


def _library_sources(trace: Trace, libs: pl.DataFrame, library_domains: Sequence[str]) -> list[dict[str, Any]]:
    """Per library asked for, whether the capture traced it and how many calls it recorded.

    ``status``: ``traced`` (calls recorded, or tracing requested and nsys raised no objection),
    ``not_traced`` (requested, but nsys said it could not trace it: never read as "no calls"),
    ``not_requested`` (the capture settings do not ask for it), ``unknown`` (no capture settings).
    """
    types = set(trace.capture.get("CAPTURE_EVENT_TYPE", []))
    refused = trace.diagnostics.filter(pl.col("category") == "library_not_traced")
    out = []
    for library in dict.fromkeys(library_domains):
        calls = libs.filter(pl.col("library") == library).height
        markers = sum(n for table, n in trace.library_markers.items() if trace.tables_used.get(library) == table)
        wanted = LIBRARY_CAPTURE_TYPES.get(library)
        requested: bool | None = None
        if wanted is not None and types:
            requested = bool(wanted & types) or markers > 0
        said = refused.filter(pl.col("library") == library)["text"].to_list()
        if said:
            status, reason = "not_traced", f"nsys: {said[0]}"
        elif calls or requested:
            status, reason = "traced", None
        elif requested is False:
            status, reason = "not_requested", "the capture's CAPTURE_EVENT_TYPE does not request it"
        else:
            status, reason = "unknown", (
                "no capture settings say whether it was traced"
                if wanted is not None
                else f"NVTX domain {library}: no range recorded, so whether it was used is unknown"
            )
        out.append(
            {
                "library": library,
                "status": status,
                "requested": requested,
                "calls": calls,
                "markers": markers,
                "reason": reason,
            }
        )
    return out


_LIBRARY_STATUS = re.compile(r"\b(CUBLAS(?:LT)?|CUDNN|CUSOLVER|CUSPARSE|CUFFT|CURAND)_STATUS_([A-Z0-9_]+)")
_STATUS_FIELD = re.compile(r"^(cublas|cublaslt|cudnn|cusolver|cusparse|cufft|curand)_status$", re.IGNORECASE)


def _telemetry_library_failures(
    alignment: Alignment | None, libs: pl.DataFrame, findings: pl.DataFrame, capture: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """Telemetry lines that record a library failure (``CUBLAS_STATUS_ALLOC_FAILED``, ``cublas_status: 3``).

    ``explained``: some finding in the same process shows a failed call behind it. ``after``:
    the library call of that process that ended last at or before the line (when the line is
    placed on the trace clock).
    """
    if alignment is None:
        return []
    skip_keys = sorted(k for k, v in capture.items() if k.endswith("CUDA_SKIP_SOME_API_CALLS") and "true" in v)
    found_pids = {int(p) for p in findings.filter(pl.col("kind").is_in(FAILURE_KINDS))["pid"].drop_nulls().to_list()}
    out = []
    for event, placement in zip(alignment.log.events, alignment.placements, strict=True):
        statuses: list[str] = []
        text = None
        for key, value in event.fields.items():
            if isinstance(value, str):
                hits = [m.group(0) for m in _LIBRARY_STATUS.finditer(value) if m.group(2) != "SUCCESS"]
                if hits and text is None:
                    text = value
                statuses += hits
            elif _STATUS_FIELD.match(key) and type(value) is int and value != 0:
                statuses.append(f"{key}={value}")
        if not statuses:
            continue
        after = None
        if placement.trace_ns is not None and event.pid is not None:
            ended = libs.filter(
                (pl.col("pid") == event.pid) & pl.col("end_ns").is_not_null() & (pl.col("end_ns") <= placement.trace_ns)
            ).sort("end_ns")
            if ended.height:
                last = ended.row(-1, named=True)
                after = {
                    "lib_id": last["lib_id"],
                    "api": last["api"],
                    "tid": last["tid"],
                    "end_ns": last["end_ns"],
                    "ns_before_line": placement.trace_ns - last["end_ns"],
                    "coverage": last["coverage"],
                    "censored_reason": last["censored_reason"],
                }
        out.append(
            {
                "line": event.line,
                "event": event.event,
                "pid": event.pid,
                "statuses": list(dict.fromkeys(statuses)),
                "text": text,
                "trace_ns": placement.trace_ns,
                "after": after,
                "explained": event.pid in found_pids if event.pid is not None else bool(found_pids),
                "cuda_skip_some_api_calls": skip_keys,
            }
        )
    return out


def _call_line(r: dict[str, Any]) -> str:
    thread = r["thread_name"] if r["thread_name"] is not None else "name unknown"
    where = f" inside NVTX range {r['nvtx_range']}" if r.get("nvtx_range") is not None else ""
    if r.get("library_call_unexamined"):
        where += " (overlapping a library call the pair limit left unexamined)"
    name = return_name(r["api"], r["return_code"]) if r["api"] is not None and r["return_code"] is not None else None
    api = display_name(r["api"]) if r["api"] is not None else "an unknown API"
    return (
        f"{r['count']} {api} returned {r['return_code']} ({name or 'unknown code'}) on pid {r['pid']} tid "
        f"{r['tid']} ({thread}){where}"
    )


def _verdict(
    trace: Trace,
    libs: pl.DataFrame,
    findings: pl.DataFrame,
    failed: pl.DataFrame,
    sources: list[dict[str, Any]],
    telemetry_failures: list[dict[str, Any]],
    undecided: Sequence[str] = (),
) -> tuple[Verdict, list[str]]:
    """The verdict and its reasons. The reasons always name untraced libraries and the failed
    calls outside library calls, so ``no_failure`` is never read as "nothing failed"."""
    context: list[str] = []
    for s in sources:
        if s["status"] != "traced":
            context.append(f"{s['library']} was not traced ({s['status']}): {s['reason']}")
    if failed.height:
        total = int(failed["count"].sum())
        lines = [_call_line(r) for r in failed.head(5).to_dicts()]
        more = f"; and {failed.height - 5} more group(s)" if failed.height > 5 else ""
        context.append(
            f"{total} failed CUDA API call(s) outside library calls, in {failed.height} group(s) (see failed_calls): "
            + "; ".join(lines)
            + more
        )
    # A shadow copy of a table the joins read may hide the rows that matter: which one nsys wrote
    # is unknown, so the absence of a failure in the one read proves nothing.
    shadowed = sorted(trace.export.ambiguous_tables & EVIDENCE_TABLES)
    if shadowed:
        context.append(
            f"the export holds several versions of {', '.join(shadowed)} (see warnings): the highest was read, "
            "and which one nsys wrote is unknown"
        )
    gaps_said = trace.diagnostics.filter(pl.col("category").is_in(["cuda_events_missing", "cuda_trace_degraded"]))
    for text in dict.fromkeys(gaps_said["text"].to_list()):
        context.append(f"nsys warned: {text}")

    counts = {k: findings.filter(pl.col("kind") == k).height for k in FAILURE_KINDS}
    if any(counts.values()):
        said = {
            "nested_alloc_failure": "failed allocation call(s) wholly inside a library call on the same thread",
            "nested_call_failure": "other failed CUDA API call(s) wholly inside a library call on the same thread",
            "captured_event_wait_failure": "failed stream wait(s) on an event, after events were recorded inside "
            "a stream capture of the same process",
        }
        return "failure_found", [f"{n} {said[k]}" for k, n in counts.items() if n] + context

    gaps: list[str] = []
    if not trace.has_runtime:
        gaps.append("the export has no CUDA API trace (no CUPTI_ACTIVITY_KIND_RUNTIME table)")
    elif trace.api_total == 0:
        gaps.append("the export's CUDA API table is empty")
    censored = libs.filter(pl.col("coverage") == "censored")
    if censored.height:
        reasons = censored.group_by("censored_reason").len().sort("censored_reason")
        detail = ", ".join(f"{r['len']} {r['censored_reason']}" for r in reasons.to_dicts())
        gaps.append(
            f"{censored.height} of {libs.height} library call(s) are censored ({detail}): "
            "the trace does not cover them, so a failure inside them cannot be ruled out"
        )
    gaps += list(undecided)
    if shadowed:
        gaps.append(
            f"several versions of {', '.join(shadowed)} exist and only one was read: a failure in another cannot "
            "be ruled out"
        )
    if trace.has_runtime and not any(s["status"] == "traced" for s in sources):
        oom = sum(
            r["count"]
            for r in failed.iter_rows(named=True)
            if r["api"] is not None and (is_allocation_api(r["api"]) or is_out_of_memory(r["api"], r["return_code"]))
        )
        if oom:
            gaps.append(
                f"{oom} allocation or out-of-memory failure(s), and no library API (cuBLAS/cuDNN) was traced: "
                "whether any happened inside a library call cannot be told"
            )
    for t in telemetry_failures:
        if t["explained"]:
            continue
        after = t["after"]
        where = ""
        if after is not None:
            where = f", {after['ns_before_line'] / 1e6:.3f} ms after {after['api']} (tid {after['tid']}) ended"
            if after["coverage"] == "censored":
                where += f" (that call is censored, {after['censored_reason']}: the trace does not cover all of it)"
        skipped = (
            f"; nsys skipped some CUDA API calls (META_DATA_CAPTURE {', '.join(t['cuda_skip_some_api_calls'])}=true): "
            "--cuda-trace-all-apis=true would record them"
            if t["cuda_skip_some_api_calls"]
            else ""
        )
        gaps.append(
            f"telemetry line {t['line']} ({t['event']}) records {', '.join(t['statuses'])}{where}, but no traced "
            f"CUDA API call shows its cause{skipped}"
        )
    if gaps:
        return "inconclusive", gaps + context
    traced = [s["library"] for s in sources if s["status"] == "traced"]
    if libs.height:
        first = (
            f"{libs.height} library call(s), all covered by the trace; none has a failed CUDA API call wholly inside it"
        )
    elif traced:
        first = f"library API tracing was on ({', '.join(traced)}) and recorded no library call"
    elif failed.height:
        first = "no library API was traced; none of the failed calls is an allocation or out-of-memory failure"
    else:
        first = f"none of the {trace.api_total:,} traced CUDA API calls failed"
    return "no_failure", [first, *context]
