"""Progress of long steps (exporting a report, scanning the CUDA API table), without rich.

The library reports through this small protocol; the CLI passes a rich implementation
(:class:`nsysaudit.render.terminal.TerminalProgress`) only when stdout is a terminal and ``--json`` is not
given, so pipes, CI logs and JSON output stay quiet. Notebooks may pass their own.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives the steps of an analysis. ``advance`` may be called from several threads."""

    def start(self, label: str, total: int | None) -> None:
        """A step begins; ``total`` is its size in rows, or None when unknown (a spinner)."""

    def advance(self, amount: int) -> None:
        """``amount`` more rows of the current step are done."""

    def finish(self) -> None:
        """The current step is over."""
