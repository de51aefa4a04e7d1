"""The .nsys-rep path, end to end with the real nsys CLI (no mock): profile, export, analyze."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from conftest import H200, find_nsys, requires_nsys, unprivileged
from scenarios import observe_nested_failure

import nsysaudit
from nsysaudit.cli import main
from nsysaudit.core.digests import sha256_file
from nsysaudit.reports import conformance, documents


@requires_nsys
def test_nsys_rep_is_exported_with_real_nsys_and_cached(cpu_report: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "cache"))
    before = sha256_file(cpu_report)
    listing = sorted(p.name for p in cpu_report.parent.iterdir())

    first = nsysaudit.analyze(cpu_report, nsys_path=find_nsys()).to_dict()
    assert first["input"]["kind"] == "nsys-rep"
    assert first["input"]["sha256"] == before
    assert first["input"]["export"]["cache_hit"] is False
    assert "2023.4" in (first["input"]["export"]["exported_with"] or "")
    assert first["input"]["nsys_version"].startswith("2023.4")
    # input.export has its type (InputExport) in the contract
    assert conformance.problems(json.loads(json.dumps(first)), documents.AnalysisDocument) == []
    # A CPU-only report has no CUDA API trace: the honest answer is "inconclusive".
    assert first["census"]["cuda_api_calls"] == 0
    assert first["coverage"]["cuda_api_trace"] is False
    assert first["verdict"] == "inconclusive"

    cached = list((tmp_path / "cache" / "exports").glob("*.sqlite"))
    assert [p.name for p in cached] == [f"{before}.sqlite"]

    second = nsysaudit.analyze(cpu_report, nsys_path=find_nsys()).to_dict()
    assert second["input"]["export"]["cache_hit"] is True
    assert second["input"]["export"]["sha256"] == first["input"]["export"]["sha256"]
    assert {k: v for k, v in second.items() if k != "input"} == {k: v for k, v in first.items() if k != "input"}

    assert sha256_file(cpu_report) == before
    assert sorted(p.name for p in cpu_report.parent.iterdir()) == listing


@requires_nsys
def test_nsys_rep_through_the_cli_with_env_var(cpu_report: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("NSYSAUDIT_NSYS", find_nsys() or "")
    assert main(["analyze", "--json", str(cpu_report)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["input"]["kind"] == "nsys-rep" and d["verdict"] == "inconclusive"


def test_missing_nsys_is_a_one_line_error(tmp_path: Path, monkeypatch, capsys) -> None:
    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"not empty")
    monkeypatch.delenv("NSYSAUDIT_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert main(["analyze", str(report)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no nsys CLI was found" in err and str(report) in err


# --- the export cache is bound to its source --------------------------------------------------


def cache_entry(report: Path, cache: Path) -> Path:
    return cache / "exports" / f"{sha256_file(report)}.sqlite"


def one_line(code: int, err: str, *parts: str) -> None:
    assert code == 2 and err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, err


@requires_nsys
def test_a_poisoned_cache_entry_is_re_exported_never_trusted(
    cpu_report: Path, make_export, monkeypatch, tmp_path: Path, capsys
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(cache))
    monkeypatch.setenv("NSYSAUDIT_NSYS", find_nsys() or "")
    first = nsysaudit.analyze(cpu_report).to_dict()
    entry = cache_entry(cpu_report, cache)
    record = json.loads(entry.with_suffix(".json").read_text())
    assert record == {
        "format": "nsysaudit.export-cache/1",
        "report_sha256": sha256_file(cpu_report),
        "exported_with": first["input"]["export"]["exported_with"],
        "sha256": sha256_file(entry),
        "size_bytes": entry.stat().st_size,
    }
    assert "2023.4" in record["exported_with"]
    # Another export (with a nested failure) put in the entry's place.
    poison = make_export(observe_nested_failure())
    entry.write_bytes(poison.read_bytes())
    again = nsysaudit.analyze(cpu_report).to_dict()
    assert again["input"]["export"]["cache_hit"] is False
    assert (again["verdict"], again["census"]["cuda_api_calls"]) == ("inconclusive", 0)
    assert sha256_file(entry) == again["input"]["export"]["sha256"] != sha256_file(poison)
    # A sealed comparison made after a poisoning is right too, and verifies.
    entry.write_bytes(poison.read_bytes())
    out = tmp_path / "cmp"
    assert main(["compare", str(cpu_report), str(H200 / "release.sqlite"), "--out", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["arms"]["observe"]["verdict"] == "inconclusive"
    entry.write_bytes(poison.read_bytes())
    assert main(["verify", str(out), "--inputs", str(cpu_report), str(H200 / "release.sqlite")]) == 0
    assert "byte-identical" in capsys.readouterr().out


@requires_nsys
def test_an_entry_exported_by_another_nsys_is_re_exported(cpu_report: Path, monkeypatch, tmp_path: Path) -> None:
    """A hit needs the same ``nsys --version``; ``exported_with`` always names the nsys that made the entry."""
    real = find_nsys() or ""
    other = tmp_path / "nsys-2099"
    other.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2099.1.1"; exit 0; fi\n'
        f'exec "{real}" "$@"\n'
    )
    other.chmod(0o755)
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "cache"))
    runs = [nsysaudit.analyze(cpu_report, nsys_path=n).to_dict()["input"]["export"] for n in (real, other, other, real)]
    assert [(r["cache_hit"], r["exported_with"]) for r in runs] == [
        (False, runs[0]["exported_with"]),
        (False, "NVIDIA Nsight Systems version 2099.1.1"),
        (True, "NVIDIA Nsight Systems version 2099.1.1"),
        (False, runs[0]["exported_with"]),
    ]
    record = cache_entry(cpu_report, tmp_path / "cache").with_suffix(".json")
    tampered = json.loads(record.read_text())
    tampered["report_sha256"] = "0" * 64
    record.write_text(json.dumps(tampered))
    assert nsysaudit.analyze(cpu_report, nsys_path=real).to_dict()["input"]["export"]["cache_hit"] is False


@requires_nsys
def test_a_cache_entry_that_is_a_folder_is_one_line(cpu_report: Path, monkeypatch, tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(cache))
    entry = cache_entry(cpu_report, cache)
    entry.mkdir(parents=True)
    code = main(["analyze", "--nsys", find_nsys() or "", str(cpu_report)])
    one_line(code, capsys.readouterr().err, str(cpu_report), f"the export cache entry {entry} is not a regular file")
    assert list(entry.parent.iterdir()) == [entry]


@requires_nsys
def test_a_file_blocked_or_read_only_cache_is_one_line(
    cpu_report: Path, monkeypatch, tmp_path: Path, capsys, read_only_folder: tuple[Path, list[str]]
) -> None:
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(blocker))
    code = main(["analyze", "--nsys", find_nsys() or "", str(cpu_report)])
    one_line(code, capsys.readouterr().err, str(cpu_report), f"cannot write the export cache {blocker}/exports")
    locked, prefix = read_only_folder
    report = locked.parent / "cpu.nsys-rep"  # readable, in a folder the command may not write
    shutil.copyfile(cpu_report, report)
    report.chmod(0o644)
    proc = unprivileged(prefix, "analyze", "--nsys", find_nsys() or "", report, cache=locked)
    one_line(proc.returncode, proc.stderr, str(report), f"cannot write the export cache {locked}/exports")
    assert list(locked.iterdir()) == []


@requires_nsys
def test_a_report_this_nsys_cannot_parse_names_its_version_and_asks_for_another(
    cpu_report: Path, tmp_path: Path, capsys
) -> None:
    """nsys 2023.4.4 fails on an nsys 2025.3 report with a ProtobufParseException dump; a real report
    whose header section is zeroed makes the real CLI fail the same way (no mock)."""
    data = bytearray(cpu_report.read_bytes())
    data[64:128] = bytes(64)
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    report = evidence / "newer.nsys-rep"
    report.write_bytes(bytes(data))
    code = main(["analyze", str(report), "--nsys", str(find_nsys())])
    _, err = capsys.readouterr()
    one_line(code, err, str(report), "cannot parse this report (ProtobufParseException)", "--nsys PATH")
    assert "NVIDIA Nsight Systems version 2023.4.4" in err  # the nsys found, by its own --version
    assert "Dynamic exception type" not in err and "boost::" not in err  # not the cut-off C++ dump
    assert [p.name for p in evidence.iterdir()] == ["newer.nsys-rep"]


@requires_nsys
def test_open_exports_a_report_through_the_cache_and_analyzes_it_like_analyze(
    cpu_report: Path, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "cache"))
    listing = sorted(p.name for p in cpu_report.parent.iterdir())
    with nsysaudit.open(cpu_report, nsys_path=find_nsys()) as t:
        assert (t.input.kind, t.input.export_cache_hit) == ("nsys-rep", False)
        assert t.cuda_api().collect().height == 0 and t.threads().collect().height > 0
        opened = t.analyze().to_dict()
    analyzed = nsysaudit.analyze(cpu_report, nsys_path=find_nsys()).to_dict()
    assert analyzed["input"]["export"]["cache_hit"] is True
    assert {k: v for k, v in opened.items() if k != "input"} == {k: v for k, v in analyzed.items() if k != "input"}
    assert opened["input"]["sha256"] == analyzed["input"]["sha256"] == sha256_file(cpu_report)
    assert sorted(p.name for p in cpu_report.parent.iterdir()) == listing


def test_a_reports_header_names_the_release_that_captured_it(tmp_path: Path) -> None:
    from nsysaudit.read.inputs import report_version

    cases = {
        b"NVIDIA Tegra Profiler Report 2023@4@4@54-234433681190v0.\n": "2023.4.4.54",  # nsys 2023.4.4 (real)
        b"NVIDIA Tegra Profiler Report 2021@3@1@54-x": "2021.3.1.54",
        b"SQLite format 3\x00": None,
        b"": None,
    }
    for head, version in cases.items():
        f = tmp_path / "r.qdrep"
        f.write_bytes(head + b"\x00" * 64)
        assert report_version(f) == version, head


@requires_nsys
def test_a_report_as_qdrep_gives_its_capture_version_and_its_exporter_apart(
    cpu_report: Path, monkeypatch, tmp_path: Path, capsys
) -> None:
    """nsys_version is the capture's (the report's own header); the export's META_DATA_EXPORT
    version, which is the nsys that exported it, has its own key and batch column."""
    from nsysaudit.read.inputs import report_version

    qdrep = tmp_path / "ev" / "cpu.qdrep"
    qdrep.parent.mkdir()
    qdrep.write_bytes(cpu_report.read_bytes())
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NSYSAUDIT_NSYS", str(find_nsys()))
    doc = nsysaudit.analyze(qdrep).to_dict()
    captured = report_version(qdrep)
    assert captured is not None and captured.startswith("2023.4")
    assert doc["input"]["kind"] == "nsys-rep" and doc["input"]["nsys_version"] == captured
    assert doc["input"]["export"]["nsys_version"] == "2023.4.4.54"  # EXPORT_PRODUCT_VERSION of the export
    row = nsysaudit.audit_many([qdrep], jobs=1).row(0, named=True)
    assert (row["nsys_version"], row["exported_with"]) == (captured, doc["input"]["export"]["nsys_version"])


@requires_nsys
def test_nsys_version_is_2023_4() -> None:
    nsys = find_nsys()
    assert nsys is not None
    proc = subprocess.run(
        [nsys, "--version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2023.4" in proc.stdout, proc.stdout
