"""The .nsys-rep path, end to end with the real nsys CLI (no mock): profile, export, analyze."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nsys_tool import find_nsys, requires_nsys

import nsysaudit
from nsysaudit.cli import main
from nsysaudit.source import sha256_file

WORKLOAD = """
import time
total = 0
for i in range(200000):
    total += i * i
time.sleep(0.05)
print(total)
"""


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real report made here by `nsys profile` of a CPU-only Python program."""
    nsys = find_nsys()
    if nsys is None:
        pytest.skip("real nsys CLI not installed: run `make nsys` (scripts/install-nsys.sh)")
    work = tmp_path_factory.mktemp("profile")
    script = work / "workload.py"
    script.write_text(WORKLOAD)
    out = work / "cpu"
    proc = subprocess.run(
        [
            nsys,
            "profile",
            "-t",
            "nvtx,osrt",
            "-s",
            "none",
            "--cpuctxsw=none",
            "-o",
            str(out),
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=work,
        stdin=subprocess.DEVNULL,
    )
    report = out.with_suffix(".nsys-rep")
    assert proc.returncode == 0 and report.is_file(), proc.stderr[-2000:]
    # Keep only the report in its own folder, so "nothing written beside it" can be checked.
    evidence = tmp_path_factory.mktemp("evidence") / "cpu.nsys-rep"
    evidence.write_bytes(report.read_bytes())
    return evidence


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
