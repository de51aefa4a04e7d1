"""The sections of the details outlined once (``analyze --details``, report.md, each arm of a
comparison's report.md): the census, the failed calls no finding explains, the capture, the coverage
by trace source, the devices and ranks, the warnings. Worded from :mod:`nsysaudit.words`; laid out by
the terminal and Markdown back-ends alike (:func:`nsysaudit.render.terminal.section_parts`,
:func:`nsysaudit.render.markdown.section_lines`)."""

from __future__ import annotations

from collections.abc import Sequence

from nsysaudit import words
from nsysaudit.core.codes import display_name
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.text import byte_size
from nsysaudit.render.outline import FAILURE_KINDS, Cell, Column, Entry, Phrase, Section, TableOutline
from nsysaudit.render.outline import ident as _id
from nsysaudit.render.outline import number as _n
from nsysaudit.reports.analysis import ranked_library_calls
from nsysaudit.reports.documents import (
    AlignmentSection,
    ArmCensus,
    Census,
    Coverage,
    FailedCalls,
    Finding,
    LibraryCall,
    Memory,
    Position,
    TimelineLine,
)
from nsysaudit.reports.stalls import Stalls, glance_words, kind_words, ms
from nsysaudit.reports.statements import CLASSIFICATION_WORDS, censored_reasons_words

MAX_LIBRARY_CALLS = 40


def _api(display: str | None, api: str | None) -> str:
    """A CUDA API call's name as the answer says it (``cudaMalloc``, not nsys's ``cudaMalloc_v3020``)."""
    return display or (display_name(api) if api else "unknown")


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
        (Cell(_api(r["display_api"], r["api"]), data=True), Cell(str(r["return_code"])),
         Cell(r["return_name"] or "unknown", data=True), Cell(_n(r["count"])),
         Cell("unknown" if r["classification"] is None else CLASSIFICATION_WORDS[r["classification"]]))
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
            count=_n(g["count"]), api=_api(g["display_api"], g["api"]), code=_id(g["return_code"]),
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
        by_api = ", ".join(f"{n:,} {api}" for api, n in src["calls_by_api"].items()) \
            if "calls_by_api" in src else ""  # NCCL's calls
        text = words.LIBRARY_SOURCE.format(library=src["library"], status=src["status"], calls=_n(src["calls"]),
                                           by_api=f": {by_api}" if by_api else "")
        said = [Phrase(text)]
        if "evidence" in src:
            said.append(Phrase(src["evidence"], "phrase"))
        if src["reason"]:
            said.append(Phrase(src["reason"], "phrase"))
        helpers = tuple(Entry((Phrase(words.HELPER_THREAD.format(
            tid=_id(h["tid"]), calls=_n(h["calls"]), api=h["api"] or words.UNNAMED_CALL,
            calling=_id(h["calling_tid"]))),)) for h in src["helper_threads"]) if "helper_threads" in src else ()
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


# --- findings, library calls, and where a call falls among the telemetry lines -------------------


def position_entries(pos: Position) -> list[Entry]:
    """A call's place among the telemetry lines (``findings[].telemetry``): where it falls, the method
    and whether the clock alignment is checked, and the line in force with its values."""
    said = []
    if pos["after"] is not None:
        said.append(words.POSITION_AFTER.format(ms=f"{pos['after']['ms']:.3f}", event=pos["after"]["event"],
                                                line=pos["after"]["line"]))
    if pos["before"] is not None:
        said.append(words.POSITION_BEFORE.format(ms=f"{pos['before']['ms']:.3f}", event=pos["before"]["event"],
                                                 line=pos["before"]["line"]))
    text = ", ".join(said) or words.POSITION_NONE
    text += "".join(words.POSITION_DURING.format(event=d["event"], line=d["line"], ms=f"{d['ms_after_start']:.3f}")
                    for d in pos["during"])
    if pos["method"] is not None:
        text += words.POSITION_METHOD.format(method=pos["method"],
                                             checked=words.CLOCK_CHECKED[pos["verified"]])
    entries = [Entry((Phrase(text),), label=words.TELEMETRY, severity=None if pos["verified"] else "warning")]
    force = pos["in_force"]
    if force is not None:
        values = ", ".join(f"{k}={v:,}" for k, v in force["values"].items())
        entries.append(Entry((Phrase(words.IN_FORCE.format(event=force["event"], line=force["line"],
                                                           ms=f"{force['ms']:.3f}", values=values)),),
                             label=words.IN_FORCE_LABEL))
    return entries


def _finding_under(f: Finding, holder: str | None) -> list[Entry]:
    """What a finding's line says under it: its thread and span, the call it is inside (and what that
    allocated before), the stream capture it follows, its telemetry position, who held the memory."""
    where = words.FINDING_WHERE.format(pid=_id(f["pid"]), tid=_id(f["tid"]), thread=f["thread_name"] or
                                       words.NAME_UNKNOWN, span=_span(f["start_ns"], f["end_ns"]))
    if f["requested_bytes"] is not None or f["kind"].endswith("alloc_failure"):
        where += words.REQUESTED.format(bytes=_n(f["requested_bytes"]))
    under = [Entry((Phrase(where),))]
    enc = f["enclosing"]
    if enc is not None:
        under.append(Entry((Phrase(words.INSIDE.format(
            api=enc["api"], span=_span(enc["start_ns"], enc["end_ns"], enc["recorded_end_ns"]),
            source=enc["source"], coverage=enc["coverage"])),)))
        before = enc["allocations_before"]
        if before is not None:
            each = " + ".join(_n(b) for b in before["bytes_each"])
            under.append(Entry((Phrase(words.ALLOCATIONS_BEFORE.format(
                count=before["count"], each=f": {each} B" if before["count"] else "")),)))
    cap = f["stream_capture"]
    if cap is not None:
        records = ", ".join(f"{r['start_ns']:,}" for r in cap["event_records"][:8])
        more = words.MORE_RECORDS.format(n=cap["event_records_count"] - 8) if cap["event_records_count"] > 8 else ""
        gap = cap["ns_from_capture_end"]
        since = words.UNKNOWN_TIME if gap is None else f"{gap / 1e6:.3f} ms"
        under.append(Entry((Phrase(words.AFTER_CAPTURE.format(
            pid=_id(cap["pid"]), tid=_id(cap["tid"]), thread=cap["thread_name"] or words.NAME_UNKNOWN,
            begin=cap["begin"]["api"], start=f"{cap['begin']['start_ns']:,}", end=cap["end"]["api"],
            stop=f"{cap['end']['end_ns']:,}")),)))
        records_said = words.CAPTURE_RECORDS.format(count=cap["event_records_count"], at=records, more=more,
                                                    since=since)
        if cap["regions_with_records_before"] > 1:
            records_said += words.CAPTURES_BEFORE.format(n=cap["regions_with_records_before"])
        under.append(Entry((Phrase(records_said),)))
    if "telemetry" in f:
        under += position_entries(f["telemetry"])
    if holder is not None:
        under.append(Entry((Phrase(holder),), label=words.HELD, strong=True))
    return under


def findings_section(findings: Sequence[Finding], memory: Memory, title: str = words.FINDINGS_TITLE) -> Section:
    """Each finding: the call that failed and its return, then what :func:`_finding_under` says under it."""
    if not findings:
        return Section(title, lead=Phrase(words.NO_FINDINGS), quiet=True)
    holders: list[str | None] = [None] * len(findings)  # who held the memory at each finding
    for p in memory["at"]:
        if p["point"] == "finding" and "finding" in p:
            holders[p["finding"]] = p["holder"]
    entries = tuple(
        Entry((Phrase(words.FINDING.format(
            api=_api(f["display_api"], f["api"]), code=f["return_code"], name=f["return_name"] or words.UNKNOWN_CODE,
            oom=words.OUT_OF_MEMORY if f["out_of_memory"] else "", correlation=_id(f["correlation_id"]))),),
              label=f["kind"], severity="failure" if f["kind"] in FAILURE_KINDS else "warning",
              under=tuple(_finding_under(f, holders[i])))
        for i, f in enumerate(findings))
    return Section(title, entries, lead=Phrase(words.FINDINGS_LEAD.format(n=_n(len(findings)))))


def library_calls_section(calls: Sequence[LibraryCall]) -> Section:
    """The library calls, censored and failing first, at most :data:`MAX_LIBRARY_CALLS` (all in the JSON)."""
    if not calls:
        return Section(words.LIBRARY_CALLS_TITLE, lead=Phrase(words.NO_LIBRARY_CALLS), quiet=True)
    lead = words.LIBRARY_CALLS_LEAD.format(n=_n(len(calls))) + (words.LIBRARY_CALLS_SHOWN.format(n=MAX_LIBRARY_CALLS)
                             if len(calls) > MAX_LIBRARY_CALLS else "")
    return Section(words.LIBRARY_CALLS_TITLE, tuple(_library_call(lc) for lc in
                                                    ranked_library_calls(calls)[:MAX_LIBRARY_CALLS]), lead=Phrase(lead))


def _library_call(lc: LibraryCall) -> Entry:
    duration = words.DURATION_UNKNOWN if lc["duration_ns"] is None else f"{lc['duration_ns'] / 1e6:.3f} ms"
    why = ", ".join(lc["censored_reasons"] or [lc["censored_reason"]]) if lc["censored_reason"] else \
        lc["coverage_evidence"]
    span = words.LIBRARY_CALL_SPAN.format(span=_span(lc["start_ns"], lc["end_ns"], lc["recorded_end_ns"]),
                                          duration=duration, coverage=lc["coverage"],
                                          why=f" ({why})" if why else "")
    allocated = "unknown" if lc["allocated_bytes"] is None else byte_size(lc["allocated_bytes"])
    if lc["allocated_bytes"] is None:
        unknown = lc["allocations_size_unknown"]
        allocated += words.ALLOCATED_TRACED.format(bytes=f"{lc['allocated_bytes_traced']:,}",
                                                   unknown=words.SIZE_UNKNOWN.format(n=unknown) if unknown else "")
    nested = words.LIBRARY_CALL_NESTED.format(nested=len(lc["children"]), failed=lc["failed_children"],
                                              straddling=len(lc["straddling"]), allocated=allocated)
    under = [Entry((Phrase(span),), severity="warning" if lc["coverage"] == "censored" else None),
             Entry((Phrase(nested),))]
    if "telemetry" in lc:
        under += position_entries(lc["telemetry"])
    head = words.LIBRARY_CALL.format(api=lc["api"], source=lc["source"], pid=_id(lc["pid"]), tid=_id(lc["tid"]),
                                     thread=lc["thread_name"] or words.NAME_UNKNOWN)
    return Entry((Phrase(head),), under=tuple(under))


# --- the verdict, the telemetry and its clock alignment ---------------------------------------------


def verdict_section(verdict: str, reasons: Sequence[str]) -> Section:
    """The verdict and every reason the analysis gives for it (they quote trace text)."""
    return Section(words.VERDICT_TITLE, tuple(Entry((Phrase(r),)) for r in reasons), lead=Phrase(verdict),
                   verdict=verdict)


def _ms(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 1_000_000:.3f} ms"


def alignment_section(a: AlignmentSection | None, telemetry: Phrase | None,
                      timeline: Sequence[TimelineLine] = ()) -> Section:
    """How the telemetry was put on the trace clock: checked or not and by which mapping, the telemetry
    file (``telemetry``: None when none was given), each check, the anchors, the notes, the timeline."""
    if telemetry is None or a is None:
        return Section(words.ALIGNMENT_TITLE, lead=Phrase(words.NO_TELEMETRY), quiet=True)
    lead = words.CHECKED[a["checked"]]
    if a["method"] is not None:
        lead += words.ALIGNMENT_METHOD.format(method=a["method"], field=a["clock_field"] or "unknown",
                                              offset=_n(a["offset_ns"]))
    entries = [Entry((telemetry,))]
    for c in a["checks"]:
        entries.append(Entry((Phrase(words.ALIGNMENT_CHECK.format(check=c["check"], detail=c["detail"])),),
                             label=words.CHECK_MARK[c["passed"]],
                             severity={True: None, False: "failure", None: "warning"}[c["passed"]]))
    anchors = a["anchors"]
    entries += [Entry((Phrase(words.ANCHOR.format(
        event=p["event"], line=p["line"], nvtx=p["nvtx"], edge=p["edge"], pid=p["pid"], tid=p["tid"],
        residual=_ms(p["residual_ns"]), utc=_ms(p["utc_residual_ns"]))),)) for p in anchors["pairs"]]
    entries += [Entry((Phrase(words.NOT_AN_ANCHOR.format(event=sk["event"], lines=", ".join(map(str, sk["lines"])),
                                                         reason=sk["reason"])),)) for sk in anchors["skipped"]]
    entries += [Entry((Phrase(r),), label=words.REASON) for r in a["reasons"]]
    entries += [Entry((Phrase(n),), label=words.NOTE) for n in a["notes"]]
    columns = (Column(("line",), numeric=True), Column(("event",)), Column(("pid",)), Column(("tid",)),
               Column(("trace ns",), numeric=True), Column(("via",)), Column(("fields",)))
    rows = tuple((Cell(str(e["line"])), Cell(e["event"], data=True), Cell(_id(e["pid"])), Cell(_id(e["tid"])),
                  Cell(_n(e["trace_ns"])), Cell(e["via"] or "unknown", data=True),
                  Cell(", ".join(f"{k}={v}" for k, v in e["fields"].items()), data=True)) for e in timeline)
    tables = (TableOutline(Phrase(words.TIMELINE_TITLE), columns, rows),) if rows else ()
    return Section(words.ALIGNMENT_TITLE, tuple(entries), lead=Phrase(lead), tables=tables,
                   severity=None if a["checked"] else "warning")


def telemetry_file(path: str, sha256: str, events: int, bad_lines: int) -> Phrase:
    return Phrase(words.TELEMETRY_FILE.format(path=path, sha256=sha256, events=events, bad=bad_lines))


# --- the host stalls (the documents' ``stalls`` key, nsysaudit.reports.stalls) -----------------------

SHOWN_RANGES = 5
SHOWN_CALLS = 5


def _stall_sums(s: Stalls) -> list[str]:
    """The sums, in lines: the first one the section's lead."""
    lines = [glance_words(s).removeprefix("host stalls: ")]
    if not s["blocking_calls"]:
        return lines
    kinds = ", ".join(f"{kind_words(k['kind'], k['calls'])} ({ms(k['blocked_ns'])})" for k in s["by_kind"])
    lines.append(words.STALLS_BY_KIND.format(kinds=kinds))
    idle = (words.STALLS_IDLE.format(idle=ms(s["idle_ns"])) if s["idle_ns"]
            else "" if s["idle_ns"] is not None or not s["stalls"] else words.STALLS_IDLE_UNKNOWN)
    own = words.STALLS_OWN.format(own=ms(s["own_ns"])) if s["own_ns"] else ""
    lines.append(words.STALLS_WAITED.format(waited=ms(s["waited_ns"]), own=own, idle=idle))
    rows = ", ".join(f"{n:,} {kind}" for kind, n in s["work_rows"].items())
    if rows:
        lines.append(words.STALLS_ROWS.format(rows=rows, joined=f"{s['synchronization_rows']:,}"))
    return lines


def stalls_section(s: Stalls) -> Section:
    """The host stalls: their sums, each process's statement, the longest per NVTX range, the calls
    that blocked longest (the statements are the document's own, reports/stalls.py)."""
    first, *rest = _stall_sums(s)
    entries = [Entry((Phrase(line),)) for line in rest]
    if s["blocking_calls"]:
        entries += [Entry((Phrase(p["statement"]),)) for p in s["processes"]]
        if s["ranges"]:
            shown = s["ranges"][:SHOWN_RANGES]
            head = words.STALLS_RANGES.format(shown=len(shown), total=f"{s['ranges_total']:,}")
            entries.append(Entry((Phrase(head),), under=tuple(Entry((Phrase(r["statement"]),)) for r in shown)))
        calls = s["calls"][:SHOWN_CALLS]
        entries.append(Entry((Phrase(words.STALLS_CALLS.format(shown=len(calls), total=f"{s['calls_total']:,}",
                                                              listed=len(s["calls"]))),),
                             under=tuple(Entry((Phrase(c["statement"]), Phrase(words.STALL_SPAN.format(
                                 start=f"{c['start_ns']:,}", end=f"{c['end_ns']:,}"), "phrase"))) for c in calls)))
    return Section(words.STALLS_DETAILS_TITLE, tuple(entries), lead=Phrase(first))
