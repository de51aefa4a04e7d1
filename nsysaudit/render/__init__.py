"""Rendering: a document in, text or bytes out. The only code that uses rich.

- :mod:`nsysaudit.render.terminal`: the terminal reports (rich), the progress bar;
- :mod:`nsysaudit.render.markdown`: ``report.md``;
- :mod:`nsysaudit.render.json`: canonical JSON bytes (compact, streamed, or indented);
- :func:`escape`: trace text (and the CLI's one-line errors) shown as data (:mod:`nsysaudit.text`).
"""

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
from nsysaudit.text import escape

__all__ = [
    "analysis_json",
    "analysis_markdown",
    "analysis_renderable",
    "comparison_markdown",
    "comparison_renderable",
    "escape",
    "indented",
    "progress_bar",
    "sealed_text",
    "show",
    "verification_renderable",
    "write_analysis",
]
