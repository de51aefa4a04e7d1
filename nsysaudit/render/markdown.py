"""``report.md``: the sealed report for people, written from the same document as ``report.json``.

Every value shown comes from the report document, so the two files state the same facts. Text
that comes from traces or telemetry (API names from StringIds, thread names, NVTX strings,
messages) is data, not Markdown: :func:`md` escapes it so it is shown literally, whatever it holds.
No wall-clock time and no path other than input basenames appears, so the same document always
gives the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nsysaudit import words
from nsysaudit.core.text import escape
from nsysaudit.render import details_outline as details
from nsysaudit.render import outline
from nsysaudit.render.comparison_outline import differences_sections, not_established_section
from nsysaudit.render.memory_outline import memory_section
from nsysaudit.render.outline import AnswerOutline, Cell, ComparisonAnswerOutline, Entry, Phrase, Section
from nsysaudit.reports.documents import (
    ArmLibraryCall,
    ComparisonArm,
    ComparisonDocument,
    Handoff,
    SealedAnalysisDocument,
    SealedOptions,
)
from nsysaudit.reports.ranks import device_lines
from nsysaudit.reports.statements import (
    censored_reasons_words,
)

MAX_TEXT = 200
# Characters that can start Markdown or HTML syntax anywhere in a line (CommonMark allows a
# backslash before any ASCII punctuation). Line-start syntax (#, -, +, 1.) cannot occur: data is
# never placed at the start of a line, and line breaks in data are shown as escapes.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~#])")


def md(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as literal Markdown text; ``None`` is ``unknown``; long text is shortened.

    >>> md("a|b *c* <img>")
    'a\\\\|b \\\\*c\\\\* \\\\<img\\\\>'
    >>> md(None)
    'unknown'
    """
    if value is None:
        return "unknown"
    s = str(value)
    if len(s) > limit:
        s = f"{s[: limit - 1]}… ({len(s)} chars)"
    # Controls, bidi, zero-width and tag characters become escapes (nsysaudit.core.text), whose
    # backslash is then escaped like any other: ``\n`` in the data reads ``\n`` in the viewer.
    return _SPECIAL.sub(r"\\\1", escape(s))


def num(value: int | float | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def ident(value: int | None) -> str:
    """A pid, tid or correlation id: an identifier, never written with thousands separators."""
    return "unknown" if value is None else str(value)


def _end(end: int | None, recorded: int | None) -> str:
    if end is None and recorded is not None:
        return words.END_RECORDED.format(recorded=num(recorded))
    return num(end)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A GFM table; cells must already be escaped with :func:`md`."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("")
    return out


def _bullets(items: Iterable[str]) -> list[str]:
    return [f"- {md(x, 10_000)}" for x in items]


SIZE = {"sentence": 10_000, "phrase": 1000}  # the room a phrase is given before it is shortened
MORE_IN = {"coverage": "see Coverage"}


def _phrases(phrases: Sequence[Phrase]) -> str:
    """Phrases said one after the other, ``; `` between them; each quotes trace text: escaped."""
    return "; ".join(md(p.text, SIZE[p.size]) for p in phrases)


def _entry(e: Entry) -> list[str]:
    """An entry as bullets: a numbered one (a finding) says its number and its label in bold, a
    labelled one its label; the entries under it follow as bullets of their own."""
    body = _phrases(e.phrases) + (f" ({MORE_IN[e.more_in]})" if e.more_in is not None else "")
    if e.number is not None:
        line = f"- finding {e.number}, **{md(e.label)}**: {body}"
    else:
        line = f"- {e.label}: {body}" if e.label is not None else f"- {body}"
    return [line, *(f"- {u.label}: {_phrases(u.phrases)}" for u in e.under)]


def _sentence(p: Phrase) -> str:
    """A phrase as a sentence of its own: its first letter in capitals, a full stop after it."""
    text = _phrases([p])
    return f"{text[:1].upper()}{text[1:]}."


def _entries(entries: Sequence[Entry], indent: str = "") -> list[str]:
    out = []
    for e in entries:
        label = f"{e.label}: " if e.label is not None else ""
        refer = f"; {md(words.REFER_MARKDOWN.format(arm=e.refer[0]))}" if e.refer is not None else ""
        out.append(f"{indent}- {label}{_phrases(e.phrases)}{refer}")
        out += _entries(e.under, indent + "  ")
    return out


def _cell(c: Cell) -> str:
    text = md(c.text, 120 if c.data else MAX_TEXT) + (f" {md(c.note)}" if c.note is not None else "")
    return f"**{text}**" if c.strong else text


def section_lines(section: Section, level: str = "##") -> list[str]:
    """A titled section of the report: its lead as a sentence, its entries as bullets, its tables (each
    under its title), the entries after them, its closing note."""
    out = [f"{level} {md(section.title)}", ""]
    if section.verdict is not None:
        out += [f"**{md(section.verdict)}**", ""]
    elif section.lead is not None:
        out += [_sentence(section.lead), ""]
    if section.entries:
        out += [*_entries(section.entries), ""]
    for t in section.tables:
        out += [f"{_sentence(t.title)[:-1]}:", ""] if t.title is not None else []
        out += table([md(" ".join(c.heading)) for c in t.columns], ([_cell(c) for c in row] for row in t.rows))
    if section.after:
        out += [*_entries(section.after), ""]
    if section.note is not None:
        out += [_sentence(section.note), ""]
    return out


def answer_lines(answer: AnswerOutline) -> list[str]:
    """The answer (:mod:`nsysaudit.render.outline`) as Markdown: the verdict and its sentence, each
    entry (a finding with who held the memory, a censored call, a host stall), what else limits the verdict."""
    out = [f"**{md(answer.verdict)}**: {_phrases([answer.summary])}", ""]
    for e in answer.entries:
        out += _entry(e)
    if answer.also:
        out += ["", f"{words.ALSO.capitalize()}:", "", *(f"- {_phrases([p])}" for p in answer.also)]
    return [*out, ""]


def _kv(mapping: Mapping[str, object] | None) -> str:
    if not mapping:
        return "none"
    return ", ".join(f"{md(k)} {md(_scalar(v))}" for k, v in sorted(mapping.items()))


def _scalar(v: object) -> object:
    if isinstance(v, bool) or v is None:
        return "unknown" if v is None else str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    return v


def _library_call(lc: ArmLibraryCall) -> list[str]:
    a = lc["allocations"]
    role = "main" if lc["thread_role"] == "main" else "non-main"
    unknown = f", {a['bytes_unknown']} of unknown size" if a["bytes_unknown"] else ""
    reason = lc["censored_reason"]  # a censored call has its reason (analysis.coverage)
    out = [
        words.LIBRARY_CALL_HEADING.format(api=md(lc["api"]), pid=ident(lc["pid"]), tid=ident(lc["tid"]), role=role,
                                          name=md(lc["thread_name"])),
        "",
        # A comparison's library call carries no recorded end: an end the capture's stop clamped is unknown.
        f"- {md(lc['source'])}, {num(lc['start_ns'])} to {num(lc['end_ns'])} ns, "
        f"coverage **{md(lc['coverage'])}**"
        + (words.CENSORED_TRACE_ENDS.format(why=md(censored_reasons_words([reason])),
                                            last=num(lc["cuda_api_last_ns"]))
           if lc["coverage"] == "censored" and reason is not None else ""),
        words.NESTED_CALLS_LINE.format(calls=num(lc["nested_calls"]), failed=num(lc["nested_failed"])),
        words.NESTED_ALLOCATIONS_LINE.format(calls=num(a["calls"]), succeeded=num(a["succeeded"]),
                                             bytes=num(a["bytes"]), unknown=unknown, failed=num(a["failed"])),
        "",
    ]
    if lc["allocation_calls"] or lc["failed_calls"]:
        calls = {(c["correlation_id"], c["start_ns"]): c for c in [*lc["allocation_calls"], *lc["failed_calls"]]}
        out += table(
            ["api", "return code", "name", "correlation id", "start ns", "end ns", "bytes"],
            (
                [md(c["api"]), str(c["return_code"]), md(c["return_name"]), ident(c["correlation_id"]),
                 num(c["start_ns"]), num(c["end_ns"]), num(c["bytes"])]
                for c in sorted(calls.values(), key=lambda c: (c["start_ns"], c["correlation_id"] or 0))
            ),
        )
    if lc["nested_by_api"]:
        out += [words.NESTED_BY_API_TITLE, ""]
        out += table(
            ["api", "return code", "name", "count", "bytes"],
            (
                [md(r["api"]), str(r["return_code"]), md(r["return_name"]), num(r["count"]),
                 num(r["bytes"]) if r["allocation"] else "n/a"]
                for r in lc["nested_by_api"]
            ),
        )
    if lc["straddling"]:
        out += [f"Calls straddling its edges: {len(lc['straddling'])}.", ""]
    if lc["telemetry"]:
        out += [*_entries(details.position_entries(lc["telemetry"])), ""]
    return out


def _input_line(name: str, inp: Mapping[str, object]) -> str:
    """The input's line: its name, kind, size and digest, and the nsys and schema versions."""
    return words.INPUT_LINE.format(name=md(name), kind=md(inp["kind"]), size=num(inp["size_bytes"]),  # type: ignore[arg-type]
                                   sha256=inp["sha256"], nsys=md(inp["nsys_version"]), schema=md(inp["schema_version"]))


def _handoff(handoff: Handoff | None) -> list[str]:
    if not handoff:
        return [words.NO_HANDOFF_SNAPSHOT, ""]
    at = words.NOT_ON_TRACE_CLOCK if handoff["trace_ns"] is None else (
        f"at trace {num(handoff['trace_ns'])} ns via {md(handoff['via'])}"
    )
    return [
        words.HANDOFF_SNAPSHOT.format(line=handoff["line"], at=at, chosen_by=md(handoff["chosen_by"]),
                                      lines=handoff["handoff_lines"], values=_kv(handoff["values"])),
        "",
    ]


def _arm(name: str, arm: ComparisonArm) -> list[str]:
    inp = arm["input"]
    out = [
        f"## The {name} arm",
        "",
        _input_line(inp["name"], inp),
        "",
        *section_lines(details.verdict_section(arm["verdict"], arm["verdict_reasons"]), "###"),
        *section_lines(details.census_section(arm["census"]), "###"),
        *section_lines(details.findings_section(arm["findings"], arm["memory"]), "###"),
        *section_lines(details.failed_calls_section(arm["failed_calls"]), "###"),
        words.LIBRARY_CALLS_OF_INTEREST_HEADING.format(shown=len(arm["library_calls"]),
                                                       total=arm["library_calls_total"]),
        "",
        f"Selection: {md(arm['library_calls_selection'])}.",
        "",
    ]
    for lc in arm["library_calls"]:
        out += _library_call(lc)
    out += [*section_lines(details.capture_section(arm["coverage"]), "###"),
            *section_lines(details.coverage_section(arm["coverage"]), "###")]
    out += section_lines(memory_section(arm["memory"]), "###")
    out += section_lines(details.stalls_section(arm["stalls"]), "###")
    if "allocator" in arm:
        out += section_lines(outline.allocator_section(arm["allocator"]), "###")
    tel = arm["telemetry_input"]
    said = Phrase(words.ARM_TELEMETRY_FILE.format(path=tel["name"], size=f"{tel['size_bytes']:,}",
                                                  sha256=tel["sha256"])) if tel else None
    out += section_lines(details.alignment_section(arm["alignment"], said), "###")
    if tel:
        out += _handoff(arm["handoff"])
    if arm["warnings"]:
        out += section_lines(details.warnings_section(arm["warnings"]), "###")
    return out


def _options(options: SealedOptions | None) -> list[str]:
    """The options that changed the analysis (``options`` of a sealed document; absent otherwise)."""
    if not options:
        return []
    domains = ", ".join(md(d) for d in options["library_domains"])
    text = f"library domains {domains}; max pairs {num(options['max_pairs'])}"
    tel = options["telemetry"]
    if tel:
        anchors = ", ".join(md(a) for a in tel["anchors"]) or "the default rule"
        clocks = ", ".join(f"{md(kind)}={md(name)}" for kind, name in tel["clock"])
        text += words.OPTIONS_TELEMETRY.format(key=md(tel["event_key"]), clocks=clocks, anchors=anchors,
                                               tolerance=num(tel["tolerance_ns"]),
                                               lenient=", lenient" if tel["lenient"] else "")
    return [f"Options: {text}.", ""]


def _comparison_answer(answer: ComparisonAnswerOutline) -> list[str]:
    """The comparison's answer: grouped per arm, then what the memory did differently at the call."""
    out = ["## Answer", "", f"**{_phrases([answer.summary])}**", ""]
    for section in answer.sections:
        out += [f"### {section.title}", "", *_entries(section.entries), ""]
    return out


@dataclass(frozen=True)
class MarkdownReport:
    """``report.md`` in its three parts (its title, its answer, the rest: report.html boxes the answer)
    and the verdict its answer states (the gravest of a comparison's arms)."""

    title: str
    answer: tuple[str, ...]
    rest: tuple[str, ...]
    verdict: str

    @property
    def text(self) -> str:
        return "\n".join([self.title, "", *self.answer, *self.rest]).rstrip("\n") + "\n"


def comparison_report(doc: ComparisonDocument) -> MarkdownReport:
    """The ``report.md`` of a comparison document (:meth:`Comparison.to_dict`), in its parts."""
    answer = outline.comparison_answer_outline(doc)
    return MarkdownReport(words.COMPARISON_MD_TITLE, tuple(_comparison_answer(answer)),
                          tuple(_comparison_rest(doc)), answer.verdict)


def comparison_markdown(doc: ComparisonDocument) -> str:
    """The ``report.md`` of a comparison document (:meth:`Comparison.to_dict`)."""
    return comparison_report(doc).text


def _comparison_rest(doc: ComparisonDocument) -> list[str]:
    """What follows the comparison's answer: the inputs, what it does not establish, the differences, the arms."""
    out = [
        "## Inputs",
        "",
        words.SEAL_SENTENCE,
        "",
        *table(
            ["role", "file", "kind", "bytes", "sha256"],
            ([md(i["role"]), md(i["name"]), md(i["kind"]), num(i["size_bytes"]), f"`{i['sha256']}`"]
             for i in doc["inputs"]),
        ),
        *(_options(doc["options"]) if "options" in doc else []),
        *section_lines(not_established_section(doc["not_established"])),
        f"## {words.DIFFERENCES_TITLE}",
        "",
        *(line for section in differences_sections(doc["differences"]) for line in section_lines(section, "###")),
    ]
    for name in ("observe", "release"):
        out += _arm(name, doc["arms"][name])
    return out


def analysis_report(doc: SealedAnalysisDocument) -> MarkdownReport:
    """The ``report.md`` of a single sealed arm (the sealed ``analyze`` document), in its parts."""
    answer = outline.analysis_answer(doc)
    return MarkdownReport(f"# nsysaudit analysis: {md(doc['input']['path'])}",
                          ("## Answer", "", *answer_lines(answer)), tuple(_analysis_rest(doc)), answer.verdict)


def analysis_markdown(doc: SealedAnalysisDocument) -> str:
    """The ``report.md`` of a single sealed arm (the sealed ``analyze`` document)."""
    return analysis_report(doc).text


def _analysis_rest(doc: SealedAnalysisDocument) -> list[str]:
    """What follows the answer: the input, the verdict's reasons, every section of the document."""
    inp = doc["input"]
    out = [
        "## Input",
        "",
        words.SEAL_SENTENCE,
        "",
        _input_line(inp["path"], inp),
        "",
        *(_options(doc["options"]) if "options" in doc else []),
        *section_lines(details.verdict_section(doc["verdict"], doc["verdict_reasons"])),
        *section_lines(details.census_section(doc["census"])),
        *section_lines(details.findings_section(doc["findings"], doc["memory"])),
        *section_lines(details.failed_calls_section(doc["failed_calls"])),
        *section_lines(details.library_calls_section(doc["library_calls"])),
    ]
    out += [*section_lines(details.capture_section(doc["coverage"])),
            *section_lines(details.coverage_section(doc["coverage"]))]
    out += section_lines(memory_section(doc["memory"]))
    out += section_lines(details.stalls_section(doc["stalls"]))
    if "allocator" in doc:
        out += section_lines(outline.allocator_section(doc["allocator"]))
    if device_lines(doc):  # several devices, or a rank known
        out += section_lines(details.devices_section(device_lines(doc)))
    if "alignment" in doc:
        tel = doc["telemetry"]
        said = details.telemetry_file(tel["path"], tel["sha256"], tel["events"], tel["bad_lines"])
        out += section_lines(details.alignment_section(doc["alignment"], said, tel["timeline"]))
    if doc["warnings"]:
        out += section_lines(details.warnings_section(doc["warnings"]))
    return out
