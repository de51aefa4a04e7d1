"""The export cache's bound: its entries, who is using each, when each was last used, and pruning.

An entry is ``exports/<report sha256>.sqlite`` with its record ``<sha256>.json`` (made by
:func:`nsysaudit.read.nsys.export_report`) and its lock ``<sha256>.lock``. Whoever reads an entry
holds the lock shared for as long as it reads (a cache hit, or the export it just made); whoever
makes, replaces or removes one holds it exclusive. So two processes exporting the same report export
it once (the second waits, then finds it), and an entry being read is never removed or replaced
under its reader. Each use sets the lock's modification time: the entry's last use, recorded by
nsysaudit itself, so a file system mounted ``noatime`` does not matter.

The cache holds at most ``$NSYSAUDIT_CACHE_MAX`` bytes (default :data:`DEFAULT_MAX_BYTES`): after
each new export, the entries used least recently are removed until it fits, except those in use and
those used in the last minute (their user may be between two locks). Only this cache's own files are
ever removed: an entry whose name and record are this cache's, its record and its lock, and
unfinished exports (``export-*`` folders and ``.*.tmp`` files left by a killed process) a day old.

>>> parse_size("20G"), parse_size("1.5 GiB"), parse_size("512M"), parse_size("unlimited")
(21474836480, 1610612736, 536870912, None)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nsysaudit import words
from nsysaudit.core.errors import BadOption, UnusableInput
from nsysaudit.core.text import size_word

try:  # POSIX; elsewhere the cache is used without locks
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

ENV_CACHE = "NSYSAUDIT_CACHE"
ENV_CACHE_MAX = "NSYSAUDIT_CACHE_MAX"
DEFAULT_MAX_BYTES = 20 * 1024**3  # a few of the largest exports (GBs each)
CACHE_FORMAT = "nsysaudit.export-cache/1"
RECENT_S = 60.0  # an entry used this recently is not removed: its user may be between two locks
UNFINISHED_AGE_S = 24 * 3600.0  # an unfinished export this old was left by a killed process
_ENTRY = re.compile(r"([0-9a-f]{64})\.sqlite")
_UNFINISHED = re.compile(r"export-.*|\..*\.tmp")  # staging folders (export_report), write_atomic's temporary files
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:i?B)?|B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
MAX_RECORD_BYTES = 1 << 20


def cache_dir() -> Path:
    """Where exports of .nsys-rep reports are cached: ``$NSYSAUDIT_CACHE``, else the XDG cache."""
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nsysaudit"


def exports_dir() -> Path:
    """The folder of the export cache's entries."""
    return cache_dir() / "exports"


def parse_size(text: str) -> int | None:
    """A size in bytes: digits with an optional binary unit (``K``, ``M``, ``G``, ``T``, with or
    without ``iB``/``B``: powers of 1024), or ``unlimited`` / ``none`` (None). Raises ValueError."""
    if text.strip().lower() in ("unlimited", "none"):
        return None
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size (bytes, or with a unit: 500M, 20G, 1.5GiB; or unlimited)")
    return int(float(m[1]) * _UNITS[(m[2] or "").upper()])


def max_bytes() -> int | None:
    """The cache's bound: ``$NSYSAUDIT_CACHE_MAX`` (None: unlimited), else :data:`DEFAULT_MAX_BYTES`.
    A value that is not a size is :class:`BadOption` (one line, exit 2)."""
    given = os.environ.get(ENV_CACHE_MAX)
    if given is None or not given.strip():
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(given)
    except ValueError as exc:
        raise BadOption(f"{ENV_CACHE_MAX}: {exc}") from None


# --- the lock of an entry -------------------------------------------------------------------------


class EntryLock:
    """``flock`` on ``<sha256>.lock``: shared while the entry is read, exclusive while it is made,
    replaced or removed. Released by :meth:`release`, or when the object is collected."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, folder: Path, sha256: str, *, exclusive: bool, wait_s: float) -> EntryLock | None:
        """The lock, waiting up to ``wait_s`` seconds for it (None when it is still held then).
        Raises OSError when the lock file cannot be made or opened (a read-only cache)."""
        path = folder / f"{sha256}.lock"
        deadline = time.monotonic() + wait_s
        pause = 0.01
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
            try:
                held, busy = _try_lock(fd, path, exclusive)
            except BaseException:
                os.close(fd)
                raise
            if held:
                return cls(fd, path)
            os.close(fd)  # busy, or a lock file a pruner removed between the open and the lock: again
            if busy:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def share(self) -> None:
        """Exclusive to shared (not atomic: another process may lock in between; nothing removes
        an entry used in the last minute, :data:`RECENT_S`)."""
        if self._fd is not None and fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def touch(self) -> None:
        """Record a use of the entry: the lock's modification time is now."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.utime(self._fd)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)  # closing releases the flock

    def __del__(self) -> None:
        self.release()


def _try_lock(fd: int, path: Path, exclusive: bool) -> tuple[bool, bool]:
    """(locked, busy): whether ``fd`` now holds the lock of the file at ``path``, and whether another
    holder is why not."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(f"{path} is not a regular file")
    if fcntl is None:  # pragma: no cover
        return True, False
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False, True
    return _same_file(fd, path), False


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


# --- what the cache holds -------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One export in the cache: the report's SHA-256, its ``.sqlite``, its size with its record, when
    it was last used (seconds since the epoch), the nsys that exported it (the record's words), and
    whether a process is reading it now."""

    report_sha256: str
    sqlite: Path
    size_bytes: int
    last_used: float
    exported_with: str | None
    in_use: bool

    def line(self) -> str:
        when = datetime.fromtimestamp(self.last_used).strftime("%Y-%m-%d %H:%M")
        busy = " (in use)" if self.in_use else ""
        return f"  {when}  {size_word(self.size_bytes):>10}  {self.report_sha256[:16]}  {self.exported_with}{busy}"


@dataclass(frozen=True)
class CacheListing:
    """The export cache: its folder, its entries (least recently used first), what is left of
    unfinished exports, the names in it that are not this cache's (left alone) and its bound."""

    folder: Path
    entries: tuple[CacheEntry, ...]
    unfinished: tuple[Path, ...]
    foreign: tuple[str, ...]
    max_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries)

    def lines(self) -> list[str]:
        bound = "unlimited" if self.max_bytes is None else f"at most {size_word(self.max_bytes)}"
        out = [f"export cache {self.folder} ({bound}, {ENV_CACHE_MAX})"]
        if self.entries:
            out.append(f"  {'last used':<16}  {'size':>10}  {'report sha256':<16}  exported with")
            out += [e.line() for e in self.entries]
        out.append(f"{len(self.entries)} export(s), {size_word(self.total_bytes)}")
        return out + words.cache_leftovers(len(self.unfinished), len(self.foreign))


def _record(folder: Path, sha256: str) -> dict[str, object] | None:
    """The entry's record if it is this cache's (a regular file of its format), else None."""
    path = folder / f"{sha256}.json"
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > MAX_RECORD_BYTES:
            return None
        record = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and record.get("format") == CACHE_FORMAT else None


def _in_use(folder: Path, sha256: str) -> bool:
    if not (folder / f"{sha256}.lock").is_file():
        return False
    try:
        lock = EntryLock.acquire(folder, sha256, exclusive=True, wait_s=0)
    except OSError:
        return False
    if lock is None:
        return True
    lock.release()
    return False


def list_cache(folder: str | os.PathLike[str] | None = None) -> CacheListing:
    """What the export cache holds (``folder``: its ``exports`` folder, default the user's)."""
    where = Path(folder) if folder is not None else exports_dir()
    bound = max_bytes()
    try:
        names = sorted(os.listdir(where))
    except FileNotFoundError:
        return CacheListing(where, (), (), (), bound)
    except NotADirectoryError:
        raise UnusableInput(where, "the export cache is not a folder") from None
    except OSError as exc:
        raise UnusableInput(where, f"cannot read the export cache: {exc.strerror or exc}") from None
    entries: list[CacheEntry] = []
    unfinished: list[Path] = []
    foreign: list[str] = []
    ours: set[str] = set()
    for name in names:
        m = _ENTRY.fullmatch(name)
        if m is None:
            continue
        sha = m[1]
        entry = _entry(where, sha)
        if entry is not None:
            entries.append(entry)
            ours.update({name, f"{sha}.json", f"{sha}.lock"})
    for name in names:
        if name in ours:
            continue
        if _UNFINISHED.fullmatch(name):
            unfinished.append(where / name)
        elif not re.fullmatch(r"[0-9a-f]{64}\.lock", name):  # a lock whose entry is gone is ours too
            foreign.append(name)
    entries.sort(key=lambda e: (e.last_used, e.report_sha256))
    return CacheListing(where, tuple(entries), tuple(unfinished), tuple(foreign), bound)


def _entry(folder: Path, sha256: str, *, probe_use: bool = True) -> CacheEntry | None:
    """The entry of ``sha256`` if it is this cache's: a regular ``.sqlite`` with a record of this
    cache's format. ``probe_use``: whether to find out if a process is reading it."""
    sqlite = folder / f"{sha256}.sqlite"
    record = _record(folder, sha256)
    try:
        st = os.lstat(sqlite)
        size = st.st_size + os.lstat(folder / f"{sha256}.json").st_size
    except OSError:
        return None
    if record is None or not stat.S_ISREG(st.st_mode):
        return None
    try:
        used = os.stat(folder / f"{sha256}.lock", follow_symlinks=False).st_mtime
    except OSError:  # made before entries had locks: its export is its last known use
        used = st.st_mtime
    said = record.get("exported_with")
    return CacheEntry(sha256, sqlite, size, used, said if isinstance(said, str) else None,
                      probe_use and _in_use(folder, sha256))


# --- pruning --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune_cache` removed, what it kept although over the bound (in use, or used in
    the last minute), and the cache after it."""

    removed: tuple[CacheEntry, ...]
    kept_in_use: tuple[CacheEntry, ...]
    unfinished_removed: int
    after: CacheListing

    def lines(self) -> list[str]:
        freed = sum(e.size_bytes for e in self.removed)
        return words.cache_pruned(len(self.removed), freed, self.unfinished_removed, len(self.kept_in_use)) + (
            self.after.lines())


def prune_cache(
    max_size: int | str | None = None,
    *,
    folder: str | os.PathLike[str] | None = None,
    now: float | None = None,
) -> Pruned:
    """Remove the least recently used entries of the export cache until it holds at most
    ``max_size`` bytes (a number, or a size such as ``"5G"``; None: the cache's bound,
    :func:`max_bytes`; 0 empties it), and unfinished exports a day old. An entry in use (its lock
    held) or used in the last minute is kept."""
    bound = max_bytes() if max_size is None else _size_to_prune_to(max_size)
    listing = list_cache(folder)
    where, clock = listing.folder, time.time() if now is None else now
    total = listing.total_bytes
    removed: list[CacheEntry] = []
    kept: list[CacheEntry] = []
    for entry in listing.entries:
        if bound is None or total <= bound:
            break
        if clock - entry.last_used < RECENT_S or not _remove(where, entry):
            kept.append(entry)
            continue
        removed.append(entry)
        total -= entry.size_bytes
    gone = sum(_remove_unfinished(path, clock) for path in listing.unfinished)
    return Pruned(tuple(removed), tuple(kept), gone, list_cache(where))


def _size_to_prune_to(given: int | str) -> int:
    try:
        size = parse_size(given) if isinstance(given, str) else given
    except ValueError as exc:
        raise BadOption(f"cannot prune the cache to {exc}") from None
    if size is None or size < 0:
        raise BadOption(f"cannot prune the cache to {given!r}: give a size (0 empties it)")
    return size


def _remove(folder: Path, entry: CacheEntry) -> bool:
    """Remove ``entry`` (its record first: an entry without one is never trusted), under its lock
    taken exclusive without waiting; False when it is in use or cannot be removed."""
    try:
        lock = EntryLock.acquire(folder, entry.report_sha256, exclusive=True, wait_s=0)
    except OSError:
        return False
    if lock is None:
        return False
    try:
        again = _entry(folder, entry.report_sha256, probe_use=False)
        if again is None or again.last_used != entry.last_used:  # replaced or used since it was listed
            return False
        for name in (f"{entry.report_sha256}.json", f"{entry.report_sha256}.sqlite", lock.path.name):
            (folder / name).unlink(missing_ok=True)
        return True
    except OSError:
        return False
    finally:
        lock.release()


def _remove_unfinished(path: Path, now: float) -> bool:
    """Remove an unfinished export (a staging folder or a temporary file of this cache) a day old."""
    try:
        st = os.lstat(path)
        if now - st.st_mtime < UNFINISHED_AGE_S:
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # its link to the report is removed, never followed
        elif stat.S_ISREG(st.st_mode):
            path.unlink()
        else:
            return False
    except OSError:
        return False
    return True
