"""Seeded damaged copies of a real export: what a disk, a copy cut short or a hostile tool does to
the b-trees of an SQLite file, page by page (tests/test_hostile_damage.py sweeps them).

:func:`describe` reads an export's b-trees once (SQLite's dbstat: each tree's interior, leaf and
overflow pages; the free list from the header), :func:`mutate` makes one damaged copy of it: the
kind of damage and the tree it lands in are drawn from a seeded ``random.Random``, so a mutant is
its export and its seed.
"""

from __future__ import annotations

import random
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsysaudit.read import damage, source
from nsysaudit.read.source import readonly_uri

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
# The GPU activity tables the host stalls read (the native engine's page reader checks the first three
# as it reads them, and hands its check to the damage check: nsysaudit/read/damage.py).
GPU_TABLES = frozenset({"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"})


@dataclass(frozen=True)
class Export:
    path: Path
    data: bytes
    page_size: int
    usable: int
    trees: dict[str, list[int]]  # each b-tree's pages (interior and leaf) and the free list's (``<free>``)
    interior: dict[str, list[int]]  # each b-tree's interior pages
    overflow: dict[str, list[int]]  # each b-tree's overflow pages
    evidence: frozenset[str]  # its evidence tables
    indexes: frozenset[str]  # its evidence tables' indexes


def free_pages(data: bytes, page_size: int) -> list[int]:
    """The free list's pages (trunks and leaves), from the file's header."""
    free, trunk = [], int.from_bytes(data[32:36], "big")
    while trunk and len(free) < 10_000:
        free.append(trunk)
        at = (trunk - 1) * page_size
        count = int.from_bytes(data[at + 4 : at + 8], "big")
        free += [int.from_bytes(data[at + 8 + 4 * i : at + 12 + 4 * i], "big") for i in range(min(count, 1000))]
        trunk = int.from_bytes(data[at : at + 4], "big")
    return free


def describe(path: Path) -> Export:
    export = source.probe(path)
    try:
        evidence = frozenset(damage.evidence_tables(export))
        con = export.conn
        (page_size,) = con.execute("PRAGMA page_size").fetchone()
        indexes = {n: t for n, t in con.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'")}
    finally:
        export.close()
    con = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        rows = con.execute("SELECT name, pageno, pagetype FROM dbstat ORDER BY pageno").fetchall()
    finally:
        con.close()
    trees: dict[str, list[int]] = {}
    interior: dict[str, list[int]] = {}
    overflow: dict[str, list[int]] = {}
    for name, page, kind in rows:
        (overflow if kind == "overflow" else trees).setdefault(name, []).append(int(page))
        if kind == "internal":
            interior.setdefault(name, []).append(int(page))
    data = path.read_bytes()
    if free := free_pages(data, page_size):
        trees["<free>"] = free
    indexed = frozenset(n for n, t in indexes.items() if t in evidence)
    return Export(path, data, page_size, page_size - data[20], trees, interior, overflow, evidence, indexed)


def with_free_pages(source_path: Path, tmp: Path) -> Path:
    """A real export with a table nsysaudit does not read emptied: its pages are on the free list
    (written by SQLite, as any export that deleted rows has them)."""
    path = tmp / f"{source_path.stem}-free.sqlite"
    shutil.copy(source_path, path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA secure_delete = OFF")
    con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV")
    con.commit()
    (free,) = con.execute("PRAGMA freelist_count").fetchone()
    con.close()
    assert free >= 3
    return path


def category(export: Export, tree: str) -> str:
    if tree == "<free>":
        return "free list"
    if tree == "sqlite_schema":
        return "schema"
    if tree == RUNTIME:
        return "CUDA API table"
    if tree in export.indexes:
        return "index"
    return "evidence table" if tree in export.evidence else "other table"


def _u16(data: bytearray, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "big")


def _put16(data: bytearray, at: int, value: int) -> None:
    data[at : at + 2] = (value & 0xFFFF).to_bytes(2, "big")


class _Page:
    """One b-tree page of the copy being damaged."""

    def __init__(self, export: Export, data: bytearray, page: int) -> None:
        self.data, self.page, self.size = data, page, export.page_size
        self.start = (page - 1) * export.page_size
        self.hdr = self.start + (100 if page == 1 else 0)
        self.interior = data[self.hdr] in (0x02, 0x05)
        self.cells = _u16(data, self.hdr + 3)
        self.pointers = self.hdr + (12 if self.interior else 8)

    def pointer(self, i: int) -> int:
        """Where cell i's pointer lies."""
        return self.pointers + 2 * i

    def cell(self, i: int) -> int:
        return self.start + _u16(self.data, self.pointer(i))

    def in_page(self, at: int, n: int = 1) -> bool:
        return self.start <= at and at + n <= self.start + self.size


def _bytes(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    """A few bytes of the page overwritten: its header, its cell pointers, anywhere."""
    p = _Page(export, data, page)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        where = rng.random()
        if where < 0.3:  # the page header (and, on the free list, the trunk's next page and its count)
            at = p.hdr + rng.randrange(12)
        elif where < 0.6 and p.cells:  # the cell pointers
            at = p.hdr + 8 + rng.randrange(min(2 * p.cells + 4, export.page_size - 108))
        else:
            at = p.start + rng.randrange(export.page_size)
        data[at] = rng.randrange(256)
    return "bytes"


def _child(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    """An interior page's child pointer: duplicated (two cells, or the right-most child, name one
    page), swapped with another, or set to a page of another tree, past the file, or 0."""
    p = _Page(export, data, page)
    if not p.interior or not p.cells:
        return _bytes(export, data, page, rng)
    slots = [p.cell(i) for i in range(p.cells) if p.in_page(p.cell(i), 4)] + [p.hdr + 8]
    a, b = rng.choice(slots), rng.choice(slots)
    roll = rng.random()
    if roll < 0.4:
        data[a : a + 4] = data[b : b + 4]
        return "pointer duplicated"
    if roll < 0.7:
        data[a : a + 4], data[b : b + 4] = data[b : b + 4], data[a : a + 4]
        return "pointers swapped"
    pages = len(data) // export.page_size
    target = rng.choice([0, pages + rng.randrange(1, 9), rng.randrange(1, pages + 1)])
    data[a : a + 4] = target.to_bytes(4, "big")
    return "pointer redirected"


def _cell(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    """A cell moved: its pointer shifted by a few bytes, set to another cell's, two pointers swapped,
    or the cell count one more or fewer."""
    p = _Page(export, data, page)
    if not p.cells:
        return _bytes(export, data, page, rng)
    i, j = rng.randrange(p.cells), rng.randrange(p.cells)
    roll = rng.random()
    if roll < 0.35:
        _put16(data, p.pointer(i), _u16(data, p.pointer(i)) + rng.choice([-16, -4, -1, 1, 2, 8, 64]))
    elif roll < 0.6:
        _put16(data, p.pointer(i), _u16(data, p.pointer(j)))
    elif roll < 0.85:
        a, b = p.pointer(i), p.pointer(j)
        data[a : a + 2], data[b : b + 2] = data[b : b + 2], data[a : a + 2]
    else:
        _put16(data, p.hdr + 3, p.cells + rng.choice([-1, 1]))
    return "cell moved"


def _freeblock(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    """The page's freeblock chain: a new first freeblock somewhere in the page, an existing one's
    next or size changed, or the fragmented-byte count."""
    p = _Page(export, data, page)
    first = _u16(data, p.hdr + 1)
    roll = rng.random()
    if first and roll < 0.5:
        at = p.start + first
        if p.in_page(at, 4):
            value = rng.choice([0, 4, first + 4, export.page_size, rng.randrange(1 << 16)])
            _put16(data, at + rng.choice([0, 2]), value)
            return "freeblock"
    if roll < 0.8:
        content = min(_u16(data, p.hdr + 5) or 65536, export.usable - 5)  # the cell content area's start
        at = rng.randrange(content, export.usable - 4) if rng.random() < 0.7 else rng.randrange(1 << 16)
        _put16(data, p.hdr + 1, at)
        if p.in_page(p.start + at, 4):
            _put16(data, p.start + at, 0)
            _put16(data, p.start + at + 2, rng.choice([4, 8, 40]))
        return "freeblock"
    data[p.hdr + 7] = rng.randrange(256)
    return "freeblock"


def _overflow(export: Export, data: bytearray, tree: str, rng: random.Random) -> str:
    """An overflow chain cut (a page's next set to 0), lengthened (its last page pointing on), or
    pointed into another page, itself or past the file."""
    page = rng.choice(export.overflow[tree])
    at = (page - 1) * export.page_size
    pages = len(data) // export.page_size
    follows = [rng.randrange(2, pages + 1), page, pages + 3]
    if int.from_bytes(data[at : at + 4], "big"):
        follows.append(0)
    data[at : at + 4] = rng.choice(follows).to_bytes(4, "big")
    return "overflow chain"


def _record(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    """A leaf's record header: a serial type changed (an integer made text, a size made larger), or
    its header size."""
    p = _Page(export, data, page)
    if p.interior or not p.cells:
        return _bytes(export, data, page, rng)
    cell = p.cell(rng.randrange(p.cells))
    if not p.in_page(cell, 12):
        return _bytes(export, data, page, rng)
    at = cell
    for _ in range(2):  # past the payload size and the rowid (table leaves) or the payload size (index)
        while at < cell + 9 and data[at] & 0x80:
            at += 1
        at += 1
    if p.in_page(at + 4):
        data[at + rng.randrange(4)] = rng.choice([0, 1, 6, 7, 10, 13, 15, 21, 0x7F, 0x81, rng.randrange(256)])
    return "record"


def _zeroed(export: Export, data: bytearray, page: int, rng: random.Random) -> str:
    at = (page - 1) * export.page_size + (100 if page == 1 else 0)
    data[at : page * export.page_size] = bytes(page * export.page_size - at)
    return "page zeroed"


KINDS: dict[str, tuple[float, Callable[[Export, bytearray, int, random.Random], str]]] = {
    "bytes": (5, _bytes),
    "child": (2, _child),
    "cell": (2, _cell),
    "freeblock": (1.5, _freeblock),
    "record": (2, _record),
    "zeroed": (0.7, _zeroed),
}
TREE_WEIGHTS = {"CUDA API table": 6, "evidence table": 3, "index": 4, "free list": 3, "other table": 1, "schema": 0.3}


def mutate(export: Export, rng: random.Random, only: frozenset[str] | None = None) -> tuple[bytes, str, str]:
    """One damaged copy of the export: its bytes, the kind of damage and the category of the tree it
    landed in (:func:`category`). ``only``: the damage lands in one of these trees (category "GPU
    table"), a page of it damaged as any tree's page is."""
    data = bytearray(export.data)
    if only is not None:
        tree = rng.choice(sorted(t for t in export.trees if t in only))
        done = _page_damage(export, data, tree, rng)
        return bytes(data), done, "GPU table"
    roll = rng.random()
    if roll < 0.04:  # a copy cut short: at a page boundary, or inside a page
        pages = len(data) // export.page_size
        cut = rng.randrange(1, pages) * export.page_size - rng.choice([0, 0, 1, 100, export.page_size // 2])
        return bytes(data[: max(cut, 100)]), "truncated", "file"
    if roll < 0.1 and export.overflow:  # an evidence table's chains most often, where there are some
        trees = sorted(export.overflow)
        tree = rng.choices(trees, [TREE_WEIGHTS[category(export, t)] for t in trees])[0]
        done = _overflow(export, data, tree, rng)
        return bytes(data), done, category(export, tree)
    kinds: dict[str, list[str]] = {}
    for t in export.trees:
        kinds.setdefault(category(export, t), []).append(t)
    where = rng.choices(list(kinds), [TREE_WEIGHTS[k] for k in kinds])[0]
    tree = rng.choice(kinds[where])
    done = _page_damage(export, data, tree, rng, free=where == "free list")
    return bytes(data), done, where


def _page_damage(export: Export, data: bytearray, tree: str, rng: random.Random, *, free: bool = False) -> str:
    """One page of ``tree`` damaged (a page of the free list: only its bytes or zeroed); the kind of damage."""
    names = list(KINDS)
    kind = rng.choices(names, [KINDS[n][0] for n in names])[0]
    if kind == "child" and export.interior.get(tree):
        page = rng.choice(export.interior[tree])
    else:
        page = rng.choice(export.trees[tree])
    if free and kind in ("cell", "freeblock", "record", "child"):
        kind = "bytes"
    return KINDS[kind][1](export, data, page, rng)


# --- one mutant, read by every engine ------------------------------------------------------------

# name: (NSYSAUDIT_NATIVE, the page reader on, ADBC's threshold)
ENGINES = {
    "native": ("1", True, 10**9),
    "native-vdbe": ("1", False, 10**9),
    "adbc": ("0", True, 0),
    "sqlite3": ("0", True, 10**9),
}


def outcome(path: Path, engine: str) -> tuple[int, str, str, tuple[str, ...]]:
    """``analyze --json`` of ``path`` read by ``engine``, in this process: its exit code, its report
    with the keys naming the engine set aside (its SHA-256: the reports are long), its stderr
    (SQLite's own words set aside: :func:`sqlites_words`), and the damage it warned of
    (``damaged_index``, ``damaged_free_list``)."""
    import contextlib
    import hashlib
    import io
    import os

    from conftest import engine_free

    from nsysaudit.cli import main
    from nsysaudit.read import scan

    flag, pages, adbc_rows = ENGINES[engine]
    saved = os.environ.get("NSYSAUDIT_NATIVE"), scan.ADBC_MIN_ROWS, scan.page_layout
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    try:
        os.environ["NSYSAUDIT_NATIVE"] = flag
        scan.ADBC_MIN_ROWS = adbc_rows
        if not pages:
            scan.page_layout = lambda *a, **k: None  # type: ignore[assignment]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["analyze", str(path), "--json"])
    finally:
        if saved[0] is None:
            os.environ.pop("NSYSAUDIT_NATIVE", None)
        else:
            os.environ["NSYSAUDIT_NATIVE"] = saved[0]
        scan.ADBC_MIN_ROWS, scan.page_layout = saved[1], saved[2]  # type: ignore[assignment]
    out.flush()
    report = out.buffer.getvalue()  # type: ignore[attr-defined]
    if report:
        report = engine_free(report)[0]
    warned = tuple(k.decode() for k in re.findall(rb'"kind":"(damaged_[a-z_]+)"', report))
    return code, hashlib.sha256(report).hexdigest() if report else "", sqlites_words(err.getvalue()), warned


# What SQLite's quick_check says of a damaged record, after the table it names: its words can change
# from one run to the next on the same file (it reads bytes past the damaged page, which it did not
# write: rows and then "database disk image is malformed", or that error at once).
_SQLITES_WORDS = re.compile(r"\(SQLite's quick_check[^\n]*\)$", re.MULTILINE)


def sqlites_words(err: str) -> str:
    """``err`` with SQLite's own words of what is damaged set aside (the file, the table and the
    rest of the line stay)."""
    return _SQLITES_WORDS.sub("(SQLite's quick_check: <its words>)", err)


@dataclass(frozen=True)
class Judged:
    """One mutant's answers: each engine's (exit code, report digest, stderr); ``unstable``: an
    engine whose own answer changed from one reading to the next (SQLite 3.40 reads some damaged
    files differently each time: it reads bytes it did not write)."""

    export: str
    seed: int
    kind: str
    where: str
    answers: dict[str, tuple[int, str, str, tuple[str, ...]]]
    unstable: bool


_described: dict[Path, Export] = {}


def judge(name: str, path: Path, seed: int, engines: tuple[str, ...], folder: Path,
          only: frozenset[str] | None = None) -> Judged:
    """Mutant ``seed`` of the export at ``path`` (damaged in one of the trees ``only`` names, where
    given), read by ``engines`` (a worker process's unit of work)."""
    export = _described.get(path) or _described.setdefault(path, describe(path))
    data, kind, where = mutate(export, random.Random(f"{name}-{seed}"), only)
    mutant = folder / f"{name}-{seed}" / path.name
    mutant.parent.mkdir(parents=True, exist_ok=True)
    mutant.write_bytes(data)
    try:
        answers = {engine: outcome(mutant, engine) for engine in engines}
        unstable = False
        if len(set(answers.values())) > 1:  # read again: a real disagreement holds, an unstable read does not
            again = [{e: outcome(mutant, e) for e in engines} for _ in range(2)]
            unstable = any(len({answers[e], *(a[e] for a in again)}) > 1 for e in engines)
    finally:
        shutil.rmtree(mutant.parent, ignore_errors=True)
    return Judged(name, seed, kind, where, answers, unstable)
