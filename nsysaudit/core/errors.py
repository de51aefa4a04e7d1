"""The error hierarchy: one root, a few one-line facts, each with the exit code the CLI uses."""

from __future__ import annotations

import contextlib
import errno
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TypedDict


class NsysAuditError(Exception):
    """Root of every error nsysaudit raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 2


class UnusableInput(NsysAuditError):
    """An input file cannot be analyzed at all (empty, not SQLite, truncated, not an nsys export)."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class NsysNotFound(UnusableInput):
    """An .nsys-rep was given but no nsys CLI could be found to export it."""


class ExportFailed(UnusableInput):
    """The nsys CLI could not export an .nsys-rep to SQLite."""


class BadOption(NsysAuditError):
    """An option's value cannot be used (for example a malformed --anchor)."""


class OutputExists(BadOption):
    """The output folder already exists (``--force`` replaces an earlier sealed report folder)."""


class OutputFailed(NsysAuditError):
    """Standard output could not be written (closed, full, or its reader went away)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"standard output: cannot write ({error.strerror or error}); the output is incomplete")
        self.error = error

    @property
    def broken_pipe(self) -> bool:
        """The reader went away (``| head``): not worth an error line."""
        return isinstance(self.error, BrokenPipeError) or self.error.errno == errno.EPIPE


class OutputNotWritable(BadOption):
    """The output folder cannot be written where it was asked for (its parent is a file, read-only, ...)."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: cannot write the report folder here: {problem} (nothing was written)")
        self.path = str(path)


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM) while worker processes ran: raised in the main thread
    so that the workers are stopped on the way out. Not an ``Exception``: nothing may catch it as an
    error of one input. The CLI exits with 143, as a process killed by SIGTERM would."""

    exit_code = 143


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) while a command ran: raised in the main thread in place of
    ``KeyboardInterrupt`` (which click would answer with a line of its own), so that the CLI says
    one line and exits with 130."""

    exit_code = 130


@contextlib.contextmanager
def signal_raises(signum: int, error: type[BaseException]) -> Iterator[None]:
    """While the block runs, signal ``signum`` raises ``error`` in the main thread (where Python
    runs signal handlers), so that what the block started is undone on the way out; the earlier
    handler is restored after. Elsewhere than the main thread it does nothing (handlers can only
    be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_error(signum: int, frame: FrameType | None) -> None:
        raise error()

    earlier = signal.signal(signum, raise_error)
    try:
        yield
    finally:
        signal.signal(signum, earlier)


class CheckFailed(NsysAuditError):
    """A check the user asked for did not pass (for example ``verify`` found a changed file)."""

    exit_code = 1


class ReportWarning(TypedDict):
    """A problem found in the evidence that the analysis survived: ``kind``, how many, and what it means."""

    kind: str
    count: int
    message: str


def warning(kind: str, count: int, message: str) -> ReportWarning:
    """One entry of a report's ``warnings`` (a value: steps return them, nobody appends to a shared list)."""
    return {"kind": kind, "count": int(count), "message": message}


class PictureNotWritable(BadOption):
    """The picture file cannot be written where it was asked for (no such folder, read-only, ...)."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: cannot write the picture here: {problem} (nothing was written)")
        self.path = str(path)


class ExpectationsUnusable(NsysAuditError):
    """The expectations file cannot be used (unreadable, not TOML, a key or value it does not know)."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


class BatchOutputNotWritable(BadOption):
    """The batch output cannot be written where it was asked for (exit 2). ``kept``: parts of finished
    inputs were written before (they stay, for a rerun); else nothing was written."""

    def __init__(self, path: object, problem: str, *, kept: bool = False) -> None:
        what = "the parts finished are kept, the tables were not written" if kept else "nothing was written"
        super().__init__(f"{path}: cannot write the batch output here: {problem} ({what})")
        self.path = str(path)
        self.problem = problem
        self.kept = kept


class EngineUnavailable(NsysAuditError):
    """The engine asked for cannot run here (dask not installed, no scheduler at the address)."""
