"""``report.md``: the sealed report for people, written from the same document as ``report.json``.

Every value shown comes from the report document, so the two files state the same facts. Text
that comes from traces or telemetry (API names from StringIds, thread names, NVTX strings,
messages) is data, not Markdown: :func:`md` escapes it so it is shown literally, whatever it holds.
No wall-clock time and no path other than input basenames appears, so the same document always
gives the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nsysaudit import words
from nsysaudit.core.text import escape
from nsysaudit.render import outline, report_outline
from nsysaudit.render.outline import AnswerOutline, Cell, ComparisonAnswerOutline, Entry, Phrase, Section, pieces
from nsysaudit.reports.documents import ComparisonDocument, SealedAnalysisDocument

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


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A GFM table; cells must already be escaped with :func:`md`."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("")
    return out


# The room a phrase (or each value of a template) is given before it is shortened.
SIZE = {"sentence": 10_000, "phrase": 1000, "path": 1000, "name": MAX_TEXT, "word": MAX_TEXT}
MORE_IN = {"coverage": "see Coverage"}


def _said(p: Phrase) -> str:
    """A phrase: its data escaped (and shortened), a template's own words as they are."""
    return "".join(md(text, SIZE[p.size]) if data else str(text) for text, data in pieces(p))


def _phrases(phrases: Sequence[Phrase]) -> str:
    """Phrases said one after the other, ``; `` between them; each quotes trace text: escaped."""
    return "; ".join(_said(p) for p in phrases)


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
    return f"**{text}**" if c.strong else f"`{text}`" if c.digest else text


def _title(title: str | Phrase) -> str:
    return md(title) if isinstance(title, str) else _said(title)


def section_lines(section: Section, level: str = "##") -> list[str]:
    """A titled section of the report: its lead as a sentence, its entries as bullets, its tables (each
    under its title) and the remarks under them, the entries after them, its closing notes, then its
    parts a level below."""
    out = [f"{level} {_title(section.title)}", ""]
    if section.verdict is not None:
        out += [f"**{md(section.verdict)}**", ""]
    elif section.lead is not None:
        out += [_sentence(section.lead), ""]
    if section.entries:
        out += [*_entries(section.entries), ""]
    for t in section.tables:
        out += [f"{_sentence(t.title)[:-1]}:", ""] if t.title is not None else []
        out += table([md(" ".join(c.heading)) for c in t.columns], ([_cell(c) for c in row] for row in t.rows))
    out += [line for remark in section.remarks for line in (_sentence(remark), "")]
    if section.after:
        out += [*_entries(section.after), ""]
    out += [line for note in section.notes for line in (_sentence(note), "")]
    return out + [line for part in section.parts for line in section_lines(part, level + "#")]


def answer_lines(answer: AnswerOutline) -> list[str]:
    """The answer (:mod:`nsysaudit.render.outline`) as Markdown: the verdict and its sentence, each
    entry (a finding with who held the memory, a censored call, a host stall), what else limits the verdict."""
    out = [f"**{md(answer.verdict)}**: {_phrases([answer.summary])}", ""]
    for e in answer.entries:
        out += _entry(e)
    if answer.also:
        out += ["", f"{words.ALSO.capitalize()}:", "", *(f"- {_phrases([p])}" for p in answer.also)]
    return [*out, ""]


def _comparison_answer(answer: ComparisonAnswerOutline) -> list[str]:
    """The comparison's answer: grouped per arm, then what the memory did differently at the call."""
    out = ["## Answer", "", f"**{_phrases([answer.summary])}**", ""]
    for section in answer.sections:
        out += [f"### {_title(section.title)}", "", *_entries(section.entries), ""]
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


def _rest(sections: Sequence[Section]) -> tuple[str, ...]:
    return tuple(line for section in sections for line in section_lines(section))


def comparison_report(doc: ComparisonDocument) -> MarkdownReport:
    """The ``report.md`` of a comparison document (:meth:`Comparison.to_dict`), in its parts."""
    answer = outline.comparison_answer_outline(doc)
    title, sections = report_outline.comparison_report(doc)
    return MarkdownReport(f"# {_said(title)}", tuple(_comparison_answer(answer)), _rest(sections), answer.verdict)


def comparison_markdown(doc: ComparisonDocument) -> str:
    """The ``report.md`` of a comparison document (:meth:`Comparison.to_dict`)."""
    return comparison_report(doc).text


def analysis_report(doc: SealedAnalysisDocument) -> MarkdownReport:
    """The ``report.md`` of a single sealed arm (the sealed ``analyze`` document), in its parts."""
    answer = outline.analysis_answer(doc)
    title, sections = report_outline.analysis_report(doc)
    return MarkdownReport(f"# {_said(title)}", ("## Answer", "", *answer_lines(answer)), _rest(sections),
                          answer.verdict)


def analysis_markdown(doc: SealedAnalysisDocument) -> str:
    """The ``report.md`` of a single sealed arm (the sealed ``analyze`` document)."""
    return analysis_report(doc).text
