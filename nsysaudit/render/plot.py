"""Pictures of an analysis: the checks and the call behind ``nsysaudit plot``."""

from __future__ import annotations

import os
from pathlib import Path

from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.timeline import DEFAULT_BOUNDARY, notes_of, parse_around, timeline


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
        stall=value if kind == "stall" else None,
        window_ns=window_ns,
        boundary=boundary,
    )
    return pictures.save([drawn], out), notes_of([drawn])


