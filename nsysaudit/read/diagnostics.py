"""What nsys itself says about a capture: its bounds and its warnings.

nsys 2024.x and later write ``DIAGNOSTIC_EVENT``: "Profiling has started." / "Profiling has
stopped." (the capture's bounds on the trace clock), event counts, and warnings such as
"Not all CUDA events might have been collected." or "Installed CUDA driver version (13.0) is not
supported by this build of Nsight Systems". Older exports have only ``ANALYSIS_DETAILS``, whose
``duration`` is the length of the trace (the capture's stop on the trace clock, which starts at 0)
but which says nothing about lost events.

These decide what a trace can prove. A library call whose process made no CUDA API call after it is
covered only when nsys says profiling went on past its end and never warned that CUDA events were
lost or CUDA tracing was degraded; without ``DIAGNOSTIC_EVENT`` that cannot be known (see
:mod:`nsysaudit.analysis.coverage`).

Each message is classified by its text (nsys has no message ids) into one of :data:`Category`.
The patterns are the messages seen in real exports of nsys 2022.2 to 2026.2; an unrecognised
warning is kept as ``other`` and shown, and one that speaks of lost or dropped events counts as
``events_missing`` for CUDA unless it names another source.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Literal, TypedDict

import polars as pl

from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.reasons import Reason
from nsysaudit.core.shapes import Schema
from nsysaudit.read.source import ExportFile, quote
from nsysaudit.words import warned

Category = Literal[
    "capture_started",
    "capture_stopped",
    "cuda_events_missing",
    "nvtx_events_missing",
    "cuda_trace_degraded",
    "library_not_traced",
    "other",
]
# Categories that mean the CUDA API trace may lack calls: a library call they apply to is never
# "complete" on the strength of the capture's bounds alone.
CUDA_GAPS: frozenset[str] = frozenset({"cuda_events_missing", "cuda_trace_degraded"})

# ENUM_DIAGNOSTIC_SEVERITY_LEVEL of nsys 2024.2 through 2026.2, for exports without the enum table.
SEVERITY_FALLBACK = {0: "unknown", 1: "info", 2: "warning", 3: "error", 4: "verbose"}
WARNING_SEVERITIES = frozenset({"warning", "error"})

_STARTED = re.compile(r"\AProfiling has started\.?\Z")
_STOPPED = re.compile(r"\AProfiling has stopped\.?\Z")
_NVTX_MISSING = re.compile(r"Not all NVTX events might have been collected", re.IGNORECASE)
_CUDA_MISSING = re.compile(r"Not all (CUDA|CUPTI) events might have been collected", re.IGNORECASE)
_LOST = re.compile(r"\b(lost|dropped|discarded|overflow(ed)?|not all\b.*\bcollected)\b", re.IGNORECASE)
_NOT_CUDA = re.compile(r"\b(NVTX|OpenGL|OS ?runtime|CPU|sampl\w*|context switch\w*)\b", re.IGNORECASE)
_DRIVER_UNSUPPORTED = re.compile(r"CUDA driver version .* is not supported", re.IGNORECASE)
_CUDA_BROKEN = re.compile(
    r"\b(CUPTI|CUDA injection|CUDA trace)\b.*\b(fail\w*|error|not supported|unable|disabled)\b", re.IGNORECASE
)
_LIBRARY = re.compile(r"Tracing (?P<library>cu[A-Za-z]+) library version .* not supported", re.IGNORECASE)
_LIBRARY_NAMES = {"cudnn": "cuDNN", "cublas": "cuBLAS", "cublaslt": "cuBLASLt"}


def classify(text: str, severity: str) -> tuple[Category, str | None]:
    """The category of one diagnostic message, and the library it names (``library_not_traced``).

    >>> classify("Not all CUDA events might have been collected.", "warning")
    ('cuda_events_missing', None)
    >>> classify("Tracing cuDNN library version 91.9 is currently not supported", "warning")
    ('library_not_traced', 'cuDNN')
    >>> classify("No NVTX events collected. Does the process use NVTX?", "warning")
    ('other', None)
    """
    if _STARTED.match(text):
        return "capture_started", None
    if _STOPPED.match(text):
        return "capture_stopped", None
    library = _LIBRARY.search(text)
    if library:
        name = library.group("library")
        return "library_not_traced", _LIBRARY_NAMES.get(name.lower(), name)
    if _CUDA_MISSING.search(text):
        return "cuda_events_missing", None
    if _NVTX_MISSING.search(text):
        return "nvtx_events_missing", None
    if severity not in WARNING_SEVERITIES:
        return "other", None
    if _DRIVER_UNSUPPORTED.search(text) or _CUDA_BROKEN.search(text):
        return "cuda_trace_degraded", None
    if _LOST.search(text) and not _NOT_CUDA.search(text):
        return "cuda_events_missing", None
    return "other", None


DIAGNOSTIC_SCHEMA: Schema = {
    "timestamp_ns": pl.Int64,
    "severity": pl.String,
    "source": pl.String,
    "text": pl.String,
    "gpid": pl.Int64,
    "category": pl.String,
    "library": pl.String,
}


# A document's ``capture`` (named in nsysaudit.reports.documents, which makes the contract from it).
class CaptureBounds(TypedDict):
    start_ns: int | None
    stop_ns: int | None
    start_from: str | None
    stop_from: str | None
    diagnostics_table: bool


@dataclass(frozen=True)
class Capture:
    """The capture's bounds on the trace clock and where they were read.

    ``start_from`` / ``stop_from``: ``"DIAGNOSTIC_EVENT"`` (nsys's "Profiling has started/stopped."
    messages), ``"ANALYSIS_DETAILS"`` (the trace starts at 0 and lasts ``duration``), or None
    (unknown). ``diagnostics``: whether the export has a DIAGNOSTIC_EVENT table at all; without
    it nsys's silence about lost events proves nothing.
    """

    start_ns: int | None
    stop_ns: int | None
    start_from: str | None
    stop_from: str | None
    diagnostics: bool

    def outside(self, value: pl.Expr) -> pl.Expr:
        """True where ``value`` (a timestamp on the trace clock) is known and lies before the capture
        began or after it stopped: nsys records nothing outside its capture (it clamps ranges still
        open at the stop to the stop), so such a value is damage, whichever column holds it. A bound
        the export does not record checks nothing (never an invented one); NULL is not outside."""
        out = pl.lit(False)
        if self.start_ns is not None:
            out = out | (value < self.start_ns)
        if self.stop_ns is not None:
            out = out | (value > self.stop_ns)
        return out.fill_null(False)

    @property
    def bounds_words(self) -> str:
        """The bounds as a phrase: ``0 .. 5,617,749,898 ns`` (a side not recorded: ``?``)."""
        start = f"{self.start_ns:,}" if self.start_ns is not None else "?"
        stop = f"{self.stop_ns:,}" if self.stop_ns is not None else "?"
        return f"{start} .. {stop} ns"

    @property
    def bounded(self) -> bool:
        """Whether the export records either bound (else no timestamp can be checked against one)."""
        return self.start_ns is not None or self.stop_ns is not None


NO_CAPTURE = Capture(None, None, None, None, False)




def _enum(export: ExportFile, table: str) -> dict[int, str]:
    t = export.table(table)
    if t is None or not t.has("id", "name"):
        return {}
    label = "label" if t.has("label") else "name"
    out: dict[int, str] = {}
    for key, name in export.conn.execute(f"SELECT id, {quote(label)} FROM {quote(t.name)}"):
        if type(key) is int and isinstance(name, str):
            out[key] = name.lower()
    return out


def read_diagnostics(export: ExportFile) -> tuple[pl.DataFrame, Capture, list[ReportWarning]]:
    """DIAGNOSTIC_EVENT rows (classified), the capture's bounds, and warnings about reading them.

    Rows whose timestamp or text is not usable (wrong type, NULL) are counted in a warning and left
    out; they never decide a bound.
    """
    warnings: list[ReportWarning] = []
    table = export.table("DIAGNOSTIC_EVENT")
    rows: list[tuple[int, str, str | None, str, int | None, Category, str | None]] = []
    if table is not None and table.has("timestamp", "text"):
        severity_names = {**SEVERITY_FALLBACK, **_enum(export, "ENUM_DIAGNOSTIC_SEVERITY_LEVEL")}
        source_names = _enum(export, "ENUM_DIAGNOSTIC_SOURCE_TYPE")
        cols = [
            "timestamp",
            "severity" if table.has("severity") else "NULL",
            "source" if table.has("source") else "NULL",
            "text",
            "globalPid" if table.has("globalPid") else "NULL",
        ]
        select = ", ".join(quote(c) if c != "NULL" else c for c in cols)
        unusable = 0
        try:
            fetched = export.conn.execute(f"SELECT {select} FROM {quote(table.name)} ORDER BY rowid").fetchall()
        except sqlite3.DatabaseError as exc:
            warnings.append(
                {"kind": "diagnostics_unreadable", "count": 1, "message": f"{table.name} cannot be read: {exc}"}
            )
            fetched = []
        for ts, sev, src, text, gpid in fetched:
            if type(ts) is not int or not isinstance(text, str):
                unusable += 1
                continue
            severity = severity_names.get(sev, "unknown") if type(sev) is int else "unknown"
            source = source_names.get(src) if type(src) is int else None
            category, library = classify(text, severity)
            rows.append((ts, severity, source, text, gpid if type(gpid) is int else None, category, library))
        if unusable:
            warnings.append(warned(Reason.of("diagnostics_unusable_rows", table=table.name), unusable))
    frame = pl.DataFrame(rows, schema=DIAGNOSTIC_SCHEMA, orient="row")
    capture, said = _capture(export, frame, table is not None)
    return frame, capture, [*warnings, *said]


def _capture(export: ExportFile, diagnostics: pl.DataFrame, has_table: bool) -> tuple[Capture, list[ReportWarning]]:
    """The capture's bounds: nsys's own start/stop messages, else ANALYSIS_DETAILS (one row per
    session: rows that disagree about the duration leave the stop unknown, and a warning says so)."""
    starts = diagnostics.filter(pl.col("category") == "capture_started")["timestamp_ns"]
    stops = diagnostics.filter(pl.col("category") == "capture_stopped")["timestamp_ns"]
    start_ns = int(starts.min()) if starts.len() else None  # type: ignore[arg-type]
    stop_ns = int(stops.max()) if stops.len() else None  # type: ignore[arg-type]
    start_from = "DIAGNOSTIC_EVENT" if start_ns is not None else None
    stop_from = "DIAGNOSTIC_EVENT" if stop_ns is not None else None
    said: list[ReportWarning] = []
    if stop_ns is None:
        details = export.table("ANALYSIS_DETAILS")
        if details is not None and details.has("duration"):
            try:
                rows = export.conn.execute(f"SELECT duration FROM {quote(details.name)}").fetchall()
            except sqlite3.DatabaseError:
                rows = []
            durations = sorted({int(r[0]) for r in rows if type(r[0]) is int and r[0] >= 0})
            if len(durations) > 1:
                said.append(warned(
                    Reason.of("capture_duration_disagrees", name=details.name, rows=len(rows), durations=durations),
                    len(rows), kind="conflicting_rows",
                ))
            elif durations:
                stop_ns, stop_from = durations[0], "ANALYSIS_DETAILS"
                if start_ns is None:
                    start_ns, start_from = 0, "ANALYSIS_DETAILS"
    return Capture(start_ns, stop_ns, start_from, stop_from, has_table), said
