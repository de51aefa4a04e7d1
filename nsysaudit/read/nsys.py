"""Running the real ``nsys`` CLI: finding it, and exporting ``.nsys-rep`` reports to SQLite.

Exports are cached in a user cache folder keyed by the report's SHA-256, so a second analysis of
the same report does not export again, and nothing is ever written beside the evidence. Each
entry is bound to its report and to the nsys that exported it by a record beside it, checked on
every use (see :func:`export_report`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import ExportFailed, NsysAuditError, NsysNotFound
from nsysaudit.core.files import write_atomic
from nsysaudit.core.limits import read_at_most
from nsysaudit.core.shapes import JSON
from nsysaudit.read.cache import CACHE_FORMAT, ENV_CACHE, EntryLock, cache_dir, max_bytes, prune_cache

__all__ = ["CACHE_FORMAT", "ENV_CACHE", "CachedExport", "cache_dir", "export_report", "find_nsys", "nsys_version"]

ENV_NSYS = "NSYSAUDIT_NSYS"


def find_nsys(explicit: str | os.PathLike[str] | None, report: Path) -> Path:
    """The nsys binary to use: ``--nsys``, then ``$NSYSAUDIT_NSYS``, then ``nsys`` on PATH."""
    for candidate, origin in ((explicit, "--nsys"), (os.environ.get(ENV_NSYS), ENV_NSYS)):
        if candidate:
            path = Path(candidate)
            if path.is_file() and os.access(path, os.X_OK):
                # Absolute: the export runs nsys from a private working directory.
                return path.absolute()
            raise NsysNotFound(report, f"{origin} names {candidate}, which is not an executable file")
    found = shutil.which("nsys")
    if found:
        return Path(found).absolute()
    raise NsysNotFound(
        report,
        f"is an Nsight Systems report ({report.suffix or 'no suffix'}) and no nsys CLI was found to export it: "
        "install Nsight Systems (its nsys on PATH), pass --nsys PATH or set NSYSAUDIT_NSYS, or give its "
        "SQLite export (nsys export --type sqlite)" + _checkout_hint(),
    )


def _checkout_hint() -> str:
    """In a checkout of nsysaudit (not a pip install), the make target that installs Debian's nsys."""
    installer = Path(__file__).resolve().parents[2] / "scripts" / "install-nsys.sh"
    return "; in this checkout, `make nsys` installs Debian's" if installer.is_file() else ""


def nsys_version(nsys: Path) -> str | None:
    """The version line ``nsys --version`` prints, or None if it prints nothing usable."""
    try:
        out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[-1] if text else None


@dataclass(frozen=True)
class CachedExport:
    """An SQLite export of a report, whether this call made it or found it cached, its SHA-256
    and the ``nsys --version`` line of the nsys that made it. ``lock``: the entry's lock, held
    shared while this object lives (:mod:`nsysaudit.read.cache`: no process removes or replaces
    the entry meanwhile); :meth:`release` lets it go sooner."""

    sqlite: Path
    cache_hit: bool
    nsys: Path
    sha256: str
    exported_with: str | None
    lock: EntryLock | None = field(default=None, repr=False, compare=False)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def _record_path(entry: Path) -> Path:
    return entry.with_suffix(".json")


def _cached(report: Path, entry: Path, sha256: str, version: str | None) -> str | None:
    """The entry's SHA-256 (as its record names it) if the entry is bound to this report and this
    nsys, else None (stale).

    The record beside the entry names the report's SHA-256, the nsys version that exported it
    and the entry's own SHA-256 and size; any difference (another file put in its place, an
    export by another nsys, a half-written pair) makes it stale, never trusted.
    """
    try:
        _refuse_odd_entry(report, entry)
        record_file = _record_path(entry)
        if not entry.is_file() or record_file.is_symlink() or not record_file.is_file():  # never open a FIFO
            return None
        record: JSON = json.loads(read_at_most(record_file).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None  # no record, or an unreadable one (not JSON, nested too deep, an integer too long): export again
    if not isinstance(record, dict) or record.get("format") != CACHE_FORMAT:
        return None
    if record.get("report_sha256") != sha256 or record.get("exported_with") != version:
        return None
    try:
        if entry.stat().st_size != record.get("size_bytes"):
            return None
        digest = sha256_file(entry)
    except OSError:
        return None
    return digest if digest == record.get("sha256") else None


def export_report(report: Path, sha256: str, nsys: Path, *, timeout: float = 3600.0) -> CachedExport:
    """Export ``report`` to SQLite with the real nsys CLI, or reuse the cached export.

    A cache entry is ``exports/<report sha256>.sqlite`` with its record ``<report sha256>.json``
    beside it (see :func:`_cached`); it is used only when the record binds it to this report and
    to the version of ``nsys``, else the report is exported again. The export is written in a
    private temporary folder inside the cache and moved into place, then its record is written
    beside it (atomically, last), so an interrupted export never leaves an entry that is trusted. An
    entry that is a folder, a cache that cannot be created or written: :class:`ExportFailed`
    (one line, exit 2), never a fallback to another location.

    The entry is read under its lock held shared and made under it held exclusive
    (:mod:`nsysaudit.read.cache`): a second process exporting the same report waits, then finds
    it. After a new export, the least recently used entries past ``$NSYSAUDIT_CACHE_MAX`` go.
    """
    cache = cache_dir() / "exports"
    target = cache / f"{sha256}.sqlite"
    bound = max_bytes()  # a bad $NSYSAUDIT_CACHE_MAX is refused before anything runs
    _refuse_odd_entry(report, target)
    version = nsys_version(nsys)
    lock = _lock(report, cache, sha256, exclusive=False, timeout=timeout, needed=False)
    cached = _cached(report, target, sha256, version)
    if cached is not None:
        if lock is not None:
            lock.touch()
        return CachedExport(target, True, nsys, cached, version, lock)
    if lock is not None:
        lock.release()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(report, cache, exc) from None
    lock = _lock(report, cache, sha256, exclusive=True, timeout=timeout, needed=True)
    try:
        cached = _cached(report, target, sha256, version)  # another process may have made it meanwhile
        if cached is None:
            cached = _export_into(report, sha256, nsys, version, target, timeout)
            made = True
        else:
            made = False
        if lock is not None:
            lock.touch()
            lock.share()
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if made and bound is not None:
        with contextlib.suppress(OSError, NsysAuditError):  # the export is done; the bound is kept next time
            prune_cache(bound, folder=cache)
    return CachedExport(target, not made, nsys, cached, version, lock)


def _refuse_odd_entry(report: Path, target: Path) -> None:
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise ExportFailed(
            report, f"the export cache entry {target} is not a regular file; remove it (or point {ENV_CACHE} elsewhere)"
        )


def _unwritable(report: Path, cache: Path, exc: OSError) -> ExportFailed:
    return ExportFailed(
        report, f"cannot write the export cache {cache}: {exc.strerror or exc}; set {ENV_CACHE} to a writable folder"
    )


def _lock(report: Path, cache: Path, sha256: str, *, exclusive: bool, timeout: float, needed: bool) -> EntryLock | None:
    """The entry's lock, waiting for it as long as an export may take. A cache whose lock cannot be
    made (read-only) is read without it; one that must be written is :class:`ExportFailed`."""
    try:
        lock = EntryLock.acquire(cache, sha256, exclusive=exclusive, wait_s=timeout)
    except OSError as exc:  # no cache folder yet (nothing to read), or a read-only one
        if needed:
            raise _unwritable(report, cache, exc) from None
        return None
    if lock is None:
        raise ExportFailed(
            report, f"the export cache entry {cache / f'{sha256}.sqlite'} was in use by another process for "
            f"{timeout:.0f} s; try again, or set {ENV_CACHE} to another folder"
        )
    return lock


def _export_into(report: Path, sha256: str, nsys: Path, version: str | None, target: Path, timeout: float) -> str:
    """Export ``report`` in a private folder of the cache, move it to ``target``, write its record
    last; the export's SHA-256."""
    cache = target.parent
    try:
        staging = tempfile.TemporaryDirectory(prefix="export-", dir=cache)
    except OSError as exc:
        raise _unwritable(report, cache, exc) from None
    with staging as tmp:
        out = _run_export(report, sha256, nsys, Path(tmp), timeout)
        digest = sha256_file(out)
        fresh = {
            "format": CACHE_FORMAT,
            "report_sha256": sha256,
            "exported_with": version,
            "sha256": digest,
            "size_bytes": out.stat().st_size,
        }
        try:
            os.replace(out, target)
            write_atomic(_record_path(target), (json.dumps(fresh, indent=2, sort_keys=True) + "\n").encode())
        except OSError as exc:
            raise ExportFailed(report, f"cannot write the export cache entry {target}: {exc.strerror}") from None
    return digest


def _run_export(report: Path, sha256: str, nsys: Path, tmp: Path, timeout: float) -> Path:
    """Run ``nsys export`` into ``tmp``; the export's path."""
    # nsys reads the report through a copy-free symlink named by digest, so that nothing it
    # may write next to its input (it can create side files) lands beside the evidence.
    link = tmp / f"{sha256}.nsys-rep"
    link.symlink_to(report.resolve())
    out = tmp / "export.sqlite"
    cmd = [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(link)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=tmp, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise ExportFailed(report, f"nsys export did not finish in {timeout:.0f} s") from None
    except OSError as exc:
        raise ExportFailed(report, f"cannot run {nsys}: {exc.strerror}") from None
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        said = (proc.stderr or "") + (proc.stdout or "")
        if _UNPARSEABLE.search(said):
            # What nsys prints for a report it cannot parse is a C++ exception dump; for a report
            # made by a newer Nsight Systems (nsys 2023.4 on a 2025.3 report) it is the same.
            found = nsys_version(nsys) or str(nsys)
            raise ExportFailed(
                report,
                f"{found} cannot parse this report (ProtobufParseException): it was made by a newer Nsight "
                "Systems, or it is damaged; export it with the nsys of the release that made it "
                "(--nsys PATH or $NSYSAUDIT_NSYS)",
            )
        detail = export_cause(proc.stderr or "", proc.stdout or "")
        raise ExportFailed(report, f"nsys export failed (exit {proc.returncode}): {detail or 'no output'}")
    return out


_UNPARSEABLE = re.compile(r"ProtobufParseException|Can't parse message of type")
# nsys export's progress ("Processing 11832 events: [1%    ]", redrawn after a carriage return)
_PROGRESS = re.compile(r"(Processing\b.*)?\[[=\s]*\d+%[=\s]*\]", re.IGNORECASE)
_SAYS_ERROR = re.compile(r"error|fail|cannot|can't|unable|no space|denied|exception|abort", re.IGNORECASE)
CAUSE_CHARS = 300


def export_cause(*outputs: str) -> str:
    """Why ``nsys export`` failed, from what it printed: the lines that say an error (else its last
    lines), never its progress bar, which comes first and would fill the message. Long text keeps
    its end, where nsys says the cause ("Exportation error: ... No space left on device").

    >>> export_cause("\\rProcessing 9 events: [1%   ]" * 500 + "\\nExportation error: No space left on device\\n")
    'Exportation error: No space left on device'
    """
    lines = [line.strip() for text in outputs for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not _PROGRESS.fullmatch(line)]
    said = [line for line in lines if _SAYS_ERROR.search(line)][-3:] or lines[-2:]
    text = " ".join(" ".join(said).split())
    return text if len(text) <= CAUSE_CHARS else "..." + text[-(CAUSE_CHARS - 3):]
