"""Opening an nsys SQLite export read-only and probing what it holds.

Nothing here knows about findings: it answers "is this a usable export?", "which tables and
columns does it have?" and "which nsys/schema version wrote it?" by looking at the file itself
(``sqlite_master``, ``PRAGMA table_info``), never by assuming one nsys release's layout.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from nsysaudit.core.errors import ReportWarning, UnusableInput
from nsysaudit.core.reasons import Reason
from nsysaudit.read.unique import agreed, disagreement
from nsysaudit.words import warned

SQLITE_MAGIC = b"SQLite format 3\x00"
KNOWN_SCHEMA_MAJORS = frozenset({2, 3})

# Tables whose presence marks a file as an nsys export (one of the metadata tables is enough;
# 2022.x and older write EXPORT_META_DATA, later releases META_DATA_EXPORT).
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
# The CUDA API table columns that make a file without a metadata table recognisable as an export.
RUNTIME_COLUMNS = ("start", "end", "globalTid", "nameId", "returnValue")
# nsys 2020.3 and older write no metadata table: such a file is recognised by what nsys writes beside
# StringIds, one of its event tables with their own columns (whatever was traced: the CUDA API, NVTX,
# the OS runtime, cuBLAS, cuDNN, memory usage, sampling, scheduling). A SQLite with a StringIds and
# nothing of nsys's is still no export.
EVENT_TABLES: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": RUNTIME_COLUMNS,
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid"),
    "OSRT_API": ("start", "end", "globalTid", "nameId", "returnValue"),
    "CUBLAS_EVENTS": ("start", "end", "globalTid", "nameId"),
    "CUDNN_EVENTS": ("start", "end", "globalTid", "nameId"),
    "CUDA_GPU_MEMORY_USAGE_EVENTS": ("start", "globalPid", "bytes", "correlationId"),
    "COMPOSITE_EVENTS": ("id", "start", "globalTid", "cpuCycles"),
    "SCHED_EVENTS": ("start", "cpu", "isSchedIn", "globalTid"),
}
# A versioned table name: BASE_V<n>, n an ASCII number without a leading zero (re.ASCII: no other digits).
# SQLite's names are case-insensitive in ASCII only, so ``_v3`` is a version as ``_V3`` is.
_VARIANT = re.compile(r"(.+)_V([1-9][0-9]*)", re.ASCII | re.IGNORECASE)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def quote(name: str) -> str:
    """``name`` as an SQL identifier: in double quotes, a double quote in it doubled. The one
    quoter of table and column names: every query built from an export's names goes through it.

    >>> print(quote('a"b'))
    "a""b"
    """
    return '"' + name.replace('"', '""') + '"'


def sql_name(name: str) -> str:
    """``name`` as SQLite compares identifiers: ASCII letters without case, every other character as
    it is (``cupti_activity_kind_runtime`` and ``CUPTI_ACTIVITY_KIND_RUNTIME`` name one table; ``Ä``
    and ``ä`` two)."""
    return name.translate(_ASCII_LOWER)
SCHEMA_NOT_UTF8 = "damaged SQLite schema: its text is not valid UTF-8 (a changed byte?); not a usable nsys export"


@dataclass(frozen=True)
class SqliteHeader:
    """What the 100-byte SQLite header says about the file.

    ``page_count`` is None when the header's count is not authoritative (a writer older than
    SQLite 3.7.0, or a crafted header): then truncation cannot be seen in the header and
    :func:`probe` runs ``PRAGMA quick_check`` instead. ``wal`` is True for WAL-mode files (header
    bytes 18/19 are 2; every nsys export is in rollback mode, 1).
    """

    page_size: int
    page_count: int | None
    wal: bool


def check_sqlite_file(path: Path) -> SqliteHeader:
    """Refuse files that are not whole SQLite databases before SQLite itself sees them.

    A truncated export may open and fail half-way through a table, or worse, not fail at all
    when the lost pages are ones a query does not read. The header records the page size and
    the page count; a file shorter than their product has lost pages, so it is refused up front.
    Every cut of a file whose header count is authoritative is caught: below 100 bytes the
    header is incomplete, from 100 bytes on the file is shorter than the pages it declares.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise UnusableInput(path, "no such file") from None
    except OSError as exc:
        raise UnusableInput(path, f"cannot read: {exc.strerror}") from None
    if not path.is_file():
        raise UnusableInput(path, "not a regular file")
    if size == 0:
        raise UnusableInput(path, "empty file (0 bytes), not an nsys SQLite export")
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise UnusableInput(path, f"cannot read: {exc.strerror}") from None
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise UnusableInput(path, "not a SQLite database (bad header); expected an nsys SQLite export")
    page_size = int.from_bytes(header[16:18], "big")
    if page_size == 1:
        page_size = 65536
    if page_size < 512 or page_size & (page_size - 1):
        raise UnusableInput(path, f"corrupt SQLite header (page size {page_size})")
    write_version, read_version = header[18], header[19]
    if write_version not in (1, 2) or read_version not in (1, 2):
        raise UnusableInput(path, f"corrupt SQLite header (file format versions {write_version}/{read_version})")
    change_counter = int.from_bytes(header[24:28], "big")
    page_count = int.from_bytes(header[28:32], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    # The in-header page count is only authoritative when "version-valid-for" matches the
    # change counter (SQLite >= 3.7.0 writers keep them equal; every nsys export does).
    trusted = bool(page_count) and valid_for == change_counter
    if trusted:
        expected = page_count * page_size
        if expected > size:
            raise UnusableInput(
                path,
                f"truncated SQLite file: header says {page_count} pages of {page_size} bytes "
                f"({expected} bytes) but the file has {size} bytes",
            )
    elif size % page_size:
        raise UnusableInput(
            path, f"truncated SQLite file: {size} bytes is not a whole number of {page_size}-byte pages"
        )
    return SqliteHeader(page_size=page_size, page_count=page_count if trusted else None, wal=read_version == 2)


SIDE_SUFFIXES = ("-wal", "-journal", "-shm")


def check_side_files(path: Path, header: SqliteHeader) -> list[ReportWarning]:
    """Refuse exports whose content is partly in a journal beside them; say which side files are ignored.

    SQLite itself would read (and write) files beside the evidence: a ``-wal`` (even beside a
    rollback-mode file, whose header says no WAL: every nsys export is one), its ``-shm`` index,
    a hot ``-journal`` (to roll it back). nsysaudit opens every export ``immutable`` (see
    :func:`readonly_uri`), so SQLite never looks at them; this function decides what they mean
    from their metadata alone (``lstat``, or ``stat`` of a symlink's target), never opening them:
    a FIFO named like a journal would block a reader forever.

    - a non-empty regular ``-wal`` beside a WAL-mode file holds part of its content: refused;
    - a non-empty regular ``-journal`` beside a rollback-mode file means it was copied while being
      written (a hot journal; the file may be half-way through a transaction): refused;
    - any other non-empty side file (a ``-wal`` beside a rollback-mode file, which the file's
      recorded SHA-256 does not cover; a FIFO, folder or socket by one of those names) is
      ignored, and the returned warnings say so.
    """
    journal = "-wal" if header.wal else "-journal"
    warnings: list[ReportWarning] = []
    for suffix in SIDE_SUFFIXES:
        side = path.with_name(path.name + suffix)
        try:
            # stat() of a symlink's target opens nothing; a dangling one is no side file at all
            st = side.stat() if side.is_symlink() else side.lstat()
        except OSError:
            continue
        regular = stat.S_ISREG(st.st_mode)
        if regular and st.st_size == 0:
            continue
        if regular and suffix == journal:
            if header.wal:
                raise UnusableInput(
                    path,
                    f"WAL-mode SQLite with a non-empty {side.name} beside it: part of its content is in that "
                    "file, which nsysaudit does not read; analyze a checkpointed copy instead",
                )
            raise UnusableInput(
                path,
                f"{side.name} beside it: the file was copied while being written (hot journal) and reading it "
                "would need a rollback; analyze a copy made after the writer finished",
            )
        if suffix == "-shm" and regular:
            continue  # an index of a -wal, meaningless without one
        why = Reason.of("side_file_ignored", name=side.name, kind=None if regular else _kind(st.st_mode),
                        size=st.st_size, wal=suffix == "-wal")
        warnings.append(warned(why, 1))
    return warnings


def _kind(mode: int) -> str:
    kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket"}
    return kinds.get(stat.S_IFMT(mode), "a device")


def readonly_uri(path: Path) -> str:
    """SQLite URI that opens ``path`` read-only and ``immutable``: no locks, no side files.

    ``mode=ro`` alone still makes SQLite open a ``-wal`` it finds beside the file (even beside a
    rollback-mode file), create a ``-shm`` for it and read frames the file's digest does not
    cover, and open a ``-journal`` to check for a hot one (a FIFO there blocks it forever).
    ``immutable=1`` tells SQLite the file cannot change, so it reads the file's own bytes and
    nothing beside it; :func:`check_side_files` decides beforehand what such files mean. Every
    reader of an export (sqlite3, ADBC) opens it through this URI.
    """
    # The path's own bytes (a POSIX name need not be UTF-8: its undecodable bytes are surrogates here).
    return "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open ``path`` with SQLite's read-only URI mode: the evidence is never written."""
    try:
        conn = sqlite3.connect(readonly_uri(path), uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(path, f"SQLite cannot read it: {exc}") from None
    except UnicodeDecodeError:
        # SQLite's message about a malformed schema quotes the schema's bytes, which Python
        # cannot decode when they are not UTF-8.
        raise UnusableInput(path, SCHEMA_NOT_UTF8) from None
    return conn


def quick_check(path: Path, conn: sqlite3.Connection) -> None:
    """``PRAGMA quick_check``: page-level consistency of the whole file (linear in its size).

    Run only when the header cannot show truncation: measured at about 4 s for an 847 MB export
    with 20M CUDA API rows (the header check is O(1)), so it is not run on every export.
    """
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(path, f"SQLite integrity check failed: {exc}") from None
    result = str(rows[0][0]) if rows else "no result"
    if result != "ok":
        first = " ".join(result.split())[:200]
        raise UnusableInput(path, f"damaged SQLite file (quick_check: {first})")


class TextDecoder:
    """SQLite TEXT to ``str`` that survives invalid UTF-8 and counts it.

    One undecodable thread name must not make a whole export unusable (the stdlib default raises
    on the first one): such bytes are shown with U+FFFD replacement characters and ``invalid``
    counts the values, which the analysis reports as a warning.
    """

    def __init__(self) -> None:
        self.invalid = 0

    def __call__(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.invalid += 1
            return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Table:
    """A table found in the export: the name it really has and its columns (original case).

    ``kind`` is ``view`` for a view (nsys writes none; :meth:`ExportFile.table` refuses one).
    Column names are compared as SQLite compares them (:func:`sql_name`): ``START`` is ``start``.
    """

    name: str
    columns: tuple[str, ...]
    kind: str = "table"

    def has(self, *columns: str) -> bool:
        declared = {sql_name(c) for c in self.columns}
        return all(sql_name(c) in declared for c in columns)

    def spelled(self, *spellings: str) -> tuple[str, ...]:
        """The columns, each one that SQLite takes for one of ``spellings`` written that way
        (``START`` as ``start``): code that looks columns up by name finds them."""
        wanted = {sql_name(s): s for s in spellings}
        return tuple(wanted.get(sql_name(c), c) for c in self.columns)

    @property
    def hides_rowid(self) -> bool:
        """A declared column named rowid (in any case) hides SQLite's row key under that name."""
        return "rowid" in {c.lower() for c in self.columns}


@dataclass
class ExportFile:
    """An opened, probed nsys export. ``tables`` maps real table names to their columns."""

    path: Path
    conn: sqlite3.Connection
    tables: dict[str, Table]
    meta: dict[str, str]
    warnings: list[ReportWarning] = field(default_factory=list)
    # The read-only URI ``conn`` was opened with: other readers of the same file must use it.
    uri: str = ""
    text: TextDecoder = field(default_factory=TextDecoder)
    # base name -> its tables, lowest version first (see table_versions); built once by probe().
    versions: dict[str, tuple[Table, ...]] = field(default_factory=dict)

    @property
    def nsys_version(self) -> str | None:
        return self.meta.get("EXPORT_PRODUCT_VERSION")

    @property
    def schema_version(self) -> str | None:
        return self.meta.get("EXPORT_SCHEMA_VERSION")

    def table(self, base: str) -> Table | None:
        """The table for ``base``, accepting nsys's versioned variants (``NVTX_EVENTS_V2``): the highest
        version when several exist (see :func:`table_versions`; the choice is in ``input.tables``).

        Raises :class:`UnusableInput` when it is a view: nsys writes tables, and a view can select
        rows away (a failed call) from the table it reads.
        """
        found = self.versions.get(sql_name(base))
        if not found:
            return None
        return refuse_view(self.path, found[-1])

    def is_ambiguous(self, base: str) -> bool:
        """Whether ``base`` has several tables (the base and variants, or several variants, in any case)."""
        return len(self.versions.get(sql_name(base), ())) > 1

    def close(self) -> None:
        self.conn.close()


def refuse_view(path: Path, table: Table) -> Table:
    """``table``, unless it is a view (:class:`UnusableInput`)."""
    if table.kind == "view":
        raise UnusableInput(
            path,
            f"{table.name} is a view, not a table: nsys writes its tables as tables, and a view can leave "
            "rows out of the table it reads; not an export as nsys wrote it (analyze the original)",
        )
    return table


def table_versions(tables: dict[str, Table]) -> dict[str, tuple[Table, ...]]:
    """Every table under its base name (:func:`sql_name`: the same base in any case), lowest version
    first: ``X`` is version 1, ``X_V2`` (or ``x_v2``) version 2; of one version, by name.

    A variant is ``base`` + ``_V`` + an ASCII version number without a leading zero (``\\d``
    would also match other scripts' digits, such as the full-width two, U+FF12).
    """
    found: dict[str, list[tuple[int, Table]]] = {}
    for name, table in tables.items():
        match = _VARIANT.fullmatch(name)
        base, version = (match.group(1), int(match.group(2))) if match else (name, 1)
        found.setdefault(sql_name(base), []).append((version, table))
    return {base: tuple(t for _, t in sorted(v, key=lambda vt: (vt[0], vt[1].name))) for base, v in found.items()}


def ambiguity_warnings(versions: dict[str, tuple[Table, ...]]) -> list[ReportWarning]:
    """One ``ambiguous_table`` warning per base with several tables: one of them may be a shadow copy
    made to hide rows; the highest version is read."""
    out: list[ReportWarning] = []
    for found in (found for _, found in sorted(versions.items())):
        if len(found) > 1:
            names = ", ".join(t.name for t in found)
            match = _VARIANT.fullmatch(found[0].name)
            base = match.group(1) if match else found[0].name
            out.append(
                warned(
                    Reason.of("ambiguous_table", found=len(found), base=base, tables=names, name=found[-1].name),
                    len(found),
                )
            )
    return out




_SCHEMA_VERSION = re.compile(r"([0-9]+)\.[0-9]+\.[0-9]+", re.ASCII)


def schema_version_warnings(table: str, meta: dict[str, str]) -> list[ReportWarning]:
    """What is unknown about the export's schema version: none recorded, one that is not
    ``MAJOR.MINOR.MICRO``, a ``EXPORT_SCHEMA_VERSION_MAJOR`` that contradicts it, or a major
    version nsysaudit was not checked against. The tables are read by probing whatever it says.

    >>> [w["kind"] for w in schema_version_warnings("META_DATA_EXPORT", {"EXPORT_SCHEMA_VERSION": "x.y.z"})]
    ['unknown_schema_version']
    >>> [w["kind"] for w in schema_version_warnings(
    ...     "META_DATA_EXPORT", {"EXPORT_SCHEMA_VERSION": "99.0.0", "EXPORT_SCHEMA_VERSION_MAJOR": "3"})]
    ['inconsistent_schema_version', 'unknown_schema_major']
    """
    version, major_text = meta.get("EXPORT_SCHEMA_VERSION"), meta.get("EXPORT_SCHEMA_VERSION_MAJOR")
    if version is None and major_text is None:
        return [
            warned(Reason.of("unknown_schema_version", table=table), 1)
        ]
    out: list[ReportWarning] = []
    stated: list[int] = []
    if version is not None:
        match = _SCHEMA_VERSION.fullmatch(version)
        if match is None:
            out.append(warned(
                Reason.of("schema_version_not_a_version", table=table, version=version),
                1, kind="unknown_schema_version",
            ))
        else:
            stated.append(int(match.group(1)))
    if major_text is not None:
        if re.fullmatch(r"[0-9]+", major_text, re.ASCII) is None:
            out.append(warned(
                Reason.of("schema_major_not_a_number", table=table, major_text=major_text),
                1, kind="unknown_schema_version",
            ))
        else:
            stated.append(int(major_text))
    if len(set(stated)) > 1:
        out.append(warned(
            Reason.of("inconsistent_schema_version", table=table, version=version, major_text=major_text),
            1,
        ))
    unknown = sorted({m for m in stated if m not in KNOWN_SCHEMA_MAJORS})
    if unknown:
        out.append(warned(Reason.of("unknown_schema_major", majors=', '.join(map(str, unknown)), version=version), 1))
    return out


def _metadata(
    path: Path, conn: sqlite3.Connection, meta_table: Table | None
) -> tuple[dict[str, str], list[ReportWarning]]:
    """The metadata table's name -> value (none without the table), one value per name: a name whose
    rows disagree (two nsys versions) is left out, and a warning says so."""
    if meta_table is None:
        return {}, []
    if not meta_table.has("name", "value"):
        raise UnusableInput(path, f"not an Nsight Systems export: {meta_table.name} has no name/value columns")
    try:
        rows = conn.execute(f"SELECT name, value FROM {quote(meta_table.name)}").fetchall()
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(path, f"SQLite cannot read {meta_table.name}: {exc}") from None
    meta, conflicts = agreed((str(k), str(v)) for k, v in rows if k is not None and v is not None)
    return meta, disagreement(meta_table.name, "names", conflicts)


def probe(path: Path) -> ExportFile:
    """Check ``path`` is a whole SQLite file and an nsys export, and list what it holds."""
    header = check_sqlite_file(path)
    side_warnings = check_side_files(path, header)
    conn = open_readonly(path)
    decoder = TextDecoder()
    conn.text_factory = decoder
    try:
        if header.page_count is None:
            quick_check(path, conn)
        try:
            # The two statements sqlite-utils' Database.table_names() and Table.columns run, on the
            # read-only connection; sqlite-utils itself is not imported here (with numpy and
            # dateutil it costs ~0.15 s, half the start-up budget of a small export).
            # Views too: a view under the name of a table the analysis reads is refused, never read
            # as "no table" (ExportFile.table).
            kinds = {
                r[0]: r[1] for r in conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')")
            }
            tables: dict[str, Table] = {
                name: Table(
                    name, tuple(str(c[1]) for c in conn.execute(f"PRAGMA table_info({quote(name)})")), kinds[name]
                )
                for name in sorted(kinds)
            }
        except sqlite3.DatabaseError as exc:
            raise UnusableInput(path, f"SQLite cannot read its schema: {exc}") from None
        except UnicodeDecodeError:
            raise UnusableInput(path, SCHEMA_NOT_UTF8) from None
        versions = table_versions(tables)
        named = {sql_name(name): table for name, table in tables.items()}
        meta_table = next((refuse_view(path, named[sql_name(t)]) for t in META_TABLES if sql_name(t) in named), None)
        strings = named.get(sql_name("StringIds"))
        # nsys 2020.3 and older write no metadata table at all; what else they write is still
        # recognisable (nsys stats reads it), so such an export is read with the version unknown.
        traced = [base for base, columns in EVENT_TABLES.items()
                  if versions.get(sql_name(base)) and versions[sql_name(base)][-1].has(*columns)]
        if strings is None or (meta_table is None and not traced):
            found = (("META_DATA_EXPORT", meta_table is not None), ("StringIds", strings is not None))
            missing = " and ".join(x for x, ok in found if not ok)
            nothing = (", and none of the event tables nsys writes beside StringIds (" + ", ".join(EVENT_TABLES) + ")"
                       if strings is not None else "")
            raise UnusableInput(path, f"not an Nsight Systems export: no {missing} table{nothing}")
        refuse_view(path, strings)
        meta, meta_warnings = _metadata(path, conn, meta_table)
        export = ExportFile(
            path=path,
            conn=conn,
            tables=tables,
            meta=meta,
            uri=readonly_uri(path),
            text=decoder,
            warnings=[*side_warnings, *ambiguity_warnings(versions), *meta_warnings],
            versions=versions,
        )
        if meta_table is None:
            export.warnings.append(warned(Reason.of("no_metadata_table", tables=traced), 1))
        else:
            export.warnings += schema_version_warnings(meta_table.name, meta)
        return export
    except BaseException:
        conn.close()
        raise
