"""One reader, one answer: whatever engine reads a damaged export (the native scan from the pages or
through SQLite's VDBE, polars over ADBC, the stdlib reader), the same exit code and the same report,
or the same one-line error, as SQLite's own quick_check of the evidence tables decides
(nsysaudit/read/damage.py): the native engine's own check of the pages stands for quick_check only
where it finds a table sound, which quick_check must then find too. Damage only in the free list or
an index is a warning."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import sqlite3
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, H200, H200_2025, PUBLIC, needs_native
from mutants import ENGINES, GPU_TABLES, Judged, describe, judge, sqlites_words, with_free_pages

import nsysaudit
from nsysaudit.read import damage, source
from nsysaudit.read.source import readonly_uri

TORCH = H200_2025 / "torch" / "observe.sqlite"
MOCK = PUBLIC / "nsys-ai_mock_2026.1.sqlite"  # an export another tool added indexes to (on its CUDA API table too)
PIPIT = PUBLIC / "pipit_saxpy_2022.2.sqlite"  # nsys 2022.2: overflow chains in StringIds, a column added later
# nsys 2025.3's serialized stalls: 1,707 kernels on 33 leaves, 816 memsets, 48 copies and synchronizations,
# read by the host stalls' page reader, whose check stands for quick_check's there
SERIALIZED = H200_2025 / "sync" / "serialized.sqlite"


def real_exports(tmp: Path) -> dict[str, Path]:
    """The six real exports the mutants are made of: the nsys 2025.3 torch and event captures, the
    nsys 2023.4 capture, an export with indexes on its CUDA API table, one with pages on its free
    list, and an nsys 2022.2 export with overflow pages in an evidence table."""
    return {
        "torch": TORCH,
        "event": H200_2025 / "event" / "observe.sqlite",
        "nsys 2023.4": H200 / "observe.sqlite",
        "indexed": MOCK,
        "free pages": with_free_pages(TORCH, tmp),
        "overflow": PIPIT,
    }


# The sweep's mutants in tests of about 300 each, which pytest-xdist spreads over its workers (the
# whole sweep is some 450 CPU-seconds: in one test, one worker ran it alone at the end of the run).
SHARDS = 8


def cores() -> int:
    """The cores this process may keep busy: the machine's, shared among pytest-xdist's workers."""
    return max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def judged(tmp: Path, per_export: int, every: int, gpu: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Judged]:
    """``per_export`` seeded mutants of each real export, each read by the native engine (its own
    check and page reader) and the stdlib reader (quick_check decides), every ``every``-th by all
    four engines; and ``gpu`` mutants of an export with GPU tables damaged in one of them (category
    "GPU table"); of each, the ``shard``-th of ``shards`` runs of seeds; on worker processes where
    there are cores for them (one engine a process)."""
    def engines(seed: int) -> tuple[str, ...]:
        return tuple(ENGINES) if seed % every == 0 else ("native", "sqlite3")

    def seeds(n: int) -> range:
        return range(n * shard // shards, n * (shard + 1) // shards)

    work = [
        (name, path, seed, engines(seed), tmp, None)
        for name, path in real_exports(tmp).items()
        for seed in seeds(per_export)
    ] + [("gpu tables", SERIALIZED, seed, engines(seed), tmp, GPU_TABLES) for seed in seeds(gpu)]
    workers = min(4, cores())
    if workers == 1 or len(work) < 100:
        yield from (judge(*w) for w in work)
        return
    # spawn: a forked child inherits polars' thread pool without its threads
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(judge, *zip(*work, strict=True), chunksize=8)


Said = tuple[Counter[tuple[str, str]], Counter[str], int]


def one_answer(tmp: Path, per_export: int, every: int, gpu: int = 0, shard: int = 0, shards: int = 1) -> Said:
    """Every mutant's engines give one answer (or read it unstably); what they said, per tree and per
    kind of damage, and how many were unstable."""
    seen: Counter[tuple[str, str]] = Counter()
    kinds: Counter[str] = Counter()
    unstable = 0
    for j in judged(tmp, per_export, every, gpu, shard, shards):
        if j.unstable:
            unstable += 1
            continue
        said = {e: (a[0], a[2][:300]) for e, a in j.answers.items()}
        assert len(set(j.answers.values())) == 1, (j.export, j.seed, j.kind, j.where, said)
        code, _, err, warned = j.answers["sqlite3"]
        verdict = "refused" if code == 2 else "warned" if warned else "read"
        seen[(j.where, verdict)] += 1
        kinds[f"{j.kind}: {verdict}"] += 1
        if j.where in ("free list", "index", "other table"):  # no evidence row touched: never refused
            assert code == 0, (j.export, j.seed, j.kind, j.where, err)
        if code == 2:
            assert err.count("\n") == 1 and "Traceback" not in err, err
    return seen, kinds, unstable


def all_shards_said(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shard: int,
                    said: Said) -> Said | None:
    """What every shard of the sweep said, added up, once the last of those this run selected has
    passed (this one); else None. Each shard that passes writes its counts into a folder of this run
    that pytest-xdist's workers share (their base temporary folders' parent, pytest-of-USER/pytest-N),
    under a lock, so that exactly one shard finds them all there. A shard that failed writes nothing:
    the totals are then not checked, and the run has failed already."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-N/popen-gwK: a worker's own
    folder = base / "damage-sweep"
    folder.mkdir(exist_ok=True)
    this = request.node.originalname
    selected = {item.callspec.params["shard"] for item in request.session.items
                if getattr(item, "originalname", None) == this}
    seen, kinds, unstable = said
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counts = {"seen": [[*key, n] for key, n in seen.items()], "kinds": dict(kinds), "unstable": unstable}
        (folder / f"{shard}.json").write_text(json.dumps(counts))
        passed = {int(path.stem): json.loads(path.read_text()) for path in folder.glob("*.json")}
    if set(passed) != selected or selected != set(range(SHARDS)):
        return None
    total: Said = (Counter(), Counter(), 0)
    for counts in passed.values():
        total[0].update({(where, verdict): n for where, verdict, n in counts["seen"]})
        total[1].update(counts["kinds"])
        total = (total[0], total[1], total[2] + counts["unstable"])
    return total


@pytest.mark.slow
@pytest.mark.first
@needs_native
@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"{shard + 1}-of-{SHARDS}")
def test_every_engine_gives_one_answer_on_damaged_real_exports(
    shard: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    """2,100 seeded damaged copies of six real exports, and 300 of an export whose GPU tables (read
    by the host stalls' page reader, its check standing for quick_check's) are damaged (bytes
    overwritten; interior child pointers duplicated, swapped, redirected; cells moved; freeblocks
    and fragment counts corrupted; record headers changed; overflow chains cut or lengthened; pages
    zeroed; copies cut short): each read by the native engine and the stdlib reader, every fifth by
    all four engines, gives one exit code and one report (every key but those naming the engine), or
    one error line: SQLite's quick_check decides, and where the native check finds a table sound
    quick_check does too. (SQLite's own words of what is damaged are set aside: on a damaged record
    they can change from one run to the next, whatever reads the file.) In :data:`SHARDS` tests,
    each a run of seeds of every export; the last to pass holds the sum of what they all said to the
    bounds below (:func:`all_shards_said`)."""
    said = one_answer(tmp_path, 350, 5, gpu=300, shard=shard, shards=SHARDS)
    total = all_shards_said(request, tmp_path_factory, shard, said)
    if total is None:  # the other shards have not all passed yet: the last of them checks the sums
        return
    seen, kinds, unstable = total
    said = str((dict(seen), dict(kinds), unstable))
    assert sum(seen.values()) + unstable == 6 * 350 + 300, said  # every mutant, each in one shard
    # not vacuous: damage refused, warned of and read past, on every kind of page, by every kind of damage
    assert seen[("CUDA API table", "refused")] > 200 and seen[("evidence table", "refused")] > 60, said
    assert seen[("index", "read")] + seen[("index", "warned")] > 50 and seen[("free list", "read")] > 20, said
    assert seen[("CUDA API table", "read")] > 50 and seen[("file", "refused")] > 30, said
    assert seen[("GPU table", "refused")] > 100 and seen[("GPU table", "read")] > 10, said
    for kind in ("bytes", "pointer duplicated", "pointers swapped", "pointer redirected", "cell moved", "freeblock",
                 "record", "page zeroed", "overflow chain", "truncated"):  # fmt: skip
        assert kinds[f"{kind}: refused"] > 5, (kind, said)
    assert unstable <= 40, said


@needs_native
def test_every_engine_gives_one_answer_on_a_few_damaged_real_exports(tmp_path: Path) -> None:
    """The sweep above, five mutants of each export, by all four engines (``make test-fast``)."""
    seen, _, unstable = one_answer(tmp_path, 5, 1, gpu=5)
    assert sum(seen.values()) + unstable == 35 and unstable <= 2, (seen, unstable)


HANDED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _checked_natively(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables the damage check's native check reads (recorded as it is called)."""
    from nsysaudit.read import native

    seen: list[str] = []
    check = native.check_tables

    def recording(uri: str, tables: Any) -> list[str]:
        seen.extend(t for t, _ in tables)
        return check(uri, tables)

    monkeypatch.setattr(native, "check_tables", recording)
    return seen


@needs_native
def test_the_gpu_tables_the_stalls_read_are_checked_once_by_their_reader(monkeypatch) -> None:
    """The page reader of the host stalls checks every leaf of the kernel, copy and memset tables as it
    reads them, and the damage check takes its word: it does not read them a second time."""
    seen = _checked_natively(monkeypatch)
    with nsysaudit.open(SERIALIZED) as session:
        assert session._trace.gpu_work.checked == dict.fromkeys(HANDED, "")
    assert seen and not set(seen) & set(HANDED)
    assert "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in seen  # read by SQLite: checked by the damage check


@needs_native
def test_a_gpu_table_its_reader_doubts_is_judged_by_quick_check(tmp_path: Path, monkeypatch, capsys) -> None:
    """A kernel leaf zeroed: the reader's check is unsure, quick_check decides (its words, exit 2), as
    the stdlib engine says."""
    path = tmp_path / "serialized.sqlite"
    export = describe(SERIALIZED)
    leaves = [p for p in export.trees["CUPTI_ACTIVITY_KIND_KERNEL"]
              if p not in export.interior.get("CUPTI_ACTIVITY_KIND_KERNEL", [])]
    data = bytearray(export.data)
    page = leaves[len(leaves) // 2]
    data[(page - 1) * export.page_size : page * export.page_size] = bytes(export.page_size)
    path.write_bytes(bytes(data))
    from nsysaudit.cli import main

    answers = []
    for flag in ("1", "0"):
        monkeypatch.setenv("NSYSAUDIT_NATIVE", flag)
        code = main(["analyze", str(path), "--json"])
        out, err = capsys.readouterr()
        answers.append((code, out, err))
    assert answers[0] == answers[1]
    code, out, err = answers[0]
    assert code == 2 and out == "" and err.startswith(
        f"nsysaudit: error: {path}: damaged SQLite file: table CUPTI_ACTIVITY_KIND_KERNEL (SQLite's quick_check")


def _damaged_leaf(tmp: Path, source_path: Path, *trees: str) -> Path:
    """A copy of ``source_path`` with a wrong count of fragmented bytes on a leaf of each of ``trees``'
    b-trees (damage quick_check finds and the readers read past)."""
    export = describe(source_path)
    data = bytearray(export.data)
    for tree in trees:
        leaves = [p for p in export.trees[tree] if data[(p - 1) * export.page_size] in (0x0A, 0x0D)]
        data[(leaves[len(leaves) // 2] - 1) * export.page_size + 7] = 60
    path = tmp / f"{'-'.join(trees)}.sqlite"
    path.write_bytes(bytes(data))
    return path


@needs_native
def test_a_damaged_cuda_api_table_is_refused_before_the_rest_is_read(tmp_path: Path, monkeypatch) -> None:
    """The scan doubts its table: SQLite decides it at once (it is the first evidence table, so its
    damage is the verdict whatever else is damaged), and the GPU tables are not read. The error is
    the one the whole reading ends with, and the stdlib engine's."""
    from nsysaudit.read import trace

    path = _damaged_leaf(tmp_path, SERIALIZED, "CUPTI_ACTIVITY_KIND_RUNTIME")
    read: list[object] = []
    reader = trace.read_gpu_work
    monkeypatch.setattr(trace, "read_gpu_work", lambda *a, **k: read.append(1) or reader(*a, **k))

    def error() -> str:
        with pytest.raises(nsysaudit.UnusableInput) as raised:
            nsysaudit.analyze(path)
        return str(raised.value)

    early = error()
    assert "damaged SQLite file: table CUPTI_ACTIVITY_KIND_RUNTIME (SQLite's quick_check" in early and not read
    monkeypatch.setattr(damage.DamageCheck, "settled", lambda self, scanned: None)  # decided after the reading
    assert sqlites_words(error()) == sqlites_words(early) and read
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "0")
    assert sqlites_words(error()) == sqlites_words(early)


@needs_native
def test_a_damage_the_thread_found_is_refused_once_the_tables_before_it_are_checked(tmp_path: Path) -> None:
    """Once the damage check's thread has found a table damaged, the file is refused whatever else is
    read; only which table is named is left: the tables before it whose check was to come (the CUDA
    API table where the scan did not check it, the GPU tables the host stalls read after the scan)
    are checked at once, in order, and the first damaged one is named, as after the whole reading."""
    def named(scanned: str | None, *trees: str) -> tuple[str | None, str | None]:
        export = source.probe(_damaged_leaf(tmp_path, SERIALIZED, *trees))
        try:
            now, later = (damage.DamageCheck(export, handed=HANDED) for _ in range(2))
            now._work.result()  # the thread's work done, as it may be by the time the scan ends
            settled = now.settled(scanned)
            return (settled.table if settled is not None else None), later.result(scanned)
        finally:
            export.close()

    for scanned, trees, table in (
        ("", ("NVTX_EVENTS",), "NVTX_EVENTS"),
        (None, ("NVTX_EVENTS",), "NVTX_EVENTS"),  # the CUDA API table checked now: sound
        ("", ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",), "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),  # after the GPU tables
        ("", ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"), "CUPTI_ACTIVITY_KIND_KERNEL"),
        (None, ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"), "CUPTI_ACTIVITY_KIND_RUNTIME"),
        (None, ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
         "CUPTI_ACTIVITY_KIND_RUNTIME"),
    ):
        settled, verdict = named(scanned, *trees)
        assert settled == table and verdict.table == table and verdict.damaged is not None, (scanned, trees)


@needs_native
def test_a_damaged_synchronization_table_the_thread_found_is_refused_before_the_gpu_tables_are_read(
    tmp_path: Path, monkeypatch
) -> None:
    """The thread done by the time the scan ends (as on a small export): the GPU tables are not read
    for the host stalls, and the error is the whole reading's."""
    from nsysaudit.read import trace

    path = _damaged_leaf(tmp_path, SERIALIZED, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    read: list[object] = []
    reader, settled = trace.read_gpu_work, damage.DamageCheck.settled
    monkeypatch.setattr(trace, "read_gpu_work", lambda *a, **k: read.append(1) or reader(*a, **k))

    def after_the_thread(self: damage.DamageCheck, scanned: str | None) -> damage.Damage | None:
        self._work.result()
        return settled(self, scanned)

    def error() -> str:
        with pytest.raises(nsysaudit.UnusableInput) as raised:
            nsysaudit.analyze(path)
        return str(raised.value)

    monkeypatch.setattr(damage.DamageCheck, "settled", after_the_thread)
    early = error()
    assert "damaged SQLite file: table CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (SQLite's" in early and not read
    monkeypatch.setattr(damage.DamageCheck, "settled", lambda self, scanned: None)
    assert sqlites_words(error()) == sqlites_words(early) and read


@needs_native
def test_a_gpu_table_its_reader_doubts_is_decided_before_the_rest_is_read(tmp_path: Path, monkeypatch) -> None:
    """The page reader doubts a kernel leaf (read past): quick_check decides as soon as the reader is done (what
    it read is not reduced further), once (not again after the reading), and the error is the whole
    reading's."""
    from nsysaudit.read import gpu_work

    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    path = _damaged_leaf(tmp_path, SERIALIZED, kernel)
    searched: list[object] = []
    checks: list[tuple[str, ...]] = []
    after, check_export = gpu_work._without_own, damage.check_export  # the step after the reader's pass
    monkeypatch.setattr(gpu_work, "_without_own", lambda *a, **k: searched.append(1) or after(*a, **k))
    monkeypatch.setattr(damage, "check_export", lambda uri, tables, *a, **k: checks.append(tuple(tables))
                        or check_export(uri, tables, *a, **k))

    def error() -> str:
        with pytest.raises(nsysaudit.UnusableInput) as raised:
            nsysaudit.analyze(path)
        return str(raised.value)

    early = error()
    assert f"damaged SQLite file: table {kernel} (SQLite's quick_check" in early and not searched
    assert checks.count((kernel,)) == 1, checks
    monkeypatch.setattr(damage.DamageCheck, "settled_by_reader", lambda self, read: None)
    assert sqlites_words(error()) == sqlites_words(early) and searched


def test_free_list_damage_is_a_warning_and_the_rows_are_read_as_they_are(tmp_path: Path, capsys) -> None:
    path = with_free_pages(TORCH, tmp_path)
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
