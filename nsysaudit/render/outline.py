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

from dataclasses import dataclass
from typing import Literal

from nsysaudit import words
from nsysaudit.reports.documents import Answer, ComparisonAnswer

Severity = Literal["failure", "warning"]
# How much room a phrase is given before it is shortened: a whole sentence, or a phrase within one.
Size = Literal["sentence", "phrase"]
VERDICTS = ("failure_found", "inconclusive", "no_failure")
# The finding kinds that are failures themselves; any other kind is shown as a warning.
FAILURE_KINDS = ("nested_alloc_failure", "nested_call_failure", "captured_event_wait_failure")


@dataclass(frozen=True)
class Phrase:
    """Words shown as data (every back-end escapes them); ``size``: how much room they are given."""

    text: str
    size: Size = "sentence"


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


@dataclass(frozen=True)
class AnswerOutline:
    """The answer read first: the verdict and its sentence, the entries (findings, censored calls,
    host stalls), and what else limits the verdict (``also``)."""

    verdict: str
    summary: Phrase
    entries: tuple[Entry, ...]
    also: tuple[Phrase, ...]


@dataclass(frozen=True)
class Section:
    """A titled part: an arm's answer, or a list of entries; ``severity``: what its title warns of."""

    title: str
    entries: tuple[Entry, ...] = ()
    answer: AnswerOutline | None = None
    severity: Severity | None = None


@dataclass(frozen=True)
class ComparisonAnswerOutline:
    """The comparison's answer: its sentence, then its sections (the ranks, each arm, the memory at the
    call, what is not established, the host stalls); ``verdict``: the gravest of the arms' verdicts."""

    summary: Phrase
    sections: tuple[Section, ...]
    verdict: str


def _bullets(statements: list[str]) -> tuple[Entry, ...]:
    return tuple(Entry((Phrase(s),)) for s in statements)


def answer_outline(answer: Answer, *, stalls: bool = True) -> AnswerOutline:
    """The answer's outline (``stalls``: the host stalls' entries; a comparison says both arms' in a
    section of its own)."""
    entries: list[Entry] = []
    for n, f in enumerate(answer["findings"], 1):
        phrases = (Phrase(f["what"]), *((Phrase(f["when"], "phrase"),) if f["when"] else ()))
        under = [Entry((Phrase(f["held"]),), label=words.HELD, strong=True)] if f["held"] else []
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


def comparison_answer_outline(answer: ComparisonAnswer) -> ComparisonAnswerOutline:
    """The comparison's answer, grouped per arm, then what the memory did differently at the call."""
    sections: list[Section] = []
    if answer["ranks"]:  # the arms are two ranks of one job
        sections.append(Section(words.RANKS_TITLE, _bullets(answer["ranks"])))
    arms = {name: answer_outline(answer["arms"][name], stalls=False) for name in ("observe", "release")}
    sections += [Section(words.ARM_TITLE.format(arm=name), answer=arm) for name, arm in arms.items()]
    if answer["memory"]:
        sections.append(Section(words.MEMORY_AT_CALL_TITLE, _bullets(answer["memory"])))
    if answer["not_established"]:
        sections.append(Section(words.NOT_ESTABLISHED_TITLE, _bullets(answer["not_established"]), severity="warning"))
    if answer["stalls"]:
        sections.append(Section(words.STALLS_TITLE, _bullets([answer["stalls"]])))
    return ComparisonAnswerOutline(Phrase(answer["summary"]), tuple(sections),
                                   gravest([arm.verdict for arm in arms.values()]))
