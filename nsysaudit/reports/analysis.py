"""The single-arm report: one document per analysis, built once, with its frames.

:func:`report_analysis` turns an :class:`~nsysaudit.analysis.Analysis` of an input into an
:class:`AnalysisResult`; ``AnalysisResult.to_dict()`` is the JSON contract CI jobs and notebooks
rely on (keys are only ever added, never renamed: docs/json.md). The library calls, 10^5+
on large exports, stay a polars frame until asked for (``to_dict()`` or the JSON renderer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

import polars as pl

from nsysaudit._version import __version__
from nsysaudit.analysis import Analysis
from nsysaudit.analysis.alignment import Alignment
from nsysaudit.analysis.devices import DeviceTruth, device_truth
from nsysaudit.analysis.nccl import HelperThread
from nsysaudit.analysis.run import TELEMETRY_POINTS_RULE
from nsysaudit.analysis.verdict import Verdict
from nsysaudit.core.codes import is_allocation_api, is_allocation_failure, is_out_of_memory, names
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import pid_bits, pid_of, tid_bits
from nsysaudit.read.diagnostics import WARNING_SEVERITIES, Capture
from nsysaudit.read.inputs import InputInfo
from nsysaudit.reports.alignment_section import alignment_section, telemetry_summary
from nsysaudit.reports.answer import MAX_CENSORED, answer
from nsysaudit.reports.conformance import required_columns, required_keys
from nsysaudit.reports.documents import (
    SCHEMA_VERSION,
    AllocationsBefore,
    AllocatorSection,
    AnalysisDocument,
    AnalysisSchemaName,
    Answer,
    CaptureBounds,
    Censored,
    Census,
    Coverage,
    Enclosing,
    FailedCalls,
    Finding,
    Input,
    LaunchedCommand,
    LibraryCall,
    LibrarySource,
    Limits,
    Memory,
    MemoryPoint,
    NsysDiagnostic,
    Process,
    Ranks,
    SourceCoverage,
    TargetDevice,
    Tool,
)
from nsysaudit.reports.ranks import document_keys, placement
from nsysaudit.reports.stalls import Stalls, stalls_section
from nsysaudit.reports.statements import allocator_statement, holder_statement
from nsysaudit.words import result_repr

__all__ = ["AnalysisResult", "InputInfo", "Verdict", "report_analysis"]


INT64_MAX = (1 << 63) - 1


def duration_ns(start: str = "start_ns", end: str = "end_ns") -> pl.Expr:
    """``end - start`` computed without wrapping: null when it does not fit in 64 bits (a call
    spanning the whole int64 range), never a wrapped negative number."""
    wide = pl.col(end).cast(pl.Int128) - pl.col(start).cast(pl.Int128)
    return pl.when(wide <= INT64_MAX).then(wide).otherwise(None).cast(pl.Int64)


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


def _name_columns(keys: pl.DataFrame) -> pl.DataFrame:
    """``api, return_code, display_api, return_name, allocation`` for each distinct (api, return_code)."""
    rows = [
        (
            api,
            rc,
            *names(api, rc).values(),
            api is not None and is_allocation_api(api),
        )
        for api, rc in keys.select("api", "return_code").iter_rows()
    ]
    return pl.DataFrame(
        rows,
        schema={
            "api": pl.String,
            "return_code": pl.Int64,
            "display_api": pl.String,
            "return_name": pl.String,
            "allocation": pl.Boolean,
        },
        orient="row",
    )


def _census(analysis: Analysis) -> Census:
    """The census: every (api, non-zero return code), already grouped and sorted by the analysis."""
    census = analysis.frames["census"]
    return {
        "cuda_api_calls": analysis.cuda_api_calls,
        "nonzero_returns": int(census["count"].sum()) if census.height else 0,
        "by_return": [
            {
                "api": r["api"],
                **names(r["api"], r["return_code"]),
                "return_code": r["return_code"],
                "count": r["count"],
                # failure | reports_earlier_error (cudaGetLastError) | not_ready_poll (a query's 600)
                "classification": r["classification"],
            }
            for r in census.iter_rows(named=True)
        ],
        "failed_calls": int(census.filter(pl.col("classification") == "failure")["count"].sum()),
    }


def _children(pairs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per library call, its nested calls (with their sums) and its straddling calls, as lists of structs."""
    names = _name_columns(pairs.select("api", "return_code").unique())
    call = pl.struct(
        "api", "display_api", "return_code", "return_name", "correlation_id", "start_ns", "end_ns", "bytes"
    )  # children keep their documented fields; ``allocation`` only drives the size bookkeeping
    # The pairs come in (lib_id, start_ns, correlation_id) order (Analysis.frames), which the
    # children lists keep: joined in order, not sorted again.
    named = pairs.join(names, on=["api", "return_code"], how="left", nulls_equal=True, maintain_order="left")
    nested = (
        named.filter(pl.col("relation") == "nested")
        .group_by("lib_id", maintain_order=True)
        .agg(
            call.alias("children"),
            pl.col("bytes").sum().alias("allocated_bytes_traced"),
            (pl.col("allocation") & (pl.col("return_code") == 0) & pl.col("bytes").is_null())
            .sum()
            .cast(pl.Int64)
            .alias("allocations_size_unknown"),
            (pl.col("return_code") != 0).sum().cast(pl.Int64).alias("failed_children"),
        )
    )
    straddling = (
        named.filter(pl.col("relation") == "straddling")
        .group_by("lib_id", maintain_order=True)
        .agg(call.alias("straddling"))
    )
    return nested, straddling


def _with_optional_columns(libs: pl.DataFrame) -> pl.DataFrame:
    """The library calls frame with the columns frames built before some analyses lack, at their defaults."""
    if "children_complete" not in libs.columns:
        libs = libs.with_columns(pl.lit(True).alias("children_complete"))
    if "end_known" not in libs.columns:  # frames built before coverage knew the capture's stop
        libs = libs.with_columns(pl.col("end_ns").is_not_null().alias("end_known"))
    for name, dtype in (("censored_reasons", pl.List(pl.String)), ("coverage_evidence", pl.String)):
        if name not in libs.columns:
            libs = libs.with_columns(pl.lit(None, dtype=dtype).alias(name))
    return libs


def library_calls_table(frames: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The ``library_calls`` entries as one polars frame (children and straddling as lists of structs).

    Built column-wise and converted once: large exports have 10^5+ library calls.
    """
    nested, straddling = _children(frames["pairs"])
    libs = _with_optional_columns(frames["library_calls"])
    lib_names = _name_columns(
        libs.select("api").unique().with_columns(pl.lit(0, dtype=pl.Int64).alias("return_code"))
    )
    made = {  # the columns not taken as the frame has them; the rest, by name, in LibraryCall's order
        "global_tid": pl.col("gtid").alias("global_tid"),
        # The recorded end of a range open when the capture stopped is the stop: unknown.
        "end_ns": pl.when(pl.col("end_known")).then(pl.col("end_ns")).otherwise(None).alias("end_ns"),
        "recorded_end_ns": pl.col("end_ns").alias("recorded_end_ns"),
        "duration_ns": pl.when(pl.col("end_known")).then(duration_ns()).otherwise(None).alias("duration_ns"),
        # Unknown (null), never a partial sum, when a pair limit (--max-pairs) left successful
        # children unlisted, a successful nested allocation's size is unknown (no memory
        # event, NULL bytes, a shared correlation id), or the trace does not cover the call.
        "allocated_bytes": pl.when(
            pl.col("children_complete")
            & (pl.col("allocations_size_unknown").fill_null(0) == 0)
            & (pl.col("coverage") == "complete")
        )
        .then(pl.col("allocated_bytes_traced").fill_null(0))
        .otherwise(None)
        .alias("allocated_bytes"),
        "allocated_bytes_traced": pl.col("allocated_bytes_traced").fill_null(0),
        "allocations_size_unknown": pl.col("allocations_size_unknown").fill_null(0),
        "failed_children": pl.col("failed_children").fill_null(0),
    }
    table = (
        libs.join(lib_names.select("api", "display_api"), on="api", how="left", nulls_equal=True)
        .join(nested, on="lib_id", how="left")
        .join(straddling, on="lib_id", how="left")
        .sort("lib_id")
        .select(*(made.get(name, pl.col(name)) for name in required_columns(LibraryCall)))
    )
    empty = pl.lit([], dtype=table.schema["children"])
    return table.with_columns(
        pl.col("children").fill_null(empty),
        pl.col("straddling").fill_null(pl.lit([], dtype=table.schema["straddling"])),
    )


def ranked_library_calls(calls: Sequence[LibraryCall]) -> list[LibraryCall]:
    """The library calls in the order a reader needs them: censored first (where the evidence
    stops), then those with failed nested calls, then the rest; in ``lib_id`` order within each."""
    return sorted(calls, key=lambda c: (c["coverage"] != "censored", c["failed_children"] == 0, c["lib_id"]))


def _findings(analysis: Analysis, truth: DeviceTruth) -> list[Finding]:
    thread_names = {r["gtid"]: r["thread_name"] for r in analysis.frames["thread_names"].to_dicts()}
    complete = bool(analysis.frames["library_calls"]["children_complete"].all()) if (
        "children_complete" in analysis.frames["library_calls"].columns
    ) else True
    helpers = {h["global_tid"]: h for s in analysis.library_sources for h in s.get("helper_threads", [])}
    out: list[Finding] = []
    for number, r in enumerate(_rows(analysis.frames["findings"]), start=1):
        api = r["api"]
        said = names(api, r["return_code"])
        where = placement(truth, r["gtid"])
        finding: Finding = {
            "number": number,  # as the reports for people number them; its index in findings is number - 1
            "kind": r["kind"],
            "api": api,
            "display_api": said["display_api"],
            "return_name": said["return_name"],
            "return_code": r["return_code"],
            "correlation_id": r["correlation_id"],
            "pid": r["pid"],
            "tid": r["tid"],
            "global_tid": r["gtid"],
            "thread_name": r["thread_name"],
            "start_ns": r["start_ns"],
            "end_ns": r["end_ns"],
            # A failed allocation has no CUDA_GPU_MEMORY_USAGE_EVENTS row: its size is unknown.
            # Other calls request no memory (null).
            "requested_bytes": r["bytes"] if is_allocation_api(api) else None,
            "out_of_memory": bool(r.get("out_of_memory")),
            "enclosing": _enclosing(r, complete, helpers) if r["lib_id"] is not None else None,
            "enclosing_chain": r["enclosing_chain"] or [],
            "stream_capture": None,
            "rank": where["rank"],
            "rank_source": where["rank_source"],
            "device_id": where["device_id"],
            "devices": where["devices"],
        }
        capture = r.get("stream_capture")
        if capture is not None:
            g = capture["gtid"]
            finding["stream_capture"] = {
                "begin": capture["begin"],
                "end": capture["end"],
                "event_records": capture["event_records"],
                "event_records_count": len(capture["event_records"]),
                "ns_from_capture_end": capture["ns_from_capture_end"],
                "regions_with_records_before": capture["regions_with_records_before"],
                "pid": pid_bits(g) if g is not None else None,
                "tid": tid_bits(g) if g is not None else None,
                "global_tid": g,
                "thread_name": thread_names.get(g),
            }
        if analysis.alignment is not None:
            finding["telemetry"] = analysis.alignment.position(r["pid"], r["start_ns"], r["end_ns"])
        out.append(finding)
    return out


def _enclosing(r: Mapping[str, Any], complete: bool, helpers: Mapping[int, HelperThread]) -> Enclosing:
    """The library call a finding's row ``r`` is nested in, and the successful allocations nested in
    it before the failed call ("after 1,024 + 131,072 B"; unknown when a pair limit left successful
    calls unlisted: not ``complete``); with the mappings before it and the NCCL helper thread the
    failed call ran on (``helpers``, by thread), where there are."""
    end_known = r.get("lib_end_known") is not False
    each = list(r.get("allocated_before") or [])
    out = _enclosing_call(r, end_known, each, complete)
    mapped = list(r.get("mapped_before") or [])
    if mapped and complete:
        out["mapped_before"] = {"count": len(mapped), "bytes_each": mapped, "bytes": sum(mapped)}
    lib_gtid = r.get("lib_gtid")
    if lib_gtid is not None and lib_gtid != r["gtid"] and r["gtid"] in helpers:
        out["helper_thread"] = helpers[r["gtid"]]
    return out


def _enclosing_call(r: Mapping[str, Any], end_known: bool, each: list[int | None], complete: bool) -> Enclosing:
    known = [b for b in each if b is not None]
    before: AllocationsBefore = {
        "count": len(each),
        "bytes_each": each,
        "bytes": sum(known) if len(known) == len(each) else None,
    }
    return {
        "lib_id": r["lib_id"],
        "api": r["lib_api"],
        "library": r["lib_library"],
        "source": r["lib_source"],
        "start_ns": r["lib_start_ns"],
        "end_ns": r["lib_end_ns"] if end_known else None,
        "recorded_end_ns": r["lib_end_ns"],
        "end_known": end_known,
        "coverage": r["lib_coverage"],
        "allocations_before": before if complete else None,
    }


def _failed_calls(frames: Mapping[str, pl.DataFrame]) -> list[FailedCalls]:
    """Failures no finding explains, grouped (see :func:`nsysaudit.analysis.failures.failed_calls`)."""
    out: list[FailedCalls] = []
    for r in _rows(frames.get("failed_calls", pl.DataFrame())):
        api, rc = r["api"], r["return_code"]
        out.append(
            {
                "api": api,
                **names(api, rc),
                "return_code": rc,
                "allocation": api is not None and (is_allocation_api(api) or is_allocation_failure(api, rc)),
                "out_of_memory": api is not None and is_out_of_memory(api, rc),
                "pid": r["pid"],
                "tid": r["tid"],
                "global_tid": r["gtid"],
                "thread_name": r["thread_name"],
                "nvtx_range": r["nvtx_range"],
                "nvtx_domain": r["nvtx_domain"],
                "straddles_library_call": r["straddles_library_call"],
                "library_call_unexamined": r["library_call_unexamined"],
                "count": r["count"],
                "first_ns": r["first_ns"],
                "last_ns": r["last_ns"],
                "example_correlation_ids": r["example_correlation_ids"],
            }
        )
    return out


def censored_rows(frame: pl.DataFrame) -> list[Censored]:
    """The rows of :func:`censored_table` (or a slice of it) as ``coverage.censored`` entries. polars
    types a row ``dict[str, Any]``: the frame's columns are checked to be the entry's keys, and the
    table's select gives each its type."""
    if set(frame.columns) != required_keys(Censored):
        raise ValueError(f"not a censored_table frame: columns {frame.columns}")
    return cast(list[Censored], frame.to_dicts())


def censored_table(analysis: Analysis) -> pl.DataFrame:
    """``coverage.censored`` as a frame, one row per censored library call in ``lib_id`` order, its
    columns the entries' keys: made by polars and written by polars (10^6 censored calls are never
    10^6 dicts unless asked for, :attr:`AnalysisResult.coverage`)."""
    libs = analysis.frames["library_calls"]
    end_known = pl.col("end_known").fill_null(True) if "end_known" in libs.columns else pl.lit(True)
    reasons = (
        pl.col("censored_reasons") if "censored_reasons" in libs.columns else pl.lit(None, dtype=pl.List(pl.String))
    )
    made = {  # the columns not taken as the frame has them; the rest, by name, in Censored's order
        "end_ns": pl.when(end_known).then(pl.col("end_ns")).otherwise(None).alias("end_ns"),
        "recorded_end_ns": pl.col("end_ns").alias("recorded_end_ns"),
        "end_known": end_known.alias("end_known"),
        "reason": pl.col("censored_reason").alias("reason"),
        "reasons": pl.when(reasons.list.len() > 0)
        .then(reasons)
        .otherwise(pl.concat_list(pl.col("censored_reason")))
        .alias("reasons"),
    }
    return (
        libs.filter(pl.col("coverage") == "censored")
        .sort("lib_id")
        .select(*(made.get(name, pl.col(name)) for name in required_columns(Censored)))
    )


class CoverageHead(TypedDict):
    """``coverage`` but its ``censored`` library calls (:func:`censored_table`, kept as a frame)."""

    cuda_api_trace: bool
    by_source: list[SourceCoverage]
    capture: CaptureBounds
    nsys_diagnostics: list[NsysDiagnostic]
    library_sources: list[LibrarySource]


def _coverage(analysis: Analysis) -> CoverageHead:
    """Where the evidence stops: the capture's bounds, nsys's own warnings (the censored library
    calls are :func:`censored_table`, kept as a frame)."""
    diagnostics = analysis.frames.get("diagnostics")
    said: list[NsysDiagnostic] = []
    if diagnostics is not None:
        for d in diagnostics.filter(pl.col("severity").is_in(list(WARNING_SEVERITIES))).to_dicts():
            gpid = d["gpid"]
            said.append(
                {
                    "timestamp_ns": d["timestamp_ns"],
                    "severity": d["severity"],
                    "source": d["source"],
                    "text": d["text"],
                    "category": d["category"],
                    "library": d["library"],
                    "global_pid": gpid,
                    "pid": pid_of(gpid),
                }
            )
    return {
        "cuda_api_trace": analysis.cuda_api_trace,
        "by_source": list(analysis.coverage_sources),
        "capture": capture_section(analysis.capture_bounds),
        "nsys_diagnostics": said,
        "library_sources": list(analysis.library_sources),
    }


def truth_of(analysis: Analysis) -> DeviceTruth:
    """Devices and ranks of the analysis (:func:`nsysaudit.analysis.devices.device_truth`)."""
    ledger_devices = analysis.ledger.summary.get("devices", []) if analysis.ledger is not None else []
    telemetry = analysis.alignment.log if analysis.alignment is not None else None
    return device_truth(analysis.devices, analysis.processes, ledger_devices, telemetry)


def _memory(analysis: Analysis, truth: DeviceTruth | None = None) -> Memory:
    """The ``memory`` key: the ledger's summary per device and process and its value at each moment."""
    ledger = analysis.ledger
    if ledger is None:
        return {"ledger": False, "why_no_ledger": "not analyzed", "at": []}
    names = {p["global_pid"]: p["name"] for p in analysis.processes}
    at: list[MemoryPoint] = []
    for p in analysis.memory_points:
        in_force = None
        if analysis.alignment is not None and p["t_ns"] is not None:
            where = analysis.alignment.position(p["pid"], p["t_ns"], p["t_ns"])
            in_force = where.get("allocator", where["in_force"])  # the allocator's own figures, where a line has them
        holder = holder_statement(p, names, gap_examples=p.get("free_calls_without_event_examples", ()),
                                  in_force=in_force,
                                  devices=truth.devices if truth is not None and truth.several_devices else None)
        at.append({**p, "holder": holder})
    out: Memory = {
        **ledger.summary,
        "ledger": ledger.claimed,
        "why_no_ledger": ledger.why_not,
        "at": at,
    }
    if analysis.alignment is not None:
        pids = analysis.alignment.log.lines["pid"]
        lines = pids.len() - pids.null_count()
        out["telemetry_points"] = {"lines": lines, "read_at": sum(1 for p in at if p["point"] == "telemetry"),
                                   "rule": TELEMETRY_POINTS_RULE}
    return out


def _stalls(analysis: Analysis) -> Stalls:
    """The ``stalls`` key (:mod:`nsysaudit.reports.stalls`), each listed call placed among the telemetry lines."""
    from nsysaudit.analysis.stalls import empty_stalls

    alignment = analysis.alignment
    return stalls_section(analysis.stalls if analysis.stalls is not None else empty_stalls(),
                          alignment.position if alignment is not None else None)


class Head(TypedDict):
    """Every key of the analysis document but ``library_calls`` and ``coverage.censored``, which stay
    frames until asked for; ``alignment`` and ``telemetry`` in their lazy form, their per-line lists
    :class:`~nsysaudit.reports.alignment_section.LineList` (:meth:`AnalysisResult.document` makes them lists)."""

    tool: Tool
    schema: AnalysisSchemaName
    input: Input
    census: Census
    findings: list[Finding]
    failed_calls: list[FailedCalls]
    coverage: CoverageHead
    processes: list[Process]
    verdict: Verdict
    verdict_reasons: list[str]
    warnings: list[ReportWarning]
    limits: Limits
    memory: Memory
    devices: list[TargetDevice]
    launches: list[LaunchedCommand]
    ranks: Ranks
    stalls: Stalls
    answer: Answer
    alignment: NotRequired[dict[str, object]]
    telemetry: NotRequired[dict[str, object]]
    allocator: NotRequired[AllocatorSection]


def _allocator(analysis: Analysis) -> AllocatorSection | None:
    """The ``allocator`` key (with memory snapshots only): each snapshot joined, and the allocator at
    each moment with its ``statement`` (:func:`~nsysaudit.reports.statements.allocator_statement`)."""
    if analysis.allocator is None:
        return None
    section = analysis.allocator.section()
    stacks = {(s["snapshot"], s["stack"]): s for s in section["stacks"]}
    section["at"] = [{**p, "statement": allocator_statement(p, stacks)} for p in section["at"]]
    return section


def _head(info: InputInfo, analysis: Analysis, censored: pl.DataFrame) -> Head:
    """Every key of the document but ``library_calls`` and ``coverage.censored`` (``censored``: its frame)."""
    truth = truth_of(analysis)
    findings = _findings(analysis, truth)
    keys = document_keys(truth, analysis.processes, findings)  # processes, devices, launches, ranks
    memory = _memory(analysis, truth)
    stalls = _stalls(analysis)
    out: Head = {
        "tool": {"name": "nsysaudit", "version": __version__},
        "schema": {"kind": "analysis", "version": SCHEMA_VERSION},
        "input": input_entry(info),
        "census": _census(analysis),
        "findings": findings,
        "failed_calls": _failed_calls(analysis.frames),
        "coverage": _coverage(analysis),
        "processes": keys["processes"],
        "verdict": analysis.verdict,
        "verdict_reasons": list(analysis.verdict_reasons),
        "warnings": [w.copy() for w in analysis.warnings],
        "limits": analysis.limits.copy(),
        "memory": memory,
        "devices": keys["devices"],
        "launches": keys["launches"],
        "ranks": keys["ranks"],
        "stalls": stalls,
        "answer": answer(
            findings, analysis.verdict, list(analysis.verdict_reasons), keys["processes"], memory,
            censored_rows(censored.head(MAX_CENSORED)), censored.height,
            devices=keys["devices"], names_devices=keys["ranks"]["shown"], stalls=stalls["statements"],
            library_failures=analysis.telemetry_library_failures,
        ),
    }
    if analysis.alignment is not None:
        out["alignment"] = alignment_section(analysis.alignment, lazy=True)
        out["telemetry"] = {
            **telemetry_summary(analysis.alignment, lazy=True),
            "library_failures": list(analysis.telemetry_library_failures),
        }
    allocator = _allocator(analysis)
    if allocator is not None:
        out["allocator"] = allocator
    return out



def input_entry(info: InputInfo) -> Input:
    """The document's ``input`` object."""
    out: Input = {
        "path": info.path,
        "sha256": info.sha256,
        "kind": info.kind,
        "size_bytes": info.size_bytes,
        "nsys_version": info.nsys_version,
        "schema_version": info.schema_version,
        "tables": dict(sorted(info.tables.items())),
        "session_start_utc_ns": info.session_start_utc_ns,
    }
    if info.engine is not None:  # how nsysaudit read it, not the evidence: not in a sealed report.json
        out["engine"] = info.engine.name
        out["sqlite_version"] = info.engine.sqlite_version
        out["native_unavailable"] = info.engine.native_unavailable
    if info.kind == "nsys-rep":
        out["export"] = {
            "sha256": info.export_sha256,
            "cache_hit": info.export_cache_hit,
            "exported_with": info.exported_with,
            "nsys_version": info.export_nsys_version,
        }
    return out


def capture_section(capture: Capture) -> CaptureBounds:
    """The document's ``capture`` object: the capture's bounds and where they were read."""
    return {
        "start_ns": capture.start_ns,
        "stop_ns": capture.stop_ns,
        "start_from": capture.start_from,
        "stop_from": capture.stop_from,
        "diagnostics_table": capture.diagnostics,
    }

@dataclass(frozen=True)
class AnalysisResult:
    """One input's report: what was analyzed, the analysis, and its document, built once.

    ``head`` holds every key of the JSON document but ``library_calls`` and ``coverage.censored``,
    which stay the frames ``library_calls_table`` and ``censored_table`` until :meth:`to_dict`,
    :attr:`coverage` (or the JSON renderer) asks for them. With telemetry, its per-line lists
    (``telemetry.timeline``, ``alignment.agreement.diffs_ns``, ``alignment.anchors.events_without_anchor``)
    are :class:`~nsysaudit.reports.alignment_section.LineList` there, made by :meth:`document` (or written
    by the JSON renderer). Build one with :func:`report_analysis`.
    """

    input: InputInfo
    analysis: Analysis
    head: Head
    library_calls_table: pl.DataFrame
    censored_table: pl.DataFrame

    # --- the analysis' own values -----------------------------------------------------------------
    @property
    def frames(self) -> Mapping[str, pl.DataFrame]:
        return self.analysis.frames

    @property
    def verdict(self) -> Verdict:
        return self.analysis.verdict

    @property
    def verdict_reasons(self) -> list[str]:
        return list(self.analysis.verdict_reasons)

    @property
    def warnings(self) -> list[ReportWarning]:
        return list(self.analysis.warnings)

    @property
    def alignment(self) -> Alignment | None:
        return self.analysis.alignment

    @property
    def capture(self) -> Mapping[str, list[str]]:
        """META_DATA_CAPTURE: the capture's settings (key -> values)."""
        return self.analysis.capture

    @property
    def cuda_api_calls(self) -> int:
        return self.analysis.cuda_api_calls

    # --- the document -------------------------------------------------------------------------------
    @property
    def census(self) -> Census:
        census: Census = self.head["census"]
        return census.copy()

    @property
    def findings(self) -> list[Finding]:
        return list(self.head["findings"])

    @property
    def coverage(self) -> Coverage:
        """The document's ``coverage`` (capture bounds, sources, censored library calls)."""
        head = self.head["coverage"]  # all of it but the censored calls, kept as their frame
        return {"cuda_api_trace": head["cuda_api_trace"], "by_source": head["by_source"],
                "censored": censored_rows(self.censored_table), "capture": head["capture"],
                "nsys_diagnostics": head["nsys_diagnostics"], "library_sources": head["library_sources"]}

    def library_calls_frame(self) -> pl.DataFrame:
        """``library_calls`` as one polars frame (children and straddling as lists of structs)."""
        return self.library_calls_table

    def library_call_dicts(self, frame: pl.DataFrame) -> list[LibraryCall]:
        """Rows of :meth:`library_calls_frame` (or a subset of it) as ``library_calls`` entries. polars
        types a row ``dict[str, Any]``: the frame's columns are checked to be the entry's keys (the
        table's schema gives each its type)."""
        if set(frame.columns) != required_keys(LibraryCall):
            raise ValueError(f"not a library_calls_table frame: columns {frame.columns}")
        out = cast(list[LibraryCall], frame.to_dicts())
        if self.alignment is not None:
            for row in out:
                row["telemetry"] = self.alignment.position(row["pid"], row["start_ns"], row["end_ns"])
        return out

    def document(self, library_calls: list[LibraryCall]) -> AnalysisDocument:
        """The document with the given ``library_calls`` (a subset, for reports that select)."""
        h = self.head
        doc: AnalysisDocument = {
            "tool": h["tool"], "input": h["input"], "census": h["census"], "findings": h["findings"],
            "failed_calls": h["failed_calls"], "coverage": self.coverage, "processes": h["processes"],
            "verdict": h["verdict"], "verdict_reasons": h["verdict_reasons"], "warnings": h["warnings"],
            "limits": h["limits"], "memory": h["memory"], "answer": h["answer"], "library_calls": library_calls,
            "devices": h["devices"], "launches": h["launches"], "ranks": h["ranks"], "stalls": h["stalls"],
            "schema": h["schema"],
        }
        alignment = self.analysis.alignment
        if alignment is not None:  # the head's lazy forms, their per-line lists made
            doc["alignment"] = alignment_section(alignment)
            doc["telemetry"] = {**telemetry_summary(alignment),
                                "library_failures": list(self.analysis.telemetry_library_failures)}
        if "allocator" in h:
            doc["allocator"] = h["allocator"]
        return doc

    def to_dict(self) -> AnalysisDocument:
        """The JSON document ``nsysaudit analyze --json`` prints, as Python objects."""
        return self.document(self.library_call_dicts(self.library_calls_table))

    def __repr__(self) -> str:
        found: dict[str, int] = {}
        for f in self.head["findings"]:
            found[f["kind"]] = found.get(f["kind"], 0) + 1
        return result_repr(self.input.path, self.verdict, list(found.items()), self.library_calls_table.height,
                           len(self.head["failed_calls"]), len(self.analysis.warnings))


def report_analysis(info: InputInfo, analysis: Analysis) -> AnalysisResult:
    """The report of ``analysis`` of the input ``info``: its document, built once."""
    censored = censored_table(analysis)
    head = _head(info, analysis, censored)
    return AnalysisResult(info, analysis, head, library_calls_table(analysis.frames), censored)
