"""One reader, one answer: whatever engine reads a damaged export (the native scan from the pages or
through SQLite's VDBE, polars over ADBC, the stdlib reader), the same exit code and the same report,
or the same one-line error. SQLite's own quick_check of the evidence tables decides what is damage
(nsysaudit/read/damage.py); damage only in the free list or an index is a warning."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, H200, H200_2025, PUBLIC, engine_free, needs_native

import nsysaudit
from nsysaudit.cli import main
from nsysaudit.read import damage, scan, source
from nsysaudit.read.source import readonly_uri

TORCH = H200_2025 / "torch" / "observe.sqlite"
MOCK = PUBLIC / "nsys-ai_mock_2026.1.sqlite"  # an export another tool added indexes to (on its CUDA API table too)

# name: (NSYSAUDIT_NATIVE, the page reader on, ADBC's threshold)
ENGINES = {
    "native": ("1", True, 10**9),
    "native-vdbe": ("1", False, 10**9),
    "adbc": ("0", True, 0),
    "sqlite3": ("0", True, 10**9),
}


def outcome(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``analyze --json`` of ``path`` read by ``engine``: its exit code and report (the keys naming
    the engine set aside), or its exit code and error line."""
    flag, pages, adbc_rows = ENGINES[engine]
    with monkeypatch.context() as m:
        m.setenv("NSYSAUDIT_NATIVE", flag)
        m.setattr(scan, "ADBC_MIN_ROWS", adbc_rows)
        if not pages:
            m.setattr(scan, "page_layout", lambda *a, **k: None)
        code = main(["analyze", str(path), "--json"])
    out, err = capsys.readouterr()
    if out:
        return code, engine_free(out.encode())[0].decode(), err
    return code, out, err


def pages_by_tree(path: Path) -> dict[str, list[int]]:
    """Each b-tree's pages, as SQLite's dbstat walks them, and the free list's (``<free>``)."""
    con = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        trees: dict[str, list[int]] = {}
        for name, page in con.execute("SELECT name, pageno FROM dbstat ORDER BY pageno"):
            trees.setdefault(name, []).append(int(page))
        (page_size,) = con.execute("PRAGMA page_size").fetchone()
    finally:
        con.close()
    data, free = path.read_bytes(), []
    trunk = int.from_bytes(data[32:36], "big")
    while trunk and len(free) < 10_000:
        free.append(trunk)
        at = (trunk - 1) * page_size
        count = int.from_bytes(data[at + 4 : at + 8], "big")
        free += [int.from_bytes(data[at + 8 + 4 * i : at + 12 + 4 * i], "big") for i in range(min(count, 1000))]
        trunk = int.from_bytes(data[at : at + 4], "big")
    if free:
        trees["<free>"] = free
    return trees


@dataclass(frozen=True)
class Export:
    path: Path
    page_size: int
    trees: dict[str, list[int]]
    evidence: frozenset[str]  # its evidence tables
    indexes: frozenset[str]  # its evidence tables' indexes


def with_free_pages(tmp: Path) -> Path:
    """The real torch capture with a table nsysaudit does not read emptied: its pages are on the
    free list (written by SQLite, as any export that deleted rows has them)."""
    path = tmp / "torch-free.sqlite"
    shutil.copy(TORCH, path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA secure_delete = OFF")
    con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV")
    con.commit()
    (free,) = con.execute("PRAGMA freelist_count").fetchone()
    con.close()
    assert free >= 3
    return path


def describe(path: Path) -> Export:
    export = source.probe(path)
    try:
        evidence = frozenset(damage.evidence_tables(export))
        con = export.conn
        (page_size,) = con.execute("PRAGMA page_size").fetchone()
        indexes = {n: t for n, t in con.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'")}
    finally:
        export.close()
    indexed = frozenset(n for n, t in indexes.items() if t in evidence)
    return Export(path, page_size, pages_by_tree(path), evidence, indexed)


def category(export: Export, tree: str) -> str:
    if tree == "<free>":
        return "free list"
    if tree == "sqlite_schema":
        return "schema"
    if tree == "CUPTI_ACTIVITY_KIND_RUNTIME":
        return "CUDA API table"
    if tree in export.indexes:
        return "index"
    return "evidence table" if tree in export.evidence else "other table"


def mutate(export: Export, rng: random.Random) -> tuple[bytes, str]:
    """The export with a few bytes of one page overwritten: the CUDA API table's pages most often,
    then the other evidence tables', indexes', the free list's, tables nsysaudit does not read."""
    weights = {"CUDA API table": 6, "evidence table": 3, "index": 4, "free list": 4, "other table": 1, "schema": 0.3}
    kinds: dict[str, list[str]] = {}
    for t in export.trees:
        kinds.setdefault(category(export, t), []).append(t)
    kind = rng.choices(list(kinds), [weights[k] for k in kinds])[0]
    tree = rng.choice(kinds[kind])
    page = rng.choice(export.trees[tree])
    data = bytearray(export.path.read_bytes())
    base = (page - 1) * export.page_size + (100 if page == 1 else 0)
    cells = int.from_bytes(data[base + 3 : base + 5], "big")
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        where = rng.random()
        if where < 0.3:  # the page header (and, on the free list, the trunk's next page and its count)
            at = base + rng.randrange(12)
        elif where < 0.6 and cells:  # the cell pointers
            at = base + 8 + rng.randrange(min(2 * cells + 4, export.page_size - 108))
        else:
            at = (page - 1) * export.page_size + rng.randrange(export.page_size)
        data[at] = rng.randrange(256)
    return bytes(data), category(export, tree)


@pytest.mark.slow
@needs_native
def test_every_engine_gives_one_answer_on_damaged_real_exports(tmp_path: Path, monkeypatch, capsys) -> None:
    """300 seeded damaged copies of six real exports: each read by the four engines gives the same
    exit code and the same report (verdict, census, findings, warnings: every key but those naming
    the engine), or the same one-line error. SQLite 3.40 reads a few damaged files differently from
    one run to the next (it reads bytes it did not write): where an engine's own answer changes
    between runs, the mutant says nothing, and there must be few of them."""
    exports = {
        "torch": (describe(TORCH), 80),
        "capi": (describe(H200_2025 / "capi" / "observe.sqlite"), 40),
        "event": (describe(H200_2025 / "event" / "observe.sqlite"), 40),
        "nsys 2023.4": (describe(H200 / "observe.sqlite"), 40),
        "indexed": (describe(MOCK), 50),
        "free pages": (describe(with_free_pages(tmp_path)), 50),
    }
    rng = random.Random(22)
    mutant = tmp_path / "observe.sqlite"
    seen: Counter[tuple[str, str]] = Counter()
    unstable = 0
    for name, (export, count) in exports.items():
        for trial in range(count):
            data, where = mutate(export, rng)
            mutant.write_bytes(data)
            answers = {engine: outcome(mutant, engine, monkeypatch, capsys) for engine in ENGINES}
            if len(set(answers.values())) > 1:
                again = [{e: outcome(mutant, e, monkeypatch, capsys) for e in ENGINES} for _ in range(2)]
                if any(len({answers[e], *(a[e] for a in again)}) > 1 for e in ENGINES):
                    unstable += 1
                    continue
                said = {e: (a[0], a[2] or a[1][:300]) for e, a in answers.items()}
                raise AssertionError((name, trial, where, said))
            code, _, err = answers["sqlite3"]
            said = "refused" if code == 2 else "warned" if '"damaged_' in answers["sqlite3"][1] else "read"
            seen[(where, said)] += 1
            if where in ("free list", "index", "other table"):  # no evidence row touched: never refused
                assert code == 0, (name, trial, where, err)
            if code == 2:
                assert err.count("\n") == 1 and "Traceback" not in err, err
    # not vacuous: damage refused, damage warned of, damage that changed nothing, on every kind of page
    assert seen[("CUDA API table", "refused")] > 30 and seen[("evidence table", "refused")] > 10, seen
    assert seen[("index", "warned")] > 5 and seen[("free list", "warned")] > 1, seen
    assert seen[("CUDA API table", "read")] > 10, seen
    assert unstable <= 6, (unstable, seen)


def test_free_list_damage_is_a_warning_and_the_rows_are_read_as_they_are(tmp_path: Path, capsys) -> None:
    path = with_free_pages(tmp_path)
    clean = nsysaudit.analyze(path).to_dict()
    data = bytearray(path.read_bytes())
    trunk = int.from_bytes(data[32:36], "big")
    data[(trunk - 1) * 4096 + 4 : (trunk - 1) * 4096 + 8] = (4000).to_bytes(4, "big")  # its leaf count
    path.write_bytes(bytes(data))
    got = nsysaudit.analyze(path).to_dict()
    kinds = {w["kind"]: w for w in got["warnings"]}
    assert "damaged_free_list" in kinds and "Main freelist: " in kinds["damaged_free_list"]["message"]
    assert got["census"] == clean["census"] and got["verdict"] == clean["verdict"]


def test_index_damage_is_a_warning_and_table_damage_beside_it_is_not(tmp_path: Path) -> None:
    """An index of the CUDA API table with a cell pointer outside its page: a warning (the rows are
    read from the table's own b-tree); the same damage in the table's b-tree: damaged."""
    export = describe(MOCK)
    clean = nsysaudit.analyze(MOCK).to_dict()
    for tree, damaged in (("_nsysai_runtime_corr", False), ("CUPTI_ACTIVITY_KIND_RUNTIME", True)):
        data = bytearray(MOCK.read_bytes())
        leaf = next(
            p for p in export.trees[tree] if data[(p - 1) * export.page_size] in (0x0A, 0x0D)
        )  # a leaf of the b-tree
        at = (leaf - 1) * export.page_size
        data[at + 8 : at + 10] = (export.page_size + 9).to_bytes(2, "big")
        path = tmp_path / f"{tree}.sqlite"
        path.write_bytes(bytes(data))
        if damaged:
            with pytest.raises(nsysaudit.UnusableInput, match=rf"damaged SQLite file: table {tree} \(SQLite's"):
                nsysaudit.analyze(path)
            continue
        got = nsysaudit.analyze(path).to_dict()
        kinds = {w["kind"]: w for w in got["warnings"]}
        assert "an index of CUPTI_ACTIVITY_KIND_RUNTIME is damaged" in kinds["damaged_index"]["message"]
        assert got["census"] == clean["census"]


def test_a_problem_said_with_the_trees_root_is_placed_by_it(tmp_path: Path) -> None:
    """SQLite 3.44 and later begin each b-tree problem with its tree's root page: an index's root
    makes it the index's, anything else the table's (and a NOT NULL column's NULL is no b-tree's)."""
    con = sqlite3.connect(readonly_uri(MOCK), uri=True)
    try:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = '_nsysai_runtime_corr'").fetchone()
        (own,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_RUNTIME'").fetchone()
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        lines = [f"Tree {root} page {root} cell 0: Rowid 5 out of order", f"NULL value in {table}.start"]
        assert damage.classify(con, table, lines) == ([], [lines[0]], [])
        lines = [f"Tree {own} page 9 cell 2: Offset 5000 out of range 100..4096", "Freelist: invalid page number 99"]
        assert damage.classify(con, table, lines) == ([lines[0]], [], [lines[1]])
    finally:
        con.close()


def test_the_evidence_tables_are_every_table_an_analysis_reads(monkeypatch) -> None:
    """Every table the analysis of any bundled export looks up is one quick_check checks."""
    looked_up: set[str] = set()
    table = source.ExportFile.table

    def recording(self: source.ExportFile, base: str) -> Any:
        looked_up.add(base)
        return table(self, base)

    monkeypatch.setattr(source.ExportFile, "table", recording)
    for path in sorted(FIXTURES.rglob("*.sqlite")):
        try:
            nsysaudit.analyze(path)
        except nsysaudit.UnusableInput:
            continue  # the fixtures of unusable input
    assert looked_up and looked_up <= set(damage.EVIDENCE_TABLES), looked_up - set(damage.EVIDENCE_TABLES)
