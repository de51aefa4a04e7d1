"""Unusable input: every command that reads an export exits 2 with one line naming the file and the
problem, never a traceback; and no command writes to or beside its inputs.

Bytes that are not an export (empty, random, cut at any page, a damaged page of a table the analysis
reads), a SQLite file that is not an nsys export, side files (a -wal, a hot journal, a FIFO), a
directory, a missing file, a .nsys-rep that nsys cannot export, a path that is not UTF-8, an export
cache record nested too deeply.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from builder import Call, Export, build_export
from conftest import (
    DEEP_JSON,
    H200,
    HUGE_INT,
    OBSERVE,
    PUBLIC,
    UNUSABLE,
    assert_one_line_error,
    copy_in,
    find_nsys,
    folder_state,
    requires_nsys,
    run,
)
from scenarios import RUNTIME, damage, observe_nested_failure, two_workers

from nsysaudit.core.errors import UnusableInput
from nsysaudit.read.source import check_sqlite_file

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


# --- unusable bytes -------------------------------------------------------------------------------------


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
    """nsys export draws its progress bar on stderr first and says why it failed last."""
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


# --- evidence is read-only ----------------------------------------------------------------------------


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


# --- names and records from outside ---------------------------------------------------------------


def test_a_path_that_is_not_utf8_is_one_line_exit_2(capsys, evidence: Path) -> None:
    bad = Path(os.fsdecode(os.fsencode(evidence) + b"/bad\xff.sqlite"))
    shutil.copyfile(OBSERVE, bad)
    for args in (["analyze", "--json", str(bad)], ["compare", str(bad), str(OBSERVE), "--out", str(evidence / "o")]):
        code, out, err = run(capsys, *args)
        assert_one_line_error(code, err, Path(str(bad).replace("\udcff", "\\udcff")), "its path is not valid UTF-8")
        assert out == ""
    assert sorted(os.listdir(os.fsencode(evidence))) == [b"bad\xff.sqlite"]


def test_an_export_cache_record_nested_too_deeply_is_stale_not_a_traceback(tmp_path: Path) -> None:
    from nsysaudit.read import nsys

    entry = tmp_path / f"{'0' * 64}.sqlite"
    shutil.copyfile(OBSERVE, entry)
    for record in (DEEP_JSON, f'{{"format": "nsysaudit.export-cache/1", "size_bytes": {HUGE_INT}}}'):
        entry.with_suffix(".json").write_text(record)
        assert nsys._cached(tmp_path / "r.nsys-rep", entry, "0" * 64, "nsys 1") is None  # exported again




# --- what older nsys wrote: recognised by what nsys writes, not by one table ---------------------------


def nsys_2020_3_osrt_nvtx() -> Export:
    """What nsys 2020.3 writes for a capture of the OS runtime and NVTX only (a builder case: no such real
    export is bundled): no metadata table (2020.3 wrote none) and no CUDA table (nothing traced it);
    StringIds, ThreadNames, PROCESSES, TARGET_INFO_SESSION_START_TIME, ANALYSIS_DETAILS, NVTX_EVENTS
    and OSRT_API with nsys's own DDL."""
    from builder import Range, ddl_statements

    osrt = ddl_statements()["OSRT_API"]
    return Export(
        ranges=[Range("epoch", 1_000, 90_000, 100, 100)],
        thread_names={(100, 100): "python3"},
        processes={100: "python3"},
        analysis_duration=100_000,
        omit_tables={"META_DATA_EXPORT", "META_DATA_CAPTURE", "CUPTI_ACTIVITY_KIND_RUNTIME"},
        raw_sql=[
            f"{osrt};"
            "INSERT INTO StringIds (id, value) VALUES (1000, 'pthread_mutex_lock'), (1001, 'ioctl');"
            "INSERT INTO OSRT_API VALUES (2000, 2500, 27, 1677721700, 1000, 0, 0, 1), "
            "(3000, 3100, 27, 1677721700, 1001, 0, 0, 2)",
        ],
    )


def test_an_nsys_2020_3_export_of_the_os_runtime_and_nvtx_is_read_as_inconclusive(capsys, make_export) -> None:
    """Refused as "not an Nsight Systems export: no META_DATA_EXPORT table" once the rule asked for
    that table or a CUDA table; earlier releases read it as inconclusive (no CUDA API trace), which is
    the truth: it is recognised by the tables nsys writes."""
    path = make_export(nsys_2020_3_osrt_nvtx())
    code, out, err = run(capsys, "analyze", "--json", str(path))
    assert code == 0, err
    d = json.loads(out)
    assert d["verdict"] == "inconclusive" and d["census"]["cuda_api_calls"] == 0
    assert "no CUDA API trace" in d["verdict_reasons"][0]
    [said] = [w for w in d["warnings"] if w["kind"] == "no_metadata_table"]
    assert "(NVTX_EVENTS, OSRT_API)" in said["message"]
    assert (d["input"]["nsys_version"], d["input"]["schema_version"]) == (None, None)


def test_a_string_table_beside_nothing_of_nsys_is_still_no_export(capsys, make_export) -> None:
    spec = nsys_2020_3_osrt_nvtx()
    spec.ranges = []
    spec.raw_sql = ["CREATE TABLE OSRT_API (start INTEGER, stop INTEGER)"]  # a table of that name, not nsys's
    path = make_export(spec)
    code, _, err = run(capsys, "analyze", str(path))
    assert_one_line_error(code, err, path, "not an Nsight Systems export: no META_DATA_EXPORT table, and none of "
                          "the event tables nsys writes beside StringIds")
