"""Running the real ``nsys`` CLI: finding it, and exporting ``.nsys-rep`` reports to SQLite.

Exports are cached in a user cache folder keyed by the report's SHA-256, so a second analysis of
the same report does not export again, and nothing is ever written beside the evidence.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nsysaudit.errors import ExportFailed, NsysNotFound

ENV_NSYS = "NSYSAUDIT_NSYS"
ENV_CACHE = "NSYSAUDIT_CACHE"


def cache_dir() -> Path:
    """Where exports of .nsys-rep reports are cached: ``$NSYSAUDIT_CACHE``, else the XDG cache."""
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nsysaudit"


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
        "is an .nsys-rep and no nsys CLI was found to export it "
        "(run `make nsys`, or pass --nsys PATH / set NSYSAUDIT_NSYS)",
    )


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
    """An SQLite export of a report, and whether this call made it or found it cached."""

    sqlite: Path
    cache_hit: bool
    nsys: Path


def export_report(report: Path, sha256: str, nsys: Path, *, timeout: float = 3600.0) -> CachedExport:
    """Export ``report`` to SQLite with the real nsys CLI, or reuse the cached export.

    The export is written in a private temporary folder inside the cache and moved into place
    atomically, so an interrupted export never leaves a half-written cache entry.
    """
    cache = cache_dir() / "exports"
    target = cache / f"{sha256}.sqlite"
    if target.is_file() and target.stat().st_size > 0:
        return CachedExport(target, True, nsys)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportFailed(report, f"cannot create the export cache {cache}: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="export-", dir=cache) as tmp:
        # nsys reads the report through a copy-free symlink named by digest, so that nothing it
        # may write next to its input (it can create side files) lands beside the evidence.
        link = Path(tmp) / f"{sha256}.nsys-rep"
        link.symlink_to(report.resolve())
        out = Path(tmp) / "export.sqlite"
        cmd = [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(link)]
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise ExportFailed(report, f"nsys export did not finish in {timeout:.0f} s") from None
        except OSError as exc:
            raise ExportFailed(report, f"cannot run {nsys}: {exc.strerror}") from None
        if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
            detail = " ".join((proc.stderr or proc.stdout or "").split())[:300]
            raise ExportFailed(report, f"nsys export failed (exit {proc.returncode}): {detail or 'no output'}")
        os.replace(out, target)
    return CachedExport(target, False, nsys)
