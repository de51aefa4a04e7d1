"""A comparison's differences outlined once (``compare``'s terminal ``--details`` and report.md): the
nested allocation failure, the findings by kind, what the library calls allocated arm by arm, the
calls failing in one arm only, the sources and capture options, the ledger of both arms, the
allocator's own view, the memory at the handoff; then what the comparison does not establish."""

from __future__ import annotations

from collections.abc import Sequence

from nsysaudit import words
from nsysaudit.core.codes import display_name
from nsysaudit.render.outline import Cell, Column, Entry, Phrase, Section, TableOutline, allocator_differences
from nsysaudit.render.outline import number as _n
from nsysaudit.reports.documents import Differences, NotEstablished, Sources


def _findings_by_kind(diff: Differences) -> Section:
    rows = tuple((Cell(r["kind"], data=True), Cell(_n(r["observe"])), Cell(_n(r["release"])))
                 for r in diff["findings_by_kind"])
    if not rows:
        return Section(words.FINDINGS_BY_KIND_TITLE, lead=Phrase(words.NO_FINDING_IN_EITHER), quiet=True)
    columns = (Column(("kind",)), Column(("observe",), numeric=True), Column(("release",), numeric=True))
    return Section(words.FINDINGS_BY_KIND_TITLE, tables=(TableOutline(None, columns, rows),))


def _library_calls(diff: Differences) -> Section:
    if not diff["library_calls"]:
        return Section(words.PAIRS_TITLE, lead=Phrase(words.NO_PAIRS), quiet=True)
    entries = tuple(
        Entry((Phrase(words.PAIR.format(api=(k := p["match_key"])["api"], role=words.THREAD_ROLE[k["thread_role"]],
                                        ordinal=k["ordinal"])),),
              under=tuple(Entry((Phrase(s),)) for s in p["statements"]))
        for p in diff["library_calls"])
    return Section(words.PAIRS_TITLE, entries)


def _failing(diff: Differences) -> Section:
    rows = []
    for scope, block in (("census", diff["failing_calls"]["census"]), ("nested", diff["failing_calls"]["nested"])):
        for where in ("only_in_observe", "only_in_release", "in_both"):
            rows += [(Cell(words.FAILING_WHERE[where]), Cell(words.FAILING_SCOPE[scope]),
                      Cell(display_name(r["api"]) if r["api"] else "unknown", data=True), Cell(str(r["return_code"])),
                      Cell(r["return_name"] or words.UNKNOWN_CODE, data=True), Cell(_n(r["observe"])),
                      Cell(_n(r["release"]))) for r in block[where]]
    if not rows:
        return Section(words.FAILING_TITLE, lead=Phrase(words.NO_FAILING), quiet=True)
    columns = (Column(("where",)), Column(("among",)), Column(("api",)), Column(("return", "code"), numeric=True),
               Column(("name",)), Column(("observe",), numeric=True), Column(("release",), numeric=True))
    return Section(words.FAILING_TITLE, tables=(TableOutline(None, columns, tuple(rows)),))


def _values(values: Sequence[str] | None) -> str:
    """A META_DATA_CAPTURE key's values: ``absent`` when the export has no such key."""
    return words.ABSENT if values is None else ", ".join(values)


def _sources(src: Sources) -> Section:
    entries = []
    for label, v in ((words.NSYS_VERSION, src["nsys_version"]), (words.SCHEMA_VERSION, src["schema_version"]),
                     (words.INPUT_KIND, src["kind"])):
        entries.append(Entry((Phrase(words.SOURCE_VERSION.format(
            label=label, observe=v["observe"] or "unknown", release=v["release"] or "unknown",
            same=words.SAME[v["same"]])),), severity=None if v["same"] else "warning"))
    cap = src["capture"]
    differing = [Entry((Phrase(words.KEY_DIFFERS.format(key=d["key"], observe=_values(d["observe"]),
                                                        release=_values(d["release"]))),), severity="warning")
                 for d in cap["differs"]]
    differing += [Entry((Phrase(words.KEY_DIFFERS_AS_EXPECTED.format(
        key=d["key"], why=d["why"], observe=_values(d["observe"]), release=_values(d["release"]))),))
        for d in cap["differs_as_expected"]]
    entries.append(Entry((Phrase(words.CAPTURE_OPTIONS.format(
        keys=cap["keys_compared"], same=cap["same"], differ=len(cap["differs"]),
        expected=len(cap["differs_as_expected"]))),), under=tuple(differing)))
    return Section(words.SOURCES_TITLE, tuple(entries))


def _handoff(diff: Differences) -> Section:
    if not diff["handoff"]:
        return Section(words.HANDOFF_TITLE, lead=Phrase(words.NO_HANDOFF), quiet=True)
    columns = (Column(("field",)), Column(("observe",), numeric=True), Column(("release",), numeric=True),
               Column(("release", "minus observe"), numeric=True))
    rows = tuple((Cell(k, data=True), Cell(_n(v["observe"])), Cell(_n(v["release"])),
                  Cell(_n(v["release_minus_observe"]))) for k, v in diff["handoff"].items())
    return Section(words.HANDOFF_TITLE, tables=(TableOutline(None, columns, rows),))


def differences_sections(diff: Differences) -> list[Section]:
    """The differences, a section each (see the module docstring)."""
    out = [Section(words.NESTED_FAILURE_TITLE, (Entry((Phrase(diff["nested_alloc_failure"]["statement"]),)),)),
           _findings_by_kind(diff), _library_calls(diff), _failing(diff), _sources(diff["sources"]),
           Section(words.LEDGER_BOTH_TITLE, tuple(Entry((Phrase(s),)) for s in diff["memory"]["statements"]))]
    if "allocator" in diff:
        out.append(Section(words.ALLOCATOR_BOTH_TITLE, allocator_differences(diff["allocator"])))
    return [*out, _handoff(diff)]


def not_established_section(items: Sequence[NotEstablished]) -> Section:
    """What the comparison does not establish, each in its statement."""
    return Section(words.NOT_ESTABLISHED_DETAILS_TITLE, tuple(Entry((Phrase(x["statement"]),)) for x in items),
                   severity="warning")
