"""The reports outlined whole: which sections each one shows, in its order, and the lines of its own
around them (built once, laid out by the terminal and Markdown back-ends alike).

- the heads a command prints first: ``analyze``'s input, ``compare``'s inputs, where a sealed report
  was written, what ``verify`` checked (:class:`~nsysaudit.render.outline.Head`);
- ``analyze --details``' sections (:func:`details`) and a comparison's (:func:`comparison_details`);
- report.md's title and the sections after its answer (:func:`analysis_report`,
  :func:`comparison_report`): the input and the seal, the options, each arm of a comparison with its
  library calls of interest and its handoff snapshot.

The sections themselves are the builders' (:mod:`~nsysaudit.render.details_outline`,
:mod:`~nsysaudit.render.memory_outline`, :mod:`~nsysaudit.render.comparison_outline`,
:mod:`~nsysaudit.render.outline`); the words are :mod:`nsysaudit.words`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from nsysaudit import words
from nsysaudit.read.inputs import Input
from nsysaudit.render import details_outline
from nsysaudit.render.comparison_outline import differences_sections, not_established_section
from nsysaudit.render.memory_outline import memory_section
from nsysaudit.render.outline import (
    Cell,
    Column,
    Entry,
    Head,
    Phrase,
    Section,
    TableOutline,
    Value,
    allocator_section,
    ident,
    number,
    scalar,
)
from nsysaudit.reports.documents import (
    AnalysisDocument,
    ArmInput,
    ArmLibraryCall,
    ComparisonArm,
    ComparisonDocument,
    Handoff,
    SealedAnalysisDocument,
)
from nsysaudit.reports.ranks import device_lines
from nsysaudit.reports.statements import censored_reasons_words


def short_hash(sha256: str | None) -> str:
    """A digest as a person reads it: its first 12 hex digits (the whole one is in --json and the seal)."""
    return "unknown" if sha256 is None else f"{sha256[:12]}…"


def _own(template: str, **said: str) -> str:
    """``template`` with some of its fields filled by our own words (not data: the back-end keeps them)."""
    for name, text in said.items():
        template = template.replace(f"{{{name}}}", text)
    return template


# --- the heads -------------------------------------------------------------------------------------


def input_head(d: AnalysisDocument, command: str = "analyze") -> Head:
    """The input analyzed: its path, kind, digest, nsys and schema versions; how this install read it
    (not in a sealed report: see metadata.json); a report's export."""
    inp = d["input"]
    lines: list[tuple[Phrase, ...]] = [(Phrase(words.INPUT_HEAD, "word", values={
        "kind": inp["kind"], "sha256": short_hash(inp["sha256"]), "nsys": inp["nsys_version"],
        "schema": inp["schema_version"]}),)]
    if "engine" in inp:
        engine = [Phrase(words.ENGINE_LINE, values={"engine": inp["engine"], "sqlite": inp["sqlite_version"]})]
        why = inp["native_unavailable"]
        if why and inp["engine"] != "native":  # its first words; the rest in the JSON
            engine.append(Phrase(words.NATIVE_UNAVAILABLE, values={"why": why.split(" (")[0]}, severity="warning"))
        lines.append(tuple(engine))
    if inp["kind"] == "nsys-rep":
        exp = inp["export"]
        lines.append((Phrase(words.EXPORT_LINE, values={"sha256": short_hash(exp["sha256"]),
                                                        "hit": words.CACHE_HIT[bool(exp["cache_hit"])]}),))
    return Head(words.HEAD_TITLE.format(command=command), Phrase(inp["path"], "phrase"), tuple(lines))


def comparison(doc: ComparisonDocument | SealedAnalysisDocument) -> ComparisonDocument:
    """``doc`` if it is a comparison (a sealed folder's document is either kind: another is refused)."""
    if doc["kind"] != "comparison":
        raise TypeError(f"a comparison document is rendered here, not a document of kind {doc['kind']!r}")
    return doc


def comparison_head(doc: ComparisonDocument) -> Head:
    """The comparison's inputs: each one's role, name, digest and size."""
    return Head(words.HEAD_TITLE.format(command="compare"), None, tuple(
        (Phrase(words.COMPARED_INPUT, "name", values={"role": i["role"], "name": i["name"],
                                                      "sha256": short_hash(i["sha256"]),
                                                      "size": f"{i['size_bytes']:,}"}),)
        for i in doc["inputs"]))


def sealed_head(directory: str, files: Sequence[str]) -> Head:
    """Where a sealed report was written, and what it holds (the seal itself is printed last)."""
    lines = [(Phrase(", ".join(files)),)]
    if "report.html" in files:
        html = f"{directory.rstrip('/')}/report.html"
        lines.append((Phrase(words.SEALED_FULL_REPORT, "path", values={"html": html}),))
    return Head(words.SEALED_TITLE, Phrase(directory, "path"), tuple(lines))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def verified_head(directory: str, files: Sequence[str], inputs: Sequence[Mapping[str, object]], rerun: bool,
                  *, full: bool = False) -> Head:
    """What ``nsysaudit verify`` checked (it only returns when every check passed); digests short unless
    ``full``. The inputs' names and roles come from metadata.json: a forged one is data too."""
    lines = [(Phrase(words.verified_files(len(files))),)]
    for i in inputs:
        digest = str(i["sha256"]) if full else short_hash(str(i["sha256"]))
        lines.append((Phrase(words.VERIFIED_INPUT, "path", values={
            "path": _text(i["path"]), "role": _text(i["role"]), "name": _text(i["name"]), "sha256": digest,
            "size": f"{i['size_bytes']:,}"}),))
    if rerun:
        lines.append((Phrase(words.VERIFIED_RERUN),))
    return Head(words.VERIFIED_TITLE, Phrase(directory, "path"), tuple(lines), passed=True)


# --- the sections of analyze --details and of compare --details ---------------------------------------


def _warnings(d: AnalysisDocument | SealedAnalysisDocument | ComparisonArm) -> tuple[Section, ...]:
    return (details_outline.warnings_section(d["warnings"]),) if d["warnings"] else ()


def warnings(d: AnalysisDocument) -> tuple[Section, ...]:
    """The warnings' section, if there is any warning (shown under the answer without --details too)."""
    return _warnings(d)


def _allocator(d: AnalysisDocument | SealedAnalysisDocument | ComparisonArm) -> tuple[Section, ...]:
    return (allocator_section(d["allocator"]),) if "allocator" in d else ()


def _devices(d: AnalysisDocument | SealedAnalysisDocument) -> tuple[Section, ...]:
    lines = device_lines(d)  # several devices, or a rank known: which process ran where, with its rank
    return (details_outline.devices_section(lines),) if lines else ()


def _alignment(d: AnalysisDocument | SealedAnalysisDocument) -> tuple[Section, ...]:
    if "alignment" not in d:
        return ()
    tel = d["telemetry"]
    said = details_outline.telemetry_file(tel["path"], tel["sha256"], tel["events"], tel["bad_lines"])
    return (details_outline.alignment_section(d["alignment"], said, tel["timeline"]),)


def details(d: AnalysisDocument) -> tuple[Section, ...]:
    """``analyze --details``: every section of the document, in the terminal's order."""
    return (details_outline.verdict_section(d["verdict"], d["verdict_reasons"]),
            details_outline.capture_section(d["coverage"]), *_alignment(d),
            details_outline.census_section(d["census"]),
            details_outline.findings_section(d["findings"], d["memory"]),
            details_outline.failed_calls_section(d["failed_calls"]), memory_section(d["memory"]),
            details_outline.stalls_section(d["stalls"]), *_allocator(d), *_devices(d),
            details_outline.library_calls_section(d["library_calls"]),
            details_outline.coverage_section(d["coverage"]), *_warnings(d))


def _differences(doc: ComparisonDocument) -> Section:
    return Section(words.DIFFERENCES_TITLE, parts=tuple(differences_sections(doc["differences"])))


def comparison_details(doc: ComparisonDocument) -> tuple[Section, ...]:
    """``compare --details``: the differences, then what the comparison does not establish."""
    return _differences(doc), not_established_section(doc["not_established"])


# --- report.md --------------------------------------------------------------------------------------


def _input_line(name: str, inp: Input | ArmInput) -> Phrase:
    """The input's line: its name, kind, size and digest, and the nsys and schema versions."""
    return Phrase(words.INPUT_LINE, "name", values={
        "name": name, "kind": inp["kind"], "size": number(inp["size_bytes"]), "sha256": inp["sha256"],
        "nsys": inp["nsys_version"], "schema": inp["schema_version"]})


def _options(doc: SealedAnalysisDocument | ComparisonDocument) -> tuple[Phrase, ...]:
    """The options that changed the analysis (``options`` of a sealed document; absent otherwise)."""
    if "options" not in doc or not doc["options"]:
        return ()
    options = doc["options"]
    template = words.OPTIONS
    values: dict[str, Value] = {"domains": tuple(options["library_domains"]),
                                "max_pairs": number(options["max_pairs"])}
    tel = options["telemetry"]
    if tel:
        template += _own(words.OPTIONS_TELEMETRY, lenient=words.LENIENT if tel["lenient"] else "",
                         **({} if tel["anchors"] else {"anchors": words.DEFAULT_ANCHORS}))
        clocks = tuple(Phrase("{kind}={name}", "name", values={"kind": kind, "name": name})
                       for kind, name in tel["clock"])
        values |= {"key": tel["event_key"], "clocks": clocks,
                   "anchors": tuple(tel["anchors"]), "tolerance": number(tel["tolerance_ns"])}
    return (Phrase(template, "name", values=values),)


def _input(doc: SealedAnalysisDocument) -> Section:
    """The input and what the seal pins."""
    inp = doc["input"]
    return Section(words.INPUT_TITLE, lead=Phrase(words.SEAL_SENTENCE, values={}),
                   notes=(_input_line(inp["path"], inp), *_options(doc)))


def _inputs(doc: ComparisonDocument) -> Section:
    """A comparison's inputs in a table, what the seal pins, the options."""
    columns = tuple(Column((c,)) for c in ("role", "file", "kind", "bytes", "sha256"))
    rows = tuple((Cell(i["role"]), Cell(i["name"]), Cell(i["kind"]), Cell(number(i["size_bytes"])),
                  Cell(i["sha256"], digest=True)) for i in doc["inputs"])
    return Section(words.INPUTS_TITLE, lead=Phrase(words.SEAL_SENTENCE, values={}),
                   tables=(TableOutline(None, columns, rows),), notes=_options(doc))


def analysis_report(doc: SealedAnalysisDocument) -> tuple[Phrase, tuple[Section, ...]]:
    """report.md of a sealed arm: its title, and what follows its answer (the input, the verdict's
    reasons, every section of the document), in report.md's order."""
    title = Phrase(words.ANALYSIS_MD_TITLE, "name", values={"path": doc["input"]["path"]})
    return title, (
        _input(doc), details_outline.verdict_section(doc["verdict"], doc["verdict_reasons"]),
        details_outline.census_section(doc["census"]),
        details_outline.findings_section(doc["findings"], doc["memory"]),
        details_outline.failed_calls_section(doc["failed_calls"]),
        details_outline.library_calls_section(doc["library_calls"]),
        details_outline.capture_section(doc["coverage"]), details_outline.coverage_section(doc["coverage"]),
        memory_section(doc["memory"]), details_outline.stalls_section(doc["stalls"]), *_allocator(doc),
        *_devices(doc), *_alignment(doc), *_warnings(doc))


def comparison_report(doc: ComparisonDocument) -> tuple[Phrase, tuple[Section, ...]]:
    """report.md of a comparison: its title, and what follows its answer (the inputs, what it does not
    establish, the differences, the arms)."""
    return Phrase(words.COMPARISON_MD_TITLE, values={}), (
        _inputs(doc), not_established_section(doc["not_established"]), _differences(doc),
        *(_arm(name, doc["arms"][name]) for name in ("observe", "release")))


def _kv(values: Mapping[str, int | float]) -> Value:
    """A snapshot's values, by name: ``name value``, ", " between them."""
    return tuple(Phrase("{name} {value}", "name", values={"name": k, "value": scalar(v)})
                 for k, v in sorted(values.items())) or "none"


def _handoff(handoff: Handoff | None) -> Phrase:
    """The arm's telemetry handoff snapshot: which line, where on the trace clock, its values."""
    if not handoff:
        return Phrase(words.NO_HANDOFF_SNAPSHOT)
    at = words.NOT_ON_TRACE_CLOCK if handoff["trace_ns"] is None else words.HANDOFF_AT
    return Phrase(_own(words.HANDOFF_SNAPSHOT, at=at), "name", values={
        "line": str(handoff["line"]), "trace_ns": number(handoff["trace_ns"]), "via": handoff["via"],
        "chosen_by": handoff["chosen_by"], "lines": str(handoff["handoff_lines"]), "values": _kv(handoff["values"])})


def _unknown(value: str | None) -> str:
    return "unknown" if value is None else value


def _library_call(lc: ArmLibraryCall) -> Section:
    """An arm's library call of interest: where and when, its nested calls, the allocations and failed
    ones in a table, the nested calls by API, where it falls among the telemetry lines."""
    a, reason = lc["allocations"], lc["censored_reason"]  # a censored call has its reason (analysis.coverage)
    role = "main" if lc["thread_role"] == "main" else "non-main"
    title = Phrase(_own(words.LIBRARY_CALL_HEADING, role=role), "name", values={
        "api": lc["api"], "pid": ident(lc["pid"]), "tid": ident(lc["tid"]), "name": lc["thread_name"]})
    # A comparison's library call carries no recorded end: an end the capture's stop clamped is unknown.
    span, values = words.ARM_CALL_SPAN, {"source": lc["source"], "start": number(lc["start_ns"]),
                                             "end": number(lc["end_ns"]), "coverage": lc["coverage"]}
    if lc["coverage"] == "censored" and reason is not None:
        span += words.CENSORED_TRACE_ENDS
        values |= {"why": censored_reasons_words([reason]), "last": number(lc["cuda_api_last_ns"])}
    unknown = words.UNKNOWN_SIZES.format(n=a["bytes_unknown"]) if a["bytes_unknown"] else ""
    entries = (Entry((Phrase(span, "name", values=dict(values)),)),
               Entry((Phrase(words.NESTED_CALLS_LINE.format(calls=number(lc["nested_calls"]),
                                                            failed=number(lc["nested_failed"]))),)),
               Entry((Phrase(words.NESTED_ALLOCATIONS_LINE.format(
                   calls=number(a["calls"]), succeeded=number(a["succeeded"]), bytes=number(a["bytes"]),
                   unknown=unknown, failed=number(a["failed"]))),)))
    calls = {(c["correlation_id"], c["start_ns"]): c for c in [*lc["allocation_calls"], *lc["failed_calls"]]}
    listed = sorted(calls.values(), key=lambda c: (c["start_ns"], c["correlation_id"] or 0))
    tables = [TableOutline(None, tuple(Column((c,)) for c in (
        "api", "return code", "name", "correlation id", "start ns", "end ns", "bytes")), tuple(
        (Cell(_unknown(c["api"])), Cell(str(c["return_code"])), Cell(_unknown(c["return_name"])),
         Cell(ident(c["correlation_id"])), Cell(number(c["start_ns"])), Cell(number(c["end_ns"])),
         Cell(number(c["bytes"]))) for c in listed))] if listed else []
    if lc["nested_by_api"]:
        tables.append(TableOutline(Phrase(words.NESTED_BY_API_TITLE), tuple(
            Column((c,)) for c in ("api", "return code", "name", "count", "bytes")), tuple(
            (Cell(_unknown(r["api"])), Cell(str(r["return_code"])), Cell(_unknown(r["return_name"])),
             Cell(number(r["count"])), Cell(number(r["bytes"]) if r["allocation"] else "n/a"))
            for r in lc["nested_by_api"])))
    straddling = (Phrase(words.STRADDLING_CALLS.format(n=len(lc["straddling"]))),) if lc["straddling"] else ()
    return Section(title, entries, tables=tuple(tables), remarks=straddling,
                   after=tuple(details_outline.position_entries(lc["telemetry"])) if lc["telemetry"] else ())


def _arm(name: str, arm: ComparisonArm) -> Section:
    """One arm of a comparison: its input, then its sections (its library calls of interest among them)."""
    tel = arm["telemetry_input"]
    said = Phrase(words.ARM_TELEMETRY_FILE.format(path=tel["name"], size=f"{tel['size_bytes']:,}",
                                                  sha256=tel["sha256"])) if tel else None
    alignment = details_outline.alignment_section(arm["alignment"], said)
    if tel:
        alignment = replace(alignment, notes=(*alignment.notes, _handoff(arm["handoff"])))
    calls = Section(words.LIBRARY_CALLS_OF_INTEREST_HEADING.format(shown=len(arm["library_calls"]),
                                                                   total=arm["library_calls_total"]),
                    lead=Phrase(words.SELECTION, "name", values={"selection": arm["library_calls_selection"]}),
                    parts=tuple(_library_call(lc) for lc in arm["library_calls"]))
    return Section(words.ARM_TITLE.format(arm=name), lead=_input_line(arm["input"]["name"], arm["input"]), parts=(
        details_outline.verdict_section(arm["verdict"], arm["verdict_reasons"]),
        details_outline.census_section(arm["census"]),
        details_outline.findings_section(arm["findings"], arm["memory"]),
        details_outline.failed_calls_section(arm["failed_calls"]), calls,
        details_outline.capture_section(arm["coverage"]), details_outline.coverage_section(arm["coverage"]),
        memory_section(arm["memory"]), details_outline.stalls_section(arm["stalls"]), *_allocator(arm), alignment,
        *_warnings(arm)))
