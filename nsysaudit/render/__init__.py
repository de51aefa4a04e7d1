"""Rendering: a document in, text or bytes out. The only code that uses rich.

- :mod:`nsysaudit.render.terminal`: the terminal reports (rich), the progress bar;
- :mod:`nsysaudit.render.markdown`: ``report.md``;
- :mod:`nsysaudit.render.json`: canonical JSON bytes (compact, streamed, or indented);
- :mod:`nsysaudit.render.pictures`: the timeline pictures (the only matplotlib code, imported only
  when a picture is drawn), :mod:`nsysaudit.render.html`: ``report.html``;
- :func:`escape`: trace text (and the CLI's one-line errors) shown as data (:mod:`nsysaudit.core.text`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysaudit.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from nsysaudit.core.defaults import DEFAULT_BOUNDARY
    from nsysaudit.core.text import escape
    from nsysaudit.render.json import analysis_json, compact, indented, write_analysis
    from nsysaudit.render.markdown import analysis_markdown, comparison_markdown
    from nsysaudit.render.plot import check_picture_out, plot_timeline
    from nsysaudit.render.terminal import (
        analysis_renderable,
        comparison_renderable,
        progress_bar,
        sealed_text,
        show,
        verification_renderable,
    )
    from nsysaudit.reports.timeline import parse_around

# Imported on first use (PEP 562): JSON output never loads rich or the Markdown renderer.
_HOMES = {
    **dict.fromkeys(("analysis_json", "compact", "indented", "write_analysis"), "nsysaudit.render.json"),
    **dict.fromkeys(("analysis_markdown", "comparison_markdown"), "nsysaudit.render.markdown"),
    **dict.fromkeys(("check_picture_out", "plot_timeline"), "nsysaudit.render.plot"),
    **dict.fromkeys(
        ("analysis_renderable", "comparison_renderable", "progress_bar", "sealed_text", "show",
         "verification_renderable"),
        "nsysaudit.render.terminal",
    ),
    "DEFAULT_BOUNDARY": "nsysaudit.core.defaults",
    "parse_around": "nsysaudit.reports.timeline",
    "escape": "nsysaudit.core.text",
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())

__all__ = [
    "DEFAULT_BOUNDARY",
    "analysis_json",
    "analysis_markdown",
    "analysis_renderable",
    "check_picture_out",
    "compact",
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
