"""Rendering: a document in, text or bytes out. The only code that uses rich.

- :mod:`nsysaudit.render.terminal`: the terminal reports (rich), the progress bar;
- :mod:`nsysaudit.render.markdown`: ``report.md``;
- :mod:`nsysaudit.render.json`: canonical JSON bytes (compact, streamed, or indented);
- :mod:`nsysaudit.render.pictures`: the timeline pictures (the only matplotlib code, imported only
  when a picture is drawn), :mod:`nsysaudit.render.html`: ``report.html``;
- :func:`escape`: trace text (and the CLI's one-line errors) shown as data (:mod:`nsysaudit.text`).
"""

from __future__ import annotations

import os
from pathlib import Path

from nsysaudit.render.json import analysis_json, indented, write_analysis
from nsysaudit.render.markdown import analysis_markdown, comparison_markdown
from nsysaudit.render.terminal import (
    analysis_renderable,
    comparison_renderable,
    progress_bar,
    sealed_text,
    show,
    verification_renderable,
)
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.timeline import DEFAULT_BOUNDARY, notes_of, parse_around, timeline
from nsysaudit.text import escape


def check_picture_out(out: str | os.PathLike[str]) -> Path:
    """Refuse a picture path that cannot be written (one line, exit 2), before any analysis runs."""
    from nsysaudit.render import pictures

    return pictures.check_picture_out(out)


def plot_timeline(
    result: AnalysisResult,
    out: str | os.PathLike[str],
    *,
    around: str | None = None,
    window_ns: int | None = None,
    boundary: str = DEFAULT_BOUNDARY,
) -> tuple[int, list[str]]:
    """Draw ``result``'s timeline into ``out`` (``.svg`` or ``.png``, written atomically) around
    ``around`` (``finding:N`` or a time in trace nanoseconds; see
    :func:`nsysaudit.reports.timeline.parse_around`); return its size in bytes and the notes that
    say what was chosen (focus, window, lanes)."""
    from nsysaudit.render import pictures

    kind, value = parse_around(around) if around is not None else (None, None)
    drawn = timeline(
        result,
        finding=value if kind == "finding" else None,
        at_ns=value if kind == "time" else None,
        window_ns=window_ns,
        boundary=boundary,
    )
    return pictures.save([drawn], out), notes_of([drawn])


__all__ = [
    "DEFAULT_BOUNDARY",
    "analysis_json",
    "analysis_markdown",
    "analysis_renderable",
    "check_picture_out",
    "comparison_markdown",
    "comparison_renderable",
    "escape",
    "indented",
    "parse_around",
    "plot_timeline",
    "progress_bar",
    "sealed_text",
    "show",
    "verification_renderable",
    "write_analysis",
]
