"""``analyze()``: one export in, one :class:`AnalysisResult` out. The CLI is a shell over this."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from nsysaudit import integrity, joins, nsys
from nsysaudit.alignment import align
from nsysaudit.errors import UnusableInput
from nsysaudit.model import DEFAULT_LIBRARY_DOMAINS, Trace, global_pid, load
from nsysaudit.progress import Progress
from nsysaudit.reports.analysis import LIBRARY_CAPTURE_TYPES, AnalysisResult, InputInfo, Verdict
from nsysaudit.source import probe, sha256_file
from nsysaudit.telemetry import TelemetryLog, TelemetryOptions, load_telemetry

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
    :mod:`nsysaudit.telemetry`); its clocks are aligned with the trace (see
    :mod:`nsysaudit.alignment`) and every finding and library call is placed among its lines.
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
        result = analyze_trace(trace, info, max_pairs=max_pairs)
        if log is not None:
            attach_telemetry(result, log)
        return result
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


def attach_telemetry(result: AnalysisResult, log: TelemetryLog) -> None:
    """Align ``log`` with the analyzed trace and store it on ``result`` (``result.alignment``).

    Bad telemetry lines skipped under ``lenient`` are added to ``result.warnings``.
    """
    pids = {p["pid"] for p in result.processes if p["pid"] is not None}
    pids |= {int(p) for p in result.frames["library_calls"]["pid"].drop_nulls().to_list()}
    result.alignment = align(
        log, result.frames["nvtx_ranges"], result.input.session_start_utc_ns, trace_pids=sorted(pids)
    )
    if log.bad_lines:
        detail = "; ".join(f"line {b.line}: {b.problem}" for b in log.bad_lines[:10])
        more = f"; {len(log.bad_lines) - 10} more" if len(log.bad_lines) > 10 else ""
        result.warnings.append(
            {
                "kind": "telemetry_bad_lines",
                "count": len(log.bad_lines),
                "message": f"{log.path}: skipped (--lenient): {detail}{more}",
            }
        )


def analyze_trace(trace: Trace, info: InputInfo, *, max_pairs: int | None = joins.DEFAULT_MAX_PAIRS) -> AnalysisResult:
    """The joins, coverage and verdict over an already loaded :class:`Trace`."""
    names = trace.thread_names
    api_span = trace.api_span.filter(pl.col("gpid").is_not_null())
    libs = joins.with_ids(joins.censor(trace.library_calls, api_span, has_runtime=trace.has_runtime), names).sort(
        "lib_id"
    )

    calls = integrity.joinable_calls(trace.api_rows)
    nesting = joins.nest_bounded(trace.library_calls, calls, max_pairs)
    pairs = joins.attach_bytes(nesting.pairs, trace.allocations)
    pairs = pairs.sort(["lib_id", "start_ns", "correlation_id"], nulls_last=True)
    # Partly broken rows: counted in warnings; what could hide a finding makes the verdict inconclusive.
    pairs, undecided = integrity.review(trace, pairs)
    undecided += integrity.limit_review(trace, nesting)
    libs = libs.with_columns(pl.lit(nesting.complete).alias("children_complete"))

    findings = _findings(pairs, libs, names)
    census = (
        trace.api_rows.filter(pl.col("return_code") != 0)
        .group_by(["api", "return_code"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort(["api", "return_code"], nulls_last=True)
    )
    coverage_sources = _coverage_sources(trace, api_span)
    verdict, reasons = _verdict(trace, census, libs, findings, undecided)
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
            "api_span": api_span,
            "api_rows": trace.api_rows,
            "nvtx_ranges": trace.nvtx_ranges,
            "thread_names": names,
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
    )


def _findings(pairs: pl.DataFrame, libs: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """One row per failed allocation call, enclosed by its innermost library call.

    A call nested in several library calls (cublasLtCreate inside cublasCreate_v2) is one finding;
    ``enclosing_chain`` lists every enclosing call, innermost first. A call that is nested in
    none but straddles one is a ``straddling_alloc_failure``.
    """
    failures = joins.alloc_failures(pairs)
    if failures.height == 0:
        schema: dict[str, Any] = {
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
            "lib_id": pl.Int64,
            "lib_api": pl.String,
            "lib_library": pl.String,
            "lib_source": pl.String,
            "lib_start_ns": pl.Int64,
            "lib_end_ns": pl.Int64,
            "lib_coverage": pl.String,
            "enclosing_chain": pl.List(
                pl.Struct({"lib_id": pl.Int64, "api": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64})
            ),
        }
        return pl.DataFrame(schema=schema)
    lib_cols = libs.select(
        "lib_id",
        pl.col("api").alias("lib_api"),
        pl.col("library").alias("lib_library"),
        pl.col("source").alias("lib_source"),
        pl.col("start_ns").alias("lib_start_ns"),
        pl.col("end_ns").alias("lib_end_ns"),
        pl.col("coverage").alias("lib_coverage"),
    )
    enriched = failures.join(lib_cols, on="lib_id", how="left").with_columns(
        (pl.col("lib_end_ns") - pl.col("lib_start_ns")).alias("lib_duration")
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
    out = first.join(chain, on=key, how="left", nulls_equal=True)
    out = joins.with_ids(out, names)
    return out.select(
        "kind",
        "api",
        "return_code",
        "correlation_id",
        "gtid",
        "pid",
        "tid",
        "thread_name",
        "start_ns",
        "end_ns",
        "bytes",
        "lib_id",
        "lib_api",
        "lib_library",
        "lib_source",
        "lib_start_ns",
        "lib_end_ns",
        "lib_coverage",
        "enclosing_chain",
    ).sort(["start_ns", "gtid", "correlation_id"], nulls_last=True)


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


def _verdict(
    trace: Trace, census: pl.DataFrame, libs: pl.DataFrame, findings: pl.DataFrame, undecided: Sequence[str] = ()
) -> tuple[Verdict, list[str]]:
    nested = findings.filter(pl.col("kind") == "nested_alloc_failure")
    if nested.height:
        return "failure_found", [
            f"{nested.height} failed allocation call(s) wholly inside a library call on the same thread"
        ]
    total = trace.api_total
    if not trace.has_runtime:
        return "inconclusive", ["the export has no CUDA API trace (no CUPTI_ACTIVITY_KIND_RUNTIME table)"]
    if total == 0:
        return "inconclusive", ["the export's CUDA API table is empty"]
    censored = libs.filter(pl.col("coverage") == "censored")
    if censored.height:
        reasons = censored.group_by("censored_reason").len().sort("censored_reason")
        detail = ", ".join(f"{r['len']} {r['censored_reason']}" for r in reasons.to_dicts())
        return "inconclusive", [
            f"{censored.height} of {libs.height} library call(s) are censored ({detail}): "
            "the CUDA API trace does not cover them, so a failure inside them cannot be ruled out"
        ]
    if undecided:
        return "inconclusive", list(undecided)
    if libs.height == 0:
        captured = LIBRARY_CAPTURE_TYPES & set(trace.capture.get("CAPTURE_EVENT_TYPE", []))
        if captured:
            return "no_failure", [
                f"library API tracing was on ({', '.join(sorted(captured))}) and recorded no library call"
            ]
        return "inconclusive", [
            "the export has no library API ranges (cuBLAS/cuDNN) and its capture settings do not show "
            "library tracing, so nested failures cannot be looked for"
        ]
    return "no_failure", [
        f"{libs.height} library call(s), all covered by the CUDA API trace; none has a failed "
        "allocation call wholly inside it"
    ]
