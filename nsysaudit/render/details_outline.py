"""The sections of the details outlined once (``analyze --details``, report.md, each arm of a
comparison's report.md): the census, the failed calls no finding explains, the capture, the coverage
by trace source, the devices and ranks, the warnings. Worded from :mod:`nsysaudit.words`; laid out by
the terminal and Markdown back-ends alike (:func:`nsysaudit.render.terminal.section_parts`,
:func:`nsysaudit.render.markdown.section_lines`)."""

from __future__ import annotations

from collections.abc import Sequence

from nsysaudit import words
from nsysaudit.core.errors import ReportWarning
from nsysaudit.render.outline import Cell, Column, Entry, Phrase, Section, TableOutline
from nsysaudit.reports.documents import ArmCensus, Census, Coverage, FailedCalls
from nsysaudit.reports.statements import CLASSIFICATION_WORDS, censored_reasons_words


def _n(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def _id(value: int | None) -> str:
    """A pid, tid or correlation id: never with thousands separators."""
    return "unknown" if value is None else str(value)


def _span(start: int | None, end: int | None, recorded_end: int | None = None) -> str:
    """``[start .. end] ns``; an end the capture's stop clamped is unknown, with the stop."""
    if end is None and recorded_end is not None:
        shown = words.END_AT_STOP.format(recorded=f"{recorded_end:,}")
    else:
        shown = _n(end)
    return f"[{_n(start)} .. {shown}] ns"


def census_section(census: Census | ArmCensus, level_title: str = words.CENSUS_TITLE) -> Section:
    """How many CUDA API calls, how many returned non-zero, and each (api, return) pair that did."""
    lead = Phrase(words.CENSUS_LEAD.format(calls=_n(census["cuda_api_calls"]),
                                           nonzero=_n(census["nonzero_returns"])))
    columns = (Column(("api",)), Column(("return", "code"), numeric=True), Column(("name",)),
               Column(("count",), numeric=True), Column(("meaning",)))
    rows = tuple(
        (Cell(r["api"] or "unknown", data=True), Cell(str(r["return_code"])),
         Cell(r["return_name"] or "unknown", data=True), Cell(_n(r["count"])),
         Cell(CLASSIFICATION_WORDS.get(r["classification"] or "", "unknown")))
        for r in census["by_return"])
    return Section(level_title, lead=lead, tables=(TableOutline(None, columns, rows),) if rows else ())


def failed_calls_section(groups: Sequence[FailedCalls]) -> Section:
    """The failed calls no finding explains, grouped by call, return, thread and NVTX range."""
    total = sum(g["count"] for g in groups)
    if not groups:
        return Section(words.FAILED_CALLS_TITLE, lead=Phrase(words.FAILED_CALLS_NONE), quiet=True)
    entries = []
    for g in groups:
        where = (words.FAILED_IN_RANGE.format(range=g["nvtx_range"]) if g["nvtx_range"] is not None
                 else words.FAILED_IN_NO_RANGE)
        text = words.FAILED_GROUP.format(
            count=_n(g["count"]), api=g["api"] or "unknown", code=_id(g["return_code"]),
            name=g["return_name"] or "unknown", oom=words.OUT_OF_MEMORY if g["out_of_memory"] else "",
            pid=_id(g["pid"]), tid=_id(g["tid"]), thread=g["thread_name"] or words.NAME_UNKNOWN, where=where,
            span=_span(g["first_ns"], g["last_ns"]),
            examples=", ".join(str(c) for c in g["example_correlation_ids"]) or "none")
        notes = [n for n, on in ((words.STRADDLES, g["straddles_library_call"]),
                                 (words.UNEXAMINED, g["library_call_unexamined"])) if on]
        entries.append(Entry((Phrase(text), *(Phrase(n, "phrase") for n in notes)),
                             severity="warning" if notes else None))
    lead = Phrase(words.FAILED_CALLS_LEAD.format(total=f"{total:,}", groups=len(groups)))
    return Section(words.FAILED_CALLS_TITLE, tuple(entries), lead=lead)


def capture_section(coverage: Coverage) -> Section:
    """The capture's bounds, nsys's own diagnostics, and each library's source of calls."""
    cap = coverage["capture"]
    if cap["stop_ns"] is None:
        lead = Phrase(words.CAPTURE_UNKNOWN)
    else:
        lead = Phrase(words.CAPTURE_BOUNDS.format(start=_n(cap["start_ns"]), stop=_n(cap["stop_ns"]),
                                                  source=cap["stop_from"] or "unknown"))
    entries = [] if cap["diagnostics_table"] else [Entry((Phrase(words.NO_DIAGNOSTICS),), severity="warning")]
    for d in coverage["nsys_diagnostics"]:
        who = words.DIAGNOSTIC_PID.format(pid=d["pid"]) if d["pid"] is not None else ""
        entries.append(Entry((Phrase(words.DIAGNOSTIC.format(
            severity=d["severity"], at=_n(d["timestamp_ns"]), who=who, category=d["category"], text=d["text"])),)))
    for src in coverage["library_sources"]:
        by_api = ", ".join(f"{n:,} {api}" for api, n in src.get("calls_by_api", {}).items())  # NCCL's calls
        text = words.LIBRARY_SOURCE.format(library=src["library"], status=src["status"], calls=_n(src["calls"]),
                                           by_api=f": {by_api}" if by_api else "")
        said = [Phrase(text)]
        if "evidence" in src:
            said.append(Phrase(src["evidence"], "phrase"))
        if src["reason"]:
            said.append(Phrase(src["reason"], "phrase"))
        helpers = tuple(Entry((Phrase(words.HELPER_THREAD.format(
            tid=_id(h["tid"]), calls=_n(h["calls"]), api=h["api"] or words.UNNAMED_CALL,
            calling=_id(h["calling_tid"]))),)) for h in src.get("helper_threads", []))
        entries.append(Entry(tuple(said), severity=None if src["status"] == "traced" else "warning", under=helpers))
    return Section(words.CAPTURE_TITLE, tuple(entries), lead=lead)


def coverage_section(coverage: Coverage) -> Section:
    """Each trace source's rows per process and their span, the calls the trace censors."""
    columns = (Column(("source",)), Column(("pid",), numeric=True), Column(("first ns",), numeric=True),
               Column(("last ns",), numeric=True), Column(("rows",), numeric=True))
    rows = tuple((Cell(s["source"]), Cell(_id(s["pid"])), Cell(_n(s["first_ns"])),
                  Cell(_n(s["last_ns"])), Cell(_n(s["rows"])))
                 for s in coverage["by_source"])
    entries = [] if coverage["cuda_api_trace"] else [Entry((Phrase(words.NO_CUDA_API_TRACE),), severity="warning")]
    for c in coverage["censored"]:
        reasons = c["reasons"] or [c["reason"]]
        text = words.CENSORED_CALL.format(api=c["api"], pid=_id(c["pid"]), tid=_id(c["tid"]),
                                          span=_span(c["start_ns"], c["end_ns"], c["recorded_end_ns"]),
                                          why=censored_reasons_words(reasons), codes=", ".join(reasons))
        said = [Phrase(text)]
        last = c["cuda_api_last_ns"]
        if last is not None and c["reason"] == "cuda_api_trace_ends_inside" and c["end_ns"] is not None:
            said.append(Phrase(words.TRACE_ENDS.format(last=f"{last:,}", before=f"{c['end_ns'] - last:,}"), "phrase"))
        entries.append(Entry(tuple(said), label=words.CENSORED, severity="warning"))
    lead = None if rows else Phrase(words.NO_TRACE_ROWS)
    return Section(words.COVERAGE_TITLE, lead=lead, tables=(TableOutline(None, columns, rows),) if rows else (),
                   after=tuple(entries))


def devices_section(lines: Sequence[str]) -> Section:
    """Which process ran on which device, with its rank (:func:`nsysaudit.reports.ranks.device_lines`)."""
    return Section(words.DEVICES_TITLE, tuple(Entry((Phrase(line),)) for line in lines))


def warnings_section(warnings: Sequence[ReportWarning]) -> Section:
    """The analysis' warnings: each kind, how many, and its message."""
    return Section(words.WARNINGS_TITLE, tuple(
        Entry((Phrase(w["message"]),), label=f"{w['kind']} ({w['count']:,})", severity="warning") for w in warnings))
