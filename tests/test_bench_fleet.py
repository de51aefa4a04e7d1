"""The batch benchmark runs (at a tiny size: this checks that it works, it measures nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent


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
