"""The benchmarks run (benchmarks/run.py and the batch benchmark, benchmarks/fleet.py), at a tiny size:
this checks that they work, it measures nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--rows", "20000", "40000", "--repeat", "1",
         "--out", str(tmp_path / "data"), "--results", str(results), "--no-wheel", "--real"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert "### 20,000 CUDA API rows" in text and "### 40,000 CUDA API rows" in text
    assert "| analyze |" in text and "| compare |" in text and "| scan |" in text
    assert "Growth:" in text
    assert "`benchmarks/stages.py`" in text and "| read: _scan |" in text and "| analysis: _nest |" in text
    assert "### Small exports: process start to exit" in text
    assert "| analyze (1,229-row real torch export) |" in text and '| python -c "import polars" |' in text


def test_fleet_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "fleet.py"), "--copies", "4", "--large", "1", "--rows", "20000",
         "--repeat", "1", "--out", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "### small: 4 exports" in proc.stdout and "### large: 1 exports" in proc.stdout
    for engine, jobs in (("local", 1), ("local", 2), ("dask", 2)):
        assert proc.stdout.count(f"| {engine} | {jobs} |") == 2


def test_snapshot_join_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "snapshot_join.py"), "--entries", "3000", "--moments", "4",
         "--repeat", "1", "--out", str(tmp_path / "data"), "--results", str(results)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert "-entry snapshot" in text and "Clock checked: True; 4 moments read" in text
    assert "| join + 4 moments |" in text and "| of which unpickling" in text
