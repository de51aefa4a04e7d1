"""The outline of a document: what a person is shown, arranged once, for every back-end.

A document (``analyze --json``, a comparison's ``report.json``) is read here and only here; what comes
out is small frozen values (sections of phrases, lists of entries) that carry their meaning (a
verdict, a severity, an emphasis, the part of the details an entry refers to) and no layout. The
terminal (:mod:`nsysaudit.render.terminal`), Markdown (:mod:`nsysaudit.render.markdown`) and HTML
(:mod:`nsysaudit.render.html`) back-ends lay the same outline out, each in its own way; the words come
from :mod:`nsysaudit.words` (the outline's sentences) or from the document's own statements.

Every :class:`Phrase` may quote trace text (API, thread and event names): each back-end shows it as
data (escaped), never as markup.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from nsysaudit import words
from nsysaudit.core.text import size_word
from nsysaudit.reports.documents import (
    AllocatorChange,
    AllocatorDifferences,
    AllocatorNote,
    AllocatorSection,
    AnalysisDocument,
    Answer,
    ComparisonArm,
    ComparisonDocument,
    SealedAnalysisDocument,
)
from nsysaudit.reports.ranks import device_lines
from nsysaudit.reports.stalls import glance_words

Severity = Literal["failure", "warning"]
# How much room a phrase (or each value of a template) is given before it is shortened: a whole sentence,
# a phrase within one, a path, a name, a word (a version).
Size = Literal["sentence", "phrase", "path", "name", "word"]
# A template's value: trace text (None: unknown), or several said with ", " between them (each text, or
# a phrase of its own).
Value: TypeAlias = "str | tuple[str | Phrase, ...] | None"
VERDICTS = ("failure_found", "inconclusive", "no_failure")
# The finding kinds that are failures themselves; any other kind is shown as a warning.
FAILURE_KINDS = ("nested_alloc_failure", "nested_call_failure", "captured_event_wait_failure")


@dataclass(frozen=True)
class Phrase:
    """Words shown as data (every back-end escapes them); ``size``: how much room they are given.

    With ``values``, ``text`` is a template of our own words (not escaped: it may hold the back-end's
    markup, as report.md's own lines do) whose ``{name}`` fields are the values, each shown as data;
    ``severity``: what the words warn of."""

    text: str
    size: Size = "sentence"
    values: Mapping[str, Value] | None = None
    severity: Severity | None = None


_FIELD = re.compile(r"\{(\w+)\}")


def pieces(p: Phrase) -> Iterator[tuple[str | None, bool]]:
    """A phrase in the pieces a back-end shows: ``(text, True)`` for data it escapes (None: unknown),
    ``(text, False)`` for its own words."""
    if p.values is None:
        yield p.text, True
        return
    at = 0
    for field in _FIELD.finditer(p.text):
        yield p.text[at:field.start()], False
        value = p.values[field.group(1)]
        for i, item in enumerate(value if isinstance(value, tuple) else (value,)):
            if i:
                yield ", ", False
            if isinstance(item, Phrase):
                yield from pieces(item)
            else:
                yield item, True
        at = field.end()
    yield p.text[at:], False


@dataclass(frozen=True)
class Entry:
    """One entry of a list: its ``phrases`` (said one after the other, ``; `` between them), under a
    ``label`` (a finding's kind, "held", "censored", ...), with its ``number`` (a finding's), its
    ``severity``, a ``strong`` label, the ``under`` entries that belong to it, and ``more_in``: the part
    of the details that holds the rest (``"coverage"``)."""

    phrases: tuple[Phrase, ...]
    label: str | None = None
    number: int | None = None
    severity: Severity | None = None
    strong: bool = False
    under: tuple[Entry, ...] = ()
    more_in: str | None = None
    refer: tuple[str, str] | None = None  # (arm, its input): the arm's own report says the rest


@dataclass(frozen=True)
class AnswerOutline:
    """The answer read first: the verdict and its sentence, the entries (findings, censored calls,
    host stalls), and what else limits the verdict (``also``)."""

    verdict: str
    summary: Phrase
    entries: tuple[Entry, ...]
    also: tuple[Phrase, ...]


@dataclass(frozen=True)
class Cell:
    """A table's cell: its ``text``, a ``note`` (the terminal writes it on a line of its own, Markdown in
    the cell after the text), whether it is trace text (``data``: escaped) and ``strong``."""

    text: str
    note: str | None = None
    data: bool = False
    strong: bool = False
    digest: bool = False  # Markdown shows a digest as code


@dataclass(frozen=True)
class Column:
    """A table's column: its heading in lines (the terminal stacks them to keep the column narrow,
    Markdown says them in one), and whether it holds figures (aligned right, never broken)."""

    heading: tuple[str, ...]
    numeric: bool = False


@dataclass(frozen=True)
class TableOutline:
    """A table: its title (None: its section's title says what it holds), its columns and rows."""

    title: Phrase | None
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Section:
    """A titled part: its ``lead`` (said after the title; ``quiet``: nothing else to say), its entries,
    its tables, the ``remarks`` said under them, the entries ``after`` them, its closing ``notes``, then the
    ``parts`` it holds (sections a level below it); ``severity``: what its title warns of. A title that
    quotes trace text is a :class:`Phrase`."""

    title: str | Phrase
    entries: tuple[Entry, ...] = ()
    severity: Severity | None = None
    lead: Phrase | None = None
    tables: tuple[TableOutline, ...] = ()
    remarks: tuple[Phrase, ...] = ()
    after: tuple[Entry, ...] = ()
    notes: tuple[Phrase, ...] = ()
    quiet: bool = False
    verdict: str | None = None  # the lead states this verdict
    parts: tuple[Section, ...] = ()


@dataclass(frozen=True)
class Head:
    """What a command prints first: its ``title`` (strong; ``passed``: a check that passed) and the
    ``subject`` on its line, then ``lines`` of their own under it, each said in pieces."""

    title: str
    subject: Phrase | None
    lines: tuple[tuple[Phrase, ...], ...]
    passed: bool = False


@dataclass(frozen=True)
class ComparisonAnswerOutline:
    """The comparison's answer: its sentence, then its sections (the ranks, each arm, the memory at the
    call, what is not established, the host stalls); ``verdict``: the gravest of the arms' verdicts."""

    summary: Phrase
    sections: tuple[Section, ...]
    verdict: str


def _bullets(statements: list[str]) -> tuple[Entry, ...]:
    return tuple(Entry((Phrase(s),)) for s in statements)


def answer_outline(
    answer: Answer, *, stalls: bool = True, allocator: AllocatorSection | None = None
) -> AnswerOutline:
    """The answer's outline (``stalls``: the host stalls' entries; a comparison says both arms' in a
    section of its own; ``allocator``: the document's memory snapshots, whose view at each finding is
    said under it)."""
    views = {p["finding"]: p["statement"] for p in allocator["at"] if "finding" in p and "statement" in p} \
        if allocator is not None else {}
    entries: list[Entry] = []
    for n, f in enumerate(answer["findings"], 1):
        phrases = (Phrase(f["what"]), *((Phrase(f["when"], "phrase"),) if f["when"] else ()))
        under = [Entry((Phrase(f["held"]),), label=words.HELD, strong=True)] if f["held"] else []
        if f["finding"] in views:
            under.append(Entry((Phrase(views[f["finding"]]),), label=words.ALLOCATOR, strong=True))
        if "reported" in f:
            under.append(Entry((Phrase(f["reported"]),), label=words.REPORTED, strong=True))
        severity: Severity = "failure" if f["kind"] in FAILURE_KINDS else "warning"
        entries.append(Entry(phrases, label=f["kind"], number=n, severity=severity, under=tuple(under)))
    for c in answer["censored"]:
        held = (Entry((Phrase(c["held"]),), label=words.HELD_AT_START, strong=True),) if c["held"] else ()
        entries.append(Entry((Phrase(c["what"]),), label=words.CENSORED, severity="warning", under=held))
    more = answer["censored_total"] - len(answer["censored"])
    if more > 0:
        entries.append(Entry((Phrase(words.MORE_CENSORED.format(n=more)),), severity="warning", more_in="coverage"))
    if stalls:  # above the share docs/stalls.md states
        entries += [Entry((Phrase(s),), label=words.STALL, severity="warning") for s in answer["stalls"]]
    return AnswerOutline(answer["verdict"], Phrase(answer["summary"]), tuple(entries),
                         tuple(Phrase(s) for s in answer["limits"]))


def gravest(verdicts: list[str]) -> str:
    """The first of ``verdicts`` in :data:`VERDICTS`' order (failure_found before the others); ``""``
    for none."""
    return next((v for v in VERDICTS if v in verdicts), "")


def analysis_answer(doc: AnalysisDocument | SealedAnalysisDocument) -> AnswerOutline:
    """The analysis document's answer (:func:`answer_outline`), with its memory snapshots' view."""
    return answer_outline(doc["answer"], allocator=_allocator(doc))


def _allocator(doc: AnalysisDocument | SealedAnalysisDocument | ComparisonArm) -> AllocatorSection | None:
    """The memory snapshots' key of a document or an arm (present only with snapshots)."""
    if "allocator" not in doc:
        return None
    return doc["allocator"]


def comparison_answer_outline(doc: ComparisonDocument) -> ComparisonAnswerOutline:
    """The comparison's answer, grouped per arm, then what the memory did differently at the call
    (with memory snapshots, the caching allocator of both arms at each pair of library calls)."""
    answer = doc["answer"]
    sections: list[Section] = []
    if answer["ranks"]:  # the arms are two ranks of one job
        sections.append(Section(words.RANKS_TITLE, _bullets(answer["ranks"])))
    # Each arm in a line, its findings referred to its own report: the comparison says what differs,
    # not again what analyze says of each arm (issue 37, item 8).
    sections.append(Section(words.ARMS_TITLE, tuple(
        _arm_entry(name, answer["arms"][name], _arm_arguments(doc, name)) for name in ("observe", "release"))))
    at_calls = allocator_differences(doc["differences"]["allocator"], calls_only=True) \
        if "allocator" in doc["differences"] else ()
    if answer["memory"] or at_calls:
        sections.append(Section(words.MEMORY_AT_CALL_TITLE, (*_bullets(answer["memory"]), *at_calls)))
    if answer["not_established"]:
        sections.append(Section(words.NOT_ESTABLISHED_TITLE, _bullets(answer["not_established"]), severity="warning"))
    if answer["stalls"]:
        sections.append(Section(words.STALLS_TITLE, _bullets([answer["stalls"]])))
    return ComparisonAnswerOutline(Phrase(answer["summary"]), tuple(sections),
                                   gravest([answer["arms"][name]["verdict"] for name in ("observe", "release")]))


def _arm_arguments(doc: ComparisonDocument, arm: str) -> str:
    """The arguments ``analyze`` takes to say an arm's answer as the comparison read it: its input, its
    telemetry and its memory snapshots, by the names the comparison gives them."""
    given: list[str] = []
    for i in doc["inputs"]:
        if i["role"] == arm:
            given.insert(0, i["name"])
        elif i["role"] == f"{arm}_telemetry":
            given += ["--telemetry", i["name"]]
        elif i["role"].startswith(f"{arm}_snapshot_"):
            given += ["--snapshot", i["name"]]
    return " ".join(given)


def _arm_entry(name: str, arm: Answer, input_name: str) -> Entry:
    """One arm in a line: its verdict and how many findings of which kinds, and where its findings are
    said in full (``refer``: the arm, and the input its own report is made from)."""
    kinds = Counter(f["kind"] for f in arm["findings"])
    found = words.ARM_FINDINGS.format(n=len(arm["findings"]), kinds=", ".join(
        f"{n} {kind}" for kind, n in kinds.items())) if kinds else words.ARM_NO_FINDING
    return Entry((Phrase(words.ARM_LINE.format(verdict=arm["verdict"], findings=found)),), label=name,
                 severity="failure" if arm["verdict"] == "failure_found" else None,
                 refer=(name, input_name) if kinds else None)


# --- the allocator's own view (memory snapshots) ------------------------------------------------------


def number(value: int | float | None) -> str:
    """A count or figure with thousands separators; ``unknown`` for null."""
    return "unknown" if value is None else f"{value:,}"


def ident(value: int | None) -> str:
    """A pid, tid or correlation id: never with thousands separators; ``unknown`` for null."""
    return "unknown" if value is None else str(value)


def _size(value: int | None) -> str:
    return "unknown" if value is None else size_word(value)


def scalar(value: object) -> str:
    """A value in words: a count with thousands separators, ``unknown`` for null."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:,}" if isinstance(value, int) else str(value)


def _note(note: AllocatorNote) -> Entry:
    values = {k: scalar(v) for k, v in note["values"].items()}
    try:
        text = words.SNAPSHOT_NOTES[note["code"]].format(**values)
    except KeyError:  # a note of another version: its code, or a value these words name, unknown here
        shown = ", ".join(f"{k} {v}" for k, v in sorted(values.items()))
        text = words.SNAPSHOT_NOTE_UNKNOWN.format(code=note["code"], values=shown)
    return Entry((Phrase(text),), severity="warning" if note["code"] in words.WARNING_NOTES else None)


def allocator_section(section: AllocatorSection) -> Section:
    """The ``allocator`` key: each snapshot (what it is, its sums when taken, its clock, its notes), then
    the allocator at each moment the ledger is read at (the moments' own statements)."""
    entries: list[Entry] = []
    for s in section["snapshots"]:
        at, clock = s["at_snapshot"], s["clock"]
        text = words.SNAPSHOT.format(
            index=s["index"], path=s["path"], size_bytes=f"{s['size_bytes']:,}", backend=s["backend"] or "unknown",
            segments=f"{at['segments']:,}", reserved=_size(at["reserved_bytes"]),
            allocated=_size(at["allocated_bytes"]), entries=f"{s['history']['entries']:,}",
            clock=words.SNAPSHOT_CLOCK[clock["checked"]].format(method=clock["method"] or "unknown"))
        entries.append(Entry((Phrase(text),), under=tuple(_note(n) for n in s["notes"])))
    entries += [Entry((Phrase(p["statement"]),)) for p in section["at"] if "statement" in p]
    return Section(words.ALLOCATOR_TITLE, tuple(entries))


def _change(where: str, change: AllocatorChange) -> Entry:
    o, r = change["observe"], change["release"]
    return Entry((Phrase(words.ALLOCATOR_CHANGE.format(
        where=where,
        observe_reserved=_size(o["reserved_bytes"] if o is not None else None),
        release_reserved=_size(r["reserved_bytes"] if r is not None else None),
        observe_inactive=_size(o["inactive_bytes"] if o is not None else None),
        release_inactive=_size(r["inactive_bytes"] if r is not None else None))),))


def allocator_differences(diff: AllocatorDifferences, *, calls_only: bool = False) -> tuple[Entry, ...]:
    """``differences.allocator`` in lines: what each arm's allocator gave back to CUDA, then the allocator
    of both arms at the handoff and at each pair of library calls (``calls_only``: those alone)."""
    entries: list[Entry] = []
    if not calls_only:
        for arm in ("observe", "release"):
            a = diff["observe"] if arm == "observe" else diff["release"]
            released = a["segments_released"] if a is not None else None
            if a is None:
                entries.append(Entry((Phrase(words.NO_SNAPSHOT.format(arm=arm)),)))
            elif released is not None:
                entries.append(Entry((Phrase(words.SEGMENTS_RELEASED.format(
                    arm=arm, segments=f"{released['segments']:,}", bytes=_size(released["bytes"]),
                    snapshot=released["snapshot"])),)))
        entries.append(_change(words.AT_HANDOFF, diff["at_handoff"]))
    for pair in diff["library_calls"]:
        key = pair["match_key"]
        entries.append(_change(words.AT_CALL.format(api=key["api"], ordinal=key["ordinal"],
                                                 role=words.THREAD_ROLE[key["thread_role"]]), pair))
    return tuple(entries)


def glance(d: AnalysisDocument) -> tuple[str, ...]:
    """One line each of what the details hold (the census, the memory, the devices and ranks, the
    telemetry, the host stalls), so a person knows what --details would show."""
    c, libs, memory = d["census"], d["library_calls"], d["memory"]
    censored = sum(1 for lc in libs if lc["coverage"] == "censored")
    lines = [words.glance_census(c["cuda_api_calls"], c["nonzero_returns"], len(libs), censored)]
    if memory["ledger"]:
        lines.append(words.glance_ledger(memory["events"], len(memory["at"])))
    else:
        lines.append(words.GLANCE_NO_LEDGER.format(why=memory["why_no_ledger"]))
    if device_lines(d):
        ranks = d["ranks"]
        known = ", ".join(map(str, ranks["ranks"])) or words.NO_RANK_STATED
        lines.append(words.glance_devices(len(d["devices"]), known, ranks["processes_with_rank"], ranks["processes"]))
    if "alignment" in d:
        lines.append(words.GLANCE_TELEMETRY.format(events=f"{d['telemetry']['events']:,}",
                                                   checked=words.CHECKED[d["alignment"]["checked"]]))
    if d["stalls"]["blocking_calls"]:
        lines.append(glance_words(d["stalls"]))
    return tuple(lines)
