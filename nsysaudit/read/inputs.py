"""What the user named: an export (``.sqlite``) or a report (``.nsys-rep``, exported with the real nsys).

:func:`check_input` refuses what is not a file; :func:`open_input` starts the input's SHA-256 in the
background, exports a report through the cache (:mod:`nsysaudit.read.nsys`) and opens the export
read-only (:func:`nsysaudit.read.source.probe`). :class:`InputInfo` describes the input in reports.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, NotRequired, TypedDict, TypeVar, cast

from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import UnusableInput
from nsysaudit.core.limits import refuse_unfit
from nsysaudit.core.paths import refuse_undecodable_name
from nsysaudit.core.progress import Progress
from nsysaudit.read.source import ExportFile, probe

if TYPE_CHECKING:  # the export of a report (and its cache) is loaded only for a report
    from nsysaudit.read import nsys

InputKind = Literal["sqlite", "nsys-rep"]
T = TypeVar("T")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


# A report's first bytes name the Nsight Systems release that wrote it ("NVIDIA Tegra Profiler Report
# 2023@4@4@54-..." in a 2023.4.4 .nsys-rep): the capture's version, not the one that exports it.
_REPORT_HEADER = re.compile(rb"\ANVIDIA [A-Za-z ]*Report ([0-9]{4}(?:@[0-9]+){1,4})")


def report_version(path: Path) -> str | None:
    """The Nsight Systems version a report was captured with, from its header; None when the header
    does not say (the export's own version is then all the report shows)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    m = _REPORT_HEADER.match(head)
    return m.group(1).decode("ascii").replace("@", ".") if m else None


def input_kind(path: Path) -> InputKind:
    """``nsys-rep`` for Nsight Systems reports (by suffix), ``sqlite`` for everything else."""
    return "nsys-rep" if path.name.lower().endswith(REPORT_SUFFIXES) else "sqlite"


@dataclass(frozen=True)
class Engine:
    """What read the CUDA API table: ``name`` (``native``, ``adbc``, ``sqlite3``; ``none`` without
    the table), the ``sqlite_version`` it read with, and why the native engine did not
    (``native_unavailable``; None where it did, or could have)."""

    name: str
    sqlite_version: str
    native_unavailable: str | None = None


# A document's ``input`` and its parts (named in nsysaudit.reports.documents, which makes the
# contract from them): what nsysaudit.reports.analysis.input_entry makes of an InputInfo.
class InputExport(TypedDict):
    """A ``.nsys-rep``'s export: its SHA-256, whether the export cache held it (``cache_hit``), the
    ``nsys --version`` line of the nsys that made it (``exported_with``) and the Nsight Systems
    version its own META_DATA_EXPORT names (``nsys_version``)."""

    sha256: str | None
    cache_hit: bool | None
    exported_with: str | None
    nsys_version: str | None


class Input(TypedDict):
    """The input: what was read and how. ``export``: a .nsys-rep's export (digest, cache, nsys);
    ``engine`` and the SQLite that read it are the install's, not the evidence's."""

    path: str
    kind: InputKind
    sha256: str
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    session_start_utc_ns: int | None
    tables: dict[str, str]
    engine: NotRequired[str]
    sqlite_version: NotRequired[str]
    native_unavailable: NotRequired[str | None]
    export: NotRequired[InputExport]


@dataclass(frozen=True)
class InputInfo:
    """What was analyzed: the file the user named and, for reports, the export made from it."""

    path: str
    sha256: str
    kind: InputKind
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    tables: dict[str, str]
    session_start_utc_ns: int | None
    export_sha256: str | None = None
    export_cache_hit: bool | None = None
    exported_with: str | None = None
    export_nsys_version: str | None = None  # a report's export: the version its META_DATA_EXPORT names
    engine: Engine | None = None



class Background(Generic[T]):
    """``work()`` on a daemon thread (it never delays an error exit); :meth:`result` waits for it and
    raises, on the caller's thread, what it raised. For work that holds no GIL while it waits:
    hashlib over a file, SQLite stepping a statement."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._value = work()
        except BaseException as exc:
            self._error = exc

    def done(self) -> bool:
        """Whether the work has ended (:meth:`result` would not wait)."""
        return not self._thread.is_alive()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)


class BackgroundDigest:
    """SHA-256 of a file computed in a daemon thread (hashlib releases the GIL; never delays an error exit)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._work = Background(lambda: sha256_file(path), "nsysaudit-sha256")

    def result(self) -> str:
        try:
            return self._work.result()
        except OSError as exc:
            raise UnusableInput(self._path, f"cannot read: {exc.strerror}") from None


def check_input(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path, or :class:`UnusableInput` when it is missing or not a regular file."""
    given = Path(path)
    if not given.exists():
        raise UnusableInput(given, "no such file")
    if not given.is_file():
        raise UnusableInput(given, "not a regular file")
    return given


@dataclass
class OpenedInput:
    """An input opened for reading: its export (open, read-only) and what describes it."""

    given: Path
    shown_as: str
    kind: InputKind
    export: ExportFile
    digest: BackgroundDigest
    cached: nsys.CachedExport | None = None  # a report's export, made or found in the cache

    def info(self, tables: dict[str, str], session_start_utc_ns: int | None, engine: Engine | None = None) -> InputInfo:
        """The input's description once its export is loaded (``tables`` read, session start, the engine)."""
        captured = report_version(self.given) if self.kind == "nsys-rep" else None
        return InputInfo(
            path=self.shown_as,
            sha256=self.digest.result(),
            kind=self.kind,
            size_bytes=self.given.stat().st_size,
            # a report: the release that captured it (its header); an export: the one that wrote it
            nsys_version=captured or self.export.nsys_version,
            export_nsys_version=self.export.nsys_version if self.kind == "nsys-rep" else None,
            schema_version=self.export.schema_version,
            tables=tables,
            session_start_utc_ns=session_start_utc_ns,
            engine=engine,
            export_sha256=self.cached.sha256 if self.cached is not None else None,
            export_cache_hit=self.cached.cache_hit if self.cached is not None else None,
            # the nsys that made this export, cached or not
            exported_with=self.cached.exported_with if self.cached is not None else None,
        )


def open_input(
    given: Path, *, shown_as: str, nsys_path: str | os.PathLike[str] | None = None, progress: Progress | None = None
) -> OpenedInput:
    """Start hashing ``given``, export it when it is a report, and open the export read-only.

    An ``.nsys-rep`` needs its digest first: it keys the export cache.
    """
    refuse_undecodable_name(given)
    kind = input_kind(given)
    digest = BackgroundDigest(given)
    cached = None
    if kind == "nsys-rep":
        from nsysaudit.read import nsys

        if given.stat().st_size == 0:
            raise UnusableInput(given, "empty file (0 bytes), not an Nsight Systems report")
        binary = nsys.find_nsys(nsys_path, given)
        if progress is not None:
            progress.start(f"exporting {given.name} with nsys", None)
        try:
            cached = nsys.export_report(given, digest.result(), binary)
        finally:
            if progress is not None:
                progress.finish()
        sqlite_path = cached.sqlite
    else:
        sqlite_path = given
    with contextlib.suppress(OSError):  # a file that cannot be stat'ed is refused by the probe, one line
        refuse_unfit(given, sqlite_path.stat().st_size)
    return OpenedInput(given, shown_as, kind, probe(sqlite_path), digest, cached)
