"""The verdict and its reasons, the libraries the capture traced, and the library failures telemetry records.

Verdicts: ``failure_found`` (a finding of :data:`FAILURE_KINDS`), ``inconclusive`` (none, but a gap
in the evidence could hide one), ``no_failure`` otherwise. The reasons always name untraced
libraries, the failed calls outside library calls and nsys's CUDA warnings (docs/evidence.md, "Verdict").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal, NamedTuple, NotRequired, TypedDict

import polars as pl

from nsysaudit.analysis import nccl
from nsysaudit.analysis.alignment import Alignment
from nsysaudit.analysis.coverage import CensoredReason, CoverageState
from nsysaudit.analysis.nccl import FailedCall, HelperThread
from nsysaudit.core.codes import is_allocation_api, is_out_of_memory
from nsysaudit.core.reasons import Reason
from nsysaudit.read.nccl import NCCL
from nsysaudit.read.trace import Trace
from nsysaudit.words import say

Verdict = Literal["failure_found", "inconclusive", "no_failure"]


class LibrarySource(TypedDict):
    library: str
    requested: bool | None
    status: str
    calls: int
    markers: int
    reason: str | None
    # NCCL only: how the export shows NCCL's calls (its domain's name, or its payload schemas), its
    # calls per API, and the threads NCCL started for its calls (nsysaudit.analysis.nccl).
    evidence: NotRequired[str]
    calls_by_api: NotRequired[dict[str, int]]
    helper_threads: NotRequired[list[HelperThread]]


class LibraryFailureAfter(TypedDict):
    lib_id: int
    api: str
    tid: int | None
    end_ns: int | None
    ns_before_line: int | None
    coverage: CoverageState
    censored_reason: CensoredReason | None


class LibraryFailure(TypedDict):
    """A library failure the application reported (a telemetry line), and the library call before it."""

    line: int
    event: str
    pid: int | None
    trace_ns: int | None
    text: str | None
    statuses: list[str]
    explained: bool
    after: LibraryFailureAfter | None
    cuda_skip_some_api_calls: list[str]
    # NCCL's error text ("Failed to CUDA calloc async 24 bytes", ncclUnhandledCudaError): its library, the
    # finding it is tied to (the process's last finding before the line; null: none) and whether that
    # finding is an out-of-memory failure (the trace confirms one).
    library: NotRequired[str]
    finding: NotRequired[int | None]
    finding_number: NotRequired[int | None]  # the same finding numbered from 1, as the reports number it
    trace_confirms_out_of_memory: NotRequired[bool]
    # Where no finding is: the out-of-memory failure before the line that no library call encloses.
    failed_call: NotRequired[FailedCall]


FAILURE_KINDS = ("nested_alloc_failure", "nested_call_failure", "captured_event_wait_failure")


# Tables whose rows decide findings: an ambiguous one (a shadow copy beside it) is a verdict gap.
EVIDENCE_TABLES = frozenset(
    {"CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUBLAS_EVENTS", "CUDNN_EVENTS", "StringIds"}
)


# Capture settings (META_DATA_CAPTURE CAPTURE_EVENT_TYPE values) that request library API tracing.
LIBRARY_CAPTURE_TYPES = {"cuBLAS": frozenset({"CuBLAS", "cuBLAS"}), "cuDNN": frozenset({"CuDNN", "cuDNN"}),
                         NCCL: frozenset({"NvtxEvents"})}  # NCCL's calls are its own NVTX ranges


def library_sources(trace: Trace, libs: pl.DataFrame, library_domains: Sequence[str]) -> list[LibrarySource]:
    """Per library asked for, whether the capture traced it and how many calls it recorded.

    ``status``: ``traced`` (calls recorded, or tracing requested and nsys raised no objection),
    ``not_traced`` (requested, but nsys said it could not trace it: never read as "no calls"),
    ``not_requested`` (the capture settings do not ask for it), ``unknown`` (no capture settings).
    NCCL is listed only where the export shows it (:func:`nsysaudit.analysis.nccl.library_source`): a
    capture of a job that does not use NCCL says nothing about NCCL.
    """
    types = set(trace.capture.get("CAPTURE_EVENT_TYPE", []))
    refused = trace.diagnostics.filter(pl.col("category") == "library_not_traced")
    out: list[LibrarySource] = []
    for library in dict.fromkeys(library_domains):
        if library == NCCL:
            if trace.nccl.seen:
                wants_nvtx = bool(LIBRARY_CAPTURE_TYPES[NCCL] & types) if types else None
                out.append(nccl.library_source(trace, libs, wants_nvtx))
            continue
        calls = libs.filter(pl.col("library") == library).height
        markers = sum(n for table, n in trace.library_markers.items() if trace.tables_used.get(library) == table)
        wanted = LIBRARY_CAPTURE_TYPES.get(library)
        requested: bool | None = None
        if wanted is not None and types:
            requested = bool(wanted & types) or markers > 0
        said = [str(text) for text in refused.filter(pl.col("library") == library)["text"].to_list()]
        status: str
        why: Reason | None
        if said:
            status, why = "not_traced", Reason.of("library_refused", said=said[0])
        elif calls or requested:
            status, why = "traced", None
        elif requested is False:
            status, why = "not_requested", Reason.of("library_not_requested")
        else:
            status, why = "unknown", (
                Reason.of("library_unknown") if wanted is not None
                else Reason.of("library_domain_unused", library=library)
            )
        out.append(
            {
                "library": library,
                "status": status,
                "requested": requested,
                "calls": calls,
                "markers": markers,
                "reason": None if why is None else say(why),
            }
        )
    return out


_LIBRARY_STATUS = re.compile(r"\b(CUBLAS(?:LT)?|CUDNN|CUSOLVER|CUSPARSE|CUFFT|CURAND)_STATUS_([A-Z0-9_]+)")


_STATUS_FIELD = re.compile(r"\A(cublas|cublaslt|cudnn|cusolver|cusparse|cufft|curand)_status\Z", re.IGNORECASE)


def telemetry_library_failures(
    alignment: Alignment | None, libs: pl.DataFrame, findings: pl.DataFrame, capture: dict[str, list[str]],
    *, unrecovered: pl.DataFrame | None = None,
) -> list[LibraryFailure]:
    """Telemetry lines that record a library failure (``CUBLAS_STATUS_ALLOC_FAILED``, ``cublas_status: 3``).

    ``explained``: some finding in the same process shows a failed call behind it. ``after``:
    the library call of that process that ended last at or before the line (when the line is
    placed on the trace clock).
    """
    if alignment is None:
        return []
    skip_keys = sorted(k for k, v in capture.items() if k.endswith("CUDA_SKIP_SOME_API_CALLS") and "true" in v)
    found_pids = {int(p) for p in findings.filter(pl.col("kind").is_in(FAILURE_KINDS))["pid"].drop_nulls().to_list()}
    out: list[LibraryFailure] = []
    # Only the lines whose text can hold a status (the reader keeps them, decoded: 10^6 lines are not searched).
    status_lines = alignment.log.status_lines
    rows = alignment.lines_of([row for row, _ in status_lines]).iter_rows() if status_lines else iter(())
    # Each line's number, event, pid (null: none written) and place on the trace clock (null: not placed).
    line: int
    name: str
    pid: int | None
    trace_ns: int | None
    for (_, fields), (line, name, pid, trace_ns) in zip(status_lines, rows, strict=True):
        statuses: list[str] = []
        text = None
        nccl_said: list[str] = []
        for key, value in fields.items():
            if isinstance(value, str):
                said = nccl.error_text(value)  # NCCL's error names and allocation warning
                if said and text is None:
                    text = value
                nccl_said += said
                if "_STATUS_" not in value:  # what _LIBRARY_STATUS needs
                    continue
                hits = [m.group(0) for m in _LIBRARY_STATUS.finditer(value) if m.group(2) != "SUCCESS"]
                if hits and text is None:
                    text = value
                statuses += hits
            elif type(value) is int and value != 0 and key[-7:].lower() == "_status" and _STATUS_FIELD.match(key):
                statuses.append(f"{key}={value}")
        statuses += nccl_said
        if not statuses:
            continue
        after: LibraryFailureAfter | None = None
        if trace_ns is not None and pid is not None:
            ended = libs.filter(
                (pl.col("pid") == pid) & pl.col("end_ns").is_not_null() & (pl.col("end_ns") <= trace_ns)
            ).sort("end_ns")
            if ended.height:
                last = ended.row(-1, named=True)
                end_ns = int(last["end_ns"])  # not null: the filter above
                after = {
                    "lib_id": int(last["lib_id"]),
                    "api": str(last["api"]),
                    "tid": last["tid"],
                    "end_ns": end_ns,
                    "ns_before_line": trace_ns - end_ns,
                    "coverage": last["coverage"],
                    "censored_reason": last["censored_reason"],
                }
        entry: LibraryFailure = {
            "line": line,
            "event": name,
            "pid": pid,
            "statuses": list(dict.fromkeys(statuses)),
            "text": text,
            "trace_ns": trace_ns,
            "after": after,
            "explained": pid in found_pids if pid is not None else bool(found_pids),
            "cuda_skip_some_api_calls": skip_keys,
        }
        if nccl_said:  # tied to the failed call (analysis/nccl)
            _tie_nccl(entry, nccl.tie(findings, unrecovered, pid, trace_ns, kinds=FAILURE_KINDS))
        out.append(entry)
    return out


def _tie_nccl(entry: LibraryFailure, tie: nccl.Tie) -> None:
    """Record on an NCCL error line's ``entry`` what :func:`nsysaudit.analysis.nccl.tie` tied it to."""
    entry["library"] = NCCL
    entry["finding"] = tie.finding
    entry["finding_number"] = None if tie.finding is None else tie.finding + 1
    entry["trace_confirms_out_of_memory"] = tie.out_of_memory
    if tie.failed_call is not None:
        entry["failed_call"] = tie.failed_call


class FailedGroup(NamedTuple):
    """A group of failed calls outside library calls (a row of the analysis' ``failed_calls`` frame)."""

    api: str | None
    return_code: int
    pid: int | None
    tid: int | None
    thread_name: str | None
    nvtx_range: str | None
    library_call_unexamined: bool | None
    calls: int

    @classmethod
    def rows(cls, failed: pl.DataFrame) -> list[FailedGroup]:
        columns = [*cls._fields[:-1], "count"]
        return [cls(*row) for row in failed.select(columns).iter_rows()]


def decide(
    trace: Trace,
    libs: pl.DataFrame,
    findings: pl.DataFrame,
    failed: pl.DataFrame,
    sources: list[LibrarySource],
    telemetry_failures: list[LibraryFailure],
    undecided: Sequence[Reason] = (),
    *,
    unrecovered: pl.DataFrame | None = None,
) -> tuple[Verdict, list[Reason]]:
    """The verdict and its reasons. The reasons always name untraced libraries and the failed
    calls outside library calls, so ``no_failure`` is never read as "nothing failed".
    ``unrecovered``: the out-of-memory failures outside library calls after which their process made
    no successful allocation (:func:`nsysaudit.analysis.recovery.unrecovered`, with pid, tid and
    thread name): a gap (``inconclusive``), never ``no_failure``."""
    # A shadow copy of a table the joins read may hide the rows that matter: which one nsys wrote
    # is unknown, so the absence of a failure in the one read proves nothing.
    shadowed = sorted(t for t in EVIDENCE_TABLES if trace.export.is_ambiguous(t))
    context = _context(trace, failed, sources, shadowed)
    found = Counter(findings["kind"].to_list())  # a few rows: counted in Python, not a query a kind
    counts = {k: found[k] for k in FAILURE_KINDS}
    if any(counts.values()):
        return "failure_found", _found(findings, counts) + context
    gaps = [
        *_coverage_gaps(trace, libs),
        *undecided,
        *_evidence_gaps(trace, failed, sources, shadowed),
        *(_telemetry_gap(t) for t in telemetry_failures if not t["explained"]),
        *_unrecovered_gap(unrecovered),
    ]
    if gaps:
        return "inconclusive", gaps + context
    return "no_failure", [_nothing_failed(trace, libs, failed, sources), *context]


def _found(findings: pl.DataFrame, counts: dict[str, int]) -> list[Reason]:
    """The first reasons of ``failure_found``: the findings per kind; those of an NCCL call's helper
    thread (:mod:`nsysaudit.analysis.nccl`) are counted apart, since their thread is not the call's."""
    off = (
        findings.filter(pl.col("lib_gtid").is_not_null() & (pl.col("lib_gtid") != pl.col("gtid")))
        if "lib_gtid" in findings.columns else findings.clear()
    )
    helpers = Counter(off["kind"].to_list())
    out = []
    for kind, n in counts.items():
        helper = helpers[kind]
        if n - helper:
            out.append(Reason.of("found", kind=kind, calls=n - helper))
        if helper:
            out.append(Reason.of("found_on_helper_thread", kind=kind, calls=helper))
    return out


def _context(trace: Trace, failed: pl.DataFrame, sources: list[LibrarySource], shadowed: list[str]) -> list[Reason]:
    """What every verdict says besides: untraced libraries, the failed calls outside library calls
    (the first five groups named), shadowed tables, nsys's own warnings that CUDA events were lost."""
    context: list[Reason] = []
    for s in sources:
        if s["status"] != "traced":
            context.append(
                Reason.of("library_not_traced", library=s["library"], status=s["status"], reason=s["reason"])
            )
    if failed.height:
        context.append(Reason.of(
            "failed_outside_library_calls", calls=int(failed["count"].sum()), groups=failed.height,
            first=[r._asdict() for r in FailedGroup.rows(failed.head(5))],
        ))
    if shadowed:
        context.append(Reason.of("shadowed_tables_read", tables=shadowed))
    gaps_said = trace.diagnostics.filter(pl.col("category").is_in(["cuda_events_missing", "cuda_trace_degraded"]))
    context += [Reason.of("nsys_warned", text=text) for text in dict.fromkeys(gaps_said["text"].to_list())]
    return context


def _coverage_gaps(trace: Trace, libs: pl.DataFrame) -> list[Reason]:
    """No CUDA API trace, or library calls the trace does not cover."""
    gaps: list[Reason] = []
    if not trace.has_cuda_api:
        gaps.append(Reason.of("no_cuda_api_trace"))
    elif trace.cuda_api_total == 0:
        gaps.append(Reason.of("empty_cuda_api_table"))
    censored = libs.filter(pl.col("coverage") == "censored")
    if censored.height:
        by_reason = censored.group_by("censored_reason").len().sort("censored_reason").rows()
        gaps.append(Reason.of("censored_library_calls", censored=censored.height, calls=libs.height,
                              by_reason=by_reason))
    return gaps


def _evidence_gaps(
    trace: Trace, failed: pl.DataFrame, sources: list[LibrarySource], shadowed: list[str]
) -> list[Reason]:
    """Evidence that may be elsewhere: another version of a table, allocation failures where no
    library API was traced."""
    gaps: list[Reason] = []
    if shadowed:
        gaps.append(Reason.of("shadowed_tables_unread", tables=shadowed))
    if trace.has_cuda_api and not any(s["status"] == "traced" for s in sources):
        oom = sum(
            r["count"]
            for r in failed.iter_rows(named=True)
            if r["api"] is not None and (is_allocation_api(r["api"]) or is_out_of_memory(r["api"], r["return_code"]))
        )
        if oom:
            gaps.append(Reason.of("failures_where_no_library_traced", failures=oom))
    return gaps


def _unrecovered_gap(unrecovered: pl.DataFrame | None) -> list[Reason]:
    """Out-of-memory allocation failures outside library calls that nothing after them shows the
    process survived (:mod:`nsysaudit.analysis.recovery`): named, the first three of them."""
    if unrecovered is None or unrecovered.height == 0:
        return []
    first = unrecovered.head(3).select(
        "api", "return_code", "pid", "tid", "thread_name", "start_ns", "correlation_id"
    ).to_dicts()
    return [Reason.of("unrecovered_out_of_memory", failures=unrecovered.height, first=first)]


def _telemetry_gap(t: LibraryFailure) -> Reason:
    """A library failure the application's telemetry recorded and no traced call explains."""
    return Reason.of(
        "telemetry_failure_unexplained", line=t["line"], event=t["event"], statuses=t["statuses"],
        after=t["after"], skipped=t["cuda_skip_some_api_calls"], failed_call=t.get("failed_call"),
    )


def _nothing_failed(trace: Trace, libs: pl.DataFrame, failed: pl.DataFrame, sources: list[LibrarySource]) -> Reason:
    """The first reason of ``no_failure``: what was looked at and found clean."""
    traced = [s["library"] for s in sources if s["status"] == "traced"]
    if libs.height:
        return Reason.of("library_calls_clean", calls=libs.height)
    if traced:
        return Reason.of("tracing_recorded_no_library_call", libraries=traced)
    if failed.height:
        return Reason.of("no_allocation_failure_untraced")
    return Reason.of("no_call_failed", calls=trace.cuda_api_total)
