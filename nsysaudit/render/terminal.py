"""Terminal rendering of reports: the only module that uses rich.

Text that comes from traces or telemetry (thread names, NVTX strings, messages) is data: it is
wrapped in ``rich.text.Text`` so markup in it is shown literally, characters a terminal acts on
(escape sequences, line breaks, bidi overrides) are shown as escapes, and very long strings are
shortened with their length shown.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO, cast

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.progress import BarColumn, SpinnerColumn, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from nsysaudit import words
from nsysaudit.core.text import escape
from nsysaudit.render import outline, report_outline
from nsysaudit.render.outline import (
    AnswerOutline,
    ComparisonAnswerOutline,
    Entry,
    Head,
    Phrase,
    Section,
    TableOutline,
    pieces,
)
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import ComparisonDocument, SealedAnalysisDocument

MAX_TEXT = 80


def literal(value: object, limit: int = MAX_TEXT) -> Text:
    """Trace-provided text shown as-is (no markup), shortened past ``limit`` characters."""
    if value is None:
        return Text("unknown", style="dim italic")
    s = str(value)
    # rich passes ESC, CSI and line breaks through: trace text could recolour the terminal, forge
    # report lines or reorder them (see nsysaudit.core.text for the characters).
    shown = escape(s)
    if len(shown) > limit:
        shown = f"{shown[: limit - 1]}… ({len(s)} chars)"
    return Text(shown)


VERDICT_STYLE = {"failure_found": "bold red", "inconclusive": "bold yellow", "no_failure": "bold green"}


class Hanging:
    """``lead`` then ``body`` wrapped at the console's width, every wrapped line indented under the
    body's start (a hanging indent), never back at column 0, and no line padded with trailing
    spaces (a table grid pads every cell to its width: copied text carried them)."""

    def __init__(self, lead: str | Text, body: Text, *, indent: int = 2, style: str | None = None) -> None:
        self.lead = Text(" " * indent + lead, style=style or "") if isinstance(lead, str) else lead
        self.body = body

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = self.lead.cell_len
        lines = self.body.wrap(console, max(options.max_width - width, 16), overflow="fold")
        for i, line in enumerate(lines):
            line.rstrip()
            out = (self.lead.copy() if i == 0 else Text(" " * width)) + line
            out.end = ""
            yield out
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.lead.cell_len + 1, self.lead.cell_len + self.body.cell_len)


_BULLET = re.compile(r" *(?:- |\d+\. )?")


def _hang(parts: Sequence[RenderableType]) -> list[RenderableType]:
    """Every line of every ``Text`` part as a :class:`Hanging` line: its leading spaces and bullet
    (``- ``, ``1. ``) are the lead, so a wrapped line goes on under its text, not at column 0.
    Tables and other renderables are kept as they are."""
    out: list[RenderableType] = []
    for part in parts:
        if not isinstance(part, Text):
            out.append(part)
            continue
        for line in part.split("\n", allow_blank=True):
            lead = _BULLET.match(line.plain)
            cut = lead.end() if lead is not None else 0
            out.append(Hanging(line[:cut], line[cut:], indent=0) if line.plain.strip() else Text(""))
    return out


SEVERITY_STYLE = {"failure": "bold red", "warning": "yellow"}
# The room a phrase (or each value of a template) is given before it is shortened.
SIZE = {"sentence": 4000, "phrase": 400, "path": 300, "name": 200, "word": MAX_TEXT}
MORE_IN = {"coverage": "--details"}


def _said(p: Phrase) -> Text:
    """A phrase: its data escaped (and shortened), a template's own words as they are; in its severity."""
    said = Text()
    for text, data in pieces(p):
        said.append_text(literal(text, SIZE[p.size]) if data else Text(str(text)))
    said.stylize(SEVERITY_STYLE[p.severity] if p.severity is not None else "")
    return said


def _phrases(phrases: Sequence[Phrase]) -> Text:
    """Phrases said one after the other, ``; `` between them; each quotes trace text: escaped."""
    body = Text()
    for i, p in enumerate(phrases):
        body.append("; " if i else "")
        body.append_text(_said(p))
    return body


def head_text(head: Head) -> Text:
    """A command's head: its title in bold (green: a check passed), its subject, its lines under it."""
    text = Text()
    text.append(f"{head.title} " if head.subject is not None else head.title,
                style="bold green" if head.passed else "bold")
    if head.subject is not None:
        text.append_text(_said(head.subject))
    for line in head.lines:
        text.append("\n  ")
        for p in line:
            text.append_text(_said(p))
    return text


def _entry(e: Entry, indent: int = 2) -> list[RenderableType]:
    """An entry as hanging lines: a numbered one (a finding) leads with its number and its label in
    the body, a labelled one with its label, in the entry's severity; the entries under it under its words."""
    style = SEVERITY_STYLE[e.severity] if e.severity is not None else None
    body = _phrases(e.phrases)
    if e.more_in is not None:
        body.append(f" ({MORE_IN[e.more_in]})")
    if e.number is not None:
        lead = f"{e.number}. "
        body = Text.assemble(Text(e.label or "", style=style or ""), ": ", body)
        line = Hanging(lead, body, indent=indent)
    elif e.label is not None:
        lead = f"{e.label}: "
        line = Hanging(lead, body, indent=indent, style=style)
    else:
        lead = ""
        body.stylize(style or "")
        line = Hanging(lead, body, indent=indent)
    under = [Hanging(f"{u.label}: ", _phrases(u.phrases), indent=indent + len(lead), style="bold" if u.strong else None)
             for u in e.under]
    return [line, *under]


def _bullets(entries: Sequence[Entry], indent: int = 2) -> list[RenderableType]:
    """Entries as bullets (a label before the words), the entries under each a level deeper; each in
    its severity."""
    parts: list[RenderableType] = []
    for e in entries:
        body = _phrases(e.phrases)
        if e.label is not None:
            body = Text.assemble(f"{e.label}: ", body)
        body.stylize(SEVERITY_STYLE[e.severity] if e.severity is not None else "")
        if e.refer is not None:
            body.append_text(Text("; ").append_text(literal(words.REFER_TERMINAL.format(input=e.refer[1]), 400)))
        parts.append(Hanging("- ", body, indent=indent))
        parts += _bullets(e.under, indent + 2)
    return parts


def _table(t: TableOutline) -> Table:
    """A table of the outline: figures aligned right and never broken, a cell's note on a line of its own."""
    title = Text("  ").append_text(_phrases([t.title])) if t.title is not None else None
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    for i, col in enumerate(t.columns):
        if col.numeric:
            table.add_column("\n".join(col.heading), justify="right", no_wrap=True)
        else:  # as wide as its longest word, up to 26 columns: a name is broken only when longer
            words_in = [w for row in t.rows for w in row[i].text.split()] or [""]
            table.add_column("\n".join(col.heading), overflow="fold", min_width=min(max(map(len, words_in)), 26))
    for row in t.rows:
        cells = []
        for c in row:
            cell = literal(c.text, 120) if c.data else Text(c.text)
            if c.note is not None:
                cell.append(f"\n{c.note}")
            cell.stylize("bold" if c.strong else "")
            cells.append(cell)
        table.add_row(*cells)
    return table


def _title(title: str | Phrase) -> Text:
    return Text(title) if isinstance(title, str) else _said(title)


def section_parts(section: Section) -> list[RenderableType]:
    """A titled section of the details: its title in bold and its lead, its entries as bullets, its tables
    and the remarks under them, the entries after them, its closing note."""
    own = section.lead or section.entries or section.tables or section.remarks or section.after or section.notes
    head = Text.assemble("\n", _title(section.title), ":" if own or not section.parts else "", style="bold")
    if section.lead is not None:
        head.append(" ")
        start = len(head)
        head.append_text(_phrases([section.lead]))
        style = VERDICT_STYLE[section.verdict] if section.verdict is not None else \
            "dim" if section.quiet else SEVERITY_STYLE[section.severity] if section.severity is not None else ""
        head.stylize(style, start)
    parts: list[RenderableType] = [head, *_bullets(section.entries)]
    parts += [_table(t) for t in section.tables]
    parts += [Hanging("", _phrases([remark])) for remark in section.remarks]
    parts += _bullets(section.after)
    parts += [Hanging("", _phrases([note]), style="dim") for note in section.notes]
    return parts + [p for part in section.parts for p in section_parts(part)]


def answer_parts(answer: AnswerOutline) -> list[RenderableType]:
    """The answer first (:mod:`nsysaudit.render.outline`): the verdict and its sentence, each entry
    (a finding: what, when, who held the memory; a censored call; a host stall), what limits the verdict."""
    parts: list[RenderableType] = [Text("")]
    line = Text(answer.verdict, style=VERDICT_STYLE[answer.verdict])
    parts.append(Hanging("", Text.assemble(line, ": ", _phrases([answer.summary])), indent=0))
    for e in answer.entries:
        parts += _entry(e)
    if answer.also:
        parts.append(Text(f"  {words.ALSO}:", style="dim"))
        parts += [Hanging("- ", _phrases([p]), indent=4) for p in answer.also]
    return parts


def glance(lines: Sequence[str]) -> list[RenderableType]:
    """One line each of what the details hold (:func:`nsysaudit.render.outline.glance`), so a person
    knows what --details would show."""
    out: list[RenderableType] = [Text("")]
    out += [Hanging("", literal(line, 2000), style="dim") for line in lines]
    out.append(Hanging("", Text(words.GLANCE_FULL_REPORT, style="dim")))
    return out


def analysis_renderable(result: AnalysisResult, *, details: bool = False) -> RenderableType:
    """The single-arm report as one rich renderable: the answer first; with ``details`` every section."""
    d = result.to_dict()
    parts: list[RenderableType] = [head_text(report_outline.input_head(d)), *answer_parts(outline.analysis_answer(d))]
    if not details:
        return Group(*parts, *_sections(report_outline.warnings(d)), *glance(outline.glance(d)))
    parts.append(Text("\n--- details ---", style="dim"))
    return Group(*_hang(parts + _sections(report_outline.details(d))))


def _sections(sections: Sequence[Section]) -> list[RenderableType]:
    return [part for section in sections for part in section_parts(section)]


_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")


class _NoTrailingSpaces:
    """A text stream that drops the spaces rich pads lines with (wrapped text keeps the space it
    broke at, tables pad every cell) before each newline, style codes kept; all else is the
    stream's own (``isatty``, ``encoding``, ``fileno``: rich's terminal detection sees the real one)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_TRAILING.sub(r"\1", text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def console(*, stderr: bool = False) -> Console:
    """The console reports are printed on: no highlighting of numbers or paths (trace text is data),
    no trailing spaces on a line."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=cast(TextIO, _NoTrailingSpaces(stream)), stderr=stderr, highlight=False)


def to_text(renderable: RenderableType, *, width: int = 80) -> str:
    """``renderable`` as the terminal shows it at ``width`` columns, without colour (goldens, tests)."""
    buffer = io.StringIO()
    Console(file=cast(TextIO, _NoTrailingSpaces(buffer)), width=width, color_system=None, force_terminal=False,
            highlight=False).print(renderable)
    return buffer.getvalue()


def show(renderable: RenderableType, *, stderr: bool = False) -> None:
    """Print ``renderable`` on stdout (or stderr)."""
    console(stderr=stderr).print(renderable)


def progress_bar() -> TerminalProgress:
    """A transient progress bar on stderr (see :class:`TerminalProgress`)."""
    return TerminalProgress(console(stderr=True))


# --- sealed reports: compare and verify ----------------------------------------------------------


def comparison_answer_parts(answer: ComparisonAnswerOutline) -> list[RenderableType]:
    """The comparison's answer: the failure in one arm or both, each arm's answer, what the memory
    did differently at the call that failed, and what the comparison cannot establish."""
    parts: list[RenderableType] = [Text(""), Hanging("", _phrases([answer.summary]), indent=0, style="bold")]
    for section in answer.sections:
        title = _title(section.title).plain
        title = title[:1].lower() + title[1:]
        parts.append(Text(f"\n{title}", style="bold yellow" if section.severity == "warning" else "bold"))
        parts += _bullets(section.entries)
    return parts


def comparison_renderable(
    doc: ComparisonDocument | SealedAnalysisDocument, *, details: bool = True
) -> RenderableType:
    """The comparison document (``report.json`` of ``nsysaudit compare``) for the terminal: its
    answer first, then (``details``) the differences. (A sealed folder's document is either kind:
    one of another kind is refused.)"""
    comparison = report_outline.comparison(doc)
    parts = [head_text(report_outline.comparison_head(comparison)),
             *comparison_answer_parts(outline.comparison_answer_outline(comparison))]
    if not details:
        return Group(*parts)
    parts.append(Text("\n--- details ---", style="dim"))
    return Group(*_hang(parts + _sections(report_outline.comparison_details(comparison))))


def sealed_text(directory: str, files: Sequence[str]) -> RenderableType:
    """Where a sealed report was written, and what it holds (the seal itself is printed last)."""
    return Group(*_hang([Text(""), head_text(report_outline.sealed_head(directory, files))]))


def verification_renderable(
    directory: str, files: Sequence[str], inputs: Sequence[Mapping[str, object]], rerun: bool, *, full: bool = False
) -> RenderableType:
    """What ``nsysaudit verify`` checked (it only returns when every check passed); digests short unless ``full``."""
    return Group(*_hang([head_text(report_outline.verified_head(directory, files, inputs, rerun, full=full))]))


class TerminalProgress:
    """A rich progress bar for long steps (see :class:`nsysaudit.core.progress.Progress`).

    Drawn on stderr, transient (it disappears when the step ends), so the report on stdout is the
    same with or without it. The CLI uses it only when stdout is a terminal and --json is off.
    """

    def __init__(self, console: Console) -> None:
        self._progress = RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None

    def start(self, label: str, total: int | None) -> None:
        if self._task is None:
            self._progress.start()
        else:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(label, total=total)

    def advance(self, amount: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, amount)

    def finish(self) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None
            self._progress.stop()
