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
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.text import byte_size, escape
from nsysaudit.render import details_outline as sections
from nsysaudit.render import outline
from nsysaudit.render.comparison_outline import differences_sections, not_established_section
from nsysaudit.render.memory_outline import memory_section
from nsysaudit.render.outline import AnswerOutline, ComparisonAnswerOutline, Entry, Phrase, Section, TableOutline
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import (
    AnalysisDocument,
    ComparisonDocument,
    SealedAnalysisDocument,
)
from nsysaudit.reports.ranks import device_lines

MAX_TEXT = 80
MAX_LIBRARY_ROWS = 40
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


def ns(value: int | None) -> Text:
    return Text("unknown", style="dim italic") if value is None else Text(f"{value:,}")


def nbytes(value: int | float | None) -> Text:
    if value is None:
        return Text("unknown", style="dim italic")
    return Text(byte_size(value))


def _bytes_cell(value: int | None, *, unit: bool = True) -> Text:
    """A table cell: the exact bytes, and the binary unit on a line of its own so columns stay narrow
    (without ``unit``, the bytes without " B": the column's heading says "(B)")."""
    if value is None:
        return nbytes(value)
    cell = byte_size(value).replace(" (", "\n(", 1)
    return Text(cell if unit else cell.replace(" B\n", "\n", 1))


VERDICT_STYLE = {"failure_found": "bold red", "inconclusive": "bold yellow", "no_failure": "bold green"}


def ident(value: int | None) -> Text:
    """A pid, tid or correlation id: an identifier, never shown with thousands separators."""
    return Text("unknown", style="dim italic") if value is None else Text(str(value))


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


def hanging(lead: str, body: Text, *, indent: int = 2, style: str | None = None) -> Hanging:
    """See :class:`Hanging`."""
    return Hanging(lead, body, indent=indent, style=style)


def short_hash(sha256: str | None) -> str:
    """A digest as a person reads it: its first 12 hex digits (the whole one is in --json and the seal)."""
    return "unknown" if sha256 is None else f"{sha256[:12]}…"


def input_head(d: AnalysisDocument, command: str = "analyze") -> Text:
    inp = d["input"]
    head = Text()
    head.append(f"nsysaudit {command} ", style="bold")
    head.append_text(literal(inp["path"], 400))
    head.append(f"\n  {inp['kind']}, sha256 {short_hash(inp['sha256'])}, nsys ")
    head.append_text(literal(inp["nsys_version"]))  # META_DATA_EXPORT text: data like any trace string
    head.append(", schema ")
    head.append_text(literal(inp["schema_version"]))
    if "engine" in inp:  # how this install read it (not in a sealed report: see metadata.json)
        head.append(f"\n  engine {inp['engine']}, SQLite {inp['sqlite_version']}")
        if inp["native_unavailable"] and inp["engine"] != "native":  # its first words; the rest in the JSON
            head.append(f" (native engine {inp['native_unavailable'].split(' (')[0]})", style="yellow")
    if inp["kind"] == "nsys-rep":
        exp = inp["export"]
        hit = "cache hit" if exp["cache_hit"] else "exported now"
        head.append(f"\n  export sha256 {short_hash(exp['sha256'])} ({hit})")
    return head


SEVERITY_STYLE = {"failure": "bold red", "warning": "yellow"}
SIZE = {"sentence": 4000, "phrase": 400}  # the room a phrase is given before it is shortened
MORE_IN = {"coverage": "--details"}


def _phrases(phrases: Sequence[Phrase]) -> Text:
    """Phrases said one after the other, ``; `` between them; each quotes trace text: escaped."""
    body = Text()
    for i, p in enumerate(phrases):
        body.append("; " if i else "")
        body.append_text(literal(p.text, SIZE[p.size]))
    return body


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
        line = hanging(lead, body, indent=indent)
    elif e.label is not None:
        lead = f"{e.label}: "
        line = hanging(lead, body, indent=indent, style=style)
    else:
        lead = ""
        body.stylize(style or "")
        line = hanging(lead, body, indent=indent)
    under = [hanging(f"{u.label}: ", _phrases(u.phrases), indent=indent + len(lead), style="bold" if u.strong else None)
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
        parts.append(hanging("- ", body, indent=indent))
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


def section_parts(section: Section) -> list[RenderableType]:
    """A titled section of the details: its title in bold and its lead, its entries as bullets, its tables,
    the entries after them, its closing note."""
    head = Text(f"\n{section.title}:", style="bold")
    if section.lead is not None:
        head.append(" ")
        head.append_text(_phrases([section.lead]))
        style = VERDICT_STYLE[section.verdict] if section.verdict is not None else \
            "dim" if section.quiet else SEVERITY_STYLE[section.severity] if section.severity is not None else ""
        head.stylize(style, len(section.title) + 3)
    parts: list[RenderableType] = [head, *_bullets(section.entries)]
    parts += [_table(t) for t in section.tables]
    parts += _bullets(section.after)
    if section.note is not None:
        parts.append(hanging("", _phrases([section.note]), style="dim"))
    return parts


def answer_parts(answer: AnswerOutline) -> list[RenderableType]:
    """The answer first (:mod:`nsysaudit.render.outline`): the verdict and its sentence, each entry
    (a finding: what, when, who held the memory; a censored call; a host stall), what limits the verdict."""
    parts: list[RenderableType] = [Text("")]
    line = Text(answer.verdict, style=VERDICT_STYLE[answer.verdict])
    parts.append(hanging("", Text.assemble(line, ": ", _phrases([answer.summary])), indent=0))
    for e in answer.entries:
        parts += _entry(e)
    if answer.also:
        parts.append(Text(f"  {words.ALSO}:", style="dim"))
        parts += [hanging("- ", _phrases([p]), indent=4) for p in answer.also]
    return parts


def glance(d: AnalysisDocument) -> list[RenderableType]:
    """One line each of what the details hold, so a person knows what --details would show."""
    out: list[RenderableType] = [Text("")]
    out += [hanging("", literal(line, 2000), style="dim") for line in outline.glance(d)]
    out.append(hanging("", Text(words.GLANCE_FULL_REPORT, style="dim")))
    return out


def analysis_renderable(result: AnalysisResult, *, details: bool = False) -> RenderableType:
    """The single-arm report as one rich renderable: the answer first; with ``details`` every section."""
    d = result.to_dict()
    parts: list[RenderableType] = [input_head(d), *answer_parts(outline.analysis_answer(d))]
    if not details:
        return Group(*parts, *_warnings(d["warnings"]), *glance(d))
    parts.append(Text("\n--- details ---", style="dim"))

    parts += [*section_parts(sections.verdict_section(d["verdict"], d["verdict_reasons"])),
              *section_parts(sections.capture_section(d["coverage"]))]
    if "alignment" in d:
        tel = d["telemetry"]
        said = sections.telemetry_file(tel["path"], tel["sha256"], tel["events"], tel["bad_lines"])
        parts.extend(section_parts(sections.alignment_section(d["alignment"], said, tel["timeline"])))
    parts += [*section_parts(sections.census_section(d["census"])),
              *section_parts(sections.findings_section(d["findings"], d["memory"])),
              *section_parts(sections.failed_calls_section(d["failed_calls"]))]
    parts.extend(section_parts(memory_section(d["memory"])))
    parts.extend(section_parts(sections.stalls_section(d["stalls"])))
    if "allocator" in d:
        parts.extend(section_parts(outline.allocator_section(d["allocator"])))
    lines = device_lines(d)  # several devices, or a rank known: which process ran where, with its rank
    if lines:
        parts.extend(section_parts(sections.devices_section(lines)))
    parts += [*section_parts(sections.library_calls_section(d["library_calls"])),
              *section_parts(sections.coverage_section(d["coverage"]))]
    parts.extend(_warnings(d["warnings"]))
    return Group(*_hang(parts))


def _warnings(warnings: Sequence[ReportWarning]) -> list[RenderableType]:
    return section_parts(sections.warnings_section(warnings)) if warnings else []


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
    parts: list[RenderableType] = [Text(""), hanging("", _phrases([answer.summary]), indent=0, style="bold")]
    for section in answer.sections:
        title = section.title[0].lower() + section.title[1:]
        parts.append(Text(f"\n{title}", style="bold yellow" if section.severity == "warning" else "bold"))
        parts += _bullets(section.entries)
    return parts


def comparison_renderable(
    doc: ComparisonDocument | SealedAnalysisDocument, *, details: bool = True
) -> RenderableType:
    """The comparison document (``report.json`` of ``nsysaudit compare``) for the terminal: its
    answer first, then (``details``) the differences. (A sealed folder's document is either kind:
    one of another kind is refused.)"""
    if doc["kind"] != "comparison":
        raise TypeError(f"a comparison document is rendered here, not a document of kind {doc['kind']!r}")
    parts: list[RenderableType] = []
    head = Text("nsysaudit compare", style="bold")
    for i in doc["inputs"]:
        head.append(f"\n  {i['role']}: ")
        head.append_text(literal(i["name"], 200))
        head.append(f"  sha256 {short_hash(i['sha256'])}  {i['size_bytes']:,} bytes")
    parts.append(head)
    parts.extend(comparison_answer_parts(outline.comparison_answer_outline(doc)))
    if not details:
        return Group(*parts)
    parts.append(Text("\n--- details ---", style="dim"))
    parts.append(Text(f"\n{words.DIFFERENCES_TITLE}", style="bold"))
    for section in differences_sections(doc["differences"]):
        parts += section_parts(section)
    parts += section_parts(not_established_section(doc["not_established"]))
    return Group(*_hang(parts))


def sealed_text(directory: str, files: Sequence[str]) -> RenderableType:
    """Where a sealed report was written, and what it holds (the seal itself is printed last)."""
    return Group(*_hang([_sealed_lines(directory, files)]))


def _sealed_lines(directory: str, files: Sequence[str]) -> Text:
    t = Text("\nsealed report: ", style="bold")
    t.append_text(literal(directory, 300))
    t.append(f"\n  {', '.join(files)}")
    if "report.html" in files:
        t.append("\n  the full report: ")
        t.append_text(literal(f"{directory.rstrip('/')}/report.html", 300))
        t.append(" (a browser), report.md, report.json")
    return t


def verification_renderable(
    directory: str, files: Sequence[str], inputs: Sequence[Mapping[str, object]], rerun: bool, *, full: bool = False
) -> RenderableType:
    """What ``nsysaudit verify`` checked (it only returns when every check passed); digests short unless ``full``."""
    t = Text("verified ", style="bold green")
    t.append_text(literal(directory, 300))
    t.append(words.verified_files(len(files)))
    for i in inputs:  # the name and role come from metadata.json: a forged one is text too
        t.append("\n  input ")
        t.append_text(literal(i["path"], 300))
        t.append(" (")
        t.append_text(literal(i["role"], 300))
        t.append(") matches the sealed ")
        t.append_text(literal(i["name"], 300))
        digest = str(i["sha256"]) if full else short_hash(str(i["sha256"]))
        t.append(f": sha256 {digest}, {i['size_bytes']:,} bytes")
    if rerun:
        t.append(words.VERIFIED_RERUN)
    return Group(*_hang([t]))


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
