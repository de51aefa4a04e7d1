"""The export cache of .nsys-rep reports, bounded: a size cap, the least recently used entries out
first (their use recorded by nsysaudit, not the file system's atime), ``nsysaudit cache`` to list and
prune, only the cache's own files ever removed, and two processes exporting the same report export
it once. An nsys stand-in copies a real export in place of ``nsys export`` (its runs counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TORCH, run

import nsysaudit
from nsysaudit.core.digests import sha256_file
from nsysaudit.core.text import size_word
from nsysaudit.read import cache as export_cache
from nsysaudit.read import nsys

HOUR = 3600.0


@pytest.fixture
def fake_nsys(tmp_path: Path) -> Path:
    """An ``nsys`` that exports by copying TORCH/observe.sqlite (after ``$FAKE_NSYS_SLEEP`` seconds),
    appending a line to ``runs.log`` beside it for each export."""
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir()
    script.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2099.1.1"; exit 0; fi\n'
        'while [ $# -gt 0 ]; do if [ "$1" = "--output" ]; then out="$2"; fi; shift; done\n'
        f'echo export >> "{script.parent / "runs.log"}"\n'
        'sleep "${FAKE_NSYS_SLEEP:-0}"\n'
        f'cp "{TORCH / "observe.sqlite"}" "$out"\n'
    )
    script.chmod(0o755)
    return script


def runs(fake_nsys: Path) -> int:
    log = fake_nsys.parent / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The export cache's folder of entries (``$NSYSAUDIT_CACHE/exports``), unbounded unless a test sets it."""
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NSYSAUDIT_CACHE_MAX", raising=False)
    return tmp_path / "cache" / "exports"


def report(folder: Path, name: str) -> Path:
    """A distinct .nsys-rep (its bytes name it): the stand-in exports any report the same way."""
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.nsys-rep"
    path.write_bytes(f"report {name}".encode())
    return path


def export(path: Path, fake_nsys: Path) -> nsys.CachedExport:
    return nsys.export_report(path, sha256_file(path), fake_nsys)


def used_ago(cache: Path, entry: nsys.CachedExport, seconds: float) -> None:
    """Set the entry's last use ``seconds`` back (as a run that long ago would have left it)."""
    then = time.time() - seconds
    os.utime(cache / f"{entry.sqlite.stem}.lock", (then, then))


ENTRY_BYTES = (TORCH / "observe.sqlite").stat().st_size


def test_sizes_are_read_in_binary_units_and_a_bad_bound_is_one_line(capsys, cache: Path, monkeypatch) -> None:
    assert export_cache.parse_size("500M") == 500 * 1024**2
    assert export_cache.parse_size("20GiB") == export_cache.parse_size("20 gb") == 20 * 1024**3
    assert export_cache.parse_size("1024") == 1024 and export_cache.parse_size("none") is None
    assert export_cache.max_bytes() == export_cache.DEFAULT_MAX_BYTES == 20 * 1024**3
    monkeypatch.setenv("NSYSAUDIT_CACHE_MAX", "lots")
    code, out, err = run(capsys, "cache")
    assert (code, out) == (2, "")
    assert err == "nsysaudit: error: NSYSAUDIT_CACHE_MAX: 'lots' is not a size (bytes, or with a unit: 500M, " \
                  "20G, 1.5GiB; or unlimited)\n"


def test_a_bad_bound_is_refused_before_nsys_runs(capsys, cache: Path, fake_nsys: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NSYSAUDIT_CACHE_MAX", "-3G")
    code, _, err = run(capsys, "analyze", "--nsys", fake_nsys, report(tmp_path / "runs", "a"))
    assert code == 2 and err.count("\n") == 1 and "NSYSAUDIT_CACHE_MAX" in err
    assert runs(fake_nsys) == 0 and not cache.exists()


def test_the_least_recently_used_entries_go_first_past_the_bound(cache: Path, fake_nsys: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("NSYSAUDIT_CACHE_MAX", str(2 * ENTRY_BYTES + 4096))  # two entries and their records
    folder = tmp_path / "runs"
    a, b = export(report(folder, "a"), fake_nsys), export(report(folder, "b"), fake_nsys)
    used_ago(cache, a, 3 * HOUR)
    used_ago(cache, b, 2 * HOUR)
    a.release(), b.release()
    again = export(report(folder, "a"), fake_nsys)  # a cache hit: a is now the most recently used
    assert again.cache_hit and runs(fake_nsys) == 2
    again.release()
    c = export(report(folder, "c"), fake_nsys)  # past the bound: b, used least recently, goes
    assert not c.cache_hit and runs(fake_nsys) == 3
    left = {e.report_sha256 for e in nsysaudit.list_cache().entries}
    assert left == {a.sqlite.stem, c.sqlite.stem}
    assert not (cache / f"{b.sqlite.stem}.json").exists() and not (cache / f"{b.sqlite.stem}.lock").exists()
    # its use is recorded by nsysaudit, whatever the file system does with atime
    assert [e.report_sha256 for e in nsysaudit.list_cache().entries] == [a.sqlite.stem, c.sqlite.stem]


def test_an_entry_in_use_or_just_used_is_kept_whatever_the_bound(cache: Path, fake_nsys: Path, tmp_path: Path):
    folder = tmp_path / "runs"
    held = export(report(folder, "held"), fake_nsys)  # its lock held while this object lives
    fresh = export(report(folder, "fresh"), fake_nsys)
    fresh.release()
    old = export(report(folder, "old"), fake_nsys)
    old.release()
    used_ago(cache, held, HOUR), used_ago(cache, old, HOUR)
    pruned = nsysaudit.prune_cache(0)
    assert [e.report_sha256 for e in pruned.removed] == [old.sqlite.stem]
    assert {e.report_sha256 for e in pruned.kept_in_use} == {held.sqlite.stem, fresh.sqlite.stem}
    assert [e.in_use for e in pruned.after.entries] == [True, False]  # held (an hour ago), fresh (now)
    held.release()
    assert [e.report_sha256 for e in nsysaudit.prune_cache(0, now=time.time() + HOUR).removed] == [
        held.sqlite.stem, fresh.sqlite.stem
    ]
    assert sorted(p.name for p in cache.iterdir()) == []


def test_cache_lists_and_prunes_and_leaves_what_is_not_its_own(capsys, cache, fake_nsys, tmp_path) -> None:
    folder = tmp_path / "runs"
    entries = [export(report(folder, name), fake_nsys) for name in ("a", "b")]
    for age, entry in zip((2 * HOUR, HOUR), entries, strict=True):
        used_ago(cache, entry, age)
        entry.release()
    foreign = {
        "notes.txt": b"mine",
        f"{'0' * 64}.sqlite": b"an export without a record",  # named as an entry, but no record says so
        f"{'1' * 64}.sqlite": b"its record is not the cache's",
        f"{'1' * 64}.json": b'{"format": "something else"}',
    }
    for name, data in foreign.items():
        (cache / name).write_bytes(data)
    (cache / "link.sqlite").symlink_to(TORCH / "observe.sqlite")
    stale, young = cache / "export-killed", cache / "export-running"
    for unfinished in (stale, young):
        unfinished.mkdir()
        (unfinished / "export.sqlite").write_bytes(b"half")
        (unfinished / "r.nsys-rep").symlink_to(folder / "a.nsys-rep")  # the staging folder's link to the report
    os.utime(stale, (time.time() - 2 * 24 * HOUR,) * 2)

    code, out, err = run(capsys, "cache")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"export cache {cache} (at most 20.0 GiB, NSYSAUDIT_CACHE_MAX)"
    shas = [e.sqlite.stem for e in entries]
    assert [line.split()[4] for line in lines[2:4]] == [s[:16] for s in shas]  # least recently used first
    assert all("NVIDIA Nsight Systems version 2099.1.1" in line for line in lines[2:4])
    sizes = [e.size_bytes for e in nsysaudit.list_cache().entries]
    assert lines[4:] == [f"2 export(s), {size_word(sum(sizes))}",
                         "2 unfinished export(s) (a running or killed nsys export)",
                         "5 other file(s), not this cache's: left alone"]

    code, out, err = run(capsys, "cache", "--prune", "--max-size", "500K")
    assert (code, err) == (0, "")
    assert out.splitlines()[:2] == [f"removed 1 least recently used export(s), {size_word(sizes[0])}",
                                    "removed 1 unfinished export(s) left by a killed process"]
    assert [e.report_sha256 for e in nsysaudit.list_cache().entries] == [shas[1]]
    for name, data in foreign.items():
        assert (cache / name).read_bytes() == data
    assert (cache / "link.sqlite").is_symlink() and young.is_dir() and not stale.exists()
    assert (folder / "a.nsys-rep").read_bytes() == b"report a"  # the link was removed, never followed

    code, out, err = run(capsys, "cache", "--max-size", "1G")
    assert code == 2 and out == "" and "--max-size is the size --prune prunes to" in err and err.count("\n") == 1


def test_two_processes_exporting_the_same_report_export_it_once(cache: Path, fake_nsys: Path, tmp_path: Path) -> None:
    path = report(tmp_path / "runs", "shared")
    env = {**os.environ, "NSYSAUDIT_CACHE": str(cache.parent), "FAKE_NSYS_SLEEP": "1"}
    command = [sys.executable, "-m", "nsysaudit", "analyze", "--json", "--nsys", str(fake_nsys), str(path)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    exports = [json.loads(out)["input"]["export"] for out, _ in outputs]
    assert runs(fake_nsys) == 1  # the second waited for the first's export, then found it
    assert sorted(e["cache_hit"] for e in exports) == [False, True]
    assert exports[0]["sha256"] == exports[1]["sha256"]
    sha = sha256_file(path)
    assert sorted(p.name for p in cache.iterdir()) == [f"{sha}.json", f"{sha}.lock", f"{sha}.sqlite"]


def test_a_cache_folder_that_is_a_file_is_one_line(capsys, cache: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not a folder")
    code, out, err = run(capsys, "cache")
    assert (code, out) == (2, "") and err == f"nsysaudit: error: {cache}: the export cache is not a folder\n"


def test_a_lock_that_is_a_symlink_is_never_followed_one_line(capsys, cache: Path, fake_nsys: Path, tmp_path) -> None:
    path = report(tmp_path / "runs", "a")
    cache.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"not the cache's")
    (cache / f"{sha256_file(path)}.lock").symlink_to(elsewhere)
    code, out, err = run(capsys, "analyze", "--nsys", fake_nsys, path)
    assert (code, out) == (2, "") and err.count("\n") == 1 and f"cannot write the export cache {cache}" in err
    assert elsewhere.read_bytes() == b"not the cache's" and runs(fake_nsys) == 0
