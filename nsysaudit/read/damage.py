"""Whether an export is damaged: one rule for every engine, SQLite's own.

A damaged b-tree can make any reader pass rows by without an error, or read bytes that are not
rows, and two readers (the native page reader, SQLite's VDBE, ADBC's SQLite, the stdlib's) can do
so differently. So no reader decides: SQLite's ``PRAGMA quick_check(T)`` of every evidence table
``T`` (:func:`evidence_tables`: the tables the analysis reads rows from), and ``PRAGMA
quick_check(sqlite_schema)`` (the schema's b-tree and the free list), always through Python's
``sqlite3`` (the SQLite every install has, and the one the native engine is checked to run).
quick_check walks every page of each table's b-tree (and its indexes'): page headers, cells inside
their page, keys and rowids in order, child pages, overflow chains, and each row's record.

Where the native engine runs, it checks a table first, in C (native/scan.c: the same checks,
stricter where that is simpler, at the speed of reading the pages): a table it finds sound is one
quick_check calls sound, and quick_check is not run on it; where it is unsure, quick_check runs and
decides, in its own words. The CUDA API table is checked by the scan itself as it reads the pages
(:mod:`nsysaudit.read.scan`), the GPU tables the host stalls read by that same page reader as it
reads them (:mod:`nsysaudit.read.gpu_work`; where it did not read one whole, it is checked here
after the reading), the other tables by :class:`DamageCheck` on a thread of its own beside the
reading. Where the scan doubts the CUDA API table, or the thread has found a table damaged by the
time the scan ends, the verdict is settled then (:meth:`DamageCheck.settled`): a damaged file is
refused before the rest of it is read. Tables the native check leaves to SQLite: those with an
index (quick_check checks its b-tree too), WITHOUT ROWID, STRICT, a CHECK constraint or a generated
column (:func:`column_classes`). What quick_check says is sorted (:func:`classify`):

- a problem in an evidence table's own b-tree: the file is damaged (one line, exit 2), whichever
  engine would have read it and whatever it would have read;
- a problem only in the free list (pages no table uses), or only in an index's b-tree (the
  readers read the table's rows, not its indexes): a warning, the analysis goes on;
- ``NULL value in T.c`` (a NOT NULL column holding NULL): not damage; the readers count such
  values themselves (``null_in_not_null_column``).

Beside it, checks no engine can answer differently: the rows a scan visits must be SQLite's
``count(*)`` of the table, and its min rowid no more than its max (:mod:`nsysaudit.read.scan`).
tests/test_hostile_damage.py holds every engine to one answer over hundreds of damaged copies of the
bundled real exports.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass

from nsysaudit.core.errors import ReportWarning, UnusableInput
from nsysaudit.core.reasons import Reason
from nsysaudit.read import native
from nsysaudit.read.inputs import Background
from nsysaudit.read.source import ExportFile, quote, uncounted
from nsysaudit.words import warned

# The tables the analysis reads rows from, nsys's versioned variants resolved through ExportFile.table
# (tests/test_hostile_damage.py checks that every table an analysis looks up is here), the CUDA API table first.
EVIDENCE_TABLES = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "StringIds",
    "NVTX_EVENTS",
    "NVTX_PAYLOAD_SCHEMA_ENTRIES",  # NCCL's payload schemas name its NVTX domain (read/nccl.py)
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
    "CUDA_GPU_MEMORY_POOL_EVENTS",
    "CUBLAS_EVENTS",
    "CUDNN_EVENTS",
    "ThreadNames",
    "PROCESSES",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_CUDA_CONTEXT_INFO",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "META_DATA_CAPTURE",
    "DIAGNOSTIC_EVENT",
    "ANALYSIS_DETAILS",
    "ENUM_NSYS_EVENT_TYPE",
    "ENUM_NSYS_EVENT_CLASS",
    "ENUM_CUDA_MEM_KIND",
    "ENUM_CUDA_DEV_MEM_EVENT_OPER",
    "ENUM_CUDA_MEMPOOL_TYPE",
    "ENUM_CUDA_MEMPOOL_OPER",
    "ENUM_DIAGNOSTIC_SEVERITY_LEVEL",
    "ENUM_DIAGNOSTIC_SOURCE_TYPE",
    # The host stalls' evidence (nsysaudit/read/gpu_work.py).
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "ENUM_CUDA_MEMCPY_OPER",
)
SCHEMA = "sqlite_master"  # quick_check of the schema's b-tree also checks the free list
CUDA_API = EVIDENCE_TABLES[0]

# What quick_check lets a column hold without a word, by its affinity (native/scan.c's COL_...):
# anything (BLOB affinity); no TEXT (INTEGER, REAL, NUMERIC: it names a TEXT value there); no number
# (TEXT); and COL_DEFAULT: the column has a DEFAULT, which a record older than it holds.
COL_ANY, COL_NUMBER, COL_TEXT, COL_DEFAULT = 0, 1, 2, 4
_CLASS = {"BLOB": COL_ANY, "TEXT": COL_TEXT, "INTEGER": COL_NUMBER, "REAL": COL_NUMBER, "NUMERIC": COL_NUMBER}
# Tables the native check leaves to quick_check (found in the CREATE text, comments too: any doubt is SQLite's).
_SQLITES_TO_CHECK = re.compile(r"\b(WITHOUT\s+ROWID|STRICT|CHECK)\b", re.IGNORECASE)

# What quick_check says that is not about a b-tree (SQLite 3.40 to 3.50 wording).
_CONTENT = re.compile(r"(NULL value in |non-\w+ value in |CHECK constraint failed|row \d+ missing from index"
                      r"|wrong # of entries in index)")  # fmt: skip
# The free list, and pages no b-tree and no free list holds (said only by a whole-file check).
_FREELIST = re.compile(r"(Main freelist|Freelist): |Page \d+ is never used|Page \d+: never used", re.IGNORECASE)
_TREE = re.compile(r"^Tree (\d+) page")  # SQLite 3.44 and later name the tree's root page
_PAGE = re.compile(r"\bpage (\d+)", re.IGNORECASE)


def affinity(declared: str) -> str:
    """SQLite's affinity of a column declared ``declared`` (sqlite3AffinityType: its ASCII letters
    compared without case, the first rule that matches anywhere in it).

    >>> [affinity(t) for t in ("INTEGER", "VARCHAR(8)", "", "DOUBLE", "FLOATING POINT", "DECIMAL")]
    ['INTEGER', 'TEXT', 'BLOB', 'REAL', 'INTEGER', 'NUMERIC']
    """
    t = declared.encode("utf-8", "surrogatepass").lower()
    if not t:
        return "BLOB"
    if b"int" in t:
        return "INTEGER"
    if b"char" in t or b"clob" in t or b"text" in t:
        return "TEXT"
    if b"blob" in t:
        return "BLOB"
    if b"real" in t or b"floa" in t or b"doub" in t:
        return "REAL"
    return "NUMERIC"


def column_classes(conn: sqlite3.Connection, table: str) -> bytes | None:
    """What the native check needs of ``table``: each column's class (``COL_...``, by its affinity),
    or None where it cannot check the table's rows: WITHOUT ROWID, STRICT, with a CHECK constraint
    or a generated column, or a table SQLite cannot describe."""
    try:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        if row is None or not isinstance(row[0], str) or _SQLITES_TO_CHECK.search(row[0]):
            return None
        info = conn.execute("SELECT type, dflt_value, hidden FROM pragma_table_xinfo(?)", (table,)).fetchall()
    except sqlite3.DatabaseError:
        return None
    if not info or any(hidden != 0 for *_, hidden in info):
        return None
    return bytes(_CLASS[affinity(str(t or ""))] | (COL_DEFAULT if d is not None else 0) for t, d, _ in info)


def indexed(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` has an index (quick_check checks its b-tree too; the native check does not).
    Any doubt is an index."""
    try:
        return conn.execute("SELECT 1 FROM pragma_index_list(?)", (table,)).fetchone() is not None
    except sqlite3.DatabaseError:
        return True


def native_classes(conn: sqlite3.Connection, table: str) -> bytes | None:
    """:func:`column_classes` of a table whose native check stands for quick_check's (no index)."""
    return None if indexed(conn, table) else column_classes(conn, table)


def native_sound(uri: str, conn: sqlite3.Connection, tables: Sequence[str]) -> set[str]:
    """The ``tables`` the native check finds sound (quick_check would say nothing of them), all
    checked on one connection."""
    classes = {t: c for t in tables if (c := native_classes(conn, t)) is not None}
    try:
        whys = native.check_tables(uri, list(classes.items()))
    except native.NativeScanError:
        return set()
    return {t for t, why in zip(classes, whys, strict=True) if why == ""}


def evidence_tables(export: ExportFile) -> tuple[str, ...]:
    """The names of ``export``'s evidence tables (:data:`EVIDENCE_TABLES` it has)."""
    return tuple(dict.fromkeys(t.name for t in (export.table(base) for base in EVIDENCE_TABLES) if t is not None))


@dataclass(frozen=True)
class Damage:
    """What SQLite's checks found: ``damaged``, the one-line problem when an evidence table's b-tree
    is damaged (None: it is not); ``warnings``: damage that does not touch the evidence rows."""

    damaged: str | None = None
    warnings: tuple[ReportWarning, ...] = ()
    table: str | None = None  # the damaged table (SCHEMA: the schema's b-tree or the whole file)

    def raise_if_damaged(self, path: object) -> None:
        if self.damaged is not None:
            raise UnusableInput(path, self.damaged)


def _lines(rows: Sequence[tuple[object, ...]]) -> list[str]:
    """quick_check's rows as single problems (SQLite 3.40 puts a b-tree's problems in one row)."""
    out: list[str] = []
    for (text,) in rows:
        for line in str(text).split("\n"):
            line = line.strip()
            if line and line != "ok" and not line.startswith("*** in database"):
                out.append(line)
    return out


def _index_pages(conn: sqlite3.Connection, table: str) -> tuple[dict[int, str], set[int]] | None:
    """The pages of ``table``'s indexes (page -> index) and of its own b-tree, from SQLite's dbstat
    (each walked from its root); None where SQLite cannot say (no dbstat, or a walk failed)."""
    try:
        indexes = [r[0] for r in conn.execute("SELECT name FROM pragma_index_list(?)", (table,))]
        own = {int(p) for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))}
        pages: dict[int, str] = {}
        for index in indexes:
            for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (index,)):
                pages[int(p)] = index
    except sqlite3.DatabaseError:
        return None
    return pages, own


def classify(conn: sqlite3.Connection, table: str, lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    """quick_check's problems of ``table`` as (in its own b-tree, only in one of its indexes, in the
    free list); the rest (values, not b-trees) is left out. A problem is only an index's when
    SQLite places its page in an index's b-tree and not in the table's; any doubt is the table's."""
    trees = [line for line in lines if not _CONTENT.match(line)]
    freelist = [line for line in trees if _FREELIST.match(line)]
    trees = [line for line in trees if not _FREELIST.match(line)]
    if not trees:
        return [], [], freelist
    roots = {int(r): str(n) for n, r in conn.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'index'")}
    indexed = any(True for _ in conn.execute("SELECT 1 FROM pragma_index_list(?)", (table,)))
    located = _index_pages(conn, table) if indexed else None
    own: list[str] = []
    index_only: list[str] = []
    for line in trees:
        tree = _TREE.match(line)
        page = _PAGE.search(line)
        if tree is not None:
            in_index = int(tree.group(1)) in roots
        elif located is not None and page is not None:
            in_index = int(page.group(1)) in located[0] and int(page.group(1)) not in located[1]
        else:
            in_index = False
        (index_only if in_index and indexed else own).append(line)
    return own, index_only, freelist


def _summary(lines: list[str]) -> str:
    first = " ".join(lines[0].split())[:200]
    return first + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def check_export(
    uri: str,
    tables: Sequence[str],
    interrupted: threading.Event | None = None,
    *,
    native_first: bool = False,
    schema: bool = True,
) -> Damage:
    """Run the checks (see the module docstring) on a connection of their own; stop at the first
    evidence table whose b-tree is damaged. ``native_first``: a table the native check finds sound
    is not given to quick_check. ``schema``: the schema's b-tree and the free list too. (An SQLite
    before 3.33 cannot check one table: the whole file is checked once, and every b-tree problem is
    damage.)"""
    warnings: list[ReportWarning] = []
    per_table = sqlite3.sqlite_version_info >= (3, 33, 0)
    with closing(sqlite3.connect(uri, uri=True, check_same_thread=False)) as conn:
        sound = native_sound(uri, conn, tables) if native_first and per_table else set()
        for table in (*tables, *([SCHEMA] if schema else [])) if per_table else (SCHEMA,):
            if interrupted is not None and interrupted.is_set():
                break
            if table in sound:
                continue
            where = "its schema" if table == SCHEMA else f"table {table}"
            try:
                argument = f"({quote(table)})" if per_table else ""
                lines = _lines(conn.execute(f"PRAGMA quick_check{argument}").fetchall())
                own, index_only, freelist = classify(conn, table, lines)
            except sqlite3.DatabaseError as exc:
                return Damage(f"damaged SQLite file: {where} (SQLite's quick_check cannot finish: {exc})", (), table)
            if own:
                return Damage(f"damaged SQLite file: {where} (SQLite's quick_check: {_summary(own)})", (), table)
            if index_only:
                warnings.append(warned(
                    Reason.of("damaged_index", table=table, found=_summary(index_only)),
                    len(index_only),
                ))  # fmt: skip
            if freelist:
                warnings.append(warned(
                    Reason.of("damaged_free_list", found=_summary(freelist)),
                    len(freelist),
                ))  # fmt: skip
    return Damage(None, tuple(warnings))


class DamageCheck:
    """:func:`check_export` of an export's evidence tables on a daemon thread (neither SQLite nor the
    native check holds the GIL while it checks); :meth:`result` waits for it. Started before the
    tables are read. Where the native engine runs, the tables its page reader checks as it reads them
    are left to it (``deferred``: the CUDA API table, which the scan reads; ``handed``: the tables
    named by ``handed``, base names, which a later reader may read whole), and :meth:`result` is told
    what those checks found: a table is not read twice."""

    def __init__(self, export: ExportFile, handed: Sequence[str] = ()) -> None:
        tables, uri = evidence_tables(export), export.uri
        self._uri = uri
        self._native = native.load() is not None and sqlite3.sqlite_version_info >= (3, 33, 0)
        cuda_api = export.table(CUDA_API)
        self.deferred = (
            cuda_api.name
            if self._native and cuda_api is not None and native_classes(export.conn, cuda_api.name) is not None
            else None
        )
        self.handed: tuple[str, ...] = ()
        if self._native:
            with uncounted(export.conn):  # declarations the other engines do not read: not counted
                found = [t.name for t in map(export.table, handed) if t is not None and t.name in tables]
                self.handed = tuple(dict.fromkeys(
                    t for t in found if t != self.deferred and native_classes(export.conn, t) is not None))
        self._order = {t: i for i, t in enumerate((*tables, SCHEMA))}
        rest = tuple(t for t in tables if t != self.deferred and t not in self.handed)
        self._stop = threading.Event()
        self._work = Background(
            lambda: check_export(uri, rest, self._stop, native_first=self._native), "nsysaudit-quick-check"
        )
        self._scanned: Damage | None = None  # SQLite's verdict on the deferred table, decided by settled()
        self._scan_said: str | None = None  # what the scan's check said of it, as settled() heard
        self._verdict: tuple[str | None, dict[str, str], Damage] | None = None  # settled_by_reader's

    def settled(self, scanned: str | None) -> Damage | None:
        """The verdict, where the file is already known to be damaged once the CUDA API table is read,
        so that the rest of a damaged file is not read (else None: :meth:`result` decides, after the
        reading); what :meth:`result` would say. ``scanned`` as for :meth:`result`. Where the scan
        doubted the deferred CUDA API table, SQLite decides it now (and :meth:`result` does not
        again): it comes first in the evidence tables' order, so damage there is the verdict whatever
        else is damaged. Where the thread has already found a table damaged, the file is refused
        whatever the rest says, and only which table is named is left: the tables before it whose
        check was still to come (the CUDA API table where the scan did not check it, the GPU tables
        the host stalls would read after the scan) are checked now, native check first, in order, and
        the first damaged one is named, else the thread's."""
        self._scan_said = scanned
        if self.deferred is not None and scanned not in ("", None) and self._scanned is None:
            self._scanned = check_export(self._uri, (self.deferred,), native_first=False, schema=False)
        if self._scanned is not None and self._scanned.damaged is not None:
            return self._scanned
        if not self._work.done():
            return None
        try:
            found = self._work.result()
        except Exception:  # result() raises it again, where the caller waits for it
            return None
        # The thread's work done and damage found: result() then waits for nothing, and checks the
        # tables before that one whose check is still to come (none read: native check first).
        return self.result(scanned) if found.damaged is not None else None

    def settled_by_reader(self, read: Mapping[str, str]) -> Damage | None:
        """The verdict once the GPU tables' page reader has checked them (``read`` as for
        :meth:`result`), where it doubted one: decided now, waiting for the thread (:meth:`result`
        then gives it again), so that a file damaged there is refused before the rest is read; else
        None (:meth:`result` decides, after the reading)."""
        if all(why == "" for table, why in read.items() if table in self.handed):
            return None
        verdict = self.result(self._scan_said, read)
        self._verdict = (self._scan_said, dict(read), verdict)
        return verdict if verdict.damaged is not None else None

    def result(self, scanned: str | None = None, read: Mapping[str, str] | None = None) -> Damage:
        """The verdict on the evidence tables. ``scanned``: what the scan's own check of the deferred
        CUDA API table found ("" sound; why it is unsure; None: not checked, as when reading failed
        before it); ``read``: the same of the ``handed`` tables the page reader read whole (a table
        absent: not checked). A table whose check is not "" is checked here, in the evidence tables'
        order, as far as the first damaged table the thread found (that one comes first where it
        comes first)."""
        if self._scanned is not None and self._scanned.damaged is not None:
            return self._scanned  # the first table in order: the verdict, whatever the thread finds
        if self._verdict is not None and self._verdict[2].damaged is not None:
            return self._verdict[2]  # decided by settled_by_reader, every table's check known then
        scanned = self._scan_said if scanned is None else scanned  # reading failed after the scan
        if self._verdict is not None and self._verdict[:2] == (scanned, dict(read or {})):
            return self._verdict[2]  # decided by settled_by_reader: sound
        found = self._work.result()
        given = {t: (read or {}).get(t) for t in self.handed}
        if self.deferred is not None:
            given[self.deferred] = "" if self._scanned is not None else scanned
        left = sorted((t for t, why in given.items() if why != ""), key=self._order.__getitem__)
        if found.damaged is not None:
            left = [t for t in left if self._order[t] < self._order.get(found.table or SCHEMA, len(self._order))]
        # The deferred table, decided by settled(), is the first in order: its warnings come first.
        warnings: list[ReportWarning] = list(self._scanned.warnings) if self._scanned is not None else []
        for table in left:
            own = check_export(self._uri, (table,), native_first=given[table] is None, schema=False)
            if own.damaged is not None:
                return own
            warnings += own.warnings
        return Damage(found.damaged, (*warnings, *found.warnings), found.table)

    def cancel(self) -> None:
        """Stop at the next table (the caller gave up on the input for another reason)."""
        self._stop.set()
