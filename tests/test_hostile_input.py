"""Hostile and broken input (issue 6): nsysaudit never crashes, never lies, never touches the evidence.

1. Unusable input exits 2 with one line naming the file and the problem (no traceback).
2. Evidence is read-only: inputs keep their SHA-256 and nothing appears beside them.
3. Text from traces is data: markup is shown literally, JSON stays valid, long text is shortened.
4. Resource bounds: explicit limits, reported when hit (growth is measured by
   ``benchmarks/hostile_growth.py``, never timed here).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, build_export, strip_not_null
from conftest import (
    DEEP_JSON,
    FORGED,
    H200,
    HOSTILE_TEXT,
    HUGE_INT,
    OBSERVE,
    PUBLIC,
    RUNTIME,
    UNSAFE_SHOWN,
    UNUSABLE,
    assert_one_line_error,
    copy_in,
    find_nsys,
    folder_state,
    hostile_export,
    requires_nsys,
    run,
    warning_counts,
)
from rich.console import Console
from scenarios import MAIN, PID, WORKER, MiB, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.analysis.joins import closed_libs, count_pairs, nest
from nsysaudit.core.errors import UnusableInput
from nsysaudit.read.source import check_sqlite_file
from nsysaudit.render.terminal import analysis_renderable

REAL_EXPORTS = sorted([*H200.glob("*.sqlite"), *PUBLIC.glob("*.sqlite")])


# --- helpers ---------------------------------------------------------------------------------------


def commands_for(bad: Path, good: Path, out: Path) -> list[list[str]]:
    """Every command that reads an export, with ``bad`` in each input position."""
    return [
        ["analyze", str(bad)],
        ["analyze", "--json", str(bad)],
        ["analyze", str(bad), "--out", str(out / "sealed")],
        ["compare", str(bad), str(good), "--out", str(out / "a")],
        ["compare", str(good), str(bad), "--out", str(out / "b")],
    ]


# --- 1. unusable input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_unusable_bytes_exit_2_on_every_command(capsys, evidence: Path, tmp_path: Path, case: str) -> None:
    content, problem = UNUSABLE[case]
    bad = evidence / f"{case}.sqlite"
    bad.write_bytes(content)
    good = copy_in(evidence, OBSERVE)
    before = folder_state(evidence)
    for args in commands_for(bad, good, tmp_path / "out"):
        code, out, err = run(capsys, *args)
        assert_one_line_error(code, err, bad, problem)
        assert out == ""
    assert folder_state(evidence) == before


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"")
    plain = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "analyze", str(bad)], capture_output=True, text=True, check=False
    )
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "--debug", "analyze", str(bad)], capture_output=True, text=True, check=False
    )
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "UnusableInput" in debug.stderr
    # after the command too (issue 24, item 9): it was refused there ("No such option")
    for args in (["analyze", str(bad), "--debug"], ["compare", str(bad), str(bad), "--out", "x", "--debug"]):
        after = subprocess.run([sys.executable, "-m", "nsysaudit", *args], capture_output=True, text=True, check=False)
        assert "Traceback" in after.stderr and "UnusableInput" in after.stderr, after.stderr


def _cuts(size: int, page: int) -> Iterator[int]:
    """Every page boundary below ``size``, the header's edges and a few odd offsets."""
    yield from range(0, size, page)
    yield from (1, 15, 16, 99, 100, 101, page - 1, page + 1, size // 2 + 7, size - page + 1, size - 1)


@pytest.mark.parametrize("real", REAL_EXPORTS, ids=lambda p: p.name)
def test_every_truncation_of_a_real_export_is_refused_up_front(tmp_path: Path, real: Path) -> None:
    """Cut at every page boundary (and odd offsets): refused by the header check alone.

    The header's page count is authoritative in all bundled exports (version-valid-for equals
    the change counter), so a cut anywhere, even one that lands on a page boundary and leaves a
    file SQLite would happily open, is seen before any table is read.
    """
    data = real.read_bytes()
    header = check_sqlite_file(real)
    assert header.page_count is not None and header.page_count * header.page_size == len(data)
    cut_file = tmp_path / real.name
    cut_file.write_bytes(data)
    cuts = sorted(set(_cuts(len(data), header.page_size)), reverse=True)
    for cut in cuts:  # shrink one copy in place: cheap even for ~2000 cuts
        os.truncate(cut_file, cut)
        with pytest.raises(UnusableInput) as info:
            check_sqlite_file(cut_file)
        message = str(info.value)
        if cut == 0:
            assert "empty file" in message
        elif cut < 100:
            assert "not a SQLite database" in message
        else:
            assert "truncated SQLite file" in message and f"file has {cut} bytes" in message


@pytest.mark.parametrize("cut", [100, 4096, 8192, 70 * 4096, 561152 - 4096, 561152 - 1])
def test_truncated_real_export_exits_2_on_every_command(capsys, evidence: Path, tmp_path: Path, cut: int) -> None:
    bad = evidence / "cut.sqlite"
    bad.write_bytes(OBSERVE.read_bytes()[:cut])
    good = copy_in(evidence, OBSERVE)
    before = folder_state(evidence)
    for args in commands_for(bad, good, tmp_path / "out"):
        code, _, err = run(capsys, *args)
        assert_one_line_error(code, err, bad, "truncated SQLite file")
    assert folder_state(evidence) == before


def _legacy_header(data: bytes) -> bytes:
    """The same file as a pre-3.7.0 writer would leave it: the header page count is not trusted."""
    out = bytearray(data)
    out[92:96] = (int.from_bytes(out[24:28], "big") + 1).to_bytes(4, "big")
    return bytes(out)


def test_untrusted_header_falls_back_to_quick_check(capsys, evidence: Path) -> None:
    """Without an authoritative page count a cut on a page boundary is caught by PRAGMA quick_check."""
    data = _legacy_header(OBSERVE.read_bytes())
    whole = evidence / "legacy.sqlite"
    whole.write_bytes(data)
    assert check_sqlite_file(whole).page_count is None
    code, out, err = run(capsys, "analyze", "--json", str(whole))
    assert code == 0, err
    assert json.loads(out)["census"]["cuda_api_calls"] == 925
    for cut in (len(data) - 4096, len(data) - 3 * 4096, len(data) // 2 // 4096 * 4096, 4096):
        bad = evidence / f"legacy-cut-{cut}.sqlite"
        bad.write_bytes(data[:cut])
        code, _, err = run(capsys, "analyze", str(bad))
        assert code == 2 and err.count("\n") == 1 and str(bad) in err, err
        assert any(p in err for p in ("damaged SQLite file", "SQLite cannot read it", "malformed")), err
    odd = evidence / "legacy-odd.sqlite"
    odd.write_bytes(data[:5000])
    code, _, err = run(capsys, "analyze", str(odd))
    assert_one_line_error(code, err, odd, "not a whole number of 4096-byte pages")


def test_sqlite_that_is_not_an_nsys_export(capsys, evidence: Path, tmp_path: Path) -> None:
    other = evidence / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.commit()
    con.close()
    good = copy_in(evidence, OBSERVE)
    before = folder_state(evidence)
    for args in commands_for(other, good, tmp_path / "out"):
        code, _, err = run(capsys, *args)
        assert_one_line_error(code, err, other, "not an Nsight Systems export: no META_DATA_EXPORT table")
    assert folder_state(evidence) == before


@pytest.mark.parametrize("table", ["StringIds", "META_DATA_EXPORT"])
def test_export_without_a_required_table(capsys, make_export, table: str) -> None:
    # Without a metadata table an export is still read when its CUDA API table is recognisable
    # (nsys 2020.3 wrote none; see test_evidence_rules.py); without both it is not an export.
    omit = {table} if table == "StringIds" else {table, "CUPTI_ACTIVITY_KIND_RUNTIME"}
    path = make_export(Export(calls=[Call("cudaMalloc_v3020", 1, 2)], omit_tables=omit))
    code, _, err = run(capsys, "analyze", str(path))
    assert_one_line_error(code, err, path, f"no {table} table")


def test_string_ids_without_its_columns(capsys, make_export) -> None:
    path = make_export(
        Export(
            calls=[Call("cudaMalloc_v3020", 1, 2)],
            raw_sql=["ALTER TABLE StringIds RENAME COLUMN value TO text_value"],
        )
    )
    code, _, err = run(capsys, "analyze", str(path))
    assert_one_line_error(code, err, path, "StringIds has no value column")


# A page of a table in the middle of the file is damaged: the tables exist, the query fails half-way.


def _leaf_pages(data: bytes, page_size: int, root: int) -> list[int]:
    """Leaf pages of the table b-tree rooted at ``root`` (1-based page numbers), in key order."""
    base = (root - 1) * page_size
    head = base + (100 if root == 1 else 0)
    kind = data[head]
    if kind == 0x0D:
        return [root]
    assert kind == 0x05, f"page {root} is not a table b-tree page"
    cells = int.from_bytes(data[head + 3 : head + 5], "big")
    right = int.from_bytes(data[head + 8 : head + 12], "big")
    children = []
    for i in range(cells):
        pointer = int.from_bytes(data[head + 12 + 2 * i : head + 14 + 2 * i], "big")
        children.append(int.from_bytes(data[base + pointer : base + pointer + 4], "big"))
    children.append(right)
    return [leaf for child in children for leaf in _leaf_pages(data, page_size, child)]


def damage_table(source: Path, target: Path, table: str) -> int:
    """Copy ``source`` to ``target`` with the middle leaf page of ``table`` overwritten; its page number."""
    con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        sql = "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?"
        (root,) = con.execute(sql, (table,)).fetchone()
    finally:
        con.close()
    data = bytearray(source.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    leaves = _leaf_pages(bytes(data), page_size, root)
    victim = leaves[len(leaves) // 2]
    start = (victim - 1) * page_size
    data[start : start + page_size] = random.Random(victim).randbytes(page_size)
    target.write_bytes(bytes(data))
    return victim


READ_TABLES = [
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "CUDA_GPU_MEMORY_USAGE_EVENTS",
    "StringIds",
    "ThreadNames",
    "PROCESSES",
    "META_DATA_CAPTURE",
    "ENUM_NSYS_EVENT_TYPE",
    "TARGET_INFO_SESSION_START_TIME",
]


@pytest.mark.parametrize("table", READ_TABLES)
def test_damaged_page_in_a_table_the_analysis_reads_exits_2(capsys, evidence: Path, tmp_path: Path, table: str) -> None:
    bad = evidence / "damaged.sqlite"
    damage_table(OBSERVE, bad, table)
    good = copy_in(evidence, OBSERVE)
    before = folder_state(evidence)
    for args in commands_for(bad, good, tmp_path / "out"):
        code, out, err = run(capsys, *args)
        assert code == 2, (args, out[-500:], err)
        assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err, err
    assert folder_state(evidence) == before


def test_damaged_page_in_a_table_the_analysis_does_not_read(capsys, evidence: Path) -> None:
    """Only what the analysis reads can change its answer; other damage is outside its evidence."""
    bad = evidence / "damaged.sqlite"
    damage_table(OBSERVE, bad, "TARGET_INFO_SYSTEM_ENV")
    code, out, err = run(capsys, "analyze", "--json", str(bad))
    assert code == 0, err
    assert json.loads(out)["census"]["cuda_api_calls"] == 925


def test_wal_mode_export_is_read_without_writing_beside_it(capsys, evidence: Path) -> None:
    """``mode=ro`` alone would create -wal and -shm beside a WAL-mode file: it is opened immutable."""
    wal = copy_in(evidence, OBSERVE, "wal.sqlite")
    con = sqlite3.connect(wal)
    assert con.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    con.close()
    before = folder_state(evidence)
    assert before.keys() == {"wal.sqlite"}
    code, out, err = run(capsys, "analyze", "--json", str(wal))
    assert code == 0, err
    assert json.loads(out)["census"]["cuda_api_calls"] == 925
    assert folder_state(evidence) == before


def test_wal_file_beside_the_export_is_refused(capsys, evidence: Path) -> None:
    wal = copy_in(evidence, OBSERVE, "wal.sqlite")
    con = sqlite3.connect(wal)
    con.execute("PRAGMA journal_mode = WAL")
    con.close()
    (evidence / "wal.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    before = folder_state(evidence)
    code, _, err = run(capsys, "analyze", str(wal))
    assert_one_line_error(code, err, wal, "WAL-mode SQLite with a non-empty wal.sqlite-wal beside it")
    assert folder_state(evidence) == before


def test_hot_journal_beside_the_export_is_refused(capsys, evidence: Path) -> None:
    bad = copy_in(evidence, OBSERVE, "copied-mid-write.sqlite")
    (evidence / "copied-mid-write.sqlite-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(504))
    before = folder_state(evidence)
    code, _, err = run(capsys, "analyze", str(bad))
    assert_one_line_error(code, err, bad, "hot journal")
    assert folder_state(evidence) == before


def crafted_wal(export: Path, sql: str) -> bytes:
    """The -wal a WAL-mode copy of ``export`` holds after ``sql`` (checkpointing off): frames that
    SQLite would apply to ``export`` too, rollback-mode header or not, if it found them beside it."""
    work = export.with_name("wal-work.sqlite")
    shutil.copyfile(export, work)
    con = sqlite3.connect(work, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute(sql)
        frames = work.with_name(work.name + "-wal").read_bytes()  # read while the connection keeps it
    finally:
        con.close()
    for leftover in work.parent.glob("wal-work.sqlite*"):
        leftover.unlink()
    return frames


def test_a_wal_beside_a_rollback_mode_export_is_ignored_and_said(capsys, make_export, evidence: Path) -> None:
    """Same file bytes, with and without a crafted -wal: the same analysis; nothing written beside it."""
    built = make_export(observe_nested_failure())
    export = copy_in(evidence, built, "run.sqlite")
    frames = crafted_wal(built, f"UPDATE {RUNTIME} SET returnValue = 0")
    code, out, err = run(capsys, "analyze", "--json", str(export))
    alone = json.loads(out)
    assert code == 0 and alone["verdict"] == "failure_found" and alone["warnings"] == [], err
    (evidence / "run.sqlite-wal").write_bytes(frames)
    # The frames are real: plain mode=ro would read them (on a copy) and find no failure at all.
    probe_dir = evidence.parent / "plain-ro"
    probe_dir.mkdir()
    for name in ("run.sqlite", "run.sqlite-wal"):
        shutil.copyfile(evidence / name, probe_dir / name)
    plain = sqlite3.connect(f"file:{probe_dir / 'run.sqlite'}?mode=ro", uri=True)
    assert plain.execute(f"SELECT count(*) FROM {RUNTIME} WHERE returnValue != 0").fetchone() == (0,)
    plain.close()
    assert (probe_dir / "run.sqlite-shm").exists()  # and it writes beside the file it reads

    before = folder_state(evidence)
    code, out, err = run(capsys, "analyze", "--json", str(export))
    assert code == 0, err
    with_wal = json.loads(out)
    assert folder_state(evidence) == before  # no -shm, the -wal untouched
    [warning] = [w for w in with_wal["warnings"] if w["kind"] == "side_file_ignored"]
    assert warning["message"] == (
        f"run.sqlite-wal beside the export ({len(frames):,} bytes) is ignored, never read: the export is in "
        "rollback mode (like every nsys export), so a WAL beside it is not part of it"
    )
    with_wal["warnings"].remove(warning)
    assert with_wal == alone


@pytest.mark.parametrize("suffix", ["-journal", "-wal"])
def test_a_fifo_named_like_a_side_file_is_never_opened(evidence: Path, suffix: str) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the analysis must not hang on it."""
    export = copy_in(evidence, OBSERVE)
    os.mkfifo(evidence / f"observe.sqlite{suffix}")
    before = sorted(p.name for p in evidence.iterdir())
    proc = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "analyze", "--json", str(export)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["census"]["cuda_api_calls"] == 925
    [warning] = [w for w in doc["warnings"] if w["kind"] == "side_file_ignored"]
    assert warning["message"] == (
        f"observe.sqlite{suffix} beside the export is not a regular file (a FIFO): ignored, not opened"
    )
    assert sorted(p.name for p in evidence.iterdir()) == before


def test_directory_and_missing_file(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "analyze", str(tmp_path / "missing.sqlite"))
    assert_one_line_error(code, err, tmp_path / "missing.sqlite", "no such file")
    folder = tmp_path / "folder.sqlite"
    folder.mkdir()
    code, _, err = run(capsys, "analyze", str(folder))
    assert_one_line_error(code, err, folder, "not a regular file")


# --- .nsys-rep inputs -------------------------------------------------------------------------------


def test_nsys_rep_without_an_nsys_binary(capsys, evidence: Path, monkeypatch) -> None:
    report = evidence / "run.nsys-rep"
    report.write_bytes(random.Random(1).randbytes(4096))
    before = folder_state(evidence)
    monkeypatch.delenv("NSYSAUDIT_NSYS", raising=False)
    monkeypatch.setenv("PATH", "")
    code, _, err = run(capsys, "analyze", str(report))
    assert_one_line_error(code, err, report, "no nsys CLI was found")
    code, _, err = run(capsys, "analyze", "--nsys", str(evidence / "no-such-nsys"), str(report))
    assert_one_line_error(code, err, report, "not an executable file")
    monkeypatch.setenv("NSYSAUDIT_NSYS", "/nonexistent/nsys")
    code, _, err = run(capsys, "analyze", str(report))
    assert_one_line_error(code, err, report, "/nonexistent/nsys, which is not an executable file")
    assert folder_state(evidence) == before


def test_empty_nsys_rep(capsys, evidence: Path) -> None:
    report = evidence / "empty.nsys-rep"
    report.write_bytes(b"")
    code, _, err = run(capsys, "analyze", str(report))
    assert_one_line_error(code, err, report, "empty file")


@requires_nsys
@pytest.mark.parametrize("content", [b"garbage", random.Random(2).randbytes(200_000)], ids=["short", "random"])
def test_nsys_rep_that_nsys_cannot_export(
    capsys, evidence: Path, tmp_path: Path, monkeypatch, content: bytes
) -> None:
    nsys = find_nsys()
    assert nsys is not None
    report = evidence / "broken.nsys-rep"
    report.write_bytes(content)
    before = folder_state(evidence)
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(cache))
    # A relative --nsys works too: nsys runs from a private folder, so the path is made absolute.
    monkeypatch.chdir(Path(nsys).parent)
    code, _, err = run(capsys, "analyze", "--nsys", "./nsys", str(report))
    assert_one_line_error(code, err, report, "nsys export failed")
    assert folder_state(evidence) == before
    # No half-written export is left in the cache either.
    assert not list(cache.rglob("*.sqlite"))


def test_a_failed_nsys_export_says_its_cause_not_its_progress(capsys, evidence: Path, tmp_path: Path) -> None:
    """nsys export draws its progress bar on stderr first and says why it failed last (issue 24, item 9)."""
    report = evidence / "run.nsys-rep"
    report.write_bytes(b"a report")
    nsys = tmp_path / "nsys"
    progress = "".join(f"\\rProcessing 11832 events: [{i}%%{' ' * 50}]" for i in range(1, 60))  # printf: %%
    nsys.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2023.4.4"; exit 0; fi\n'
        f'printf "{progress}" >&2\n'
        'printf "\\nExportation error: database or disk is full: No space left on device\\n" >&2\nexit 1\n'
    )
    nsys.chmod(0o755)
    code, _, err = run(capsys, "analyze", "--nsys", str(nsys), str(report))
    assert_one_line_error(code, err, report, "nsys export failed (exit 1): Exportation error: database or disk is "
                          "full: No space left on device")
    assert "Processing" not in err


# --- 1b. partly broken input: the analysis runs, every problem is a warning ----------------------

SECOND = 700  # a second worker thread with its own cublasCreate_v2


def two_workers(*, failure_on_first: bool) -> Export:
    """The observe (or release) scenario plus a second worker whose cublasCreate_v2 holds a
    successful cudaMalloc (corr 40), a kernel launch (41) and a failed cudaMalloc (42)."""
    spec = observe_nested_failure() if failure_on_first else release_three_allocations()
    spec.calls += [
        Call("cudaMalloc_v3020", 40_000, 40_500, PID, SECOND, corr=40, bytes=MiB),
        Call("cudaLaunchKernel_v7000", 41_000, 41_200, PID, SECOND, corr=41),
        Call("cudaMalloc_v3020", 42_000, 42_400, PID, SECOND, ret=2, corr=42),
        Call("cudaStreamSynchronize_v3020", 60_000, 60_100, PID, MAIN, corr=60),
    ]
    spec.lib_calls.append(LibCall("cublasCreate_v2", 39_000, 43_000, PID, SECOND))
    spec.thread_names[(PID, SECOND)] = "bwd_worker_1"
    return spec


def damage(kind: str, corr: int) -> list[str]:
    """raw_sql that damages the CUDA API row with correlation id ``corr`` in one way."""
    where = f"WHERE correlationId = {corr}"
    return {
        "dangling_name_id": [f"UPDATE {RUNTIME} SET nameId = 9999 {where}"],
        "null_start": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET start = NULL {where}"],
        "null_end": [strip_not_null(RUNTIME), f'UPDATE {RUNTIME} SET "end" = NULL {where}'],
        "null_return": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET returnValue = NULL {where}"],
        "null_name_id": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET nameId = NULL {where}"],
        "null_global_tid": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET globalTid = NULL {where}"],
        "reversed": [f'UPDATE {RUNTIME} SET start = "end" + 100 {where}'],
        "duplicate_correlation": [f"UPDATE {RUNTIME} SET correlationId = 40 {where}"],
    }[kind]


DAMAGE_WARNING = {
    "dangling_name_id": ("dangling_name_id", 1),
    "null_start": ("null_in_not_null_column", 1),
    "null_end": ("null_in_not_null_column", 1),
    "null_return": ("null_in_not_null_column", 1),
    "null_name_id": ("null_in_not_null_column", 1),
    "null_global_tid": ("null_global_tid", 1),
    "reversed": ("reversed_time_range", 1),
    "duplicate_correlation": ("duplicate_correlation_id", 2),
}


def analyze_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code, out, err = run(capsys, "analyze", "--json", str(path))
    assert code == 0, err
    code_text, text, err_text = run(capsys, "analyze", str(path))  # the terminal report runs too
    assert code_text == 0 and "warning:" in text, err_text
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_two_workers_scenario_is_clean(capsys, make_export) -> None:
    doc = json.loads(run(capsys, "analyze", "--json", str(make_export(two_workers(failure_on_first=False))))[1])
    assert doc["warnings"] == []
    assert [(f["correlation_id"], f["tid"]) for f in doc["findings"]] == [(42, SECOND)]


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damaged_failed_call_is_a_warning_and_unaffected_findings_stay(capsys, make_export, kind: str) -> None:
    """The damaged row is the second worker's failed cudaMalloc; the first worker's finding stays."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = damage(kind, 42)
    doc = analyze_json(capsys, make_export(spec))
    warning, count = DAMAGE_WARNING[kind]
    assert warning_counts(doc)[warning] == count
    first = [f for f in doc["findings"] if f["tid"] == WORKER]
    assert [(f["kind"], f["correlation_id"], f["return_code"]) for f in first] == [("nested_alloc_failure", 22, 2)]
    assert doc["verdict"] == "failure_found"
    assert doc["census"]["cuda_api_calls"] == 9  # every row counts, damaged or not


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damage_that_could_hide_a_finding_makes_the_verdict_inconclusive(capsys, make_export, kind: str) -> None:
    spec = two_workers(failure_on_first=False)
    spec.raw_sql = damage(kind, 42)
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts[DAMAGE_WARNING[kind][0]] == DAMAGE_WARNING[kind][1]
    if kind == "duplicate_correlation":
        # Still decidable by time, name and return: found, but its bytes cannot be attributed.
        [finding] = doc["findings"]
        assert (finding["kind"], finding["correlation_id"], finding["requested_bytes"]) == (
            "nested_alloc_failure", 40, None)
        second = next(lc for lc in doc["library_calls"] if lc["tid"] == SECOND)
        assert [c["bytes"] for c in second["children"]] == [None, None, None]
        assert doc["verdict"] == "failure_found"
        return
    assert doc["findings"] == []
    assert counts["undecided_calls"] == 1
    assert doc["verdict"] == "inconclusive", doc["verdict_reasons"]
    assert "could be a failed allocation inside a library call" in doc["verdict_reasons"][0]


@pytest.mark.parametrize("kind", sorted(DAMAGE_WARNING))
def test_damage_that_cannot_hide_a_finding_keeps_the_verdict(capsys, make_export, kind: str) -> None:
    """The damaged row is a successful kernel launch: warned about, but it cannot be a failed allocation."""
    spec = two_workers(failure_on_first=False)
    spec.calls = [c for c in spec.calls if c.corr != 42]
    spec.raw_sql = damage(kind, 41)
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts[DAMAGE_WARNING[kind][0]] == DAMAGE_WARNING[kind][1]
    assert "undecided_calls" not in counts
    assert doc["verdict"] == "no_failure", doc["verdict_reasons"]


def test_census_counts_damaged_rows_as_the_warnings_say(capsys, make_export) -> None:
    """NULL returnValue: in cuda_api_calls, not in nonzero_returns (unknown is not a failure).
    NULL start: still a call with a return code, counted in by_return; never joined."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        strip_not_null(RUNTIME),
        f"UPDATE {RUNTIME} SET returnValue = NULL WHERE correlationId = 22",
        f"UPDATE {RUNTIME} SET start = NULL WHERE correlationId = 42",
    ]
    doc = analyze_json(capsys, make_export(spec))
    assert doc["census"]["cuda_api_calls"] == 9
    assert doc["census"]["nonzero_returns"] == 1
    assert [(r["api"], r["return_code"], r["count"]) for r in doc["census"]["by_return"]] == [
        ("cudaMalloc_v3020", 2, 1)
    ]
    messages = " ".join(w["message"] for w in doc["warnings"])
    assert "not in by_return" in messages and "excluded from" in messages
    assert doc["findings"] == [] and doc["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    "sql,warning,reason",
    [
        (["UPDATE NVTX_EVENTS SET start = 44000 WHERE start = 39000"],
         "reversed_library_range", "library_call_reversed"),
        ([strip_not_null("NVTX_EVENTS"), 'UPDATE NVTX_EVENTS SET "end" = NULL WHERE start = 39000'],
         "library_call_without_end", "library_call_has_no_end"),
        ([strip_not_null("NVTX_EVENTS"), "UPDATE NVTX_EVENTS SET start = NULL WHERE start = 39000"],
         "library_call_without_start", "library_call_has_no_start"),
        (["UPDATE NVTX_EVENTS SET textId = 9999 WHERE start = 39000"], "dangling_library_name", None),
    ],
    ids=["reversed", "no-end", "no-start", "dangling-name"],
)
def test_damaged_library_range(capsys, make_export, sql: list[str], warning: str, reason: str | None) -> None:
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = sql
    doc = analyze_json(capsys, make_export(spec))
    assert warning_counts(doc)[warning] == 1
    second = next(lc for lc in doc["library_calls"] if lc["tid"] == SECOND)
    assert second["children"] == [] or reason is None  # a damaged range is never joined
    assert second["censored_reason"] == reason
    assert second["coverage"] == ("censored" if reason else "complete")
    # The first worker's finding is unaffected.
    assert [f["correlation_id"] for f in doc["findings"] if f["tid"] == WORKER] == [22]


def test_unknown_nvtx_domain_could_hide_library_calls(capsys, make_export) -> None:
    spec = two_workers(failure_on_first=False)
    spec.raw_sql = ["UPDATE NVTX_EVENTS SET text = NULL WHERE eventType = 75"]  # the cuBLAS domain loses its name
    doc = analyze_json(capsys, make_export(spec))
    counts = warning_counts(doc)
    assert counts["unknown_nvtx_domain"] == 2
    assert doc["library_calls"] == [] and doc["verdict"] == "inconclusive"


def test_failed_allocation_never_gets_another_calls_bytes(capsys, make_export) -> None:
    """An allocation event carrying a failed call's correlation id belongs to another call."""
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET correlationId = 22 WHERE correlationId = 21",
    ]
    doc = analyze_json(capsys, make_export(spec))
    first = next(f for f in doc["findings"] if f["correlation_id"] == 22)
    assert first["requested_bytes"] is None
    assert warning_counts(doc)["allocation_event_for_failed_call"] == 1


def test_wrong_typed_values_are_warnings_not_crashes(capsys, make_export) -> None:
    spec = two_workers(failure_on_first=True)
    spec.raw_sql = [
        f"UPDATE {RUNTIME} SET start = 'soon', \"end\" = x'00ff' WHERE correlationId = 41",
        f"UPDATE {RUNTIME} SET returnValue = 2.5 WHERE correlationId = 40",
    ]
    doc = analyze_json(capsys, make_export(spec))
    assert warning_counts(doc)["type_mismatch"] == 2
    assert [f["correlation_id"] for f in doc["findings"] if f["tid"] == WORKER] == [22]


@pytest.mark.parametrize(
    "shadows,read",
    [
        (["CUPTI_ACTIVITY_KIND_RUNTIME_V2"], "CUPTI_ACTIVITY_KIND_RUNTIME_V2"),
        (["CUPTI_ACTIVITY_KIND_RUNTIME_V2", "CUPTI_ACTIVITY_KIND_RUNTIME_V10"], "CUPTI_ACTIVITY_KIND_RUNTIME_V10"),
    ],
    ids=["base-and-v2", "three-versions"],
)
def test_a_shadow_version_of_a_table_is_never_read_silently(
    capsys, make_export, shadows: list[str], read: str
) -> None:
    """A copy of the CUDA API table without the failed call, named as a newer version of it."""
    spec = observe_nested_failure()
    spec.raw_sql = [f"CREATE TABLE {t} AS SELECT * FROM {RUNTIME} WHERE returnValue = 0" for t in shadows]
    doc = analyze_json(capsys, make_export(spec))
    assert doc["input"]["tables"]["cuda_api"] == read
    [warning] = [w for w in doc["warnings"] if w["kind"] == "ambiguous_table"]
    names = ", ".join([RUNTIME, *sorted(shadows, key=lambda t: int(t.rsplit("_V", 1)[1]))])
    assert warning == {
        "kind": "ambiguous_table",
        "count": 1 + len(shadows),
        "message": f"the export has {1 + len(shadows)} tables for {RUNTIME} ({names}): read {read}, the highest "
        "version; the others are not read",
    }
    # The shadow holds no failed call, so the analysis of it finds none: that is never no_failure.
    assert doc["findings"] == []
    assert doc["verdict"] == "inconclusive"
    assert any(r.startswith(f"several versions of {RUNTIME} exist") for r in doc["verdict_reasons"])


@pytest.mark.parametrize("digit", ["\uff12", "\u0662", "02"], ids=["fullwidth", "arabic-indic", "leading-zero"])
def test_only_ascii_version_numbers_name_a_table_variant(capsys, make_export, digit: str) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = [f'CREATE TABLE "{RUNTIME}_V{digit}" AS SELECT * FROM {RUNTIME} WHERE returnValue = 0']
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["input"]["tables"]["cuda_api"] == RUNTIME
    assert doc["verdict"] == "failure_found" and doc["warnings"] == []


# --- 3. text from traces is data ------------------------------------------------------------------

LONG = "W" * 10_000


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_shown_literally_in_the_terminal(capsys, make_export, name: str) -> None:
    text = HOSTILE_TEXT[name]
    path = make_export(hostile_export(text))
    code, brief, err = run(capsys, "analyze", str(path))  # the answer alone: escaped as well
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(brief), repr(UNSAFE_SHOWN.search(brief))
    code, out, err = run(capsys, "analyze", str(path), "--details")
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(out), repr(UNSAFE_SHOWN.search(out))
    # One real verdict line; no line forged by trace text.
    assert [line for line in out.splitlines() if line.startswith("verdict:")] == ["verdict: failure_found"]
    if name in ("markup", "link", "html"):
        assert text in out  # shown as written, markup not interpreted
    if name == "ansi":
        assert "\\x1b[2J\\x1b[31mRED\\x1b]8;;https://evil.example\\x07here" in out
    if name == "forged-line":
        assert "ok\\nverdict: no_failure" in out
    if name == "bidi":
        assert "abc\\u202eexe.txt" in out
    if name == "zero-width":
        assert "ad\\u200bmin\\u200d\\u2060\\u2064\\ufeff" in out
    if name == "tag":
        assert "x\\U000e0041\\U000e007fy" in out


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_kept_exactly_in_json(capsys, make_export, name: str) -> None:
    text = HOSTILE_TEXT[name]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(hostile_export(text))))
    assert code == 0, err
    doc = json.loads(out)  # cannot break the document
    [finding] = doc["findings"]
    assert finding["thread_name"] == text and finding["enclosing"]["api"] == text
    assert doc["library_calls"][0]["api"] == text
    assert doc["processes"][0]["name"] == text


def test_trace_text_in_a_colour_terminal(make_export) -> None:
    """Through a colour terminal console, rich's own styles are the only escape sequences."""
    result = nsysaudit.analyze(make_export(hostile_export(HOSTILE_TEXT["ansi"] + HOSTILE_TEXT["markup"])))
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=120)
    console.print(analysis_renderable(result, details=True))
    sequences = set(re.findall(r"\x1b[^a-zA-Z]*[a-zA-Z]", buffer.getvalue()))
    assert sequences and all(s.startswith("\x1b[") and s.endswith("m") for s in sequences), sequences
    assert "\x1b[2J" not in buffer.getvalue() and "\x1b]8;;https://evil" not in buffer.getvalue()
    assert "[bold red]x[/]" in buffer.getvalue()


def test_very_long_trace_text_is_shortened_with_its_length(capsys, make_export) -> None:
    path = make_export(hostile_export(LONG))
    code, out, err = run(capsys, "analyze", str(path), "--details")
    assert code == 0, err
    assert "(10000 chars)" in out and LONG not in out
    assert max(len(line) for line in out.splitlines()) < 500
    code, out, _ = run(capsys, "analyze", "--json", str(path))
    assert json.loads(out)["findings"][0]["thread_name"] == LONG  # the data itself is never cut


def test_invalid_utf8_text_is_a_warning_not_an_unusable_export(capsys, make_export) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = ["UPDATE StringIds SET value = CAST(x'627764ff776f726b6572' AS TEXT) WHERE value = 'bwd_worker_0'"]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"][0]["thread_name"] == "bwd\ufffdworker"
    assert warning_counts(doc)["invalid_utf8_text"] >= 1
    assert doc["verdict"] == "failure_found"


def test_invalid_utf8_in_an_integer_column(capsys, make_export) -> None:
    """ADBC hands such a column to polars as a broken string column (polars aborts the process on
    it): the scan refuses that batch and reads the table with the tolerant engine instead."""
    spec = observe_nested_failure()
    spec.raw_sql = [f"UPDATE {RUNTIME} SET start = CAST(x'ff' AS TEXT) WHERE correlationId = 30"]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(spec)))
    assert code == 0, err
    doc = json.loads(out)
    assert warning_counts(doc)["type_mismatch"] == 1
    assert [f["correlation_id"] for f in doc["findings"]] == [22]


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_escaped_in_report_md(make_export, tmp_path: Path, name: str) -> None:
    from nsysaudit import seal

    seal.seal_analysis(make_export(hostile_export(HOSTILE_TEXT[name])), tmp_path / "sealed")
    report = (tmp_path / "sealed" / "report.md").read_text(encoding="utf-8")
    assert not UNSAFE_SHOWN.search(report), repr(UNSAFE_SHOWN.search(report))
    assert "verdict: no_failure" not in report


def test_md_escapes_c1_bidi_zero_width_and_tag_characters() -> None:
    from nsysaudit.render.markdown import md

    assert md("a\x9b31mb\u202ec\u2066d\u200be\ufefff\U000e0041g") == (
        "a\\\\x9b31mb\\\\u202ec\\\\u2066d\\\\u200be\\\\ufefff\\\\U000e0041g"
    )


def test_markdown_report_escapes_trace_text(make_export, tmp_path: Path) -> None:
    from nsysaudit import seal

    text = "[x](https://evil.example) <img src=x> | *em* # h\n- forged item"
    sealed = seal.seal_analysis(make_export(hostile_export(text)), tmp_path / "sealed")
    report = (tmp_path / "sealed" / "report.md").read_text(encoding="utf-8")
    # Every Markdown/HTML character of the trace text is backslash-escaped; the line break too.
    assert not re.search(r"(?<!\\)\[x(?<!\\)\]|(?<!\\)<img|(?<!\\)\*em", report)
    assert "\n- forged item" not in report
    assert "\\[x\\](https://evil.example) \\<img src=x\\> \\| \\*em\\* \\# h\\\\n- forged item" in report
    assert sealed.dir == tmp_path / "sealed"


# --- 2. evidence is read-only -----------------------------------------------------------------------


def test_no_command_writes_to_or_beside_its_inputs(capsys, evidence: Path, tmp_path: Path) -> None:
    """SHA-256 of every input unchanged and no new file beside it, after every command, good or bad."""
    for real in REAL_EXPORTS:
        copy_in(evidence, real)
    for telemetry in H200.glob("*.telemetry.jsonl"):
        copy_in(evidence, telemetry)
    build_export(two_workers(failure_on_first=True), evidence / "built.sqlite")
    broken = observe_nested_failure()
    broken.raw_sql = damage("null_end", 22)
    build_export(broken, evidence / "damaged-rows.sqlite")
    (evidence / "broken.telemetry.jsonl").write_text('{"event": "x", "monotonic_ns": 1}\nnot json\n')
    observe, release = evidence / "observe.sqlite", evidence / "release.sqlite"
    obs_tel, rel_tel = evidence / "observe.telemetry.jsonl", evidence / "release.telemetry.jsonl"
    before = folder_state(evidence)
    out = tmp_path / "out"

    for export in sorted(evidence.glob("*.sqlite")):
        for args in (["analyze", str(export)], ["analyze", "--json", str(export)]):
            code, _, err = run(capsys, *args)
            assert code == 0, (args, err)
    commands = [
        (0, ["analyze", str(observe), "--telemetry", str(obs_tel)]),
        (0, ["analyze", str(observe), "--telemetry", str(evidence / "broken.telemetry.jsonl"), "--lenient"]),
        (2, ["analyze", str(observe), "--telemetry", str(evidence / "broken.telemetry.jsonl")]),
        (0, ["analyze", str(observe), "--out", str(out / "sealed-arm")]),
        (0, ["compare", str(observe), str(release), "--out", str(out / "cmp"),
             "--observe-telemetry", str(obs_tel), "--release-telemetry", str(rel_tel)]),
        (0, ["verify", str(out / "cmp"), "--inputs", str(observe), str(release), str(obs_tel), str(rel_tel)]),
        (0, ["verify", str(out / "sealed-arm"), "--inputs", str(observe)]),
        (1, ["verify", str(out / "sealed-arm"), "--inputs", str(release)]),
    ]
    for expected, args in commands:
        code, _, err = run(capsys, *args)
        assert code == expected, (args, err)
        if code:
            assert err.count("\n") == 1 and "Traceback" not in err, err
    assert folder_state(evidence) == before
    # verify only reads the sealed folder it checks.
    sealed = folder_state(out)
    run(capsys, "verify", str(out / "cmp"))
    assert folder_state(out) == sealed


def test_broken_telemetry_lines_exit_2_unless_lenient(capsys, evidence: Path) -> None:
    telemetry = evidence / "bad.telemetry.jsonl"
    telemetry.write_text('{"event": "a", "monotonic_ns": 5}\n{"event": \n')
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--telemetry", str(telemetry))
    assert code == 2 and err.count("\n") == 1 and str(telemetry) in err and "line 2" in err, err
    code, out, err = run(capsys, "analyze", "--json", str(OBSERVE), "--telemetry", str(telemetry), "--lenient")
    assert code == 0, err
    assert warning_counts(json.loads(out))["telemetry_bad_lines"] == 1


# --- 4. resource bounds: explicit limits, reported when hit ----------------------------------------
# (growth with size is measured by benchmarks/hostile_growth.py, never timed in the suite)


def nested_ranges(k: int, m: int, *, failed_at: int | None) -> Export:
    """k cublasCreate_v2 ranges nested in each other on one thread, all holding the same m calls
    (k*m overlapping pairs); call ``failed_at`` (if any) is a failed cudaMalloc."""
    calls = [
        Call("cudaMalloc_v3020", 1_000 + 100 * i, 1_050 + 100 * i, PID, WORKER, corr=i + 1,
             ret=2 if i == failed_at else 0, bytes=None if i == failed_at else MiB)
        for i in range(m)
    ]
    calls.append(Call("cudaFree_v3020", 10_000_000, 10_000_100, PID, MAIN, corr=m + 1))
    libs = [LibCall("cublasCreate_v2", 500 - i, 1_000 + 100 * m + i, PID, WORKER) for i in range(k)]
    return Export(calls=calls, lib_calls=libs)


def sequential_ranges(n: int, *, failed_in: int) -> Export:
    """n cublasCreate_v2 ranges one after another, each holding a failing cudaEventQuery (600, not
    an allocation); range ``failed_in`` also holds a failed cudaMalloc."""
    calls, libs = [], []
    for i in range(n):
        base = 10_000 * (i + 1)
        libs.append(LibCall("cublasCreate_v2", base, base + 5_000, PID, WORKER))
        calls.append(Call("cudaEventQuery_v3020", base + 100, base + 200, PID, WORKER, ret=600, corr=2 * i + 1))
        if i == failed_in:
            calls.append(Call("cudaMalloc_v3020", base + 300, base + 400, PID, WORKER, ret=2, corr=2 * i + 2))
    calls.append(Call("cudaFree_v3020", 10_000 * (n + 2), 10_000 * (n + 2) + 100, PID, MAIN, corr=10 * n))
    return Export(calls=calls, lib_calls=libs)


def test_pair_limit_keeps_findings_and_says_what_it_left_out(capsys, make_export) -> None:
    path = make_export(nested_ranges(20, 50, failed_at=25))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "100", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["limits"] == {"max_pairs": 100, "pairs": 20 * 50, "pairs_listed": 20}
    assert warning_counts(doc)["pair_limit"] == 1000
    # Every failure is still examined: the verdict stands, with the innermost enclosing call.
    assert doc["verdict"] == "failure_found"
    [finding] = doc["findings"]
    assert finding["correlation_id"] == 26 and len(finding["enclosing_chain"]) == 20
    for lc in doc["library_calls"]:
        assert [c["correlation_id"] for c in lc["children"]] == [26]  # only the failed call listed
        assert lc["children_complete"] is False and lc["allocated_bytes"] is None  # unknown, not 0
    # Without the limit every pair is listed.
    code, out, _ = run(capsys, "analyze", "--json", "--max-pairs", "0", str(path))
    doc = json.loads(out)
    assert doc["limits"]["pairs_listed"] == 1000 and "pair_limit" not in warning_counts(doc)
    assert all(lc["children_complete"] and lc["allocated_bytes"] == 49 * MiB for lc in doc["library_calls"])


def test_pair_limit_that_leaves_failures_unexamined_makes_the_verdict_inconclusive(capsys, make_export) -> None:
    path = make_export(sequential_ranges(10, failed_in=8))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "5", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"] == []
    assert doc["verdict"] == "inconclusive"
    assert "not examined" in doc["verdict_reasons"][0]
    assert "past the limit" in next(w["message"] for w in doc["warnings"] if w["kind"] == "pair_limit")
    # The same limit with the failed allocation in an examined range finds it.
    path = make_export(sequential_ranges(10, failed_in=1))
    code, out, _ = run(capsys, "analyze", "--json", "--max-pairs", "5", str(path))
    doc = json.loads(out)
    assert doc["verdict"] == "failure_found" and [f["correlation_id"] for f in doc["findings"]] == [4]


def test_pair_limit_without_failures_keeps_no_failure(capsys, make_export) -> None:
    path = make_export(nested_ranges(5, 10, failed_at=None))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "10", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "no_failure"  # nothing failed, so nothing could hide
    assert warning_counts(doc)["pair_limit"] == 50


def test_pair_limit_is_shown_in_the_terminal_and_refused_with_out(capsys, make_export, tmp_path: Path) -> None:
    path = make_export(nested_ranges(5, 10, failed_at=3))
    code, out, _ = run(capsys, "analyze", "--max-pairs", "10", str(path))
    assert code == 0 and "warning: pair_limit (50)" in out
    code, _, err = run(capsys, "analyze", "--max-pairs", "10", "--out", str(tmp_path / "sealed"), str(path))
    assert code == 2 and "--max-pairs" in err and err.count("\n") == 1
    code, _, err = run(capsys, "analyze", "--max-pairs", "-1", str(path))
    assert code == 2 and "Traceback" not in err


def test_pair_counts_without_forming_pairs_match_the_join() -> None:
    rng = random.Random(11)
    for _ in range(100):
        libs = []
        for i in range(rng.randint(0, 10)):
            start = rng.randint(0, 100)
            libs.append((i, rng.choice([1, 2]), start, start + rng.randint(0, 60)))
        calls = []
        for j in range(rng.randint(0, 40)):
            start = rng.randint(0, 170)
            calls.append((rng.choice([1, 2]), start, start + rng.randint(0, 25), j, "cudaMalloc_v3020", 0))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row")
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        )
        closed = closed_libs(lib_frame.cast(pl.Int64))
        pairs = nest(closed, call_frame)
        counts = count_pairs(closed, call_frame)
        per_lib = dict(pairs.group_by("lib_id").len().iter_rows())
        assert {lib: n for lib, n in counts.iter_rows() if n} == per_lib


@pytest.mark.parametrize("sequential", [True, False])
def test_nest_equals_a_brute_force_overlap_test(sequential: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways nest pairs calls: threads whose calls run one after another (binary searches) and
    threads where a call encloses another (the inequality join) give every overlap, nothing else."""
    import nsysaudit.analysis.joins as joins_module

    ways: Counter[bool] = Counter()  # True: threads answered in sequence; False: by the inequality join

    def counted(way: bool, real: Any) -> Any:
        def spy(calls: pl.DataFrame, libs: pl.DataFrame) -> Any:
            ways[way] += calls["gtid"].n_unique() if libs.height else 0
            return real(calls, libs)

        return spy

    monkeypatch.setattr(joins_module, "_overlapping_in_sequence", counted(True, joins_module._overlapping_in_sequence))
    monkeypatch.setattr(joins_module, "_overlapping_by_join", counted(False, joins_module._overlapping_by_join))
    rng = random.Random(5 if sequential else 6)
    for _ in range(60):
        libs = []
        for i in range(rng.randint(0, 12)):
            start = rng.randint(0, 200)
            libs.append((i, rng.choice([1, 2]), start, start + rng.randint(0, 60)))
        calls = []
        for thread in (1, 2):
            t = rng.randint(0, 10)
            for _ in range(rng.randint(0, 30)):
                if sequential:  # back to back, some of zero length, some touching the next
                    start, t = t, t + rng.randint(0, 12)
                    end = t
                    t += rng.randint(0, 3)
                else:
                    start = rng.randint(0, 260)
                    end = start + rng.randint(0, 40)
                calls.append((thread, start, end, len(calls), "cudaMalloc_v3020", 0))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row")
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        ).cast({"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64})
        pairs = nest(closed_libs(lib_frame.cast(pl.Int64)), call_frame)
        expected = {
            (lib, corr, "nested" if ls <= s and e <= le else "straddling")
            for lib, lg, ls, le in libs
            for cg, s, e, corr, _, _ in calls
            if lg == cg and s <= le and e >= ls
        }
        got = set(pairs.select("lib_id", "correlation_id", "relation").iter_rows())
        assert got == expected and pairs.height == len(expected)
        assert pairs.equals(pairs.sort(["lib_id", "start_ns", "correlation_id"], nulls_last=True))
    assert ways[True] > 10 and (ways[False] == 0 if sequential else ways[False] > 10)  # each way was taken


def test_nest_and_counts_over_many_threads_and_the_int64_edges_equal_brute_force() -> None:
    """All threads are answered at once (issue 24's 100k threads): ties, zero-length calls and
    library calls at the ends of the int64 range give every overlap of its own thread, nothing else."""
    rng = random.Random(24)
    lo, hi = -(1 << 63), (1 << 63) - 1
    for _ in range(80):
        threads = rng.randint(1, 40)
        points = [lo, lo + 1, -5, 0, 3, 7, 11, hi - 1, hi]
        libs = []
        for i in range(rng.randint(0, 30)):
            a, b = sorted(rng.choice([*points, rng.randint(-20, 20)]) for _ in range(2))
            libs.append((i, rng.randint(1, threads), a, b))
        calls = []
        for thread in range(1, threads + 1):
            t = rng.randint(-20, 0)
            for _ in range(rng.randint(0, 6)):
                start, t = t, t + rng.randint(0, 4)
                calls.append((thread, start, t, len(calls), "cudaMalloc_v3020", 0))
        if calls and rng.random() < 0.3:  # a call enclosing the next on one thread: the join's way
            g, s0, e0, *_ = calls[0]
            calls.append((g, s0, e0 + 10, len(calls), "cudaMalloc_v3020", 0))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row").cast(pl.Int64)
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        ).cast({"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64})
        closed = closed_libs(lib_frame)
        pairs = nest(closed, call_frame)
        expected = {
            (lib, corr, "nested" if ls <= s and e <= le else "straddling")
            for lib, lg, ls, le in libs
            for cg, s, e, corr, _, _ in calls
            if lg == cg and s <= le and e >= ls
        }
        assert set(pairs.select("lib_id", "correlation_id", "relation").iter_rows()) == expected
        assert pairs.height == len(expected)
        per_lib = Counter(lib for lib, _, _ in expected)
        assert {lib: n for lib, n in count_pairs(closed, call_frame).iter_rows() if n} == per_lib


# --- 3b. text is data in every command and on stderr (issue 10, item 9) ---------------------------

def test_compare_sources_line_escapes_version_strings(capsys, make_export, tmp_path: Path) -> None:
    observe = observe_nested_failure()
    observe.nsys_version = "2023.4\x1b]8;;https://e.x\x07\nverdicts:  observe no_failure\u200b"
    o = make_export(observe, "observe.sqlite")
    r = make_export(release_three_allocations(), "release.sqlite")
    code, out, err = run(capsys, "compare", str(o), str(r), "--out", str(tmp_path / "cmp"), "--details")
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(out), repr(UNSAFE_SHOWN.search(out))
    shown = " ".join(out.split())  # the terminal wraps long lines
    assert "DIFFERENT (2023.4\\x1b]8;;https://e.x\\x07\\nverdicts: observe no_failure\\u200b vs 2023.4.4.54)" in shown
    assert [line for line in out.splitlines() if line.startswith("verdicts:")] == [
        "verdicts:  observe failure_found  release no_failure"
    ]


def test_error_line_escapes_a_hostile_file_name(capsys, evidence: Path) -> None:
    bad = evidence / f"{FORGED}.sqlite"
    bad.write_bytes(b"")
    for args in (["analyze", str(bad)], ["compare", str(bad), str(OBSERVE), "--out", str(evidence / "o")]):
        code, out, err = run(capsys, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and not UNSAFE_SHOWN.search(err), repr(err)
        assert "x\\nseal: sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e.sqlite: empty file" in err


def test_error_line_escapes_schema_names_in_sqlite_messages(capsys, make_export) -> None:
    """SQLite's "malformed database schema (NAME)" quotes a schema object's name: one escaped line."""
    spec = observe_nested_failure()
    spec.raw_sql = [
        "PRAGMA writable_schema = ON;"
        "INSERT INTO sqlite_master VALUES ('table', 'evil\nverdict: no_failure\x1b[31m', 'evil', 0, 'CREATE nonsense');"
    ]
    path = make_export(spec)
    code, _, err = run(capsys, "analyze", str(path))
    assert_one_line_error(code, err, path, "malformed database schema (evil\\nverdict: no_failure\\x1b[31m)")
    assert not UNSAFE_SHOWN.search(err)


def test_verify_escapes_a_hostile_extra_file_name(capsys, tmp_path: Path) -> None:
    """A file named to forge a "seal: ... verified" line is named, escaped, on the one error line."""
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--out", str(out))
    assert code == 0, err
    (out / f"{FORGED}\nverified").write_text("")
    code, stdout, err = run(capsys, "verify", str(out))
    assert code == 1 and stdout == ""
    assert err.count("\n") == 1 and not UNSAFE_SHOWN.search(err), repr(err)
    assert "x\\nseal: sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e\\nverified: extra file" in err


def test_usage_errors_are_one_line(capsys) -> None:
    for args, problem in (
        (["analyze", str(OBSERVE), "--clock-tolerance", "nan"], "'nan' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--clock-tolerance", "inf"], "'inf' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--clock-tolerance", "-1"], "'-1' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--max-pairs", str(1 << 63)], f"{1 << 63} is not in the range"),
        (["analyze", str(OBSERVE), "--no-such-option"], "No such option '--no-such-option'"),
    ):
        code, out, err = run(capsys, *args)
        assert code == 2 and out == "", (args, out)
        assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
        assert problem in err and "nsysaudit analyze --help" in err, err


# --- 3c. sealed input names: escaped where shown, sha256sum's own form in inputs-sha256.txt (issue 24, item 4)


def test_hostile_input_names_are_sealed_exactly_and_verified_escaped(capsys, evidence: Path, tmp_path: Path) -> None:
    observe = copy_in(evidence, H200 / "observe.sqlite", "run\\1.sqlite")  # a backslash is part of a POSIX name
    release = copy_in(evidence, H200 / "release.sqlite", f"{FORGED}.sqlite")
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "compare", str(observe), str(release), "--out", str(out))
    assert code == 0, err
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (observe, release)}
    escaped = FORGED.replace("\n", "\\n")  # sha256sum escapes \\, \n and \r only (after a leading \)
    assert (out / "inputs-sha256.txt").read_bytes() == (
        f"\\{digest[observe]}  run\\\\1.sqlite\n\\{digest[release]}  {escaped}.sqlite\n"
    ).encode()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["command"] == ["nsysaudit", "compare", "run\\1.sqlite", f"{FORGED}.sqlite", "--out", "sealed"]
    assert [i["name"] for i in meta["inputs"]] == ["run\\1.sqlite", f"{FORGED}.sqlite"]
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", str(out / "inputs-sha256.txt")], cwd=evidence,
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0 and check.stdout.count(": OK\n") == 2, check.stdout + check.stderr
    code, stdout, err = run(capsys, "verify", str(out), "--inputs", str(observe), str(release))
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(stdout), repr(stdout)
    assert [line for line in stdout.splitlines() if line.startswith("seal:")] == [stdout.splitlines()[-1]]
    shown = "".join(stdout.split())  # the terminal wraps long lines
    assert "(release)matchesthesealedx\\nseal:sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e.sqlite:" in shown
    assert "(observe)matchesthesealedrun\\1.sqlite:" in shown


def test_a_sealed_name_forged_into_metadata_is_shown_escaped(capsys, evidence: Path, tmp_path: Path) -> None:
    """metadata.json's role and name are shown by verify --inputs: a forged one is text, not a line."""
    from nsysaudit.render.terminal import verification_renderable

    forged = {"path": "o.sqlite", "role": FORGED, "name": FORGED, "sha256": "0" * 64, "size_bytes": 1}
    console = Console(width=400, file=io.StringIO(), color_system=None)
    console.print(verification_renderable("DIR", ["a"], [forged], rerun=False))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert len(text.splitlines()) == 3 and not UNSAFE_SHOWN.search(text)


def test_a_path_that_is_not_utf8_is_one_line_exit_2(capsys, evidence: Path) -> None:
    bad = Path(os.fsdecode(os.fsencode(evidence) + b"/bad\xff.sqlite"))
    shutil.copyfile(OBSERVE, bad)
    for args in (["analyze", "--json", str(bad)], ["compare", str(bad), str(OBSERVE), "--out", str(evidence / "o")]):
        code, out, err = run(capsys, *args)
        assert_one_line_error(code, err, Path(str(bad).replace("\udcff", "\\udcff")), "its path is not valid UTF-8")
        assert out == ""
    assert sorted(os.listdir(os.fsencode(evidence))) == [b"bad\xff.sqlite"]


# --- 5. no traceback at the edges (issue 24, item 8) ----------------------------------------------------

@pytest.mark.parametrize("lenient", [False, True])
def test_telemetry_integers_of_thousands_of_digits_are_a_bad_line(capsys, evidence: Path, lenient: bool) -> None:
    telemetry = evidence / "huge.telemetry.jsonl"
    telemetry.write_text(f'{{"event": "a", "monotonic_ns": 5}}\n{{"event": "b", "monotonic_ns": {HUGE_INT}}}\n')
    code, out, err = run(capsys, "analyze", "--json", str(OBSERVE), "--telemetry", str(telemetry),
                         *(["--lenient"] if lenient else []))
    problem = "line 2: unusable JSON value: integer 999999999999999999999999... (5,000 characters) is outside"
    if lenient:
        assert code == 0 and "Traceback" not in err, err
        [w] = [w for w in json.loads(out)["warnings"] if w["kind"] == "telemetry_bad_lines"]
        assert problem in w["message"]
    else:
        assert_one_line_error(code, err, telemetry, problem)


def test_telemetry_keys_given_twice_are_a_bad_line_not_the_last_value(capsys, evidence: Path) -> None:
    telemetry = evidence / "twice.telemetry.jsonl"
    telemetry.write_text('{"event": "a", "monotonic_ns": 5, "monotonic_ns": 7}\n')
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--telemetry", str(telemetry))
    assert_one_line_error(code, err, telemetry, "line 1: unusable JSON value: key 'monotonic_ns' is given twice")


@pytest.mark.parametrize("seal", [False, True])
def test_verify_of_a_metadata_json_with_a_huge_integer_is_a_failed_check(
    capsys, tmp_path: Path, seal: bool
) -> None:
    out = tmp_path / "sealed"
    code, stdout, err = run(capsys, "analyze", str(OBSERVE), "--out", str(out))
    assert code == 0, err
    quoted = stdout.splitlines()[-1].removeprefix("seal: ")
    meta = out / "metadata.json"
    meta.write_text(meta.read_text().replace('"size_bytes": ', f'"size_bytes": {HUGE_INT}', 1))
    code, stdout, err = run(capsys, "verify", str(out), *(["--seal", quoted] if seal else []))
    assert (code, stdout) == (1, "") and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(out) in err and ("not readable JSON" in err or "metadata.json: changed" in err), err


def test_an_export_cache_record_nested_too_deeply_is_stale_not_a_traceback(tmp_path: Path) -> None:
    from nsysaudit.read import nsys

    entry = tmp_path / f"{'0' * 64}.sqlite"
    shutil.copyfile(OBSERVE, entry)
    for record in (DEEP_JSON, f'{{"format": "nsysaudit.export-cache/1", "size_bytes": {HUGE_INT}}}'):
        entry.with_suffix(".json").write_text(record)
        assert nsys._cached(tmp_path / "r.nsys-rep", entry, "0" * 64, "nsys 1") is None  # exported again


def test_a_batch_record_nested_too_deeply_is_one_line(capsys, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    code, _, err = run(capsys, "batch", str(OBSERVE), "--out", str(out), "--jobs", "1")
    assert code == 0, err
    (out / "parts" / "batch.json").write_text(DEEP_JSON)
    code, stdout, err = run(capsys, "batch", str(OBSERVE), "--out", str(out), "--jobs", "1")
    assert (code, stdout) == (2, "")
    assert err == f"nsysaudit: error: {out / 'parts' / 'batch.json'}: cannot write the batch output here: not a " \
        "batch record (unreadable JSON) (nothing was written)\n"


def test_ctrl_c_while_the_command_runs_is_one_line(capsys, monkeypatch) -> None:
    import signal

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("SIGINT was not delivered")

    monkeypatch.setattr(nsysaudit, "analyze", interrupted)
    code, out, err = run(capsys, "analyze", str(OBSERVE))
    assert (code, out, err) == (130, "", "nsysaudit: aborted\n")  # click's blank line is not printed


def test_ctrl_c_while_the_cli_is_imported_is_one_line() -> None:
    """SIGINT in the first ~0.2 s, while click and polars are imported: the same one line."""
    script = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def imp(name, *args, **kwargs):\n"
        "    if name == 'polars':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = imp\n"
        f"sys.argv = ['nsysaudit', 'analyze', {str(OBSERVE)!r}]\n"
        "from nsysaudit.__main__ import run\n"
        "run()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "nsysaudit: aborted\n")
